//! The address space while the server runs: versions published by one writer at a time,
//! read by every shard without a lock.
//!
//! * **Versions.** The [`AddressSpace`] is immutable once published. A change (nodes or
//!   references added or removed, [`super::edit`]) clones the current version — a handful of
//!   `Arc`s — copies the parts it touches, and publishes the result whole with one pointer
//!   swap ([`Model::commit`]). A reader keeps the version it loaded for as long as it holds
//!   the `Arc`: the nodes, ids and derived tables it sees never change under it. (A node's
//!   references are the exception: they are swapped in place, [`super::Refs`], so a node
//!   that gains a child is not copied with its value cell.)
//! * **Shards.** Each shard holds one version and looks at [`Model::version`] (one atomic
//!   load) when it asks for its next deadline; on a new one it loads it at the top of its
//!   next loop iteration, tells its monitored items which nodes went away, and acknowledges
//!   it ([`Model::ack`]). The writer wakes every shard when it publishes.
//! * **Writers** are serialized by the caller (the runtime's model writer thread, which
//!   also runs the shards' NodeManagement requests handed to it through [`Writer`]; a test
//!   calls in turn). [`Model::commit`] refuses an edit made on a version that is no longer
//!   the current one, so two writers that were not serialized cannot lose a change.
//! * **Pauses.** An edit and its commit call the writer thread's pause hook between their
//!   steps ([`super::edit::set_pause`]), where the runtime's writer gives a shard sharing
//!   its CPU its turn.
//! * **Reclaiming.** A removed node's memory goes when the last version holding it goes:
//!   the shards drop the old version when they take the new one. Its index is reused only
//!   once every shard has acknowledged the version that removed it (so no shard still has
//!   an item bound to it), and the node added there gets a new generation
//!   ([`super::Node::generation`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use arc_swap::ArcSwap;

use super::edit::Edit;
use super::AddressSpace;
use crate::config::MAX_SHARDS;

/// Not a shard (or a shard that stopped).
const UNREGISTERED: u64 = u64::MAX;

/// One request for the [`Writer`]: [`WriterJob::run`] makes and commits its edit and
/// answers the shard that holds the request. Dropped unrun, it answers BadInternalError.
pub struct WriterJob {
    work: Box<dyn FnOnce(crate::time::Now) -> crate::generated::messages::Response + Send>,
    reply: super::app::Reply,
}

impl std::fmt::Debug for WriterJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriterJob")
            .field("reply", &self.reply)
            .finish()
    }
}

impl WriterJob {
    pub(crate) fn new(
        work: Box<dyn FnOnce(crate::time::Now) -> crate::generated::messages::Response + Send>,
        reply: super::app::Reply,
    ) -> WriterJob {
        WriterJob { work, reply }
    }

    /// Runs the job (`now`: the time it runs at) and sends its response to the shard.
    pub fn run(self, now: crate::time::Now) {
        let response = (self.work)(now);
        self.reply
            .answer(super::app::Outcome::Response(Box::new(response)));
    }

    /// The job will not run: its request is answered by the shard that made it (nothing is
    /// sent).
    pub(crate) fn cancel(self) {
        self.reply.cancel();
    }
}

/// Where the shards' NodeManagement requests are edited and committed: off the shards (the
/// runtime's model writer thread, the writers' turn taken for each job), so that a shard
/// keeps serving while a big edit is made. Without one (core alone, a test) the shard edits
/// in the call that received the request.
pub trait Writer: Send + Sync {
    /// Queues `job` (to be run with [`WriterJob::run`] on the writer); the job back at once
    /// when the writer's bounded queue is full or it stopped.
    fn submit(&self, job: WriterJob) -> Result<(), WriterJob>;
}

