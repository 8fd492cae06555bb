//! The ingest queue and the writer thread.

use super::store::Store;
use super::{OnFull, Sample, SeriesId, StoreError};
use crossbeam_queue::ArrayQueue;
use std::fs::File;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use uaring_core::types::StatusCode;

/// Most samples the writer takes from the queue per hold of the store's writer lock.
const BATCH: usize = 4096;
/// Longest the writer sleeps when the queue is empty.
const IDLE_SLEEP: Duration = Duration::from_millis(1);

/// What [`Ingest::push`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pushed {
    /// Queued; nothing lost.
    Queued,
    /// The queue was full: this sample was dropped.
    Dropped,
    /// The queue was full: this sample was queued and the oldest waiting one, of this
    /// series at this SourceTimestamp, dropped.
    Displaced(SeriesId, i64),
}

/// The handle shards push samples with. Cloneable and `Send`; a push never blocks and
/// allocates nothing.
#[derive(Clone)]
pub struct Ingest {
    queue: Arc<ArrayQueue<(SeriesId, Sample)>>,
    /// Samples lost to a full queue (the store's `StoreStats::dropped`).
    dropped: Arc<AtomicU64>,
    on_full: OnFull,
}

/// The queue a writer drains: what [`Ingest`] pushes onto.
pub(crate) type Queue = ArrayQueue<(SeriesId, Sample)>;

impl Ingest {
    /// A queue of `capacity` samples (≥ 1) that counts what it drops in `dropped`; the
    /// caller's writer threads drain the queue it also returns.
    pub(crate) fn new(
        capacity: usize,
        on_full: OnFull,
        dropped: Arc<AtomicU64>,
    ) -> (Ingest, Arc<Queue>) {
        let queue = Arc::new(ArrayQueue::new(capacity.max(1)));
        (
            Ingest {
                queue: queue.clone(),
                dropped,
                on_full,
            },
            queue,
        )
    }

    /// Queues a sample for the writer. False when it was dropped (queue full and
    /// [`OnFull::DropNewest`]); every lost sample is counted in `StoreStats::dropped`.
    #[inline]
    pub fn try_push(&self, id: SeriesId, sample: Sample) -> bool {
        matches!(
            self.push(id, sample),
            Pushed::Queued | Pushed::Displaced(..)
        )
    }

    /// [`Ingest::try_push`], saying which sample was lost, if any: this one
    /// ([`OnFull::DropNewest`]) or the oldest waiting one ([`OnFull::DropOldest`]: its
    /// series and SourceTimestamp), so the caller can mark the gap.
    #[inline]
    pub fn push(&self, id: SeriesId, sample: Sample) -> Pushed {
        self.push_counted(id, sample, true)
    }

    /// [`Ingest::push`] of a `Bad_DataLost` mark: one that does not fit is not a lost
    /// value (the caller keeps the mark and tries again with the series' next value), so
    /// it is not counted; a value it displaces ([`OnFull::DropOldest`]) is.
    #[inline]
    pub fn push_mark(&self, id: SeriesId, mark: Sample) -> Pushed {
        self.push_counted(id, mark, false)
    }

    #[inline]
    fn push_counted(&self, id: SeriesId, sample: Sample, count: bool) -> Pushed {
        match self.on_full {
            OnFull::DropNewest => match self.queue.push((id, sample)) {
                Ok(()) => Pushed::Queued,
                Err(_) => {
                    if count {
                        self.dropped.fetch_add(1, Ordering::Relaxed);
                    }
                    Pushed::Dropped
                }
            },
            OnFull::DropOldest => match self.queue.force_push((id, sample)) {
                None => Pushed::Queued,
                Some((old_id, old)) => {
                    // A displaced mark is not a value; its series keeps the mark below.
                    if StatusCode(old.status) != StatusCode::BadDataLost
                        || old.value != uaring_core::types::Variant::Empty
                    {
                        self.dropped.fetch_add(1, Ordering::Relaxed);
                    }
                    Pushed::Displaced(old_id, old.source_ts)
                }
            },
        }
    }

    /// Counts a value the caller drops itself (one that may not go ahead of a mark that
    /// did not fit).
    pub fn count_dropped(&self) {
        self.dropped.fetch_add(1, Ordering::Relaxed);
    }

    /// Samples waiting for the writer.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    pub fn capacity(&self) -> usize {
        self.queue.capacity()
    }
}

