//! The embedded time-series store behind Historical Access: crash-safe, no set-up,
//! retention by age and size, ingest off the shard threads.
//!
//! # Threads
//!
//! Shards hand samples to an [`Ingest`] handle ([`Ingest::try_push`]): a push onto one
//! bounded lock-free MPMC queue (crossbeam's `ArrayQueue`), shared by every producer.
//! One queue rather than one per shard: the writer drains a single queue, the capacity
//! is one global memory bound that does not depend on how many shards push, and a
//! producer's samples stay in its order; the cost, a compare-and-swap on a shared cache
//! line per push, is small next to the rest of a sample's path at the rates one writer
//! takes (~1 M/s in total). A shard never waits: when the queue is full the sample is
//! dropped ([`OnFull::DropNewest`]) or the oldest queued one is ([`OnFull::DropOldest`]),
//! and [`StoreStats::dropped`] counts it.
//!
//! One writer thread ([`start_writer`]) drains the queue in batches of 1,024, yielding the
//! CPU between them (parked while it is
//! empty, until a push rings its doorbell or a flush is due), appends the samples
//! to the write-ahead log buffer and to the series' in-memory head chunks, seals full
//! heads into segment files, writes the log's buffered frame every `flush_interval_ms`
//! and hands its `fdatasync` to a sync thread of its own (so ingest goes on during the
//! sync; one sync in flight at most; [`StoreStats::durable`] advances when it returns),
//! checkpoints the log when it grows past `wal_max_bytes`, and applies retention.
//!
//! Memory: the queue holds at most `queue_capacity` samples; each series holds at most
//! one head of `chunk_samples` samples (56 bytes each plus what a Variant points to), so
//! many series want a smaller `chunk_samples`; the WAL holds at most one flush interval
//! past `wal_max_bytes`.
//!
//! Readers (HistoryRead runs on reader threads, not on shards) read concurrently with
//! the writer. Each series has one short mutex over its chunk index and its head: a
//! reader holds it only to copy the references of the chunks in range and the head's
//! samples in range; chunks are decoded after it is released, from files held open by
//! `Arc` (a segment dropped by retention meanwhile is still readable to that reader).
//! The writer holds a series' mutex to append one sample or to seal that head (tens of
//! microseconds). Neither side is a shard thread. Readers see every sample the writer
//! has taken from the queue, durable or not.
//!
//! # On disk (one directory)
//!
//! * `series.map`: append-only records `crc32 u32 | len u16 | id u32 | key bytes`, the
//!   persisted key → [`SeriesId`] map (ids are dense, in order of creation).
//! * `seg-NNNNNNNNNNNNNNNN.dat`: segment files, a 16-byte header (`UAHS`, version, number)
//!   then records, each a 52-byte header — magic `UAHC`, kind (chunk or delete), flags
//!   (bit 0: timestamps in order), series id, sample count, min and max source timestamp,
//!   WAL generation, payload length, payload CRC-32, header CRC-32 — and its payload.
//!   A new segment starts at `segment_bytes`; the previous one is fsynced first.
//! * A chunk payload is one bit stream, column after column: source timestamps (the
//!   first raw, then delta-of-delta in a prefix code: 1 bit for a steady clock), server
//!   timestamps (offset from the source timestamp, delta-coded: 1 bit when steady),
//!   status codes (runs), then the values by kind: Boolean 1 bit each; the integer kinds,
//!   DateTime and StatusCode zigzag deltas in the prefix code; Double as scaled decimal
//!   integers when every value in the chunk is exactly `m / 10^k` (k ≤ 6), else
//!   Gorilla XOR (Float too); anything else (mixed kinds, strings, arrays…) as core's
//!   binary encoding of each Variant after the bit stream.
//! * A delete record (kind 1) removes `[min, max]` of its series from every record
//!   written before it; it is one CRC'd record, so a delete is atomic.
//! * `wal-NNNNNNNNNNNNNNNN.log`: the write-ahead log of generation N: a 16-byte header
//!   (`UAHW`, version, generation) then frames `magic | len u32 | crc32 | payload`, the
//!   payload a run of samples: varints of the series id, of the source timestamp's
//!   difference from the previous record's, of the server timestamp's difference from
//!   the source timestamp, and of the status, then the Variant (a Double: ~14 bytes).
//!   Every sample taken by the writer is in it; it is fsynced every flush
//!   interval; that makes [`StoreStats::durable`] advance.
//! * The invariant that ties both: per series, the samples of the current WAL generation
//!   are exactly the chunks tagged with that generation (in order) followed by the head.
//!   Recovery therefore skips, per series, as many WAL samples as its chunks of that
//!   generation hold and replays the rest into the head. A checkpoint (WAL past
//!   `wal_max_bytes`) seals every head of ≥ 64 samples (tagged with the old generation),
//!   fsyncs the segment, writes the small heads into `wal-(N+1).tmp`, fsyncs it, renames
//!   it to `.log` and removes generation N.
//!
//! # What a crash can lose
//!
//! The first [`StoreStats::durable`] samples the writer took since open are on disk
//! (their WAL frames synced, or their chunks synced by a checkpoint). A crash loses at
//! most the samples taken after the last completed sync — about one flush interval, plus
//! the sync's own duration — and what was still in the queue (bounded by
//! `queue_capacity`; milliseconds of data while the writer keeps up). A kill -9 loses
//! less: what was written but not synced is in the page cache and survives. Deletes,
//! replaces and new series are durable when their call returns.
//!
//! # Recovery ([`Store::open`])
//!
//! Segments are scanned in order: every header's CRC is checked, and every payload's in
//! the newest segment (older ones were fsynced whole before the next began; their
//! payloads are checked on every read). At the first bad record the file is truncated.
//! The newest complete WAL is replayed until its first bad frame. Sizes read from disk
//! are checked against fixed bounds before anything is allocated.
//!
//! # Retention
//!
//! Whole segment files are removed, oldest first, while the oldest is older than
//! `retention_age_s` (by its newest sample's source timestamp, against the wall clock) or
//! the segments together are larger than `retention_bytes`. The segment being written is
//! never removed. A segment holding chunks of the current WAL generation is removed only
//! after a checkpoint, so a replay never brings back what retention removed.
//!
//! # Editing (HistoryUpdate)
//!
//! Samples may arrive in any order: a chunk records whether its timestamps are in order
//! and reads merge overlapping chunks (stably: equal timestamps keep insertion order).
//! Insert is an append; [`Store::delete_range`] writes a delete record;
//! [`Store::replace_many`] writes replace records: a chunk (flag bit 1, WAL generation
//! 0, so no replay counts it) that also deletes its timestamps from every record written
//! before it — one CRC'd record, so a replace is atomic per record.

