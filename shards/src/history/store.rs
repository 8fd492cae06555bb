//! The store: segment files, the chunk index, heads, WAL, recovery, retention, reads.

use super::codec::{crc32, decode_chunk, encode_chunk};
use super::wal;
use super::{Resume, Sample, SeriesId, StoreConfig, StoreError, StoreStats};
use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File, OpenOptions};
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

const SEG_MAGIC: u32 = u32::from_le_bytes(*b"UAHS");
const REC_MAGIC: u32 = u32::from_le_bytes(*b"UAHC");
const VERSION: u32 = 1;
const SEG_HEADER_LEN: u64 = 16;
const REC_HEADER_LEN: usize = 52;
const KIND_CHUNK: u8 = 0;
const KIND_DELETE: u8 = 1;
const FLAG_SORTED: u8 = 1;
/// A replace record: a chunk that deletes its timestamps from every record before it.
const FLAG_REPLACES: u8 = 2;
/// Bounds on what a record header may claim.
const MAX_PAYLOAD: u32 = 8 << 20;
const MAX_COUNT: u32 = 65_536;
/// A head is sealed at this many bytes of samples (as logged) whatever its count.
const HEAD_BYTES: usize = 1 << 20;
/// The status of the value that stands for a chunk a read could not load:
/// Bad_DataUnavailable ("temporary unavailability" of an archive, Part 4).
pub const UNREADABLE_CHUNK: u32 = uaring_core::StatusCode::BadDataUnavailable.0;
/// At a checkpoint, heads below this many samples are carried into the new WAL.
const CARRY_MAX: usize = 64;
const MAX_KEY_LEN: usize = 4096;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn le32(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    if let Some(s) = b.get(at..at + 4) {
        a.copy_from_slice(s);
    }
    u32::from_le_bytes(a)
}
fn le64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    if let Some(s) = b.get(at..at + 8) {
        a.copy_from_slice(s);
    }
    u64::from_le_bytes(a)
}

#[derive(Clone, Copy, Debug)]
struct RecHeader {
    kind: u8,
    flags: u8,
    series: u32,
    count: u32,
    min: i64,
    max: i64,
    gen: u64,
    len: u32,
    crc: u32,
}

impl RecHeader {
    fn encode(&self) -> [u8; REC_HEADER_LEN] {
        let mut h = [0u8; REC_HEADER_LEN];
        h[0..4].copy_from_slice(&REC_MAGIC.to_le_bytes());
        h[4] = self.kind;
        h[5] = self.flags;
        h[8..12].copy_from_slice(&self.series.to_le_bytes());
        h[12..16].copy_from_slice(&self.count.to_le_bytes());
        h[16..24].copy_from_slice(&self.min.to_le_bytes());
        h[24..32].copy_from_slice(&self.max.to_le_bytes());
        h[32..40].copy_from_slice(&self.gen.to_le_bytes());
        h[40..44].copy_from_slice(&self.len.to_le_bytes());
        h[44..48].copy_from_slice(&self.crc.to_le_bytes());
        let c = crc32(&h[..48]);
        h[48..52].copy_from_slice(&c.to_le_bytes());
        h
    }
    fn parse(h: &[u8; REC_HEADER_LEN]) -> Option<RecHeader> {
        if le32(h, 0) != REC_MAGIC || le32(h, 48) != crc32(&h[..48]) {
            return None;
        }
        let r = RecHeader {
            kind: h[4],
            flags: h[5],
            series: le32(h, 8),
            count: le32(h, 12),
            min: le64(h, 16) as i64,
            max: le64(h, 24) as i64,
            gen: le64(h, 32),
            len: le32(h, 40),
            crc: le32(h, 44),
        };
        let ok = match r.kind {
            KIND_CHUNK => r.count >= 1 && r.count <= MAX_COUNT && r.len <= MAX_PAYLOAD,
            KIND_DELETE => r.count == 0 && r.len == 0,
            _ => false,
        };
        (ok && r.min <= r.max).then_some(r)
    }
}

/// One segment file, shared by the chunks in it (a reader holding a chunk keeps it open).
pub(crate) struct Segment {
    no: u64,
    file: File,
    path: PathBuf,
}

#[derive(Clone)]
struct ChunkRef {
    seg: Arc<Segment>,
    /// Offset of the payload.
    off: u64,
    len: u32,
    crc: u32,
    count: u32,
    min: i64,
    max: i64,
    sorted: bool,
    /// Write order: segment number << 32 | record offset.
    seq: u64,
}

#[derive(Clone, Copy)]
struct Tomb {
    from: i64,
    to: i64,
    seq: u64,
}

struct SeriesState {
    /// In write order. `ordered`: also in time order, disjoint, each sorted.
    chunks: Vec<ChunkRef>,
    ordered: bool,
    chunks_max: i64,
    /// Deletes that cover part of some chunk written before them.
    tombs: Vec<Tomb>,
    head: Vec<Sample>,
    head_bytes: usize,
    head_min: i64,
    head_max: i64,
    head_sorted: bool,
}

impl SeriesState {
    fn new() -> Self {
        SeriesState {
            chunks: Vec::new(),
            ordered: true,
            chunks_max: i64::MIN,
            tombs: Vec::new(),
            head: Vec::new(),
            head_bytes: 0,
            head_min: i64::MAX,
            head_max: i64::MIN,
            head_sorted: true,
        }
    }
    fn push_head(&mut self, s: Sample, bytes: usize) {
        let t = s.source_ts;
        if t < self.head_max {
            self.head_sorted = false;
        }
        self.head_min = self.head_min.min(t);
        self.head_max = self.head_max.max(t);
        self.head_bytes += bytes;
        self.head.push(s);
    }
    fn clear_head(&mut self) {
        self.head.clear();
        if self.head.capacity() > 4096 {
            self.head.shrink_to(1024);
        }
        self.head_bytes = 0;
        self.head_min = i64::MAX;
        self.head_max = i64::MIN;
        self.head_sorted = true;
    }
    fn add_chunk(&mut self, c: ChunkRef) {
        if !c.sorted || (!self.chunks.is_empty() && c.min < self.chunks_max) {
            self.ordered = false;
        }
        self.chunks_max = self.chunks_max.max(c.max);
        self.chunks.push(c);
    }
    /// Applies a replace record written at `seq`: its timestamps (in order) are deleted
    /// from what was written before it.
    fn apply_replace(&mut self, ts: impl Iterator<Item = i64>, seq: u64) {
        let mut prev = None;
        for t in ts {
            if prev != Some(t) {
                self.apply_delete(t, t, seq);
                prev = Some(t);
            }
        }
    }
    /// Applies a delete written at `seq`: chunks wholly inside go, a tombstone stays for
    /// those partly inside.
    fn apply_delete(&mut self, from: i64, to: i64, seq: u64) {
        let mut partial = false;
        self.chunks.retain(|c| {
            if c.seq > seq || c.max < from || c.min > to {
                return true;
            }
            if c.min >= from && c.max <= to {
                return false;
            }
            partial = true;
            true
        });
        if partial {
            self.tombs.push(Tomb { from, to, seq });
        }
    }
}

