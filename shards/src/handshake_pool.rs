//! The handshake pool: a few helper threads that run the expensive handshake work core hands
//! out as [`HandshakeJob`]s (RSA private-key operations of OpenSecureChannel, CreateSession and
//! ActivateSession; argon2id; certificate validation that may read the PKI directory), so a
//! shard keeps serving its other connections meanwhile.
//!
//! Shape: one bounded lock-free queue of jobs (`queue_depth` entries) shared by every shard;
//! `threads` helper threads take from it. A helper that finds it empty sleeps on a condition
//! variable at once (no spinning: on a CPU it shares with a shard, a spin only delays the
//! shard), and a shard wakes one only when some helper sleeps. Each job carries its shard's
//! result queue (a bounded lock-free `ArrayQueue`, one per shard, written by the helpers, read
//! only by the shard) and its shard's [`Waker`] (the eventfd the shard's loop already waits
//! on). A shard's [`PoolClient`] counts the jobs it has out; past `queue_depth + threads` of them,
//! or when the shared queue is full, the job is refused at once and the connection answers
//! BadTcpNotEnoughResources (OpenSecureChannel) or BadTooManyOperations (session services) —
//! nothing is queued without bound, and a result can always be stored.
//!
//! `threads = 0` means no pool: every job runs inline on the shard thread (the behaviour before
//! the pool existed). That is an explicit setting, not "unbounded".

use std::sync::atomic::{fence, AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use crossbeam_queue::ArrayQueue;
use serde::Deserialize;
use uaring_core::server::handshake::{HandshakeJob, JobDone};

use crate::fleet::Waker;
use crate::handler::ConnId;

/// Most helper threads.
pub const THREADS_MAX: usize = 64;
/// Longest job queue.
pub const QUEUE_DEPTH_MAX: usize = 65_536;

/// `[handshake]` of the configuration file.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct HandshakeConfig {
    /// Helper threads. 0: no pool, handshake work runs inline on the shard threads.
    pub threads: usize,
    /// Jobs waiting for a helper, all shards together (> 0 when `threads` > 0).
    pub queue_depth: usize,
    /// Nice value of the helper threads (0..=19): above the shards' 0, so a helper sharing a
    /// CPU with a shard yields to it.
    pub nice: i32,
    /// CPUs the helper threads may run on (list, hex mask or expression, as `runtime.cpus`);
    /// "" = not pinned.
    pub cpus: String,
}

impl Default for HandshakeConfig {
    fn default() -> Self {
        HandshakeConfig {
            threads: 2,
            queue_depth: 64,
            nice: 10,
            cpus: String::new(),
        }
    }
}

impl HandshakeConfig {
    pub fn validate(&self) -> Result<(), String> {
        if self.threads > THREADS_MAX {
            return Err(format!("handshake.threads must be at most {THREADS_MAX}"));
        }
        if self.threads > 0 && !(1..=QUEUE_DEPTH_MAX).contains(&self.queue_depth) {
            return Err(format!(
                "handshake.queue_depth must be 1..={QUEUE_DEPTH_MAX} when handshake.threads > 0"
            ));
        }
        if !(0..=19).contains(&self.nice) {
            return Err("handshake.nice must be 0..=19".into());
        }
        Ok(())
    }
}

/// Takes `[handshake]` out of the configuration table.
pub fn take_config(table: &mut toml::Table) -> Result<HandshakeConfig, String> {
    let c = match table.remove("handshake") {
        Some(v) => v
            .try_into::<HandshakeConfig>()
            .map_err(|e| format!("[handshake]: {e}"))?,
        None => HandshakeConfig::default(),
    };
    c.validate()?;
    Ok(c)
}

type Results = Arc<ArrayQueue<(ConnId, JobDone)>>;

struct Envelope {
    job: HandshakeJob,
    conn: ConnId,
    results: Results,
    waker: Option<Waker>,
}

/// The jobs waiting for a helper, and how the helpers sleep.
struct Jobs<T> {
    queue: ArrayQueue<T>,
    /// Helpers asleep (or about to sleep) on `wake`.
    sleepers: AtomicUsize,
    /// The pool and its shards' clients alive: the last one to go closes the queue.
    producers: AtomicUsize,
    /// Set when no producer is left: helpers finish the queue and exit.
    closed: AtomicBool,
    lock: Mutex<()>,
    wake: Condvar,
}