pub mod archive;
mod codec;
pub mod collection;
mod ingest;
pub mod postgres;
pub mod serve;
mod store;
pub mod tools;
mod wal;

pub use codec::crc32;
pub use ingest::{start_writer, Ingest, Pushed, WriterHandle};
pub use store::Store;

use std::path::PathBuf;
use uaring_core::types::Variant;

/// One historical value: OPC UA DateTime ticks (100 ns since 1601) for both timestamps.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Sample {
    pub source_ts: i64,
    pub server_ts: i64,
    pub status: u32,
    pub value: Variant,
}

/// A series (one historized node) in a [`Store`]; stable across restarts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SeriesId(pub u32);

/// What [`Ingest::try_push`] does when the queue is full. Either way the shard does not
/// wait and [`StoreStats::dropped`] counts the lost sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum OnFull {
    /// The sample being pushed is dropped (`try_push` returns false).
    #[default]
    DropNewest,
    /// The oldest queued sample is dropped to make room (`try_push` returns true).
    DropOldest,
}

/// Where a read stopped at its limit: pass it to [`archive::Archive::read_from`] to go on. The
/// next sample has source timestamp `ts` and is preceded by `skip` samples of the same
/// timestamp already returned (in the read's direction).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Resume {
    pub ts: i64,
    pub skip: u32,
}

#[derive(Clone, Debug)]
pub struct StoreConfig {
    pub dir: PathBuf,
    /// How often the writer makes the WAL durable; what a crash can lose is what arrived
    /// in the last interval. 1 ..= 60,000.
    pub flush_interval_ms: u32,
    /// Segments whose newest sample is older than this are removed.
    pub retention_age_s: Option<u64>,
    /// Oldest segments are removed while the segments take more than this.
    pub retention_bytes: Option<u64>,
    /// Capacity of the ingest queue, in samples (≥ 1).
    pub queue_capacity: usize,
    pub on_full: OnFull,
    /// Samples in a head chunk before it is sealed (1 ..= 65,536).
    pub chunk_samples: u32,
    /// Size at which the next segment file is started.
    pub segment_bytes: u64,
    /// Size at which the WAL is checkpointed.
    pub wal_max_bytes: u64,
    /// How often the writer checks retention.
    pub retention_check_ms: u32,
    /// Nice value of the writer and sync threads (0..=19; 0 leaves it as it is): above the
    /// shards' 0, so a writer that shares a CPU with a shard yields to it.
    pub nice: i32,
    /// The Linux scheduling policy of the writer and sync threads.
    pub writer_policy: WriterPolicy,
    /// Where the store's threads run (`runtime.background_cpus`; default not pinned).
    pub cpus: crate::background::BackgroundCpus,
}