pub(crate) struct Series {
    id: u32,
    st: Mutex<SeriesState>,
}

struct SegMeta {
    seg: Arc<Segment>,
    bytes: u64,
    max_ts: i64,
    max_gen: u64,
}

/// What only the writer side touches (the writer thread, or a delete/replace call).
pub(crate) struct Core {
    gen: u64,
    wal: Option<File>,
    /// The same file (a second descriptor) for the writer's sync thread.
    wal_sync: Option<Arc<File>>,
    wal_len: u64,
    wal_buf: Vec<u8>,
    /// The previous record's source timestamp in `wal_buf` (records are delta-coded
    /// within a frame).
    wal_prev_ts: i64,
    frame_buf: Vec<u8>,
    wal_broken: bool,
    segs: BTreeMap<u64, SegMeta>,
    active: u64,
    active_len: u64,
    appended: u64,
    cache: Vec<Arc<Series>>,
    rec_buf: Vec<u8>,
}

impl Core {
    pub(crate) fn appended(&self) -> u64 {
        self.appended
    }
}

#[derive(Default)]
pub(crate) struct Counters {
    pub durable: AtomicU64,
    pub appended: AtomicU64,
    /// Shared with the ingest queue ([`super::Ingest`]), which counts what it drops.
    pub dropped: Arc<AtomicU64>,
    pub rejected: AtomicU64,
    pub flushes: AtomicU64,
    pub checkpoints: AtomicU64,
    pub segments_removed: AtomicU64,
    pub io_errors: AtomicU64,
    pub truncations: AtomicU64,
    pub replayed: AtomicU64,
    pub segment_bytes: AtomicU64,
    pub segments: AtomicU64,
    pub wal_bytes: AtomicU64,
}

struct Names {
    map: HashMap<String, SeriesId>,
    keys: Vec<String>,
    file: File,
}

/// The store. `Send + Sync`: shared by `Arc` between the writer thread and readers.
pub struct Store {
    pub(crate) cfg: StoreConfig,
    names: Mutex<Names>,
    series: RwLock<Vec<Arc<Series>>>,
    core: Mutex<Core>,
    pub(crate) c: Counters,
    /// Set by the writer's sync thread when an fdatasync failed.
    sync_failed: std::sync::atomic::AtomicBool,
    _lock: File,
}

fn seg_path(dir: &Path, no: u64) -> PathBuf {
    dir.join(format!("seg-{no:016}.dat"))
}
fn wal_path(dir: &Path, gen: u64) -> PathBuf {
    dir.join(format!("wal-{gen:016}.log"))
}
fn parse_name(name: &str, prefix: &str, suffix: &str) -> Option<u64> {
    name.strip_prefix(prefix)?
        .strip_suffix(suffix)?
        .parse()
        .ok()
}
fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    File::open(dir)?.sync_all()?;
    Ok(())
}

fn now_ticks() -> i64 {
    let ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0);
    ns / 100 + uaring_core::types::DateTime::UNIX_EPOCH_TICKS
}

fn new_segment(dir: &Path, no: u64) -> Result<Arc<Segment>, StoreError> {
    let path = seg_path(dir, no);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)?;
    let mut h = [0u8; SEG_HEADER_LEN as usize];
    h[0..4].copy_from_slice(&SEG_MAGIC.to_le_bytes());
    h[4..8].copy_from_slice(&VERSION.to_le_bytes());
    h[8..16].copy_from_slice(&no.to_le_bytes());
    file.write_all_at(&h, 0)?;
    file.sync_data()?;
    sync_dir(dir)?;
    Ok(Arc::new(Segment { no, file, path }))
}

/// The emitter of a read: applies the resume skip and the limit.
struct Emit<'a> {
    out: &'a mut Vec<Sample>,
    limit: usize,
    emitted: usize,
    skip: u32,
    skip_ts: i64,
    run_ts: Option<i64>,
    run_count: u32,
    resume: Option<Resume>,
}

impl Emit<'_> {
    /// False once the limit is reached (the resume position is then set).
    #[inline]
    fn offer(&mut self, s: Sample) -> bool {
        let t = s.source_ts;
        if self.skip > 0 && t == self.skip_ts {
            self.skip -= 1;
            self.run(t);
            return true;
        }
        self.skip = 0;
        if self.emitted >= self.limit {
            let skip = if self.run_ts == Some(t) {
                self.run_count
            } else {
                0
            };
            self.resume = Some(Resume { ts: t, skip });
            return false;
        }
        self.run(t);
        self.out.push(s);
        self.emitted += 1;
        true
    }
    #[inline]
    fn run(&mut self, t: i64) {
        if self.run_ts == Some(t) {
            self.run_count += 1;
        } else {
            self.run_ts = Some(t);
            self.run_count = 1;
        }
    }
}

