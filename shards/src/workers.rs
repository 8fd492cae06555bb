//! The library's worker pool for slow application work (methods made with
//! [`crate::MethodDef::on_pool`]): a fixed number of threads fed by one bounded queue. A
//! shard only enqueues (never waits): a full queue refuses the job at once. Threads are
//! named `uaring-worker-<i>` and run at nice 10 (as the handshake helpers do), so a worker
//! sharing a CPU with a shard yields to it.

use std::cell::Cell;
use std::rc::Rc;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};

use uaring_core::address_space::app::AsyncCall;

type Job = (AsyncCall, Box<dyn FnOnce(AsyncCall) + Send>);

/// A handle to the worker pool (cheap to clone).
#[derive(Clone)]
pub struct Workers {
    tx: SyncSender<Job>,
    threads: usize,
    /// The threads' ids and where they are placed ([`Workers::place`]).
    placement: Arc<Mutex<Placement>>,
}

impl std::fmt::Debug for Workers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workers")
            .field("threads", &self.threads)
            .finish()
    }
}

impl Workers {
    /// Starts `threads` workers behind a queue of `queue_depth` jobs.
    pub fn start(threads: usize, queue_depth: usize) -> std::io::Result<Workers> {
        let threads = threads.max(1);
        let (tx, rx) = sync_channel::<Job>(queue_depth.max(1));
        let rx: Arc<Mutex<Receiver<Job>>> = Arc::new(Mutex::new(rx));
        let placement = Arc::new(Mutex::new(Placement::default()));
        for i in 0..threads {
            let rx = rx.clone();
            let placement = placement.clone();
            std::thread::Builder::new()
                .name(format!("uaring-worker-{i}"))
                .spawn(move || {
                    if let Ok(mut p) = placement.lock() {
                        let tid = crate::background::current_tid();
                        p.cpus.place(tid, "uaring-worker");
                        p.tids.push(tid);
                    }
                    // SAFETY: setpriority on the calling thread (who = 0); a failure leaves nice 0.
                    unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 10) };
                    loop {
                        let job = match rx.lock() {
                            Ok(r) => r.recv(),
                            Err(_) => return,
                        };
                        match job {
                            Ok((call, f)) => f(call),
                            Err(_) => return,
                        }
                    }
                })?;
        }
        Ok(Workers {
            tx,
            threads,
            placement,
        })
    }

    /// Pins the pool's threads to `cpus` (`runtime.background_cpus`; the pool may have been
    /// started before the server knew its configuration): those running now, and those that
    /// start later.
    pub(crate) fn place(&self, cpus: &crate::background::BackgroundCpus) {
        if let Ok(mut p) = self.placement.lock() {
            for &tid in p.tids.iter() {
                cpus.place(tid, "uaring-worker");
            }
            p.cpus = cpus.clone();
        }
    }

    /// The number of threads.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Queues `f(call)`; the call back when the queue is full (or the pool stopped).
    // The call is given back by value on the rare full-queue path rather than boxed on every
    // submit: the large Err is the cheaper choice.
    #[allow(clippy::result_large_err)]
    pub(crate) fn submit(
        &self,
        call: AsyncCall,
        f: impl FnOnce(AsyncCall) + Send + 'static,
    ) -> Result<(), AsyncCall> {
        match self.tx.try_send((call, Box::new(f))) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full((c, _))) | Err(TrySendError::Disconnected((c, _))) => Err(c),
        }
    }
}

/// The pool's thread ids and CPUs.
#[derive(Default)]
struct Placement {
    tids: Vec<i32>,
    cpus: crate::background::BackgroundCpus,
}

/// The model writer: one thread that edits and commits the shards' NodeManagement requests
/// (AddNodes, DeleteNodes, AddReferences, DeleteReferences: core's
/// [`uaring_core::address_space::model::Writer`]), so that a shard keeps serving while a
/// request of a thousand nodes is edited. One request at a time, each in the writers' turn
/// (`turn`: the lock the library's `ServerHandle::edit` and the gateway take too), fed by
/// a bounded queue of `operation_limits.max_node_management_requests_queued` requests: a
/// shard only enqueues, and a full queue refuses at once. The thread is named
/// `uaring-model-writer`, runs at nice 10 (as the workers do), so on a CPU shared with a
/// shard the shard's reads come first, and on `runtime.background_cpus` where that is set;
/// it ends when the server's model is dropped.
///
/// Nice 10 sets the writer's share of the CPU, not how soon a shard that wakes gets the
/// CPU back: a request of a thousand nodes held the shard's CPU for 1.2 ms (median) and up
/// to 9 ms at a stretch. So the writer gives the CPU away between the edit's steps
/// ([`uaring_core::address_space::edit::set_pause`]): once [`WRITER_STEP_NS`] have passed
/// since it last did, it yields (`sched_yield`), and a shard waiting on its CPU runs first.
pub(crate) struct ModelWriter {
    tx: SyncSender<uaring_core::address_space::model::WriterJob>,
}

impl ModelWriter {
    /// Starts the thread behind a queue of `queue_depth` requests.
    pub(crate) fn start(
        queue_depth: usize,
        turn: Arc<Mutex<()>>,
        cpus: crate::background::BackgroundCpus,
    ) -> std::io::Result<Arc<ModelWriter>> {
        let (tx, rx) =
            sync_channel::<uaring_core::address_space::model::WriterJob>(queue_depth.max(1));
        std::thread::Builder::new()
            .name("uaring-model-writer".into())
            .spawn(move || {
                cpus.enter("uaring-model-writer");
                // SAFETY: setpriority on the calling thread (who = 0); a failure leaves nice 0.
                unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 10) };
                let since = Rc::new(Cell::new(0u64));
                uaring_core::address_space::edit::set_pause(Some(yielding(
                    since.clone(),
                    WRITER_STEP_NS,
                )));
                while let Ok(job) = rx.recv() {
                    let _one_at_a_time = turn.lock().unwrap_or_else(|p| p.into_inner());
                    // It slept waiting for the job: its first step is counted from here.
                    since.set(crate::clock::mono_ns());
                    job.run(crate::clock::now());
                }
            })?;
        Ok(Arc::new(ModelWriter { tx }))
    }
}

impl uaring_core::address_space::model::Writer for ModelWriter {
    fn submit(
        &self,
        job: uaring_core::address_space::model::WriterJob,
    ) -> Result<(), uaring_core::address_space::model::WriterJob> {
        match self.tx.try_send(job) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(j)) | Err(TrySendError::Disconnected(j)) => Err(j),
        }
    }
}

/// How long the model writer runs before it yields the CPU (at the edit's next step).
pub(crate) const WRITER_STEP_NS: u64 = 100_000;

/// The model writer's pause hook: yields the CPU once `step_ns` have passed since `since`
/// (CLOCK_MONOTONIC ns, set when a job begins and at each yield).
fn yielding(since: Rc<Cell<u64>>, step_ns: u64) -> uaring_core::address_space::edit::PauseHook {
    Box::new(move || {
        let now = crate::clock::mono_ns();
        if now.saturating_sub(since.get()) >= step_ns {
            std::thread::yield_now();
            since.set(crate::clock::mono_ns());
        }
    })
}
