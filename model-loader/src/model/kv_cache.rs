//! `KvCache`: keys and values of every layer for a fixed number of sequence slots.
//!
//! Storage is one `[kv_heads, capacity, head_dim]` buffer per layer, slot and kind, of which
//! the first `len` rows per head are the slot's history. Two ways of appending share it:
//!
//! - [`KvCache::append_with`] writes new rows into the buffer where it stands, growing it (by
//!   at least an eighth, in whole [`KV_ROW_GRANULE`]s) only when it is full, so a decode step
//!   costs the new rows and not a copy of the history. The CPU kernels append this way and
//!   read the padded buffer directly (`AttentionShape::kv_capacity`).
//! - [`KvCache::append`] concatenates, leaving a buffer exactly as long as the history: burn's
//!   generic attention wants contiguous keys and values, which a padded buffer would have to be
//!   copied into on every read.
//!
//! Nothing is allocated for a slot until it holds tokens, and `reset` frees it; a truncation
//! keeps the buffer for the rows that follow. [`KvCache::memory_bytes`] counts buffers.

use burn::tensor::backend::Backend;
use burn::tensor::{DType, Int, Tensor, TensorData};
use std::ops::Range;

/// Rows by which [`KvCache::append_with`] sizes its buffers: one AVX-512 register of `f32`
/// lanes, small enough that a short sequence holds little more than its own rows.
pub const KV_ROW_GRANULE: usize = 16;

/// Key and value tensors of one layer and slot.
pub type KeysAndValues<B> = (Tensor<B, 3>, Tensor<B, 3>);

/// Keys and values of one layer for one slot, `[kv_heads, capacity, head_dim]` each; the
/// slot's length says how many rows per head are history.
#[derive(Debug, Clone)]
struct LayerEntry<B: Backend> {
    keys: Tensor<B, 3>,
    values: Tensor<B, 3>,
}

impl<B: Backend> LayerEntry<B> {
    /// Rows per head the buffers hold.
    fn capacity(&self) -> usize {
        self.keys.dims()[1]
    }

    /// Zeroed key and value buffers of `shape`.
    fn zeros(shape: [usize; 3], dtype: DType, device: &B::Device) -> Self {
        let zeros = || Tensor::zeros(shape, (device, dtype));
        Self {
            keys: zeros(),
            values: zeros(),
        }
    }

    /// Buffers of `capacity` rows holding this entry's first `len` rows.
    fn grown(self, len: usize, capacity: usize) -> Self {
        let [kv_heads, _, head_dim] = self.keys.dims();
        let device = self.keys.device();
        let dtype = self.keys.dtype();
        let grow = |kept: Tensor<B, 3>| {
            let room = Tensor::zeros([kv_heads, capacity - len, head_dim], (&device, dtype));
            Tensor::cat(vec![kept, room], 1)
        };
        let kept = self.prefix(len);
        Self {
            keys: grow(kept.keys),
            values: grow(kept.values),
        }
    }

    fn bytes(&self) -> usize {
        let elements = |t: &Tensor<B, 3>| t.shape().num_elements() * t.dtype().size();
        elements(&self.keys) + elements(&self.values)
    }

    /// The first `len` rows (a view).
    fn prefix(&self, len: usize) -> Self {
        Self {
            keys: self.keys.clone().narrow(1, 0, len),
            values: self.values.clone().narrow(1, 0, len),
        }
    }
}

/// Keys and values of every layer for `num_slots` sequence slots.
#[derive(Debug, Clone)]
pub struct KvCache<B: Backend> {
    /// `entries[layer][slot]`.
    entries: Vec<Vec<Option<LayerEntry<B>>>>,
    /// Number of cached tokens per slot.
    lens: Vec<usize>,
}

impl<B: Backend> KvCache<B> {
    /// An empty cache for a model with `num_layers` layers and `num_slots` sequence slots.
    pub fn new(num_layers: usize, num_slots: usize) -> Self {
        Self {
            entries: (0..num_layers).map(|_| vec![None; num_slots]).collect(),
            lens: vec![0; num_slots],
        }
    }

    /// Number of sequence slots.
    pub fn num_slots(&self) -> usize {
        self.lens.len()
    }

    /// Number of layers.
    pub fn num_layers(&self) -> usize {
        self.entries.len()
    }

    /// Number of cached tokens of `slot`.
    ///
    /// # Panics
    /// If `slot >= num_slots()`.
    pub fn len(&self, slot: usize) -> usize {
        self.lens[slot]
    }