impl Store {
    /// Opens (creating if need be) the store in `config.dir` and recovers it: checks the
    /// records' CRCs, truncates a damaged tail, replays the WAL, checkpoints.
    pub fn open(config: StoreConfig) -> Result<Arc<Store>, StoreError> {
        let cfg = config;
        if cfg.flush_interval_ms == 0 || cfg.flush_interval_ms > 60_000 {
            return Err(StoreError::Invalid("flush_interval_ms must be 1 ..= 60000"));
        }
        if cfg.chunk_samples == 0 || cfg.chunk_samples > MAX_COUNT {
            return Err(StoreError::Invalid("chunk_samples must be 1 ..= 65536"));
        }
        if cfg.queue_capacity == 0 {
            return Err(StoreError::Invalid("queue_capacity must be at least 1"));
        }
        if cfg.segment_bytes < 4096 || cfg.segment_bytes > 1 << 30 {
            return Err(StoreError::Invalid("segment_bytes must be 4 KiB ..= 1 GiB"));
        }
        if cfg.wal_max_bytes < 4096 {
            return Err(StoreError::Invalid("wal_max_bytes must be at least 4 KiB"));
        }
        let dir = cfg.dir.clone();
        fs::create_dir_all(&dir)?;
        let lock_file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(dir.join("store.lock"))?;
        {
            use std::os::fd::AsRawFd;
            // SAFETY: flock on a descriptor this function owns; no memory is involved.
            let r = unsafe { libc::flock(lock_file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
            if r != 0 {
                return Err(StoreError::Locked);
            }
        }
        let c = Counters::default();
        let names = Self::load_names(&dir, &c)?;
        let series: Vec<Arc<Series>> = (0..names.keys.len() as u32)
            .map(|id| {
                Arc::new(Series {
                    id,
                    st: Mutex::new(SeriesState::new()),
                })
            })
            .collect();

        // The newest WAL generation; older ones (and unfinished checkpoints) are gone.
        let mut wal_gens = Vec::new();
        let mut seg_nos = Vec::new();
        for e in fs::read_dir(&dir)? {
            let e = e?;
            let name = e.file_name();
            let Some(name) = name.to_str() else { continue };
            if let Some(g) = parse_name(name, "wal-", ".log") {
                wal_gens.push(g);
            } else if let Some(n) = parse_name(name, "seg-", ".dat") {
                seg_nos.push(n);
            } else if name.starts_with("wal-") && name.ends_with(".tmp") {
                let _ = fs::remove_file(e.path());
            }
        }
        wal_gens.sort_unstable();
        seg_nos.sort_unstable();
        let gen = wal_gens.last().copied().unwrap_or(0);
        for &g in &wal_gens[..wal_gens.len().saturating_sub(1)] {
            let _ = fs::remove_file(wal_path(&dir, g));
        }

        // Segments, in order.
        let mut skip: HashMap<u32, u64> = HashMap::new();
        let mut segs = BTreeMap::new();
        for (i, &no) in seg_nos.iter().enumerate() {
            let last = i + 1 == seg_nos.len();
            let meta = Self::scan_segment(&dir, no, last, gen, &series, &mut skip, &c)?;
            segs.insert(no, meta);
        }
        let (active, active_len) = match segs.last_key_value() {
            Some((&no, m)) => (no, m.bytes),
            None => {
                let seg = new_segment(&dir, 1)?;
                segs.insert(
                    1,
                    SegMeta {
                        seg,
                        bytes: SEG_HEADER_LEN,
                        max_ts: i64::MIN,
                        max_gen: 0,
                    },
                );
                (1, SEG_HEADER_LEN)
            }
        };
        c.segments.store(segs.len() as u64, Relaxed);
        c.segment_bytes
            .store(segs.values().map(|m| m.bytes).sum(), Relaxed);

        let core = Core {
            gen,
            wal: None,
            wal_sync: None,
            wal_len: 0,
            wal_buf: Vec::new(),
            wal_prev_ts: 0,
            frame_buf: Vec::new(),
            wal_broken: false,
            segs,
            active,
            active_len,
            appended: 0,
            cache: series.clone(),
            rec_buf: Vec::new(),
        };
        let store = Arc::new(Store {
            cfg,
            names: Mutex::new(names),
            series: RwLock::new(series),
            core: Mutex::new(core),
            c,
            sync_failed: std::sync::atomic::AtomicBool::new(false),
            _lock: lock_file,
        });
        {
            let mut core = lock(&store.core);
            if gen > 0 {
                let path = wal_path(&dir, gen);
                let mut err = None;
                let scan = wal::scan(&path, gen, |id, s| {
                    if let Some(k) = skip.get_mut(&id) {
                        if *k > 0 {
                            *k -= 1;
                            return;
                        }
                    }
                    store.c.replayed.fetch_add(1, Relaxed);
                    if let Err(e) = store.push_locked(&mut core, SeriesId(id), s, false) {
                        err.get_or_insert(e);
                    }
                });
                match scan {
                    Ok(s) => {
                        if s.torn {
                            store.c.truncations.fetch_add(1, Relaxed);
                        }
                    }
                    // A WAL whose header is damaged holds nothing usable.
                    Err(StoreError::Corrupt(_)) => {
                        store.c.truncations.fetch_add(1, Relaxed);
                    }
                    Err(e) => return Err(e),
                }
                if let Some(e) = err {
                    return Err(e);
                }
            }
            store.checkpoint_locked(&mut core)?;
        }
        sync_dir(&dir)?;
        Ok(store)
    }

    fn load_names(dir: &Path, c: &Counters) -> Result<Names, StoreError> {
        let path = dir.join("series.map");
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)?;
        let len = file.metadata()?.len();
        let mut data = Vec::new();
        // Bounded: at most 2^32 ids of 4 KiB keys would not fit anyway; refuse the absurd.
        if len > 256 << 20 {
            return Err(StoreError::Corrupt("series.map (too large)"));
        }
        file.read_to_end(&mut data)?;
        let mut map = HashMap::new();
        let mut keys = Vec::new();
        let mut pos = 0usize;
        while pos + 10 <= data.len() {
            let crc = le32(&data, pos);
            let klen = u16::from_le_bytes([data[pos + 4], data[pos + 5]]) as usize;
            let id = le32(&data, pos + 6);
            let end = pos + 10 + klen;
            let Some(rec) = data.get(pos + 4..end) else {
                break;
            };
            if crc32(rec) != crc || id as usize != keys.len() || klen == 0 {
                break;
            }
            let Ok(key) = std::str::from_utf8(&data[pos + 10..end]) else {
                break;
            };
            map.insert(key.to_string(), SeriesId(id));
            keys.push(key.to_string());
            pos = end;
        }
        if pos < data.len() {
            c.truncations.fetch_add(1, Relaxed);
            file.set_len(pos as u64)?;
            file.sync_all()?;
        }
        Ok(Names { map, keys, file })
    }

    fn scan_segment(
        dir: &Path,
        no: u64,
        verify_payloads: bool,
        gen: u64,
        series: &[Arc<Series>],
        skip: &mut HashMap<u32, u64>,
        c: &Counters,
    ) -> Result<SegMeta, StoreError> {
        let path = seg_path(dir, no);
        let file = OpenOptions::new().read(true).write(true).open(&path)?;
        let file_len = file.metadata()?.len();
        let mut meta_max_ts = i64::MIN;
        let mut meta_max_gen = 0;
        let mut r = BufReader::with_capacity(1 << 20, file.try_clone()?);
        let mut h = [0u8; SEG_HEADER_LEN as usize];
        let header_ok = r.read_exact(&mut h).is_ok()
            && le32(&h, 0) == SEG_MAGIC
            && le32(&h, 4) == VERSION
            && le64(&h, 8) == no;
        let seg = Arc::new(Segment {
            no,
            file,
            path: path.clone(),
        });
        if !header_ok {
            // Nothing in it can be trusted: start it again, empty.
            c.truncations.fetch_add(1, Relaxed);
            drop(seg);
            let seg = new_segment(dir, no)?;
            return Ok(SegMeta {
                seg,
                bytes: SEG_HEADER_LEN,
                max_ts: i64::MIN,
                max_gen: 0,
            });
        }
        let mut pos = SEG_HEADER_LEN;
        let mut payload = Vec::new();
        let mut replaced = Vec::new();
        loop {
            let mut hb = [0u8; REC_HEADER_LEN];
            if pos + REC_HEADER_LEN as u64 > file_len || r.read_exact(&mut hb).is_err() {
                break;
            }
            let Some(rh) = RecHeader::parse(&hb) else {
                break;
            };
            let end = pos + REC_HEADER_LEN as u64 + rh.len as u64;
            if end > file_len {
                break;
            }
            let replaces = rh.kind == KIND_CHUNK && rh.flags & FLAG_REPLACES != 0;
            if verify_payloads || replaces {
                payload.resize(rh.len as usize, 0);
                if r.read_exact(&mut payload).is_err() || crc32(&payload) != rh.crc {
                    break;
                }
            } else if r.seek_relative(rh.len as i64).is_err() {
                break;
            }
            // A replace record's timestamps are what it deletes.
            replaced.clear();
            if replaces && decode_chunk(&payload, rh.count as usize, &mut replaced).is_err() {
                break;
            }
            let seq = (no << 32) | pos;
            if let Some(s) = series.get(rh.series as usize) {
                let mut st = lock(&s.st);
                if rh.kind == KIND_CHUNK {
                    if replaces {
                        st.apply_replace(replaced.iter().map(|s| s.source_ts), seq);
                    }
                    st.add_chunk(ChunkRef {
                        seg: seg.clone(),
                        off: pos + REC_HEADER_LEN as u64,
                        len: rh.len,
                        crc: rh.crc,
                        count: rh.count,
                        min: rh.min,
                        max: rh.max,
                        sorted: rh.flags & FLAG_SORTED != 0,
                        seq,
                    });
                    meta_max_ts = meta_max_ts.max(rh.max);
                    meta_max_gen = meta_max_gen.max(rh.gen);
                    if rh.gen == gen && !replaces {
                        *skip.entry(rh.series).or_insert(0) += rh.count as u64;
                    }
                } else {
                    st.apply_delete(rh.min, rh.max, seq);
                }
            }
            pos = end;
        }
        if pos < file_len {
            c.truncations.fetch_add(1, Relaxed);
            seg.file.set_len(pos)?;
            seg.file.sync_all()?;
        }
        // The reader's position is irrelevant from here on (writes use offsets).
        let _ = r.seek(SeekFrom::Start(0));
        Ok(SegMeta {
            seg,
            bytes: pos,
            max_ts: meta_max_ts,
            max_gen: meta_max_gen,
        })
    }

    pub(crate) fn lock_core(&self) -> MutexGuard<'_, Core> {
        lock(&self.core)
    }

