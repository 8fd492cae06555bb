//! Where the historian's series live: the embedded [`Store`] (the default) or a
//! PostgreSQL database ([`super::postgres::PgArchive`]). The HistoryRead and HistoryUpdate
//! logic (bounds, interpolation, aggregates, events, modified values) is written once, in
//! [`super::serve`], against this trait; a backend only stores and finds samples by series
//! and SourceTimestamp. Every method runs on a reader thread, never on a shard.

use super::{Resume, Sample, SeriesId, Store, StoreError, StoreStats};

/// A series store as the historian uses it.
pub trait Archive: Send + Sync {
    /// The id of the series with this key (e.g. `"ns=2;s=Boiler.Temp"`), created on first
    /// use; stable across restarts for the embedded store, within a run for PostgreSQL
    /// (which maps it to its own id in the database).
    fn series(&self, key: &str) -> Result<SeriesId, StoreError>;

    /// The id of the series with this key if there is one (made in this run or, for a
    /// backend that keeps its keys, before); never makes one. Reads that only ask whether a
    /// node has something (its modified values) use it, so that reading creates nothing.
    fn lookup(&self, key: &str) -> Result<Option<SeriesId>, StoreError>;

    /// The samples of `id` with `from ≤ source_ts ≤ to`, oldest first (newest first if
    /// `reverse`), leaving out the first `skip` samples of the starting timestamp (`from`,
    /// or `to` when `reverse`: they went out before the read was cut short), at most `limit`
    /// of them appended to `out` (0: no limit). Equal timestamps keep insertion order
    /// (reversed when `reverse`). Returns where to resume when the limit cut the read short.
    fn read_skipping(
        &self,
        id: SeriesId,
        from: i64,
        to: i64,
        reverse: bool,
        limit: usize,
        skip: u32,
        out: &mut Vec<Sample>,
    ) -> Result<Option<Resume>, StoreError>;

    /// [`Archive::read_skipping`] from the first sample of the range.
    fn read(
        &self,
        id: SeriesId,
        from: i64,
        to: i64,
        reverse: bool,
        limit: usize,
        out: &mut Vec<Sample>,
    ) -> Result<Option<Resume>, StoreError> {
        self.read_skipping(id, from, to, reverse, limit, 0, out)
    }

    /// Goes on with a read cut short: `bound` is the far end of the original range (its
    /// `to`, or its `from` when `reverse`).
    fn read_from(
        &self,
        id: SeriesId,
        resume: Resume,
        bound: i64,
        reverse: bool,
        limit: usize,
        out: &mut Vec<Sample>,
    ) -> Result<Option<Resume>, StoreError> {
        let (from, to) = if reverse {
            (bound, resume.ts)
        } else {
            (resume.ts, bound)
        };
        self.read_skipping(id, from, to, reverse, limit, resume.skip, out)
    }

    /// The newest sample with `source_ts < t` (the last of them if several share it).
    fn last_before(&self, id: SeriesId, t: i64) -> Result<Option<Sample>, StoreError> {
        if t == i64::MIN {
            return Ok(None);
        }
        let mut v = Vec::with_capacity(1);
        self.read(id, i64::MIN, t - 1, true, 1, &mut v)?;
        Ok(v.pop())
    }

    /// The oldest sample with `source_ts > t` (the first of them if several share it).
    fn first_after(&self, id: SeriesId, t: i64) -> Result<Option<Sample>, StoreError> {
        if t == i64::MAX {
            return Ok(None);
        }
        let mut v = Vec::with_capacity(1);
        self.read(id, t + 1, i64::MAX, false, 1, &mut v)?;
        Ok(v.pop())
    }

    /// Inserts samples directly (not through the ingest queue): HistoryUpdate. Durable
    /// once [`Archive::flush`] returns.
    fn insert(&self, id: SeriesId, samples: Vec<Sample>) -> Result<(), StoreError>;

    /// Replaces every sample of `id` at `sample.source_ts` with `sample` (an insert where
    /// there is none). Durable on return. Returns how many it replaced.
    fn replace(&self, id: SeriesId, sample: Sample) -> Result<u64, StoreError>;

    /// Deletes the samples of `id` with `from ≤ source_ts ≤ to`. Durable on return.
    /// Returns how many it deleted.
    fn delete_range(&self, id: SeriesId, from: i64, to: i64) -> Result<u64, StoreError>;

    /// Makes every insert before it durable.
    fn flush(&self) -> Result<(), StoreError>;

    /// Counters and sizes (those a backend does not keep stay 0).
    fn stats(&self) -> StoreStats;
}

impl Archive for Store {
    fn series(&self, key: &str) -> Result<SeriesId, StoreError> {
        Store::series(self, key)
    }

    fn lookup(&self, key: &str) -> Result<Option<SeriesId>, StoreError> {
        Ok(Store::lookup(self, key))
    }

    fn read_skipping(
        &self,
        id: SeriesId,
        from: i64,
        to: i64,
        reverse: bool,
        limit: usize,
        skip: u32,
        out: &mut Vec<Sample>,
    ) -> Result<Option<Resume>, StoreError> {
        Store::read_impl(self, id, from, to, reverse, limit, skip, out)
    }

    fn insert(&self, id: SeriesId, samples: Vec<Sample>) -> Result<(), StoreError> {
        Store::append(self, samples.into_iter().map(|s| (id, s))).map(|_| ())
    }

    fn replace(&self, id: SeriesId, sample: Sample) -> Result<u64, StoreError> {
        Store::replace(self, id, sample)
    }

    fn delete_range(&self, id: SeriesId, from: i64, to: i64) -> Result<u64, StoreError> {
        Store::delete_range(self, id, from, to)
    }

    fn flush(&self) -> Result<(), StoreError> {
        Store::flush(self).map(|_| ())
    }

    fn stats(&self) -> StoreStats {
        Store::stats(self)
    }
}
