//! The device's table cache: host columns' device copies, kept between queries so that a later
//! scan of the same host rows reads them in device memory instead of uploading them again
//! (`gpu.table_cache`).
//!
//! An entry is one column of one partition of an in-memory table, cut into the device batches a
//! scan hands out. It is found by the identity of the host arrays it was uploaded from (their
//! buffers' addresses, offsets and lengths) and the batch size it was cut to: a table whose
//! batches change (an `INSERT`, a table registered anew) has other arrays, so its scans miss and
//! upload the new rows; the stale entry is evicted like any other. An entry holds the host arrays
//! it was made from, so their memory cannot be freed and reused for other rows while it lives.
//!
//! Entries are evicted least recently used first when an insertion would take the cache past the
//! inserting session's limit (`gpu.table_cache.limit`). A query that still reads an evicted
//! entry's columns keeps them until it is done.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use datafusion::arrow::array::{Array, ArrayData, ArrayRef};
use datafusion::arrow::datatypes::DataType;

use super::DeviceColumn;

/// What identifies a column's host rows: the host arrays' data type and, for each array, the
/// addresses, offsets and lengths of its buffers (children included), with the rows per device
/// batch it is cut into.
///
/// A column of many host batches has a long layout (SF10's `lineorder`: 7,300 batches, about
/// 80,000 words a column), so the key hashes as a digest of it made once, with the key: hashing
/// the whole layout at every lookup, under the cache's lock, cost a query about 1 ms a scan and
/// held up every other scan's lookup meanwhile. Keys are still equal only when their layouts are.
/// The layout is shared: a clone of the key (the cache's copy) does not copy it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnKey {
    digest: u64,
    data_type: DataType,
    batch_rows: usize,
    layout: Arc<[usize]>,
}

impl std::hash::Hash for ColumnKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(self.digest);
    }
}

impl ColumnKey {
    /// The key of the column made of `arrays` (in order) cut into device batches of `batch_rows`.
    pub fn of(arrays: &[&ArrayRef], batch_rows: usize) -> ColumnKey {
        use std::hash::{Hash, Hasher};
        let data_type = arrays.first().map_or(DataType::Null, |a| a.data_type().clone());
        let mut layout = Vec::with_capacity(arrays.len() * 6);
        for a in arrays {
            push_layout(&a.to_data(), &mut layout);
        }
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (&data_type, batch_rows, &layout).hash(&mut h);
        ColumnKey { digest: h.finish(), data_type, batch_rows, layout: layout.into() }
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
/// them, so that caching a column of thousands of host batches is not thousands of clones).
#[derive(Debug)]
struct Column {
    chunks: Vec<Arc<DeviceColumn>>,
    _host: Arc<[ArrayRef]>,
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

    /// The device batches' columns cached under `key`, marked as just used; counts a hit or a miss.
    pub fn get(&self, key: &ColumnKey) -> Option<Vec<Arc<DeviceColumn>>> {
        self.lock().get(key).map(|c| c.chunks.clone())
    }

    /// Keeps `chunks` (uploaded from `host`, their work complete) under `key`, evicting the least
    /// recently used entries while the cache would hold more than `limit` bytes. A column larger
    /// than `limit` alone is not kept; returns whether it was.
    pub fn insert(&self, key: ColumnKey, chunks: Vec<Arc<DeviceColumn>>, host: Arc<[ArrayRef]>, limit: u64) -> bool {
        let bytes: u64 = chunks.iter().map(|c| c.byte_size() as u64).sum();
        self.lock().insert(key, Column { chunks, _host: host }, bytes, limit)
    }

    /// Drops every entry (columns still read by a running query live until it is done).
    pub fn clear(&self) {
        self.lock().clear();
    }

    pub fn stats(&self) -> CacheStats {
        self.lock().stats()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{ArrayRef, Int64Array, StringArray};

    use super::{ColumnKey, Lru};

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
