//! The device's table cache: host columns' device copies, kept between queries so that a later
//! scan of the same host rows reads them in device memory instead of uploading them again
//! (`gpu.table_cache`).
//!
//! An entry is one column of one partition of an in-memory table, or one column of the files a
//! Parquet scan reads, cut into the device batches a scan hands out. An in-memory table's is
//! found by the identity of the host arrays it was uploaded from (their buffers' addresses,
//! offsets and lengths) and the batch size it was cut to, and holds those host arrays, so their
//! memory cannot be freed and reused for other rows while it lives. A file column's is found by
//! its name and type and by the files' paths, sizes, modification times and versions (as the
//! object store lists them): a file written anew lists another version, so its old rows are
//! never read again. Entries go:
//!
//! - when nothing but the cache holds their host arrays any more (the table was dropped or its
//!   rows replaced): checked whenever the cache takes a column, is shown, or is asked for memory;
//! - when a newer entry of the same batch size shares their first host array (rows were appended
//!   to the table: its scan keys the column anew), or, for a file column, lists one of its files
//!   with another size, time or version (the file changed), as the newer one goes in;
//! - when a table says its rows changed ([`TableCache::forget`], a `GpuCachedTable` after a write);
//! - least recently used first when an insertion would take the cache past the inserting
//!   session's limit (`gpu.table_cache.limit`);
//! - least recently used first when a device memory reservation would not fit otherwise (the
//!   cache is its device budget's [`Reclaim`]), those no running query reads.
//!
//! A query that still reads an evicted entry's columns keeps them until it is done.
//!
//! With `gpu.table_cache.compress`, an entry's integer, date and decimal device batches are kept
//! packed ([`PackedColumn`]) with their full-width copies beside them while there is room: room
//! is made by giving up those copies (least recently used first) before any entry goes, and a
//! scan of a column without its copy widens it again (and offers the cache the copy).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use datafusion::arrow::array::{Array, ArrayData, ArrayRef};
use datafusion::arrow::datatypes::DataType;

use super::DeviceColumn;
use super::packed::PackedColumn;
use crate::device::{Gpu, MemoryBudget, Reclaim};
use crate::error::{Result, gpu_error};

/// What identifies a column's rows: its data type, the rows per device batch it is cut into, and
/// where the rows come from ([`Rows`]).
///
/// A column of many host batches has a long layout (SF10's `lineorder`: 7,300 batches, about
/// 80,000 words a column), so the key hashes as a digest of it made once, with the key: hashing
/// the whole layout at every lookup, under the cache's lock, cost a query about 1 ms a scan and
/// held up every other scan's lookup meanwhile. Keys are still equal only when their rows are.
/// The layout is shared: a clone of the key (the cache's copy) does not copy it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnKey {
    digest: u64,
    data_type: DataType,
    batch_rows: usize,
    rows: Rows,
}

/// Where a cached column's rows come from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Rows {
    /// Host arrays: for each, the addresses, offsets and lengths of its buffers (children
    /// included).
    Memory(Arc<[usize]>),
    /// The column of this name of these files (sorted by path), read in that order.
    Files { files: Arc<[FileVersion]>, column: Arc<str> },
}

/// One file as the object store listed it when a scan was planned: a file written anew has
/// another size, modification time or version.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FileVersion {
    pub path: String,
    pub size: u64,
    /// Modification time, nanoseconds since the epoch.
    pub modified: i64,
    pub e_tag: Option<String>,
    pub version: Option<String>,
}

impl std::hash::Hash for ColumnKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(self.digest);
    }
}

impl ColumnKey {
    /// The key of the column made of `arrays` (in order) cut into device batches of `batch_rows`.
    pub fn of(arrays: &[&ArrayRef], batch_rows: usize) -> ColumnKey {
        let data_type = arrays.first().map_or(DataType::Null, |a| a.data_type().clone());
        let mut layout = Vec::with_capacity(arrays.len() * 6);
        for a in arrays {
            push_layout(&a.to_data(), &mut layout);
        }
        Self::new(data_type, batch_rows, Rows::Memory(layout.into()))
    }

    /// The key of column `column` (of type `data_type`) of `files` (sorted by path) read in that
    /// order and cut into device batches of `batch_rows`.
    pub fn of_files(files: &Arc<[FileVersion]>, column: &str, data_type: &DataType, batch_rows: usize) -> ColumnKey {
        let rows = Rows::Files { files: Arc::clone(files), column: column.into() };
        Self::new(data_type.clone(), batch_rows, rows)
    }

    fn new(data_type: DataType, batch_rows: usize, rows: Rows) -> ColumnKey {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (&data_type, batch_rows, &rows).hash(&mut h);
        ColumnKey { digest: h.finish(), data_type, batch_rows, rows }
    }