impl<T> Jobs<T> {
    fn new(depth: usize) -> Self {
        Jobs {
            queue: ArrayQueue::new(depth),
            sleepers: AtomicUsize::new(0),
            producers: AtomicUsize::new(1),
            closed: AtomicBool::new(false),
            lock: Mutex::new(()),
            wake: Condvar::new(),
        }
    }

    /// Queues `e`; gives it back when the queue is full.
    fn push(&self, e: T) -> Result<(), T> {
        self.queue.push(e)?;
        // Pairs with the fence in `pop_or_sleep`: either that helper's pop sees this job, or
        // this load sees it counted as a sleeper and wakes it (under the lock it holds until
        // it waits, so the notification cannot fall between its check and its wait).
        fence(Ordering::SeqCst);
        if self.sleepers.load(Ordering::Relaxed) > 0 {
            let _g = self.lock.lock().unwrap_or_else(|p| p.into_inner());
            self.wake.notify_one();
        }
        Ok(())
    }

    /// The next job; sleeps while there is none. `None` once the pool is closed and drained.
    fn pop_or_sleep(&self) -> Option<T> {
        if let Some(e) = self.queue.pop() {
            return Some(e);
        }
        let mut g = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        self.sleepers.fetch_add(1, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        let e = loop {
            if let Some(e) = self.queue.pop() {
                break Some(e);
            }
            if self.closed.load(Ordering::Acquire) {
                break None;
            }
            g = self.wake.wait(g).unwrap_or_else(|p| p.into_inner());
        };
        self.sleepers.fetch_sub(1, Ordering::Relaxed);
        e
    }

    /// One producer fewer; the last one closes the queue.
    fn leave(&self) {
        if self.producers.fetch_sub(1, Ordering::AcqRel) != 1 {
            return;
        }
        self.closed.store(true, Ordering::Release);
        let _g = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        self.wake.notify_all();
    }
}

/// The helper threads and the shared job queue.
pub struct HandshakePool {
    jobs: Arc<Jobs<Envelope>>,
    threads: usize,
    queue_depth: usize,
    workers: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for HandshakePool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HandshakePool")
            .field("threads", &self.threads)
            .field("queue_depth", &self.queue_depth)
            .finish()
    }
}

/// Sets the calling thread's nice value (0: left as it is).
pub(crate) fn set_nice(nice: i32) {
    if nice == 0 {
        return;
    }
    // SAFETY: plain syscalls on the calling thread (a Linux thread id is a process id for
    // setpriority); failure only leaves the default priority.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, nice);
    }
}

fn worker(jobs: Arc<Jobs<Envelope>>, nice: i32, cpus: Vec<usize>) {
    set_nice(nice);
    if !cpus.is_empty() {
        if let Err(e) = uaring_affinity::pin_current_thread(&cpus) {
            tracing::warn!("handshake thread: cannot pin to {cpus:?}: {e}");
        }
    }
    while let Some(e) = jobs.pop_or_sleep() {
        let done = e.job.run();
        if e.results.push((e.conn, done)).is_err() {
            // Cannot happen: a shard never has more jobs out than its queue holds.
            tracing::error!("handshake result queue full: result dropped");
        }
        if let Some(w) = &e.waker {
            w.wake();
        }
    }
}

impl HandshakePool {
    /// Starts the helpers (pinned to `cpus` unless empty); `None` when `threads` is 0 (inline).
    pub fn start(
        cfg: &HandshakeConfig,
        cpus: &[usize],
    ) -> Result<Option<Arc<HandshakePool>>, String> {
        cfg.validate()?;
        if cfg.threads == 0 {
            return Ok(None);
        }
        let jobs = Arc::new(Jobs::new(cfg.queue_depth));
        let mut workers = Vec::with_capacity(cfg.threads);
        for i in 0..cfg.threads {
            let jobs = jobs.clone();
            let nice = cfg.nice;
            let cpus = cpus.to_vec();
            let h = std::thread::Builder::new()
                .name(format!("uaring-handshake-{i}"))
                .spawn(move || worker(jobs, nice, cpus))
                .map_err(|e| format!("handshake thread: {e}"))?;
            workers.push(h);
        }
        Ok(Some(Arc::new(HandshakePool {
            jobs,
            threads: cfg.threads,
            queue_depth: cfg.queue_depth,
            workers,
        })))
    }

