//! Where the server's background threads run (`runtime.background_cpus`): the model writer
//! (NodeManagement edits), the history store's threads and the method worker pool. Resolved
//! once at start like `runtime.cpus`; each thread pins itself as it starts (the worker pool,
//! which an application may start before the server, is pinned by thread id at start).
//! Empty = not pinned: the threads run wherever the process may, as the kernel places them.

use std::sync::Arc;

/// The CPUs of the background threads; empty = not pinned. Cheap to clone.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BackgroundCpus(Arc<[usize]>);

impl BackgroundCpus {
    /// Not pinned.
    pub fn any() -> BackgroundCpus {
        BackgroundCpus::default()
    }

    /// These CPUs (empty = not pinned).
    pub fn of(cpus: &[usize]) -> BackgroundCpus {
        BackgroundCpus(cpus.into())
    }

    /// The CPUs; empty when not pinned.
    pub fn cpus(&self) -> &[usize] {
        &self.0
    }

    /// Pins the calling thread, named `what` in the warning if the kernel refuses (the
    /// thread then stays where it was).
    pub fn enter(&self, what: &str) {
        if self.0.is_empty() {
            return;
        }
        if let Err(e) = uaring_affinity::pin_current_thread(&self.0) {
            tracing::warn!(thread = what, cpus = ?self.0, "cannot pin a background thread: {e}");
        }
    }

    /// Pins the thread `tid` of this process (see [`BackgroundCpus::enter`]).
    pub fn place(&self, tid: i32, what: &str) {
        if self.0.is_empty() {
            return;
        }
        if let Err(e) = uaring_affinity::pin_pid(tid, &self.0) {
            tracing::warn!(thread = what, tid, cpus = ?self.0, "cannot pin a background thread: {e}");
        }
    }
}

/// The calling thread's id (for [`BackgroundCpus::place`]).
pub(crate) fn current_tid() -> i32 {
    // SAFETY: gettid has no arguments and cannot fail.
    unsafe { libc::gettid() }
}