/// The scheduling policy of the history writer threads (`history.writer_policy`): how they
/// give way to the shards when they share a CPU (docs/History.md, "Threads").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum WriterPolicy {
    /// SCHED_OTHER at `nice`.
    Normal,
    /// SCHED_BATCH at `nice`: the kernel treats the writer as CPU-bound, so its wake-ups do
    /// not preempt a running shard.
    #[default]
    Batch,
    /// SCHED_IDLE: the writer runs only when nothing else wants the CPU; it may fall
    /// behind a busy shard and the queue drop (counted and marked).
    Idle,
}

impl WriterPolicy {
    /// Parses `normal`, `batch` or `idle`.
    pub fn parse(s: &str) -> Option<WriterPolicy> {
        match s {
            "normal" => Some(WriterPolicy::Normal),
            "batch" => Some(WriterPolicy::Batch),
            "idle" => Some(WriterPolicy::Idle),
            _ => None,
        }
    }

    /// Sets the calling thread's policy and nice value (failures leave the defaults).
    pub(crate) fn apply(self, nice: i32) {
        let policy = match self {
            WriterPolicy::Normal => None,
            WriterPolicy::Batch => Some(libc::SCHED_BATCH),
            WriterPolicy::Idle => Some(libc::SCHED_IDLE),
        };
        if let Some(policy) = policy {
            let param = libc::sched_param { sched_priority: 0 };
            // SAFETY: a plain syscall on the calling thread (pid 0) with a valid parameter;
            // failure only leaves SCHED_OTHER.
            unsafe {
                libc::sched_setscheduler(0, policy, &param);
            }
        }
        crate::handshake_pool::set_nice(nice);
    }
}

impl StoreConfig {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        StoreConfig {
            dir: dir.into(),
            flush_interval_ms: 1000,
            retention_age_s: None,
            retention_bytes: None,
            queue_capacity: 1 << 18,
            on_full: OnFull::DropNewest,
            chunk_samples: 1024,
            segment_bytes: 64 << 20,
            wal_max_bytes: 64 << 20,
            retention_check_ms: 1000,
            nice: 0,
            writer_policy: WriterPolicy::Normal,
            cpus: crate::background::BackgroundCpus::any(),
        }
    }
}

/// Counters and sizes; a snapshot.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StoreStats {
    pub series: u64,
    /// Samples in sealed chunks and heads (deletes of part of a chunk not subtracted).
    pub samples: u64,
    pub head_samples: u64,
    pub chunks: u64,
    pub segments: u64,
    pub segment_bytes: u64,
    pub wal_bytes: u64,
    /// Samples the writer has taken since open (the sequence the watermark counts).
    pub appended: u64,
    /// The first `durable` samples taken since open are on disk (WAL fsynced).
    pub durable: u64,
    /// Samples lost to a full queue.
    pub dropped: u64,
    /// Samples refused: unknown series, or a value encoding to more than 1 MiB.
    pub rejected: u64,
    pub flushes: u64,
    pub checkpoints: u64,
    pub segments_removed: u64,
    pub io_errors: u64,
    /// Records found damaged at open (the file truncated there) and frames of the WAL.
    pub recovered_truncations: u64,
    pub replayed: u64,
}

#[derive(Debug)]
pub enum StoreError {
    Io(std::io::Error),
    /// Damaged data on disk (what names the file or record kind).
    Corrupt(&'static str),
    /// A bad argument or configuration.
    Invalid(&'static str),
    /// Another process has the store open.
    Locked,
    /// The history database is away or refused a statement (its message; never a
    /// password).
    Database(String),
    /// The configuration is not usable (what is wrong).
    Config(String),
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreError::Io(e) => write!(f, "history store I/O: {e}"),
            StoreError::Corrupt(w) => write!(f, "history store: damaged {w}"),
            StoreError::Invalid(w) => write!(f, "history store: {w}"),
            StoreError::Locked => write!(f, "history store: in use by another process"),
            StoreError::Database(e) => write!(f, "history database: {e}"),
            StoreError::Config(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for StoreError {}

impl From<std::io::Error> for StoreError {
    fn from(e: std::io::Error) -> Self {
        StoreError::Io(e)
    }
}