    /// The id of the series with this key (e.g. `"ns=2;s=Boiler.Temp"`), created (and
    /// made durable) on first use.
    pub fn series(&self, key: &str) -> Result<SeriesId, StoreError> {
        Ok(self.series_many(&[key])?[0])
    }

    /// [`Store::series`] for many keys, made durable with one sync (registering the
    /// historized nodes of a large address space at start-up).
    pub fn series_many(&self, keys: &[&str]) -> Result<Vec<SeriesId>, StoreError> {
        if keys.iter().any(|k| k.is_empty() || k.len() > MAX_KEY_LEN) {
            return Err(StoreError::Invalid("series key must be 1 ..= 4096 bytes"));
        }
        let mut names = lock(&self.names);
        let mut out = Vec::new();
        let mut ids = Vec::with_capacity(keys.len());
        let mut new: Vec<(String, u32)> = Vec::new();
        for &key in keys {
            if let Some(&id) = names.map.get(key) {
                ids.push(id);
                continue;
            }
            if let Some(&(_, id)) = new.iter().find(|(k, _)| k == key) {
                ids.push(SeriesId(id));
                continue;
            }
            let id = (names.keys.len() + new.len()) as u32;
            let mut rec = Vec::with_capacity(10 + key.len());
            rec.extend_from_slice(&(key.len() as u16).to_le_bytes());
            rec.extend_from_slice(&id.to_le_bytes());
            rec.extend_from_slice(key.as_bytes());
            out.extend_from_slice(&crc32(&rec).to_le_bytes());
            out.extend_from_slice(&rec);
            new.push((key.to_string(), id));
            ids.push(SeriesId(id));
        }
        if new.is_empty() {
            return Ok(ids);
        }
        let at = names.file.metadata()?.len();
        if let Err(e) = names
            .file
            .write_all_at(&out, at)
            .and_then(|_| names.file.sync_data())
        {
            let _ = names.file.set_len(at);
            return Err(e.into());
        }
        let mut series = self.series.write().unwrap_or_else(|e| e.into_inner());
        for (key, id) in new {
            names.map.insert(key.clone(), SeriesId(id));
            names.keys.push(key);
            series.push(Arc::new(Series {
                id,
                st: Mutex::new(SeriesState::new()),
            }));
        }
        Ok(ids)
    }

    /// The id of an existing series.
    pub fn lookup(&self, key: &str) -> Option<SeriesId> {
        lock(&self.names).map.get(key).copied()
    }

    /// The key of a series.
    pub fn key(&self, id: SeriesId) -> Option<String> {
        lock(&self.names).keys.get(id.0 as usize).cloned()
    }

    fn get(&self, id: SeriesId) -> Result<Arc<Series>, StoreError> {
        self.series
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(id.0 as usize)
            .cloned()
            .ok_or(StoreError::Invalid("unknown series"))
    }

    /// Appends one sample (the writer thread's path; also usable directly, e.g. for
    /// HistoryUpdate inserts). `log`: also into the WAL (false only during replay).
    /// Ok(false): refused (unknown series, value over 1 MiB, head over its bound).
    pub(crate) fn push_locked(
        &self,
        core: &mut Core,
        id: SeriesId,
        s: Sample,
        log: bool,
    ) -> Result<bool, StoreError> {
        if core.cache.len() <= id.0 as usize {
            core.cache = self
                .series
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
        }
        // Out of the core while in use (no reference count traffic per sample).
        let cache = std::mem::take(&mut core.cache);
        let r = match cache.get(id.0 as usize) {
            Some(series) => self.push_series(core, series, s, log),
            None => {
                self.c.rejected.fetch_add(1, Relaxed);
                Ok(false)
            }
        };
        core.cache = cache;
        r
    }

    fn push_series(
        &self,
        core: &mut Core,
        series: &Series,
        s: Sample,
        log: bool,
    ) -> Result<bool, StoreError> {
        let id = SeriesId(series.id);
        let start = core.wal_buf.len();
        let prev_ts = core.wal_prev_ts;
        wal::encode_record(&mut core.wal_buf, &mut core.wal_prev_ts, id.0, &s);
        let size = core.wal_buf.len() - start;
        let mut st = lock(&series.st);
        if size > wal::MAX_RECORD || st.head.len() >= MAX_COUNT as usize {
            core.wal_buf.truncate(start);
            core.wal_prev_ts = prev_ts;
            self.c.rejected.fetch_add(1, Relaxed);
            return Ok(false);
        }
        if !log {
            core.wal_buf.truncate(start);
            core.wal_prev_ts = prev_ts;
        }
        st.push_head(s, size);
        if log {
            core.appended += 1;
        }
        let mut result = Ok(true);
        if st.head.len() >= self.cfg.chunk_samples as usize || st.head_bytes >= HEAD_BYTES {
            result = self.seal(core, series, &mut st).map(|_| true);
        }
        drop(st);
        if core.wal_buf.len() >= wal::FRAME_TARGET {
            self.write_frame(core)?;
        }
        result
    }