/// The writer thread; [`WriterHandle::shutdown`] (or dropping it) stops it after it has
/// drained the queue and flushed.
pub struct WriterHandle {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<(), StoreError>>>,
}

impl WriterHandle {
    /// Stops the writer: it drains what is queued, flushes, and exits. Returns the last
    /// error of its final flush, if any.
    pub fn shutdown(mut self) -> Result<(), StoreError> {
        self.stop_and_join()
    }

    fn stop_and_join(&mut self) -> Result<(), StoreError> {
        self.stop.store(true, Ordering::Release);
        match self.thread.take() {
            Some(t) => t
                .join()
                .unwrap_or(Err(StoreError::Invalid("history writer thread panicked"))),
            None => Ok(()),
        }
    }
}

impl Drop for WriterHandle {
    fn drop(&mut self) {
        let _ = self.stop_and_join();
    }
}

/// Starts the writer thread of `store` and returns the handle producers push with.
/// The queue (`queue_capacity`, `on_full`) is the store's configuration. One writer per
/// store: a second one would interleave with the first (it is allowed, but pointless).
pub fn start_writer(store: Arc<Store>) -> Result<(Ingest, WriterHandle), StoreError> {
    let cfg = store.config().clone();
    let (ingest, queue) = Ingest::new(cfg.queue_capacity, cfg.on_full, store.c.dropped.clone());
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let nice = cfg.nice;
    let thread = std::thread::Builder::new()
        .name("uaring-history".into())
        .spawn(move || {
            crate::handshake::set_nice(nice);
            writer_loop(&store, &queue, &stop2)
        })?;
    Ok((
        ingest,
        WriterHandle {
            stop,
            thread: Some(thread),
        },
    ))
}

fn writer_loop(
    store: &Arc<Store>,
    queue: &ArrayQueue<(SeriesId, Sample)>,
    stop: &AtomicBool,
) -> Result<(), StoreError> {
    let cfg = store.config();
    let interval = Duration::from_millis(cfg.flush_interval_ms as u64);
    let retention_every = Duration::from_millis(cfg.retention_check_ms.max(1) as u64);
    let mut next_flush = Instant::now() + interval;
    let mut next_retention = Instant::now() + retention_every;
    let mut batch: Vec<(SeriesId, Sample)> = Vec::with_capacity(BATCH);
    // fdatasync runs here, so the writer goes on taking samples meanwhile.
    let (sync_tx, sync_rx) = std::sync::mpsc::sync_channel::<(Arc<File>, u64)>(1);
    let sync_store = store.clone();
    let nice = cfg.nice;
    let syncer = std::thread::Builder::new()
        .name("uaring-hsync".into())
        .spawn(move || {
            crate::handshake::set_nice(nice);
            for (file, watermark) in sync_rx {
                sync_store.flush_end(&file, watermark);
            }
        })?;
    loop {
        let stopping = stop.load(Ordering::Acquire);
        // Drain what is queued (a batch per hold of the lock), until the queue is empty
        // or a flush is due.
        let mut took = 0;
        loop {
            while batch.len() < BATCH {
                match queue.pop() {
                    Some(x) => batch.push(x),
                    None => break,
                }
            }
            if batch.is_empty() {
                break;
            }
            took += batch.len();
            let mut core = store.lock_core();
            for (id, s) in batch.drain(..) {
                if let Err(e) = store.push_locked(&mut core, id, s, true) {
                    tracing::warn!("history store: append failed: {e}");
                }
            }
            store.c.appended.store(core.appended(), Ordering::Relaxed);
            drop(core);
            if Instant::now() >= next_flush {
                break;
            }
        }
        let now = Instant::now();
        if now >= next_flush {
            match store.flush_begin() {
                // One sync in flight at most: when the last one is still running, this
                // interval's waits for the next.
                Ok(Some(job)) => {
                    let _ = sync_tx.try_send(job);
                }
                Ok(None) => {}
                Err(e) => tracing::warn!("history store: flush failed: {e}"),
            }
            next_flush = now + interval;
        }
        if now >= next_retention {
            if let Err(e) = store.apply_retention() {
                tracing::warn!("history store: retention failed: {e}");
            }
            next_retention = now + retention_every;
        }
        if stopping && queue.is_empty() && batch.is_empty() {
            drop(sync_tx);
            let _ = syncer.join();
            return store.flush().map(|_| ());
        }
        if took == 0 && !stopping {
            std::thread::sleep(IDLE_SLEEP.min(next_flush.saturating_duration_since(now)));
        }
    }
}