    /// Whether every slot is empty.
    pub fn is_empty(&self) -> bool {
        self.lens.iter().all(|&len| len == 0)
    }

    /// Keeps the first `len` tokens of `slot` (rollback of rejected drafts). Like
    /// `Vec::truncate`, a `len` at or above the current length changes nothing.
    ///
    /// # Panics
    /// If `slot >= num_slots()`.
    pub fn truncate(&mut self, slot: usize, len: usize) {
        if len >= self.lens[slot] {
            return;
        }
        self.lens[slot] = len;
        if len == 0 {
            self.free(slot);
        }
    }

    /// Tree commit: keeps row `start + rows[i]` at `start + i` for every `i`, then sets the
    /// length to `start + rows.len()`. Rows before `start` are untouched.
    ///
    /// # Panics
    /// If `slot >= num_slots()`, `start` exceeds the length, or a row is past the length.
    pub fn gather(&mut self, slot: usize, start: usize, rows: &[usize]) {
        let len = self.lens[slot];
        assert!(
            start <= len,
            "gather: start {start} is past the length {len} of slot {slot}"
        );
        if let Some(&bad) = rows.iter().find(|&&r| start + r >= len) {
            panic!("gather: row {bad} (+{start}) is past the length {len} of slot {slot}");
        }
        if rows.iter().enumerate().all(|(i, &r)| i == r) {
            self.truncate(slot, start + rows.len());
            return;
        }
        for layer in &mut self.entries {
            let Some(entry) = &layer[slot] else { continue };
            let device = entry.keys.device();
            let indices: Vec<i64> = rows.iter().map(|&r| (start + r) as i64).collect();
            let indices =
                Tensor::<B, 1, Int>::from_data(TensorData::new(indices, [rows.len()]), &device);
            let picked_keys = entry.keys.clone().select(1, indices.clone());
            let picked_values = entry.values.clone().select(1, indices);
            let kept = entry.prefix(start);
            layer[slot] = Some(LayerEntry {
                keys: Tensor::cat(vec![kept.keys, picked_keys], 1),
                values: Tensor::cat(vec![kept.values, picked_values], 1),
            });
        }
        self.lens[slot] = start + rows.len();
    }

    /// Keys and values of `layer` at rows `rows` of `slot` (views, `[kv_heads, rows, head_dim]`
    /// each), or `None` where `rows` is empty or not all in the slot's history.
    ///
    /// # Panics
    /// If `layer >= num_layers()` or `slot >= num_slots()`.
    pub fn rows(&self, layer: usize, slot: usize, rows: Range<usize>) -> Option<KeysAndValues<B>> {
        if rows.is_empty() || rows.end > self.lens[slot] {
            return None;
        }
        let entry = self.entries[layer][slot].as_ref()?;
        let (start, len) = (rows.start, rows.len());
        Some((
            entry.keys.clone().narrow(1, start, len),
            entry.values.clone().narrow(1, start, len),
        ))
    }

    /// Empties `slot` and frees its memory.
    ///
    /// # Panics
    /// If `slot >= num_slots()`.
    pub fn reset(&mut self, slot: usize) {
        self.lens[slot] = 0;
        self.free(slot);
    }

    /// Bytes of key/value buffers held, spare capacity included.
    pub fn memory_bytes(&self) -> usize {
        self.entries
            .iter()
            .flatten()
            .flatten()
            .map(LayerEntry::bytes)
            .sum()
    }

    /// Appends new keys and values (`[kv_heads, n, head_dim]`) of `layer` after the slot's
    /// current length and returns the slot's whole history for that layer. The slot's length
    /// only grows once [`KvCache::advance`] is called, after every layer has appended.
    pub fn append(
        &mut self,
        layer: usize,
        slot: usize,
        keys: Tensor<B, 3>,
        values: Tensor<B, 3>,
    ) -> KeysAndValues<B> {
        let len = self.lens[slot];
        let entry = match self.entries[layer][slot].take() {
            Some(old) if len > 0 => {
                let old = if old.capacity() > len {
                    old.prefix(len)
                } else {
                    old
                };
                LayerEntry {
                    keys: Tensor::cat(vec![old.keys, keys], 1),
                    values: Tensor::cat(vec![old.values, values], 1),
                }
            }
            _ => LayerEntry { keys, values },
        };
        let history = (entry.keys.clone(), entry.values.clone());
        self.entries[layer][slot] = Some(entry);
        history
    }