    /// Seals a head into a chunk at the end of the active segment.
    fn seal(
        &self,
        core: &mut Core,
        series: &Series,
        st: &mut SeriesState,
    ) -> Result<(), StoreError> {
        if st.head.is_empty() {
            return Ok(());
        }
        let mut buf = std::mem::take(&mut core.rec_buf);
        buf.clear();
        buf.resize(REC_HEADER_LEN, 0);
        let mut buf = encode_chunk(&st.head, buf);
        let len = buf.len() - REC_HEADER_LEN;
        if len > MAX_PAYLOAD as usize {
            core.rec_buf = buf;
            return Err(StoreError::Invalid("chunk larger than the payload bound"));
        }
        let h = RecHeader {
            kind: KIND_CHUNK,
            flags: if st.head_sorted { FLAG_SORTED } else { 0 },
            series: series.id,
            count: st.head.len() as u32,
            min: st.head_min,
            max: st.head_max,
            gen: core.gen,
            len: len as u32,
            crc: crc32(&buf[REC_HEADER_LEN..]),
        };
        buf[..REC_HEADER_LEN].copy_from_slice(&h.encode());
        let off = core.active_len;
        let Some(meta) = core.segs.get_mut(&core.active) else {
            core.rec_buf = buf;
            return Err(StoreError::Invalid("no active segment"));
        };
        if let Err(e) = meta.seg.file.write_all_at(&buf, off) {
            let _ = meta.seg.file.set_len(off);
            core.rec_buf = buf;
            self.c.io_errors.fetch_add(1, Relaxed);
            return Err(e.into());
        }
        let total = buf.len() as u64;
        st.add_chunk(ChunkRef {
            seg: meta.seg.clone(),
            off: off + REC_HEADER_LEN as u64,
            len: h.len,
            crc: h.crc,
            count: h.count,
            min: h.min,
            max: h.max,
            sorted: st.head_sorted,
            seq: (core.active << 32) | off,
        });
        st.clear_head();
        meta.bytes += total;
        meta.max_ts = meta.max_ts.max(h.max);
        meta.max_gen = meta.max_gen.max(core.gen);
        core.active_len += total;
        core.rec_buf = buf;
        self.c.segment_bytes.fetch_add(total, Relaxed);
        if core.active_len >= self.cfg.segment_bytes {
            self.rotate(core)?;
        }
        Ok(())
    }

    fn rotate(&self, core: &mut Core) -> Result<(), StoreError> {
        if let Some(meta) = core.segs.get(&core.active) {
            meta.seg.file.sync_data()?;
        }
        let no = core.active + 1;
        let seg = new_segment(&self.cfg.dir, no)?;
        core.segs.insert(
            no,
            SegMeta {
                seg,
                bytes: SEG_HEADER_LEN,
                max_ts: i64::MIN,
                max_gen: 0,
            },
        );
        core.active = no;
        core.active_len = SEG_HEADER_LEN;
        self.c.segment_bytes.fetch_add(SEG_HEADER_LEN, Relaxed);
        self.c.segments.fetch_add(1, Relaxed);
        Ok(())
    }

    fn write_frame(&self, core: &mut Core) -> Result<(), StoreError> {
        if core.wal_buf.is_empty() {
            return Ok(());
        }
        let Some(wal_file) = core.wal.as_ref() else {
            core.wal_buf.clear();
            core.wal_prev_ts = 0;
            core.wal_broken = true;
            return Ok(());
        };
        core.frame_buf.clear();
        wal::frame(&core.wal_buf, &mut core.frame_buf);
        core.wal_buf.clear();
        core.wal_prev_ts = 0;
        match wal_file.write_all_at(&core.frame_buf, core.wal_len) {
            Ok(()) => {
                core.wal_len += core.frame_buf.len() as u64;
                self.c.wal_bytes.store(core.wal_len, Relaxed);
                Ok(())
            }
            Err(e) => {
                // The samples are in the heads; the next flush checkpoints instead, and
                // the durable watermark waits for it.
                let _ = wal_file.set_len(core.wal_len);
                core.wal_broken = true;
                self.c.io_errors.fetch_add(1, Relaxed);
                Err(e.into())
            }
        }
    }

    pub(crate) fn flush_locked(&self, core: &mut Core) -> Result<u64, StoreError> {
        if core.wal_broken {
            self.checkpoint_locked(core)?;
        } else {
            self.write_frame(core)?;
            if let Some(w) = core.wal.as_ref() {
                if let Err(e) = w.sync_data() {
                    self.c.io_errors.fetch_add(1, Relaxed);
                    core.wal_broken = true;
                    return Err(e.into());
                }
            }
            if core.wal_len > self.cfg.wal_max_bytes {
                self.checkpoint_locked(core)?;
            }
        }
        self.c.durable.fetch_max(core.appended, Relaxed);
        self.c.appended.store(core.appended, Relaxed);
        self.c.flushes.fetch_add(1, Relaxed);
        Ok(core.appended)
    }

    /// The writer thread's flush: writes the buffered frame and returns the file to
    /// fdatasync and the watermark that makes durable, so the sync runs on another
    /// thread while the writer goes on. None: nothing to sync (a checkpoint, which syncs
    /// itself, took its place).
    pub(crate) fn flush_begin(&self) -> Result<Option<(Arc<File>, u64)>, StoreError> {
        let mut core = self.lock_core();
        let core = &mut *core;
        if core.wal_broken || self.sync_failed.swap(false, Relaxed) {
            self.checkpoint_locked(core)?;
        } else {
            self.write_frame(core)?;
            if core.wal_len > self.cfg.wal_max_bytes {
                self.checkpoint_locked(core)?;
            } else if let Some(f) = core.wal_sync.clone() {
                return Ok(Some((f, core.appended)));
            }
        }
        self.c.flushes.fetch_add(1, Relaxed);
        Ok(None)
    }

    /// The sync thread's half of [`Store::flush_begin`].
    pub(crate) fn flush_end(&self, file: &File, watermark: u64) {
        match file.sync_data() {
            Ok(()) => {
                self.c.durable.fetch_max(watermark, Relaxed);
                self.c.flushes.fetch_add(1, Relaxed);
            }
            Err(e) => {
                tracing::warn!("history store: WAL sync failed: {e}");
                self.c.io_errors.fetch_add(1, Relaxed);
                // The next flush checkpoints (which rewrites what the heads hold).
                self.sync_failed.store(true, Relaxed);
            }
        }
    }

    /// Makes everything appended so far durable; returns the durable watermark.
    pub fn flush(&self) -> Result<u64, StoreError> {
        let mut core = self.lock_core();
        self.flush_locked(&mut core)
    }