    /// Whether this key's entry is stale once `newer` goes in: a file column of the same name
    /// and batch size whose files include one `newer` lists with another size, time or version.
    fn superseded_by(&self, newer: &ColumnKey) -> bool {
        let (Rows::Files { files, column }, Rows::Files { files: new_files, column: new_column }) =
            (&self.rows, &newer.rows)
        else {
            return false;
        };
        if self == newer || column != new_column || self.batch_rows != newer.batch_rows {
            return false;
        }
        // (Both lists are sorted by path.)
        files.iter().any(|f| match new_files.binary_search_by(|n| n.path.cmp(&f.path)) {
            Ok(i) => new_files[i] != *f,
            Err(_) => false,
        })
    }
}

fn push_layout(data: &ArrayData, out: &mut Vec<usize>) {
    out.extend([data.len(), data.offset(), data.buffers().len(), data.child_data().len()]);
    match data.nulls() {
        Some(n) => out.extend([n.buffer().as_ptr() as usize, n.offset(), n.len()]),
        None => out.extend([0, 0, 0]),
    }
    for b in data.buffers() {
        out.extend([b.as_ptr() as usize, b.len()]);
    }
    for c in data.child_data() {
        push_layout(c, out);
    }
}

/// One cached column: its device batches' columns, in order, with the host arrays they were
/// uploaded from (held so that their addresses stay theirs; shared with the scan that keyed
/// them, so that caching a column of thousands of host batches is not thousands of clones), or
/// none for a file column.
#[derive(Debug)]
struct Column {
    chunks: Vec<Chunk>,
    host: Option<Arc<[ArrayRef]>>,
}

/// One device batch's column as the cache keeps it.
#[derive(Debug)]
enum Chunk {
    /// As scans read it.
    Plain(Arc<DeviceColumn>),
    /// Packed ([`PackedColumn`]), with its copy at full width while the cache has room for it:
    /// that copy goes first when room is needed, and a scan widens the column again.
    Packed { packed: Arc<PackedColumn>, wide: Option<Arc<DeviceColumn>> },
}

impl Chunk {
    /// Device bytes it holds.
    fn bytes(&self) -> u64 {
        match self {
            Chunk::Plain(c) => c.byte_size() as u64,
            Chunk::Packed { packed, wide } => (packed.byte_size() + wide.as_ref().map_or(0, |w| w.byte_size())) as u64,
        }
    }

    /// Whether no running query reads it.
    fn unread(&self) -> bool {
        match self {
            Chunk::Plain(c) => Arc::strong_count(c) == 1,
            Chunk::Packed { packed, wide } => {
                Arc::strong_count(packed) == 1 && wide.as_ref().is_none_or(|w| Arc::strong_count(w) == 1)
            }
        }
    }

    /// Its full-width copy, taken out (with `unread`, only when no query reads it).
    fn shed(&mut self, unread: bool) -> Option<Arc<DeviceColumn>> {
        match self {
            Chunk::Packed { wide, .. } if wide.as_ref().is_some_and(|w| !unread || Arc::strong_count(w) == 1) => {
                wide.take()
            }
            _ => None,
        }
    }

    /// How a scan gets it.
    fn cached(&self) -> CachedChunk {
        match self {
            Chunk::Plain(c) => CachedChunk::Ready(Arc::clone(c)),
            Chunk::Packed { wide: Some(w), .. } => CachedChunk::Ready(Arc::clone(w)),
            Chunk::Packed { packed, wide: None } => CachedChunk::Packed(Arc::clone(packed)),
        }
    }
}

/// A cached column's device batch as a scan gets it: ready to read, or packed, to be widened.
#[derive(Debug, Clone)]
pub enum CachedChunk {
    Ready(Arc<DeviceColumn>),
    Packed(Arc<PackedColumn>),
}

/// A device batch's column offered to the cache ([`TableCache::insert_chunks`]): at full width,
/// packed, or both (the full-width copy kept beside the packed one while there is room).
#[derive(Debug, Clone)]
pub struct NewChunk {
    pub wide: Option<Arc<DeviceColumn>>,
    pub packed: Option<Arc<PackedColumn>>,
}