/// The current version of the address space and what the shards have seen of it.
pub struct Model {
    current: ArcSwap<AddressSpace>,
    version: AtomicU64,
    /// Per shard: the version it holds (`UNREGISTERED` when none).
    acks: Box<[AtomicU64]>,
    /// Set once by the runtime before the shards serve.
    writer: OnceLock<Arc<dyn Writer>>,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model")
            .field("version", &self.version())
            .finish()
    }
}

/// Why a commit was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitError {
    /// Another version was published since the edit began (writers were not serialized):
    /// nothing was changed; begin again.
    Conflict,
}

impl Model {
    /// The model of an address space just built.
    pub fn new(space: Arc<AddressSpace>) -> Model {
        let v = space.version();
        Model {
            current: ArcSwap::new(space),
            version: AtomicU64::new(v),
            acks: (0..MAX_SHARDS)
                .map(|_| AtomicU64::new(UNREGISTERED))
                .collect(),
            writer: OnceLock::new(),
        }
    }

    /// Hands the shards' NodeManagement edits to `writer` from now on (once: `false`, and
    /// nothing changed, when a writer is set already).
    pub fn set_writer(&self, writer: Arc<dyn Writer>) -> bool {
        self.writer.set(writer).is_ok()
    }

    /// The writer of the shards' NodeManagement edits, when the runtime set one.
    pub fn writer(&self) -> Option<&Arc<dyn Writer>> {
        self.writer.get()
    }

    /// The version published last (one atomic load: the shards' check).
    #[inline]
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    /// The version published last.
    pub fn load(&self) -> Arc<AddressSpace> {
        self.current.load_full()
    }

    /// The version published last, borrowed (no reference count touched in the usual case:
    /// the library's handles push through it from any thread).
    #[inline]
    pub fn current(&self) -> arc_swap::Guard<Arc<AddressSpace>> {
        self.current.load()
    }

    /// Shard `shard` holds version `version` (and will acknowledge every later one).
    pub fn register(&self, shard: usize, version: u64) {
        if let Some(a) = self.acks.get(shard) {
            a.store(version, Ordering::Release);
        }
    }

    /// Shard `shard` stopped: no later version waits for it.
    pub fn unregister(&self, shard: usize) {
        if let Some(a) = self.acks.get(shard) {
            a.store(UNREGISTERED, Ordering::Release);
        }
    }

    /// Shard `shard` has taken version `version` and told its items of what it removed.
    pub fn ack(&self, shard: usize, version: u64) {
        self.register(shard, version);
    }

    /// The oldest version a shard still holds (the current one when no shard runs).
    pub fn oldest_held(&self) -> u64 {
        self.acks
            .iter()
            .map(|a| a.load(Ordering::Acquire))
            .filter(|&v| v != UNREGISTERED)
            .min()
            .unwrap_or_else(|| self.version())
    }

    /// The shards that hold a version.
    fn shards(&self) -> impl Iterator<Item = usize> + '_ {
        self.acks
            .iter()
            .enumerate()
            .filter(|(_, a)| a.load(Ordering::Acquire) != UNREGISTERED)
            .map(|(i, _)| i)
    }

    /// Begins a change on the current version.
    pub fn edit(&self) -> Edit {
        Edit::new(self.load(), self.oldest_held())
    }

    /// Publishes the edited address space as the next version and wakes every shard.
    /// Returns what changed (for the model change event). Refused, with nothing changed,
    /// when another version was published since the edit began.
    pub fn commit(&self, edit: Edit) -> Result<super::edit::Committed, CommitError> {
        let (base, space, after) = edit.finish();
        super::edit::pause();
        let space = Arc::new(space);
        let prev = self.current.compare_and_swap(&base, Arc::clone(&space));
        if !Arc::ptr_eq(&prev, &base) {
            return Err(CommitError::Conflict);
        }
        self.version.store(space.version(), Ordering::Release);
        let committed = after.apply(&space);
        super::edit::pause();
        for shard in self.shards() {
            space.changes().wake(shard);
        }
        Ok(committed)
    }
}