    /// Appends `new_rows` rows to `slot` in `layer` in place: `write` gets the slot's key and
    /// value buffers (`[kv_heads, capacity, head_dim]`, grown first if they lack room, made of
    /// `dtype` zeros for an empty slot) and the rows to fill, and returns the buffers. Returns
    /// handles of the buffers, whose first `len + new_rows` rows per head are the history;
    /// drop them before the next append, or that append copies the buffer. The slot's length
    /// only grows once [`KvCache::advance`] is called, after every layer has appended.
    pub fn append_with(
        &mut self,
        layer: usize,
        slot: usize,
        new_rows: usize,
        [kv_heads, head_dim]: [usize; 2],
        (device, dtype): (&B::Device, DType),
        write: impl FnOnce(Tensor<B, 3>, Tensor<B, 3>, Range<usize>) -> KeysAndValues<B>,
    ) -> KeysAndValues<B> {
        let len = self.lens[slot];
        let needed = len + new_rows;
        let entry = match self.entries[layer][slot].take() {
            Some(entry) if len > 0 && entry.capacity() >= needed => entry,
            Some(entry) if len > 0 => {
                let capacity = grown_capacity(entry.capacity(), needed);
                entry.grown(len, capacity)
            }
            _ => LayerEntry::zeros(
                [kv_heads, grown_capacity(0, needed), head_dim],
                dtype,
                device,
            ),
        };
        let (keys, values) = write(entry.keys, entry.values, len..needed);
        let history = (keys.clone(), values.clone());
        self.entries[layer][slot] = Some(LayerEntry { keys, values });
        history
    }

    /// Records that `n` tokens were appended to `slot` in every layer.
    pub fn advance(&mut self, slot: usize, n: usize) {
        self.lens[slot] += n;
    }

    fn free(&mut self, slot: usize) {
        for layer in &mut self.entries {
            layer[slot] = None;
        }
    }
}