impl CachedChunk {
    /// Its rows.
    pub fn len(&self) -> usize {
        match self {
            CachedChunk::Ready(c) => c.len,
            CachedChunk::Packed(p) => p.len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Device bytes it takes at full width.
    pub fn wide_byte_size(&self) -> usize {
        match self {
            CachedChunk::Ready(c) => c.byte_size(),
            CachedChunk::Packed(p) => p.wide_byte_size(),
        }
    }
}

impl Column {
    /// Whether only the cache holds its host arrays: no table can scan those rows again. A file
    /// column holds none: it goes when its files change or by age.
    fn orphaned(&self) -> bool {
        self.host
            .as_ref()
            .is_some_and(|host| Arc::strong_count(host) == 1 && host.iter().all(|a| Arc::strong_count(a) == 1))
    }

    /// Whether no running query reads its device columns: evicting it frees their memory.
    fn unread(&self) -> bool {
        self.chunks.iter().all(Chunk::unread)
    }

    /// Device bytes it holds.
    fn bytes(&self) -> u64 {
        self.chunks.iter().map(Chunk::bytes).sum()
    }

    /// Takes out its full-width copies of packed chunks (see [`Chunk::shed`]) into `out`; returns
    /// their bytes.
    fn shed(&mut self, unread: bool, out: &mut Vec<Arc<DeviceColumn>>) -> u64 {
        let mut freed = 0;
        for c in &mut self.chunks {
            if let Some(w) = c.shed(unread) {
                freed += w.byte_size() as u64;
                out.push(w);
            }
        }
        freed
    }

    /// The identity of its first host array.
    fn first_array(&self) -> Option<usize> {
        self.host.as_ref()?.first().map(array_identity)
    }
}

/// The identity of a host array object (its address, which is its own while the cache holds it).
fn array_identity(a: &ArrayRef) -> usize {
    Arc::as_ptr(a) as *const () as usize
}

/// Counts a cache keeps, for `gpu_table_cache()` and the tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    pub entries: usize,
    pub bytes: u64,
    pub hits: u64,
    pub misses: u64,
    pub evictions: u64,
    /// Columns not kept because they alone are larger than the limit they were offered under.
    pub refused: u64,
    /// Entries dropped because their table's rows changed or went away.
    pub invalidated: u64,
    /// Entries dropped to make room for a device memory reservation, and the bytes given up for
    /// it (theirs and those of full-width copies of packed columns).
    pub reclaimed: u64,
    pub reclaimed_bytes: u64,
    /// Of `bytes`, those of packed columns ([`PackedColumn`]) and those of the full-width copies
    /// kept beside them; and what the packed columns would take at full width.
    pub packed_bytes: u64,
    pub wide_copy_bytes: u64,
    pub packed_full_bytes: u64,
}

/// Values of `bytes` each under keys, evicted least recently used first past a limit.
#[derive(Debug)]
struct Lru<K, V> {
    entries: HashMap<K, (V, u64, u64)>,
    clock: u64,
    stats: CacheStats,
}

impl<K, V> Default for Lru<K, V> {
    fn default() -> Self {
        Lru { entries: HashMap::new(), clock: 0, stats: CacheStats::default() }
    }
}

impl<K: std::hash::Hash + Eq + Clone, V> Lru<K, V> {
    fn get(&mut self, key: &K) -> Option<&V> {
        self.clock += 1;
        match self.entries.get_mut(key) {
            Some((v, _, used)) => {
                *used = self.clock;
                self.stats.hits += 1;
                Some(v)
            }
            None => {
                self.stats.misses += 1;
                None
            }
        }
    }

    fn insert(&mut self, key: K, value: V, bytes: u64, limit: u64) -> bool {
        if bytes > limit {
            self.stats.refused += 1;
            return false;
        }
        if let Some((_, old, _)) = self.entries.remove(&key) {
            self.stats.bytes -= old;
        }
        while self.stats.bytes + bytes > limit {
            let Some(oldest) = self.entries.iter().min_by_key(|(_, (_, _, used))| *used).map(|(k, _)| k.clone()) else {
                break;
            };
            if let Some((_, b, _)) = self.entries.remove(&oldest) {
                self.stats.bytes -= b;
                self.stats.evictions += 1;
            }
        }
        self.clock += 1;
        self.entries.insert(key, (value, bytes, self.clock));
        self.stats.bytes += bytes;
        true
    }

    /// Removes every entry `drop_it` picks; returns them (to be dropped outside the cache's lock).
    fn remove_where(&mut self, mut drop_it: impl FnMut(&K, &V) -> bool) -> Vec<V> {
        let keys: Vec<K> = self.entries.iter().filter(|(k, (v, _, _))| drop_it(k, v)).map(|(k, _)| k.clone()).collect();
        let mut out = Vec::with_capacity(keys.len());
        for k in keys {
            if let Some((v, bytes, _)) = self.entries.remove(&k) {
                self.stats.bytes -= bytes;
                out.push(v);
            }
        }
        out
    }

    /// Removes the least recently used entries `may` allows until `bytes` are gone; returns
    /// them and their bytes.
    fn remove_oldest(&mut self, bytes: u64, may: impl Fn(&V) -> bool) -> (Vec<V>, u64) {
        let mut candidates: Vec<(u64, K)> =
            self.entries.iter().filter(|(_, (v, _, _))| may(v)).map(|(k, (_, _, used))| (*used, k.clone())).collect();
        candidates.sort_by_key(|(used, _)| *used);
        let (mut out, mut freed) = (Vec::new(), 0u64);
        for (_, k) in candidates {
            if freed >= bytes {
                break;
            }
            if let Some((v, b, _)) = self.entries.remove(&k) {
                self.stats.bytes -= b;
                freed += b;
                out.push(v);
            }
        }
        (out, freed)
    }