    /// Seals the larger heads, carries the small ones into a new WAL generation, and
    /// removes the old one (see the module doc).
    fn checkpoint_locked(&self, core: &mut Core) -> Result<(), StoreError> {
        let all: Vec<Arc<Series>> = self
            .series
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let new_gen = core.gen + 1;
        let mut file_buf = wal::header(new_gen).to_vec();
        let mut piece = Vec::new();
        let mut prev_ts = 0i64;
        for s in &all {
            let mut st = lock(&s.st);
            if st.head.len() >= CARRY_MAX && self.seal(core, s, &mut st).is_ok() {
                continue;
            }
            for smp in &st.head {
                wal::encode_record(&mut piece, &mut prev_ts, s.id, smp);
                if piece.len() >= wal::FRAME_TARGET {
                    wal::frame(&piece, &mut file_buf);
                    piece.clear();
                    prev_ts = 0;
                }
            }
        }
        if !piece.is_empty() {
            wal::frame(&piece, &mut file_buf);
        }
        if let Some(meta) = core.segs.get(&core.active) {
            meta.seg.file.sync_data()?;
        }
        let dir = &self.cfg.dir;
        let tmp = dir.join(format!("wal-{new_gen:016}.tmp"));
        let path = wal_path(dir, new_gen);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)?;
        file.write_all_at(&file_buf, 0)?;
        file.sync_data()?;
        fs::rename(&tmp, &path)?;
        sync_dir(dir)?;
        if core.gen > 0 {
            let _ = fs::remove_file(wal_path(dir, core.gen));
        }
        core.gen = new_gen;
        core.wal_sync = file.try_clone().ok().map(Arc::new);
        core.wal = Some(file);
        core.wal_len = file_buf.len() as u64;
        core.wal_buf.clear();
        core.wal_prev_ts = 0;
        core.wal_broken = false;
        self.c.wal_bytes.store(core.wal_len, Relaxed);
        self.c.checkpoints.fetch_add(1, Relaxed);
        self.c.durable.fetch_max(core.appended, Relaxed);
        Ok(())
    }

    /// Removes old segments per the retention settings (the writer calls it every
    /// `retention_check_ms`). Returns how many were removed.
    pub fn apply_retention(&self) -> Result<u64, StoreError> {
        let mut core = self.lock_core();
        self.retention_locked(&mut core)
    }

    fn retention_locked(&self, core: &mut Core) -> Result<u64, StoreError> {
        if self.cfg.retention_age_s.is_none() && self.cfg.retention_bytes.is_none() {
            return Ok(0);
        }
        let now = now_ticks();
        let mut removed = 0;
        loop {
            let total: u64 = core.segs.values().map(|m| m.bytes).sum();
            let Some((&no, meta)) = core.segs.first_key_value() else {
                break;
            };
            if no == core.active {
                break;
            }
            let old = self.cfg.retention_age_s.is_some_and(|a| {
                let age = (a as i64).saturating_mul(10_000_000);
                meta.max_ts < now.saturating_sub(age)
            });
            let big = self.cfg.retention_bytes.is_some_and(|b| total > b);
            if !(old || big) {
                break;
            }
            if meta.max_gen >= core.gen {
                // A replay would count its chunks: checkpoint first.
                self.checkpoint_locked(core)?;
                continue;
            }
            let Some(meta) = core.segs.remove(&no) else {
                break;
            };
            let all: Vec<Arc<Series>> = self
                .series
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            for s in &all {
                let mut st = lock(&s.st);
                if st.chunks.iter().any(|c| c.seg.no == no) {
                    let SeriesState { chunks, tombs, .. } = &mut *st;
                    chunks.retain(|c| c.seg.no != no);
                    // A delete that no longer covers any chunk before it is done with.
                    tombs.retain(|t| {
                        chunks
                            .iter()
                            .any(|c| c.seq < t.seq && c.max >= t.from && c.min <= t.to)
                    });
                }
            }
            let _ = fs::remove_file(&meta.seg.path);
            self.c.segment_bytes.fetch_sub(meta.bytes, Relaxed);
            self.c.segments.fetch_sub(1, Relaxed);
            self.c.segments_removed.fetch_add(1, Relaxed);
            removed += 1;
        }
        Ok(removed)
    }

    /// Deletes the samples of `id` with `from ≤ source_ts ≤ to`; durable on return.
    /// Returns how many samples were deleted.
    pub fn delete_range(&self, id: SeriesId, from: i64, to: i64) -> Result<u64, StoreError> {
        let mut core = self.lock_core();
        self.delete_locked(&mut core, id, from, to)
    }

    fn delete_locked(
        &self,
        core: &mut Core,
        id: SeriesId,
        from: i64,
        to: i64,
    ) -> Result<u64, StoreError> {
        if from > to {
            return Ok(0);
        }
        let series = self.get(id)?;
        let mut st = lock(&series.st);
        self.seal(core, &series, &mut st)?;
        let deleted = self.count_in(&st, from, to);
        let h = RecHeader {
            kind: KIND_DELETE,
            flags: 0,
            series: id.0,
            count: 0,
            min: from,
            max: to,
            gen: core.gen,
            len: 0,
            crc: crc32(&[]),
        };
        let off = core.active_len;
        let meta = core
            .segs
            .get_mut(&core.active)
            .ok_or(StoreError::Invalid("no active segment"))?;
        let rec = h.encode();
        if let Err(e) = meta
            .seg
            .file
            .write_all_at(&rec, off)
            .and_then(|_| meta.seg.file.sync_data())
        {
            let _ = meta.seg.file.set_len(off);
            self.c.io_errors.fetch_add(1, Relaxed);
            return Err(e.into());
        }
        meta.bytes += REC_HEADER_LEN as u64;
        core.active_len += REC_HEADER_LEN as u64;
        self.c
            .segment_bytes
            .fetch_add(REC_HEADER_LEN as u64, Relaxed);
        st.apply_delete(from, to, (core.active << 32) | off);
        Ok(deleted)
    }

    /// Samples of a series in `[from, to]`, deletes applied (decodes partly covered
    /// chunks).
    fn count_in(&self, st: &SeriesState, from: i64, to: i64) -> u64 {
        let mut n = 0u64;
        let mut scratch = Vec::new();
        let mut buf = Vec::new();
        for c in &st.chunks {
            if c.max < from || c.min > to {
                continue;
            }
            if c.min >= from && c.max <= to && st.tombs.iter().all(|t| t.seq < c.seq) {
                n += c.count as u64;
                continue;
            }
            scratch.clear();
            if self.load_chunk(c, &mut buf, &mut scratch).is_ok() {
                n += scratch
                    .iter()
                    .filter(|s| {
                        let t = s.source_ts;
                        t >= from && t <= to && !tombed(&st.tombs, c.seq, t)
                    })
                    .count() as u64;
            }
        }
        n += st
            .head
            .iter()
            .filter(|s| s.source_ts >= from && s.source_ts <= to)
            .count() as u64;
        n
    }

    /// Replaces the samples of `id` at `sample.source_ts` with `sample` (HistoryUpdate
    /// Replace; see [`Store::replace_many`]). Returns how many samples it replaced.
    pub fn replace(&self, id: SeriesId, sample: Sample) -> Result<u64, StoreError> {
        self.replace_many(id, vec![sample])
    }

    /// Replaces, for each timestamp among `samples`, every sample of `id` at that source
    /// timestamp with the given ones (several at one timestamp stay in their order; a
    /// timestamp with no sample yet is an insert). Durable on return and atomic per
    /// record: each run of up to `chunk_samples` samples is one replace record, a chunk
    /// that also deletes its timestamps from everything written before it. Returns how
    /// many samples were replaced.
    pub fn replace_many(&self, id: SeriesId, mut samples: Vec<Sample>) -> Result<u64, StoreError> {
        let series = self.get(id)?;
        let mut core = self.lock_core();
        let core = &mut *core;
        let mut st = lock(&series.st);
        // The head goes to a chunk first, so the replace record comes after all of it.
        self.seal(core, &series, &mut st)?;
        samples.sort_by_key(|s| s.source_ts); // stable
        let mut replaced = 0u64;
        let mut prev = None;
        for s in &samples {
            if prev != Some(s.source_ts) {
                replaced += self.count_in(&st, s.source_ts, s.source_ts);
                prev = Some(s.source_ts);
            }
        }
        let piece = self.cfg.chunk_samples as usize;
        let mut written = Vec::new();
        for part in samples.chunks(piece) {
            self.write_replace(core, &series, &mut st, part, &mut written)?;
        }
        if let Some(meta) = core.segs.get(&core.active) {
            meta.seg.file.sync_data()?;
        }
        Ok(replaced)
    }

    /// One replace record (split in halves while its payload is over the bound).
    fn write_replace(
        &self,
        core: &mut Core,
        series: &Series,
        st: &mut SeriesState,
        part: &[Sample],
        buf: &mut Vec<u8>,
    ) -> Result<(), StoreError> {
        buf.clear();
        buf.resize(REC_HEADER_LEN, 0);
        let mut rec = encode_chunk(part, std::mem::take(buf));
        let len = rec.len() - REC_HEADER_LEN;
        if len > MAX_PAYLOAD as usize {
            *buf = rec;
            if part.len() == 1 {
                return Err(StoreError::Invalid("value too large"));
            }
            let (a, b) = part.split_at(part.len() / 2);
            self.write_replace(core, series, st, a, buf)?;
            return self.write_replace(core, series, st, b, buf);
        }
        let (min, max) = (
            part.first().map_or(0, |s| s.source_ts),
            part.last().map_or(0, |s| s.source_ts),
        );
        let h = RecHeader {
            kind: KIND_CHUNK,
            flags: FLAG_SORTED | FLAG_REPLACES,
            series: series.id,
            count: part.len() as u32,
            min,
            max,
            // Not in any WAL generation: never counted by a replay.
            gen: 0,
            len: len as u32,
            crc: crc32(&rec[REC_HEADER_LEN..]),
        };
        rec[..REC_HEADER_LEN].copy_from_slice(&h.encode());
        let off = core.active_len;
        let meta = core
            .segs
            .get_mut(&core.active)
            .ok_or(StoreError::Invalid("no active segment"))?;
        if let Err(e) = meta.seg.file.write_all_at(&rec, off) {
            let _ = meta.seg.file.set_len(off);
            self.c.io_errors.fetch_add(1, Relaxed);
            *buf = rec;
            return Err(e.into());
        }
        let total = rec.len() as u64;
        meta.bytes += total;
        meta.max_ts = meta.max_ts.max(max);
        core.active_len += total;
        self.c.segment_bytes.fetch_add(total, Relaxed);
        let seq = (core.active << 32) | off;
        st.apply_replace(part.iter().map(|s| s.source_ts), seq);
        st.add_chunk(ChunkRef {
            seg: meta.seg.clone(),
            off: off + REC_HEADER_LEN as u64,
            len: h.len,
            crc: h.crc,
            count: h.count,
            min,
            max,
            sorted: true,
            seq,
        });
        *buf = rec;
        Ok(())
    }

    /// Appends samples directly (not through the queue), e.g. HistoryUpdate inserts;
    /// durable at the next flush ([`Store::flush`] or the writer's). Returns how many
    /// were taken.
    pub fn append(
        &self,
        samples: impl IntoIterator<Item = (SeriesId, Sample)>,
    ) -> Result<u64, StoreError> {
        let mut core = self.lock_core();
        let mut n = 0;
        for (id, s) in samples {
            if self.push_locked(&mut core, id, s, true)? {
                n += 1;
            }
        }
        self.c.appended.store(core.appended, Relaxed);
        Ok(n)
    }

    fn load_chunk(
        &self,
        c: &ChunkRef,
        buf: &mut Vec<u8>,
        out: &mut Vec<Sample>,
    ) -> Result<(), StoreError> {
        buf.resize(c.len as usize, 0);
        c.seg.file.read_exact_at(buf, c.off)?;
        if crc32(buf) != c.crc {
            return Err(StoreError::Corrupt("chunk (CRC)"));
        }
        decode_chunk(buf, c.count as usize, out)
    }

    /// Reads the samples of `id` with `from ≤ source_ts ≤ to`, oldest first (newest first
    /// if `reverse`), appending at most `limit` of them to `out` (0: no limit). Equal
    /// timestamps keep insertion order (reversed when `reverse`). Returns where to resume
    /// when the limit cut the read short. A chunk whose CRC fails is skipped and counted
    /// in [`StoreStats::io_errors`].
    pub fn read(
        &self,
        id: SeriesId,
        from: i64,
        to: i64,
        reverse: bool,
        limit: usize,
        out: &mut Vec<Sample>,
    ) -> Result<Option<Resume>, StoreError> {
        self.read_impl(id, from, to, reverse, limit, 0, out)
    }

    pub(super) fn read_impl(
        &self,
        id: SeriesId,
        from: i64,
        to: i64,
        reverse: bool,
        limit: usize,
        skip: u32,
        out: &mut Vec<Sample>,
    ) -> Result<Option<Resume>, StoreError> {
        if from > to {
            return Ok(None);
        }
        let series = self.get(id)?;
        // Under the series' lock: the references of the chunks in range, the head's
        // samples in range, the deletes that may apply.
        let (mut srcs, tombs, head, head_sorted) = {
            let st = lock(&series.st);
            let in_range = |c: &&ChunkRef| c.max >= from && c.min <= to;
            let srcs: Vec<Src> = if st.ordered {
                let start = st.chunks.partition_point(|c| c.max < from);
                st.chunks[start..]
                    .iter()
                    .take_while(|c| c.min <= to)
                    .map(Src::chunk)
                    .collect()
            } else {
                st.chunks.iter().filter(in_range).map(Src::chunk).collect()
            };
            let tombs: Vec<Tomb> = st
                .tombs
                .iter()
                .filter(|t| t.to >= from && t.from <= to)
                .copied()
                .collect();
            let head: Vec<Sample> = if st.head_max >= from && st.head_min <= to {
                st.head
                    .iter()
                    .filter(|s| s.source_ts >= from && s.source_ts <= to)
                    .cloned()
                    .collect()
            } else {
                Vec::new()
            };
            (srcs, tombs, head, st.head_sorted)
        };
        if !head.is_empty() {
            srcs.push(Src {
                min: head.iter().map(|s| s.source_ts).min().unwrap_or(from),
                max: head.iter().map(|s| s.source_ts).max().unwrap_or(to),
                seq: u64::MAX,
                sorted: head_sorted,
                chunk: None,
            });
        }
        // Sources in time order; clusters of sources whose spans overlap (or touch: equal
        // timestamps in two sources are ordered by insertion) are merged, every other
        // source is streamed as it is. In-order data is one source a cluster.
        srcs.sort_by_key(|x| (x.min, x.seq));
        let mut clusters: Vec<std::ops::Range<usize>> = Vec::new();
        let mut cur_max = i64::MIN;
        for (i, x) in srcs.iter().enumerate() {
            match clusters.last_mut() {
                Some(r) if x.min <= cur_max => {
                    r.end = i + 1;
                    cur_max = cur_max.max(x.max);
                }
                _ => {
                    clusters.push(i..i + 1);
                    cur_max = x.max;
                }
            }
        }
        let mut e = Emit {
            out,
            limit: if limit == 0 { usize::MAX } else { limit },
            emitted: 0,
            skip,
            skip_ts: if reverse { to } else { from },
            run_ts: None,
            run_count: 0,
            resume: None,
        };
        let mut head = Some(head);
        let mut buf = Vec::new();
        let mut merged = Vec::new();
        let order: Box<dyn Iterator<Item = std::ops::Range<usize>>> = if reverse {
            Box::new(clusters.into_iter().rev())
        } else {
            Box::new(clusters.into_iter())
        };
        for r in order {
            let cluster = &mut srcs[r];
            // Insertion order within the cluster: write order, the head last.
            cluster.sort_by_key(|x| x.seq);
            merged.clear();
            for x in cluster.iter() {
                match &x.chunk {
                    Some(c) => {
                        let start = merged.len();
                        if self.load_chunk(c, &mut buf, &mut merged).is_err() {
                            // A chunk that cannot be read (an I/O error, a bad CRC) stands
                            // in the answer as one Bad_DataUnavailable value at its first
                            // time within the range: the client sees the gap.
                            merged.truncate(start);
                            self.c.io_errors.fetch_add(1, Relaxed);
                            let t = c.min.clamp(from, to);
                            merged.push(Sample {
                                source_ts: t,
                                server_ts: t,
                                status: UNREADABLE_CHUNK,
                                value: uaring_core::types::Variant::Empty,
                            });
                            continue;
                        }
                        // Only a chunk across a bound, or under a later delete, is filtered.
                        let later: Vec<Tomb> = tombs
                            .iter()
                            .filter(|t| t.seq > c.seq && t.to >= c.min && t.from <= c.max)
                            .copied()
                            .collect();
                        if c.min < from || c.max > to || !later.is_empty() {
                            let tail = merged.split_off(start);
                            merged.extend(tail.into_iter().filter(|s| {
                                let t = s.source_ts;
                                t >= from && t <= to && !tombed(&later, c.seq, t)
                            }));
                        }
                    }
                    None => merged.append(head.get_or_insert_with(Vec::new)),
                }
            }
            if cluster.len() > 1 || !cluster[0].sorted {
                merged.sort_by_key(|s| s.source_ts); // stable
            }
            let done = if reverse {
                merged.drain(..).rev().any(|s| !e.offer(s))
            } else {
                merged.drain(..).any(|s| !e.offer(s))
            };
            if done {
                break;
            }
        }
        Ok(e.resume)
    }

    pub fn stats(&self) -> StoreStats {
        let all: Vec<Arc<Series>> = self
            .series
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let mut st = self.counters();
        st.series = all.len() as u64;
        for s in &all {
            let g = lock(&s.st);
            st.chunks += g.chunks.len() as u64;
            st.samples +=
                g.chunks.iter().map(|c| c.count as u64).sum::<u64>() + g.head.len() as u64;
            st.head_samples += g.head.len() as u64;
        }
        st
    }

    /// [`Store::stats`] without the sizes that need every series' lock (`series`,
    /// `samples`, `head_samples` and `chunks` are 0): the counters alone, a few atomic
    /// loads, for a caller that polls often (the walk takes each series' lock, which the
    /// writer takes for every sample it appends).
    pub fn counters(&self) -> StoreStats {
        let mut st = StoreStats::default();
        let c = &self.c;
        st.segments = c.segments.load(Relaxed);
        st.segment_bytes = c.segment_bytes.load(Relaxed);
        st.wal_bytes = c.wal_bytes.load(Relaxed);
        st.appended = c.appended.load(Relaxed);
        st.durable = c.durable.load(Relaxed);
        st.dropped = c.dropped.load(Relaxed);
        st.rejected = c.rejected.load(Relaxed);
        st.flushes = c.flushes.load(Relaxed);
        st.checkpoints = c.checkpoints.load(Relaxed);
        st.segments_removed = c.segments_removed.load(Relaxed);
        st.io_errors = c.io_errors.load(Relaxed);
        st.recovered_truncations = c.truncations.load(Relaxed);
        st.replayed = c.replayed.load(Relaxed);
        st
    }

    pub fn config(&self) -> &StoreConfig {
        &self.cfg
    }
}

