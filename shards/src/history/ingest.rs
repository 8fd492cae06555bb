//! The ingest queue and the writer thread.

use super::store::Store;
use super::{OnFull, Sample, SeriesId, StoreError};
use crossbeam_queue::ArrayQueue;
use std::fs::File;
use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant};
use uaring_core::types::StatusCode;

/// Most samples the writer takes from the queue per hold of the store's writer lock, and
/// between two yields of the CPU (about half a millisecond of work).
const BATCH: usize = 1024;
/// Most writer threads one queue wakes (a bit each in [`Doorbell`]).
pub(crate) const MAX_WRITERS: usize = 64;

/// How a push wakes an idle writer without a system call per sample: a writer with nothing
/// to do sets its bit, looks at the queue once more, and parks until its next timed duty
/// (a flush, retention); a producer, after its push, rings only when a bit is set. Both
/// sides order their store before their load with a SeqCst fence, so either the writer
/// sees the sample or the producer sees the bit: no wake-up is lost. A busy writer never
/// parks, and then a push costs the fence and one load of a line nobody writes.
pub(crate) struct Doorbell {
    /// Bit i: writer i is parked or about to park.
    asleep: AtomicU64,
    /// Writer i's thread, set when it starts.
    writers: Box<[OnceLock<Thread>]>,
}

impl Doorbell {
    fn new(writers: usize) -> Doorbell {
        Doorbell {
            asleep: AtomicU64::new(0),
            writers: (0..writers.clamp(1, MAX_WRITERS))
                .map(|_| OnceLock::new())
                .collect(),
        }
    }

    /// After a push: wakes the writers that went idle.
    #[inline]
    fn ring(&self) {
        fence(Ordering::SeqCst);
        if self.asleep.load(Ordering::Relaxed) != 0 {
            self.wake_all();
        }
    }

    #[cold]
    pub(crate) fn wake_all(&self) {
        let mut bits = self.asleep.swap(0, Ordering::AcqRel);
        while bits != 0 {
            let i = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            if let Some(t) = self.writers.get(i).and_then(|w| w.get()) {
                t.unpark();
            }
        }
    }

    /// Writer `i` (the calling thread) registers itself, once, before it first parks.
    pub(crate) fn register(&self, i: usize) {
        if let Some(w) = self.writers.get(i) {
            let _ = w.set(std::thread::current());
        }
    }

    /// Writer `i` parks until `until` unless the queue has something (checked after its
    /// bit is set) or a push rings meanwhile. May return early (spurious wake-ups).
    pub(crate) fn idle(&self, i: usize, queue: &Queue, until: Instant) {
        let bit = 1u64 << (i % MAX_WRITERS);
        self.asleep.fetch_or(bit, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        if queue.is_empty() {
            let now = Instant::now();
            if until > now {
                std::thread::park_timeout(until - now);
            }
        }
        self.asleep.fetch_and(!bit, Ordering::Relaxed);
    }
}

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
    bell: Arc<Doorbell>,
}

/// The queue a writer drains: what [`Ingest`] pushes onto.
pub(crate) type Queue = ArrayQueue<(SeriesId, Sample)>;

impl Ingest {
    /// A queue of `capacity` samples (≥ 1) that counts what it drops in `dropped`; the
    /// caller's `writers` threads (1 ..= [`MAX_WRITERS`]) drain the queue it also returns,
    /// parking on the doorbell when idle.
    pub(crate) fn new(
        capacity: usize,
        on_full: OnFull,
        dropped: Arc<AtomicU64>,
        writers: usize,
    ) -> (Ingest, Arc<Queue>, Arc<Doorbell>) {
        let queue = Arc::new(ArrayQueue::new(capacity.max(1)));
        let bell = Arc::new(Doorbell::new(writers));
        (
            Ingest {
                queue: queue.clone(),
                dropped,
                on_full,
                bell: bell.clone(),
            },
            queue,
            bell,
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
        let pushed = self.push_quietly(id, sample, count);
        self.bell.ring();
        pushed
    }

    #[inline]
    fn push_quietly(&self, id: SeriesId, sample: Sample, count: bool) -> Pushed {
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
    bell: Arc<Doorbell>,
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
        if let Some(t) = &self.thread {
            t.thread().unpark();
        }
        self.bell.wake_all();
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
    let (ingest, queue, bell) =
        Ingest::new(cfg.queue_capacity, cfg.on_full, store.c.dropped.clone(), 1);
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let bell2 = bell.clone();
    let (nice, policy, cpus) = (cfg.nice, cfg.writer_policy, cfg.cpus.clone());
    let thread = std::thread::Builder::new()
        .name("uaring-history".into())
        .spawn(move || {
            cpus.enter("uaring-history");
            policy.apply(nice);
            bell2.register(0);
            writer_loop(&store, &queue, &bell2, &stop2)
        })?;
    Ok((
        ingest,
        WriterHandle {
            stop,
            bell,
            thread: Some(thread),
        },
    ))
}

fn writer_loop(
    store: &Arc<Store>,
    queue: &ArrayQueue<(SeriesId, Sample)>,
    bell: &Doorbell,
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
    let (nice, policy, cpus) = (cfg.nice, cfg.writer_policy, cfg.cpus.clone());
    let syncer = std::thread::Builder::new()
        .name("uaring-hsync".into())
        .spawn(move || {
            cpus.enter("uaring-hsync");
            policy.apply(nice);
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
            // Bounded work per turn: a shard waiting for this CPU gets it now, not after
            // the writer's time slice (the kernel need not preempt a running writer for a
            // waking shard).
            std::thread::yield_now();
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
            // Nothing came: park until a push rings or the next flush or retention check
            // is due (an idle server's writer wakes for those alone).
            bell.idle(0, queue, next_flush.min(next_retention));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ping-pong through the doorbell: the writer parks with a deadline far away each round,
    /// so a lost wake-up would stall the round (the hang guard fails it) rather than pass.
    #[test]
    fn a_push_always_wakes_a_parked_writer() {
        let (ingest, queue, bell) = Ingest::new(4, OnFull::DropNewest, Arc::default(), 1);
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        const ROUNDS: u32 = 2000;
        let writer = std::thread::spawn(move || {
            bell.register(0);
            for _ in 0..ROUNDS {
                loop {
                    if queue.pop().is_some() {
                        break;
                    }
                    bell.idle(0, &queue, Instant::now() + Duration::from_secs(60));
                }
                done_tx.send(()).unwrap();
            }
        });
        for i in 0..ROUNDS {
            // Vary the moment of the push against the writer's way to its park.
            for _ in 0..(i % 64) {
                std::hint::spin_loop();
            }
            assert!(ingest.try_push(SeriesId(0), Sample::default()));
            done_rx
                .recv_timeout(Duration::from_secs(20))
                .expect("the writer woke for the push");
        }
        writer.join().unwrap();
    }
}