    /// Takes what `shed` gives up of the entries (least recently used first, `except` left
    /// alone) until `bytes` are freed: `shed` returns the bytes it took from an entry. Returns the
    /// bytes freed.
    fn shed_oldest(&mut self, bytes: u64, except: Option<&K>, mut shed: impl FnMut(&mut V) -> u64) -> u64 {
        let mut order: Vec<(u64, K)> = self
            .entries
            .iter()
            .filter(|(k, _)| except != Some(*k))
            .map(|(k, (_, _, used))| (*used, k.clone()))
            .collect();
        order.sort_by_key(|(used, _)| *used);
        let mut freed = 0u64;
        for (_, k) in order {
            if freed >= bytes {
                break;
            }
            if let Some((v, b, _)) = self.entries.get_mut(&k) {
                let f = shed(v).min(*b);
                *b -= f;
                self.stats.bytes -= f;
                freed += f;
            }
        }
        freed
    }

    fn clear(&mut self) {
        self.entries.clear();
        self.stats.bytes = 0;
    }

    fn stats(&self) -> CacheStats {
        CacheStats { entries: self.entries.len(), ..self.stats }
    }
}

fn caches() -> &'static Mutex<HashMap<usize, Arc<TableCache>>> {
    static CACHES: OnceLock<Mutex<HashMap<usize, Arc<TableCache>>>> = OnceLock::new();
    CACHES.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The table cache of one device (see the module's text).
#[derive(Debug, Default)]
pub struct TableCache {
    inner: Mutex<Lru<ColumnKey, Column>>,
    /// The device budgets it was registered with as a [`Reclaim`] (their addresses).
    watched: Mutex<Vec<usize>>,
}

impl TableCache {
    /// The cache of device `ordinal`, shared by every session of the process.
    pub fn of_device(ordinal: usize) -> Arc<TableCache> {
        let mut caches = caches().lock().unwrap_or_else(|e| e.into_inner());
        Arc::clone(caches.entry(ordinal).or_default())
    }

    /// Every device's cache that has been used, by ordinal.
    pub fn all() -> Vec<(usize, Arc<TableCache>)> {
        let caches = caches().lock().unwrap_or_else(|e| e.into_inner());
        let mut all: Vec<(usize, Arc<TableCache>)> = caches.iter().map(|(d, c)| (*d, Arc::clone(c))).collect();
        all.sort_by_key(|(d, _)| *d);
        all
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Lru<ColumnKey, Column>> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes this cache give memory back when a reservation under `device` (a device's root
    /// budget) would not fit otherwise; once per budget.
    pub fn watch(self: &Arc<Self>, device: &Arc<MemoryBudget>) {
        let id = Arc::as_ptr(device) as usize;
        let mut watched = self.watched.lock().unwrap_or_else(|e| e.into_inner());
        if !watched.contains(&id) {
            watched.push(id);
            let me: Weak<TableCache> = Arc::downgrade(self);
            device.add_reclaim(me);
        }
    }

    /// The device batches' columns cached under `key`, marked as just used; counts a hit or a miss.
    pub fn get(&self, key: &ColumnKey) -> Option<Vec<CachedChunk>> {
        self.lock().get(key).map(|c| c.chunks.iter().map(Chunk::cached).collect())
    }

    /// The device batches' columns cached under each of `keys` (`None` where there are none), as
    /// they are kept (packed ones not widened), marked as just used, hits and misses counted, after
    /// giving up full-width copies while the cache holds more than `limit`.
    pub fn read_chunks(&self, keys: &[ColumnKey], limit: u64) -> Vec<Option<Vec<CachedChunk>>> {
        let mut dropped: Vec<Arc<DeviceColumn>> = Vec::new();
        let cached = {
            let mut lru = self.lock();
            // A session with a lower limit than the cache holds gives up full-width copies first.
            let over = lru.stats.bytes.saturating_sub(limit);
            if over > 0 {
                lru.shed_oldest(over, None, |c| c.shed(false, &mut dropped));
            }
            keys.iter().map(|k| lru.get(k).map(|c| c.chunks.iter().map(Chunk::cached).collect())).collect()
        };
        drop(dropped);
        cached
    }

    /// As [`TableCache::read_chunks`], packed ones widened on a stream of `gpu` (one wait for them
    /// all, after which every column's work is done), and their full-width copies kept again
    /// while the cache has room for them under `limit`.
    pub fn read(&self, keys: &[ColumnKey], gpu: &Gpu, limit: u64) -> Result<Vec<Option<Vec<Arc<DeviceColumn>>>>> {
        let cached = self.read_chunks(keys, limit);
        let any_packed = cached.iter().flatten().flatten().any(|c| matches!(c, CachedChunk::Packed(_)));
        let stream = any_packed.then(|| gpu.stream());
        let mut widened: Vec<(usize, usize, Arc<PackedColumn>, Arc<DeviceColumn>)> = Vec::new();
        let mut out: Vec<Option<Vec<Arc<DeviceColumn>>>> = Vec::with_capacity(keys.len());
        for (i, chunks) in cached.into_iter().enumerate() {
            // A key listed twice is widened once.
            if let Some(first) = keys[..i].iter().position(|k| *k == keys[i]) {
                let again = out[first].clone();
                out.push(again);
                continue;
            }
            let Some(chunks) = chunks else {
                out.push(None);
                continue;
            };
            let mut ready = Vec::with_capacity(chunks.len());
            for (j, c) in chunks.into_iter().enumerate() {
                match (c, &stream) {
                    (CachedChunk::Ready(c), _) => ready.push(c),
                    (CachedChunk::Packed(p), Some(stream)) => {
                        let wide = Arc::new(p.widen(gpu, stream)?);
                        widened.push((i, j, p, Arc::clone(&wide)));
                        ready.push(wide);
                    }
                    (CachedChunk::Packed(_), None) => return Err(gpu_error("a packed cached column has no stream")),
                }
            }
            out.push(Some(ready));
        }
        if let Some(stream) = &stream {
            stream.synchronize().map_err(|e| gpu_error(format!("widening cached columns: {e}")))?;
        }
        if !widened.is_empty() {
            self.offer_wide(keys, widened, limit);
        }
        Ok(out)
    }

    /// Keeps the full-width copies a scan made of packed chunks (`(key index, chunk, packed,
    /// wide)`, their work complete) beside them, each while it fits under `limit` once other
    /// columns' copies (least recently used first) are given up; no column goes for them.
    pub fn offer_wide(
        &self,
        keys: &[ColumnKey],
        widened: Vec<(usize, usize, Arc<PackedColumn>, Arc<DeviceColumn>)>,
        limit: u64,
    ) {
        let mut dropped: Vec<Arc<DeviceColumn>> = Vec::new();
        let mut lru = self.lock();
        for (i, j, packed, wide) in widened {
            let key = &keys[i];
            let fits = |c: &Column| matches!(c.chunks.get(j), Some(Chunk::Packed { packed: p, wide: None }) if Arc::ptr_eq(p, &packed));
            if !lru.entries.get(key).is_some_and(|(c, _, _)| fits(c)) {
                continue;
            }
            let bytes = wide.byte_size() as u64;
            let over = (lru.stats.bytes + bytes).saturating_sub(limit);
            if over > 0 && lru.shed_oldest(over, Some(key), |c| c.shed(false, &mut dropped)) < over {
                continue;
            }
            if let Some((c, b, _)) = lru.entries.get_mut(key)
                && let Some(Chunk::Packed { wide: slot, .. }) = c.chunks.get_mut(j)
            {
                *slot = Some(wide);
                *b += bytes;
                lru.stats.bytes += bytes;
            }
        }
        drop(lru);
        drop(dropped);
    }

    /// Keeps `chunks` (uploaded from `host`, their work complete) under `key`, evicting the least
    /// recently used entries while the cache would hold more than `limit` bytes. A column larger
    /// than `limit` alone is not kept; returns whether it was. Entries whose tables are gone, and
    /// those the new one supersedes (see the module's text), go first.
    pub fn insert(
        &self,
        key: ColumnKey,
        chunks: Vec<Arc<DeviceColumn>>,
        host: Option<Arc<[ArrayRef]>>,
        limit: u64,
    ) -> bool {
        self.insert_packed(key, chunks, Vec::new(), host, limit)
    }

    /// As [`TableCache::insert`], with `packed[i]` (where there is one) the packed form of
    /// `chunks[i]`: the cache keeps that, and `chunks[i]` beside it while it has room (the
    /// full-width copies of other columns go first, then whole columns, least recently used
    /// first, as for any insertion).
    pub fn insert_packed(
        &self,
        key: ColumnKey,
        chunks: Vec<Arc<DeviceColumn>>,
        packed: Vec<Option<PackedColumn>>,
        host: Option<Arc<[ArrayRef]>>,
        limit: u64,
    ) -> bool {
        let mut packed = packed.into_iter();
        let chunks = chunks
            .into_iter()
            .map(|c| NewChunk { wide: Some(c), packed: packed.next().flatten().map(Arc::new) })
            .collect();
        self.insert_chunks(key, chunks, host, limit)
    }

    /// As [`TableCache::insert_packed`], each device batch given at full width, packed, or both
    /// (a chunk with neither keeps the column out: returns false).
    pub fn insert_chunks(
        &self,
        key: ColumnKey,
        chunks: Vec<NewChunk>,
        host: Option<Arc<[ArrayRef]>>,
        limit: u64,
    ) -> bool {
        let Some(chunks) = chunks
            .into_iter()
            .map(|c| match (c.packed, c.wide) {
                (Some(packed), wide) => Some(Chunk::Packed { packed, wide }),
                (None, Some(wide)) => Some(Chunk::Plain(wide)),
                (None, None) => None,
            })
            .collect::<Option<Vec<Chunk>>>()
        else {
            return false;
        };
        let mut column = Column { chunks, host };
        let arrays: HashSet<usize> = column.host.iter().flat_map(|h| h.iter()).map(array_identity).collect();
        let mut dropped: Vec<Arc<DeviceColumn>> = Vec::new();
        let mut lru = self.lock();
        let gone = lru.remove_where(|k, c| {
            c.orphaned()
                || k.superseded_by(&key)
                || (k != &key && k.batch_rows == key.batch_rows && c.first_array().is_some_and(|a| arrays.contains(&a)))
        });
        lru.stats.invalidated += gone.len() as u64;
        if column.bytes() > limit {
            column.shed(false, &mut dropped);
        }
        let over = (lru.stats.bytes + column.bytes()).saturating_sub(limit);
        if over > 0 && lru.shed_oldest(over, Some(&key), |c| c.shed(false, &mut dropped)) < over {
            column.shed(false, &mut dropped);
        }
        let bytes = column.bytes();
        let kept = lru.insert(key, column, bytes, limit);
        drop(lru);
        drop(gone);
        drop(dropped);
        kept
    }

    /// Drops the entries under `keys`: the rows they were made from changed.
    pub fn forget(&self, keys: &[ColumnKey]) {
        let keys: HashSet<&ColumnKey> = keys.iter().collect();
        let mut lru = self.lock();
        let gone = lru.remove_where(|k, _| keys.contains(k));
        lru.stats.invalidated += gone.len() as u64;
        drop(lru);
        drop(gone);
    }

    /// Drops the entries whose tables are gone; returns how many.
    pub fn purge(&self) -> usize {
        let mut lru = self.lock();
        let gone = lru.remove_where(|_, c| c.orphaned());
        lru.stats.invalidated += gone.len() as u64;
        drop(lru);
        gone.len()
    }

    /// Drops every entry (columns still read by a running query live until it is done).
    pub fn clear(&self) {
        self.lock().clear();
    }

    /// Its counts, after dropping the entries whose tables are gone.
    pub fn stats(&self) -> CacheStats {
        self.purge();
        let lru = self.lock();
        let mut stats = lru.stats();
        for c in lru.entries.values().flat_map(|(c, _, _)| &c.chunks) {
            if let Chunk::Packed { packed, wide } = c {
                stats.packed_bytes += packed.byte_size() as u64;
                stats.packed_full_bytes += packed.wide_byte_size() as u64;
                stats.wide_copy_bytes += wide.as_ref().map_or(0, |w| w.byte_size() as u64);
            }
        }
        stats
    }
}

impl TableCache {
    /// Each cached column, for `gpu_table_cache_columns()`, least recently used first.
    pub fn columns(&self) -> Vec<CachedColumnInfo> {
        self.purge();
        let lru = self.lock();
        let mut rows: Vec<(u64, CachedColumnInfo)> = lru
            .entries
            .iter()
            .map(|(key, (column, bytes, used))| {
                let (source, name) = match &key.rows {
                    Rows::Files { files, column } => {
                        let first = files.first().map_or(String::new(), |f| f.path.clone());
                        let source = match files.len() {
                            0 | 1 => first,
                            n => format!("{first} and {} more files", n - 1),
                        };
                        (source, column.to_string())
                    }
                    Rows::Memory(_) => ("memory".to_string(), String::new()),
                };
                let mut info = CachedColumnInfo {
                    source,
                    column: name,
                    data_type: key.data_type.clone(),
                    rows: 0,
                    bytes: *bytes,
                    packed_bytes: 0,
                    full_width_bytes: 0,
                    encoding: String::new(),
                    read: !column.unread(),
                };
                let mut encodings: Vec<(String, usize)> = Vec::new();
                for c in &column.chunks {
                    let cached = c.cached();
                    info.rows += cached.len() as u64;
                    info.full_width_bytes += cached.wide_byte_size() as u64;
                    let encoding = match c {
                        Chunk::Packed { packed, .. } => {
                            info.packed_bytes += packed.byte_size() as u64;
                            packed.encoding()
                        }
                        Chunk::Plain(_) => "plain".to_string(),
                    };
                    match encodings.iter_mut().find(|(e, _)| *e == encoding) {
                        Some((_, n)) => *n += 1,
                        None => encodings.push((encoding, 1)),
                    }
                }
                info.encoding = encoding_summary(&encodings);
                (*used, info)
            })
            .collect();
        rows.sort_by_key(|(used, _)| *used);
        rows.into_iter().map(|(_, info)| info).collect()
    }
}

/// How a column's device batches are kept, from each encoding and its number of batches: the
/// one encoding, or each with its count (`dictionary, 1-byte codes: 9; plain: 1`).
fn encoding_summary(encodings: &[(String, usize)]) -> String {
    match encodings {
        [(one, _)] => one.clone(),
        many => many.iter().map(|(e, n)| format!("{e}: {n}")).collect::<Vec<_>>().join("; "),
    }
}

/// One cached column as `gpu_table_cache_columns()` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedColumnInfo {
    /// The file it was read from (the first, and how many more), or `memory` for an in-memory
    /// table's.
    pub source: String,
    /// Its name, for a file column.
    pub column: String,
    pub data_type: DataType,
    pub rows: u64,
    /// Device bytes it holds: packed batches, full-width copies beside them, plain batches.
    pub bytes: u64,
    /// Of `bytes`, those of its packed batches.
    pub packed_bytes: u64,
    /// What it takes at its Arrow width.
    pub full_width_bytes: u64,
    /// How its device batches are kept: `plain`, `N-byte values` or `N-byte offsets` (packed
    /// integers), `dictionary, N-byte codes`; with the batches of each when they differ.
    pub encoding: String,
    /// Whether a running query reads it (it cannot be evicted then).
    pub read: bool,
}

impl Reclaim for TableCache {
    /// Gives up the full-width copies of packed columns no query reads, then drops the entries
    /// whose tables are gone, then the least recently used ones no query reads, until `bytes` of
    /// device memory are freed; returns the bytes freed.
    fn reclaim(&self, bytes: u64) -> u64 {
        let mut lru = self.lock();
        let mut shed: Vec<Arc<DeviceColumn>> = Vec::new();
        let shed_bytes = lru.shed_oldest(bytes, None, |c| c.shed(true, &mut shed));
        lru.stats.reclaimed_bytes += shed_bytes;
        let mut freed_bytes = shed_bytes;
        let orphans = lru.remove_where(|_, c| c.orphaned() && c.unread());
        lru.stats.invalidated += orphans.len() as u64;
        freed_bytes += orphans.iter().map(Column::bytes).sum::<u64>();
        let (evicted, freed) = lru.remove_oldest(bytes.saturating_sub(freed_bytes), Column::unread);
        lru.stats.reclaimed += evicted.len() as u64;
        lru.stats.reclaimed_bytes += freed;
        drop(lru);
        drop(shed);
        drop(orphans);
        drop(evicted);
        freed_bytes + freed
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{ArrayRef, Int64Array, StringArray};

    use super::{ColumnKey, Lru, encoding_summary};

    /// One encoding is shown alone; several with their batches, in the order first met.
    #[test]
    fn a_columns_encodings_are_summed_by_batch() {
        let one = [("dictionary, 1-byte codes".to_string(), 9)];
        assert_eq!(encoding_summary(&one), "dictionary, 1-byte codes");
        let two = [("dictionary, 1-byte codes".to_string(), 9), ("plain".to_string(), 1)];
        assert_eq!(encoding_summary(&two), "dictionary, 1-byte codes: 9; plain: 1");
        assert_eq!(encoding_summary(&[]), "");
    }

    /// The least recently used entries go first, until the new one fits; one larger than the
    /// limit is refused and evicts nothing; a replaced key's bytes are not counted twice.
    #[test]
    fn least_recently_used_entries_are_evicted_first() {
        let mut lru: Lru<&str, ()> = Lru::default();
        assert!(lru.insert("a", (), 40, 100));
        assert!(lru.insert("b", (), 40, 100));
        assert!(lru.get(&"a").is_some());
        assert!(lru.insert("c", (), 40, 100));
        assert!(lru.get(&"b").is_none(), "b was the least recently used");
        assert!(lru.get(&"a").is_some() && lru.get(&"c").is_some());
        assert!(!lru.insert("huge", (), 101, 100));
        assert!(lru.insert("c", (), 50, 100));
        let s = lru.stats();
        assert_eq!((s.entries, s.bytes, s.evictions, s.refused), (2, 90, 1, 1));
        assert_eq!((s.hits, s.misses), (3, 1));
        assert!(lru.insert("d", (), 60, 100));
        assert_eq!(lru.stats().bytes, 60, "a and c both had to go");
        lru.clear();
        assert_eq!((lru.stats().entries, lru.stats().bytes), (0, 0));
    }

    /// An entry goes when only the cache holds its host arrays (its table was dropped), when a
    /// newer entry of the same batch size shares its first array (rows were appended), and when
    /// its table forgets it; an entry whose table lives stays.
    #[test]
    fn entries_of_dropped_or_changed_tables_go() {
        use super::TableCache;
        let cache = TableCache::default();
        let array = |n: i64| -> ArrayRef { Arc::new(Int64Array::from_iter_values(0..n)) };
        let (a, b) = (array(10), array(20));
        // Table 1 holds `a`; table 2 holds `b`, then `b` and a new `c` after an append.
        let key_a = ColumnKey::of(&[&a], 100);
        assert!(cache.insert(key_a.clone(), Vec::new(), Some(Arc::from(vec![Arc::clone(&a)])), 1 << 20));
        let key_b = ColumnKey::of(&[&b], 100);
        assert!(cache.insert(key_b.clone(), Vec::new(), Some(Arc::from(vec![Arc::clone(&b)])), 1 << 20));
        // The same rows cut for another batch size stay beside them.
        let key_b_other = ColumnKey::of(&[&b], 7);
        assert!(cache.insert(key_b_other.clone(), Vec::new(), Some(Arc::from(vec![Arc::clone(&b)])), 1 << 20));
        assert_eq!(cache.stats().entries, 3);
        let c = array(5);
        let key_bc = ColumnKey::of(&[&b, &c], 100);
        assert!(cache.insert(
            key_bc.clone(),
            Vec::new(),
            Some(Arc::from(vec![Arc::clone(&b), Arc::clone(&c)])),
            1 << 20
        ));
        assert!(cache.get(&key_b).is_none(), "the appended table's old entry stayed");
        assert!(cache.get(&key_b_other).is_some() && cache.get(&key_bc).is_some());
        assert_eq!(cache.stats().invalidated, 1);
        // Table 1 is dropped: its entry goes at the next look.
        drop(a);
        assert_eq!(cache.stats().entries, 2);
        assert!(cache.get(&key_a).is_none());
        cache.forget(&[key_bc.clone()]);
        assert!(cache.get(&key_bc).is_none() && cache.get(&key_b_other).is_some());
        assert_eq!(cache.stats().invalidated, 3);
    }

    /// A file column's key follows its files' versions: a file written anew (another size, time
    /// or version) gives another key, and inserting it drops the stale entry of the same column;
    /// another column, another batch size or a file set that shares no changed file stays.
    #[test]
    fn file_columns_go_when_a_file_changes() {
        use datafusion::arrow::datatypes::DataType;

        use super::{FileVersion, TableCache};
        let file = |path: &str, size: u64, modified: i64| FileVersion {
            path: path.into(),
            size,
            modified,
            e_tag: Some(format!("{size}-{modified}")),
            version: None,
        };
        let files = |f: Vec<FileVersion>| -> Arc<[FileVersion]> { f.into() };
        let before = files(vec![file("t/a.parquet", 100, 1), file("t/b.parquet", 200, 1)]);
        let after = files(vec![file("t/a.parquet", 100, 1), file("t/b.parquet", 210, 2)]);
        let other = files(vec![file("u/a.parquet", 100, 1)]);
        let key = |f: &Arc<[FileVersion]>, c: &str, rows| ColumnKey::of_files(f, c, &DataType::Int64, rows);
        assert_eq!(key(&before, "x", 10), key(&files(before.to_vec()), "x", 10));
        assert_ne!(key(&before, "x", 10), key(&after, "x", 10));
        assert_ne!(key(&before, "x", 10), key(&before, "y", 10));
        assert_ne!(key(&before, "x", 10), ColumnKey::of_files(&before, "x", &DataType::Int32, 10));
        let cache = TableCache::default();
        for k in [key(&before, "x", 10), key(&before, "y", 10), key(&before, "x", 7), key(&other, "x", 10)] {
            assert!(cache.insert(k, Vec::new(), None, 1 << 20));
        }
        assert_eq!(cache.purge(), 0, "file columns hold no host arrays to lose");
        assert!(cache.insert(key(&after, "x", 10), Vec::new(), None, 1 << 20));
        assert!(cache.get(&key(&before, "x", 10)).is_none(), "the changed file's column stayed");
        for k in [key(&after, "x", 10), key(&before, "y", 10), key(&before, "x", 7), key(&other, "x", 10)] {
            assert!(cache.get(&k).is_some(), "{k:?}");
        }
        assert_eq!(cache.stats().invalidated, 1);
    }

    /// The same arrays (or clones sharing their buffers) give the same key; other rows, another
    /// slice of the same buffer or another batch size give another.
    #[test]
    fn keys_follow_the_host_buffers() {
        let a: ArrayRef = Arc::new(Int64Array::from_iter_values(0..100));
        let b: ArrayRef = Arc::new(StringArray::from(vec![Some("x"), None, Some("yz")]));
        let same_values: ArrayRef = Arc::new(Int64Array::from_iter_values(0..100));
        let key = ColumnKey::of(&[&a, &b], 10);
        assert_eq!(key, ColumnKey::of(&[&Arc::clone(&a), &Arc::clone(&b)], 10));
        assert_ne!(key, ColumnKey::of(&[&same_values, &b], 10));
        assert_ne!(key, ColumnKey::of(&[&a.slice(1, 99), &b], 10));
        assert_ne!(key, ColumnKey::of(&[&a, &b], 11));
        assert_ne!(key, ColumnKey::of(&[&a], 10));
    }
}