impl Drop for Store {
    /// Makes what was appended durable (best effort; a writer's shutdown already did).
    fn drop(&mut self) {
        let core = self.core.get_mut().unwrap_or_else(|e| e.into_inner());
        let mut core = std::mem::replace(core, empty_core());
        let _ = self.flush_locked(&mut core);
    }
}

fn empty_core() -> Core {
    Core {
        gen: 0,
        wal: None,
        wal_sync: None,
        wal_len: 0,
        wal_buf: Vec::new(),
        wal_prev_ts: 0,
        frame_buf: Vec::new(),
        wal_broken: false,
        segs: BTreeMap::new(),
        active: 0,
        active_len: 0,
        appended: 0,
        cache: Vec::new(),
        rec_buf: Vec::new(),
    }
}

/// One source of a read: a chunk, or the head (`chunk` None).
struct Src {
    min: i64,
    max: i64,
    seq: u64,
    sorted: bool,
    chunk: Option<ChunkRef>,
}

impl Src {
    fn chunk(c: &ChunkRef) -> Src {
        Src {
            min: c.min,
            max: c.max,
            seq: c.seq,
            sorted: c.sorted,
            chunk: Some(c.clone()),
        }
    }
}

fn tombed(tombs: &[Tomb], seq: u64, t: i64) -> bool {
    tombs
        .iter()
        .any(|x| x.seq > seq && x.from <= t && t <= x.to)
}