    /// A shard's end of the pool.
    pub fn client(&self) -> PoolClient {
        let max_out = self.queue_depth + self.threads;
        self.jobs.producers.fetch_add(1, Ordering::Relaxed);
        PoolClient {
            jobs: self.jobs.clone(),
            results: Arc::new(ArrayQueue::new(max_out)),
            out: 0,
            max_out,
            waker: None,
        }
    }

    pub fn threads(&self) -> usize {
        self.workers.len()
    }
}

impl Drop for HandshakePool {
    /// Once the pool and every client are gone, the helpers run what is queued and exit (they
    /// are not joined: a job may be reading the PKI directory).
    fn drop(&mut self) {
        self.jobs.leave();
    }
}

/// One shard's end of the pool: submits its connections' jobs, takes their results.
pub struct PoolClient {
    jobs: Arc<Jobs<Envelope>>,
    results: Results,
    /// Jobs submitted and not yet taken back.
    out: usize,
    max_out: usize,
    waker: Option<Waker>,
}

impl PoolClient {
    /// How the helpers wake this shard when a result is ready.
    pub fn set_waker(&mut self, waker: Waker) {
        self.waker = Some(waker);
    }

    /// Queues `job` for `conn`; gives it back when the queue (or this shard's share) is full.
    pub fn submit(&mut self, conn: ConnId, job: HandshakeJob) -> Result<(), HandshakeJob> {
        if self.out >= self.max_out {
            return Err(job);
        }
        let e = Envelope {
            job,
            conn,
            results: self.results.clone(),
            waker: self.waker.clone(),
        };
        match self.jobs.push(e) {
            Ok(()) => {
                self.out += 1;
                Ok(())
            }
            Err(e) => Err(e.job),
        }
    }

    /// Takes every result ready now.
    pub fn drain(&mut self, mut f: impl FnMut(ConnId, JobDone)) {
        while let Some((conn, done)) = self.results.pop() {
            self.out -= 1;
            f(conn, done);
        }
    }

    /// Jobs out now.
    pub fn jobs_out(&self) -> usize {
        self.out
    }
}

impl Drop for PoolClient {
    fn drop(&mut self) {
        self.jobs.leave();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Producers on two threads and three sleeping consumers: every item is taken exactly
    /// once, the consumers sleep when the queue runs dry (no item waits for a later push), and
    /// they exit when the last producer leaves.
    #[test]
    fn every_job_is_taken_once_and_helpers_exit_when_the_producers_leave() {
        let jobs = Arc::new(Jobs::<u64>::new(8));
        let consumers: Vec<_> = (0..3)
            .map(|_| {
                let jobs = jobs.clone();
                std::thread::spawn(move || {
                    let mut got = Vec::new();
                    while let Some(v) = jobs.pop_or_sleep() {
                        got.push(v);
                    }
                    got
                })
            })
            .collect();
        jobs.producers.fetch_add(1, Ordering::Relaxed);
        let producers: Vec<_> = (0..2u64)
            .map(|p| {
                let jobs = jobs.clone();
                std::thread::spawn(move || {
                    for i in 0..20_000u64 {
                        let mut v = p * 1_000_000 + i;
                        // Full: the consumers are behind; try again (a shard would refuse).
                        while let Err(back) = jobs.push(v) {
                            v = back;
                            std::thread::yield_now();
                        }
                        if i % 1000 == 0 {
                            // Let the consumers run dry and fall asleep now and then.
                            std::thread::sleep(std::time::Duration::from_millis(1));
                        }
                    }
                    jobs.leave();
                })
            })
            .collect();
        for p in producers {
            p.join().unwrap();
        }
        let mut all: Vec<u64> = consumers
            .into_iter()
            .flat_map(|c| c.join().unwrap())
            .collect();
        all.sort_unstable();
        let want: Vec<u64> = (0..2u64)
            .flat_map(|p| (0..20_000u64).map(move |i| p * 1_000_000 + i))
            .collect();
        assert_eq!(all, want);
        assert_eq!(jobs.sleepers.load(Ordering::Relaxed), 0);
    }

    /// A job pushed while every helper sleeps wakes one.
    #[test]
    fn a_job_wakes_a_sleeping_helper() {
        let jobs = Arc::new(Jobs::<u32>::new(4));
        let j = jobs.clone();
        let helper = std::thread::spawn(move || j.pop_or_sleep());
        while jobs.sleepers.load(Ordering::Relaxed) == 0 {
            std::thread::yield_now();
        }
        jobs.push(7).unwrap();
        assert_eq!(helper.join().unwrap(), Some(7));
    }
}