/// Capacity for `needed` rows when the buffer holds `capacity`: at least an eighth more, so
/// that the copies a growing sequence makes add up to about eight times its rows, while spare
/// rows stay within an eighth of the buffer (plus a granule) beyond what the engine's KV
/// budget counts; in whole [`KV_ROW_GRANULE`]s.
fn grown_capacity(capacity: usize, needed: usize) -> usize {
    needed
        .max(capacity + capacity / 8)
        .next_multiple_of(KV_ROW_GRANULE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::Flex;

    type B = Flex;

    /// Keys/values `[1, n, 2]` whose row `i` holds `base + i` (keys) and `-(base + i)` (values).
    fn rows(base: usize, n: usize) -> (Tensor<B, 3>, Tensor<B, 3>) {
        let keys: Vec<f32> = (0..n).flat_map(|i| [(base + i) as f32; 2]).collect();
        let values: Vec<f32> = keys.iter().map(|v| -v).collect();
        let device = Default::default();
        (
            Tensor::from_data(TensorData::new(keys, [1, n, 2]), &device),
            Tensor::from_data(TensorData::new(values, [1, n, 2]), &device),
        )
    }

    /// The first key element of each cached row of `slot` in `layer`.
    fn row_ids(cache: &KvCache<B>, layer: usize, slot: usize) -> Vec<f32> {
        let entry = cache.entries[layer][slot]
            .as_ref()
            .expect("slot holds tokens");
        let keys: Vec<f32> = entry
            .prefix(cache.len(slot))
            .keys
            .into_data()
            .to_vec()
            .unwrap();
        keys.chunks(2).map(|pair| pair[0]).collect()
    }

    fn fill(cache: &mut KvCache<B>, slot: usize, base: usize, n: usize) {
        for layer in 0..cache.num_layers() {
            let (k, v) = rows(base, n);
            cache.append(layer, slot, k, v);
        }
        cache.advance(slot, n);
    }

    #[test]
    fn append_truncate_and_gather_move_rows() {
        let mut cache = KvCache::<B>::new(2, 2);
        fill(&mut cache, 1, 0, 4);
        fill(&mut cache, 1, 4, 3);
        assert_eq!(cache.len(1), 7);
        assert_eq!(row_ids(&cache, 1, 1), [0., 1., 2., 3., 4., 5., 6.]);
        cache.gather(1, 3, &[1, 3]);
        assert_eq!(cache.len(1), 5);
        for layer in 0..2 {
            assert_eq!(row_ids(&cache, layer, 1), [0., 1., 2., 4., 6.]);
        }
        cache.truncate(1, 2);
        fill(&mut cache, 1, 10, 1);
        assert_eq!(row_ids(&cache, 0, 1), [0., 1., 10.]);
        assert_eq!(cache.len(0), 0);
    }

    /// Appends rows `base..base + n` to `slot` in every layer in place.
    fn fill_in_place(cache: &mut KvCache<B>, slot: usize, base: usize, n: usize) {
        for layer in 0..cache.num_layers() {
            let (k, v) = rows(base, n);
            let device = Default::default();
            cache.append_with(
                layer,
                slot,
                n,
                [1, 2],
                (&device, DType::F32),
                |keys, values, at| {
                    let place = |buffer: Tensor<B, 3>, new| {
                        buffer.slice_assign([0..1, at.clone(), 0..2], new)
                    };
                    (place(keys, k), place(values, v))
                },
            );
        }
        cache.advance(slot, n);
    }

    #[test]
    fn rows_read_back_the_history_of_a_padded_buffer() {
        let mut cache = KvCache::<B>::new(2, 2);
        fill_in_place(&mut cache, 1, 0, 5);
        let (keys, values) = cache.rows(1, 1, 1..4).unwrap();
        assert_eq!(keys.dims(), [1, 3, 2]);
        let keys: Vec<f32> = keys.into_data().to_vec().unwrap();
        let values: Vec<f32> = values.into_data().to_vec().unwrap();
        assert_eq!(keys, [1., 1., 2., 2., 3., 3.]);
        assert_eq!(values, [-1., -1., -2., -2., -3., -3.]);
        assert!(
            cache.rows(0, 1, 4..6).is_none(),
            "row 5 is past the history"
        );
        assert!(cache.rows(0, 0, 0..1).is_none(), "slot 0 is empty");
        assert!(cache.rows(0, 1, 2..2).is_none());
    }

    #[test]
    fn in_place_appends_fill_spare_rows_and_grow_by_granules() {
        let mut cache = KvCache::<B>::new(2, 1);
        let granule_bytes = 2 * KV_ROW_GRANULE * 2 * 4;
        fill_in_place(&mut cache, 0, 0, 3);
        fill_in_place(&mut cache, 0, 3, 1);
        assert_eq!(row_ids(&cache, 1, 0), [0., 1., 2., 3.]);
        assert_eq!(cache.memory_bytes(), 2 * granule_bytes);
        // Past the first granule the buffer grows by whole granules, keeping the history.
        fill_in_place(&mut cache, 0, 4, KV_ROW_GRANULE);
        let ids: Vec<f32> = (0..KV_ROW_GRANULE + 4).map(|i| i as f32).collect();
        assert_eq!(row_ids(&cache, 0, 0), ids);
        assert_eq!(cache.memory_bytes(), 2 * 2 * granule_bytes);
        // A rollback keeps the buffer; the next rows overwrite the rejected ones.
        cache.truncate(0, 2);
        fill_in_place(&mut cache, 0, 90, 2);
        assert_eq!(row_ids(&cache, 0, 0), [0., 1., 90., 91.]);
        assert_eq!(cache.memory_bytes(), 2 * 2 * granule_bytes);
        cache.gather(0, 1, &[0, 2]);
        assert_eq!(row_ids(&cache, 1, 0), [0., 1., 91.]);
        fill_in_place(&mut cache, 0, 7, 1);
        assert_eq!(row_ids(&cache, 1, 0), [0., 1., 91., 7.]);
        cache.reset(0);
        assert_eq!(cache.memory_bytes(), 0);
    }

    #[test]
    fn memory_follows_allocations() {
        let mut cache = KvCache::<B>::new(1, 1);
        fill(&mut cache, 0, 0, 4);
        assert_eq!(cache.memory_bytes(), 2 * 4 * 2 * 4);
        // A truncation keeps the buffer until the next append replaces it.
        cache.truncate(0, 1);
        assert_eq!(cache.memory_bytes(), 2 * 4 * 2 * 4);
        fill(&mut cache, 0, 5, 1);
        assert_eq!(cache.memory_bytes(), 2 * 2 * 2 * 4);
        cache.reset(0);
        assert_eq!(cache.memory_bytes(), 0);
    }

    #[test]
    #[should_panic(expected = "past the length")]
    fn gather_past_the_end_panics() {
        let mut cache = KvCache::<B>::new(1, 1);
        fill(&mut cache, 0, 0, 3);
        cache.gather(0, 1, &[2]);
    }
}
