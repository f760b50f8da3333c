//! `AttentionContext`: what every attention layer of one forward pass shares: where each
//! sequence's rows are, how long its cache is, its RoPE tables and its attention mask.

use super::{ForwardBatch, KvCache, ModelError, Rope, RopeTables, SequenceInput};
use crate::backend::KernelBackend;
use burn::tensor::backend::Backend;
use burn::tensor::{Bool, Tensor, TensorData};

/// The new rows of one sequence within a forward pass.
#[derive(Debug, Clone)]
pub struct SequenceSpan<B: Backend> {
    /// KV-cache slot.
    pub slot: usize,
    /// First row of the sequence in the flattened batch.
    pub start: usize,
    /// Number of new rows.
    pub len: usize,
    /// Tokens already cached for the slot.
    pub cached: usize,
    /// `[1, 1, group * len, cached + len]`, `true` = masked out; rows are ordered
    /// `(query head within its group, new row)`. `None` when a single row sees everything,
    /// and on backends whose attention reads [`SequenceSpan::visibility`] instead
    /// ([`KernelBackend::ATTENTION_MASK_TENSORS`]; see [`SequenceSpan::generic_mask`]).
    pub(crate) mask: Option<Tensor<B, 4, Bool>>,
    /// Which keys the new rows see.
    pub(crate) visibility: SpanVisibility,
}

impl<B: Backend> SequenceSpan<B> {
    /// The mask of burn's generic attention: the prepared one, or, on the CPU backend (which
    /// prepares none because its kernel reads the visibility), one built now.
    pub(crate) fn generic_mask(
        &self,
        group_size: usize,
        device: &B::Device,
    ) -> Option<Tensor<B, 4, Bool>> {
        match &self.mask {
            Some(mask) => Some(mask.clone()),
            None => self
                .visibility
                .mask_tensor(group_size, self.cached, self.len, device),
        }
    }
}

/// Which keys (cached rows, then new rows) the new rows of a sequence see.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum SpanVisibility {
    /// Every cached row, and new rows up to and including their own.
    Causal,
    /// Row-major `[len, cached + len]`, `true` = visible.
    Explicit(Vec<bool>),
}

impl SpanVisibility {
    /// The keys `sequence`'s new rows see over a cache of `cached` rows. With a sliding
    /// `window`, a row at position `p` sees only keys at positions `p - window + 1..=p`:
    /// cached row `c` is at position `c`, new rows at their `positions`.
    fn of(sequence: &SequenceInput, cached: usize, window: Option<usize>) -> Self {
        let in_window = |row: usize, key_position: usize| {
            window.is_none_or(|w| sequence.positions[row] < key_position + w)
        };
        let window_hides_keys = window.is_some_and(|w| sequence.positions.iter().any(|&p| p >= w));
        if sequence.mask.is_none() && sequence.history_mask.is_none() && !window_hides_keys {
            return Self::Causal;
        }
        let len = sequence.len();
        let mut visible = Vec::with_capacity(len * (cached + len));
        for row in 0..len {
            visible.extend(
                (0..cached).map(|col| sequence.may_attend_cached(row, col) && in_window(row, col)),
            );
            visible.extend((0..len).map(|col| {
                sequence.may_attend(row, col) && in_window(row, sequence.positions[col])
            }));
        }
        Self::Explicit(visible)
    }

    /// The mask tensor of burn's attention (`[1, 1, group * len, cached + len]`, `true` =
    /// hidden, rows ordered `(query head within its group, new row)`), or `None` when a
    /// single causal row sees everything.
    fn mask_tensor<B: Backend>(
        &self,
        group_size: usize,
        cached: usize,
        len: usize,
        device: &B::Device,
    ) -> Option<Tensor<B, 4, Bool>> {
        if len == 1 && *self == Self::Causal {
            return None;
        }
        let columns = cached + len;
        let mut masked = Vec::with_capacity(group_size * len * columns);
        for _ in 0..group_size {
            for row in 0..len {
                masked.extend((0..columns).map(|col| !self.sees(row, col, cached, len)));
            }
        }
        let shape = [1, 1, group_size * len, columns];
        Some(Tensor::from_data(TensorData::new(masked, shape), device))
    }

    /// Whether new row `row` of a span with `cached` cached rows sees key `col`.
    fn sees(&self, row: usize, col: usize, cached: usize, len: usize) -> bool {
        match self {
            Self::Causal => col <= cached + row,
            Self::Explicit(visible) => visible[row * (cached + len) + col],
        }
    }
}

/// Per-forward data shared by all attention layers.
#[derive(Debug, Clone)]
pub struct AttentionContext<B: Backend> {
    spans: Vec<SequenceSpan<B>>,
    rope: RopeTables<B>,
    group_size: usize,
}

impl<B: KernelBackend> AttentionContext<B> {
    /// Prepares `batch` for attention layers with `num_heads` query heads and `num_kv_heads`
    /// key/value heads, with the cache lengths of `cache`.
    ///
    /// # Panics
    /// If the batch's layout is invalid (see [`AttentionContext::try_new`]).
    pub fn new(
        batch: &ForwardBatch,
        cache: &KvCache<B>,
        rope: &Rope,
        num_heads: usize,
        num_kv_heads: usize,
        device: &B::Device,
    ) -> Self {
        Self::try_new(batch, cache, rope, num_heads, num_kv_heads, device)
            .unwrap_or_else(|e| panic!("attention context: {e}"))
    }

    /// Like [`AttentionContext::new`], but a batch whose layout is invalid
    /// ([`ForwardBatch::validate_layout`]) is an error. Token ids are not looked at.
    pub fn try_new(
        batch: &ForwardBatch,
        cache: &KvCache<B>,
        rope: &Rope,
        num_heads: usize,
        num_kv_heads: usize,
        device: &B::Device,
    ) -> Result<Self, ModelError> {
        Self::try_new_windowed(batch, cache, rope, (num_heads, num_kv_heads), None, device)
    }

    /// Like [`AttentionContext::try_new`] for `(query heads, key/value heads)`, with sliding-
    /// window attention when `window` is given: each row sees only the keys of the last
    /// `window` positions up to its own (Mistral's `sliding_window`).
    pub fn try_new_windowed(
        batch: &ForwardBatch,
        cache: &KvCache<B>,
        rope: &Rope,
        (num_heads, num_kv_heads): (usize, usize),
        window: Option<usize>,
        device: &B::Device,
    ) -> Result<Self, ModelError> {
        batch.validate_layout(cache.num_slots())?;
        let group_size = num_heads / num_kv_heads;
        let positions: Vec<usize> = batch
            .sequences
            .iter()
            .flat_map(|s| s.positions.iter().copied())
            .collect();
        for (index, sequence) in batch.sequences.iter().enumerate() {
            sequence.check_history(index, cache.len(sequence.slot))?;
        }
        let mut start = 0;
        let spans = batch
            .sequences
            .iter()
            .map(|sequence| {
                let len = sequence.len();
                let cached = cache.len(sequence.slot);
                let visibility = SpanVisibility::of(sequence, cached, window);
                let mask = B::ATTENTION_MASK_TENSORS
                    .then(|| visibility.mask_tensor(group_size, cached, len, device))
                    .flatten();
                let span = SequenceSpan {
                    slot: sequence.slot,
                    start,
                    len,
                    cached,
                    mask,
                    visibility,
                };
                start += len;
                span
            })
            .collect();
        Ok(Self {
            spans,
            rope: rope.tables(&positions, &[num_heads, num_kv_heads], device),
            group_size,
        })
    }
}

impl<B: Backend> AttentionContext<B> {
    /// The sequences, in batch order.
    pub fn spans(&self) -> &[SequenceSpan<B>] {
        &self.spans
    }

    /// RoPE tables of all rows.
    pub fn rope(&self) -> &RopeTables<B> {
        &self.rope
    }

    /// Query heads per key/value head the masks were built for.
    pub fn group_size(&self) -> usize {
        self.group_size
    }

    /// Total number of rows.
    pub fn num_rows(&self) -> usize {
        self.spans.last().map_or(0, |s| s.start + s.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RopeConfig;
    use crate::model::SequenceInput;
    use burn::backend::{Autodiff, Flex};

    /// Slot 0 gets one new row; slot 2 (two cached tokens) two.
    fn sample_context<B: KernelBackend>() -> AttentionContext<B> {
        let mut cache = KvCache::<B>::new(1, 3);
        cache.advance(2, 2);
        let batch = ForwardBatch::new(vec![
            SequenceInput::new(0, vec![1], 0),
            SequenceInput::new(2, vec![1, 2], 2),
        ]);
        let rope = Rope::new(&RopeConfig::default(), 4);
        let bad = ForwardBatch::new(vec![SequenceInput::new(5, vec![1], 0)]);
        assert!(AttentionContext::try_new(&bad, &cache, &rope, 4, 2, &Default::default()).is_err());
        AttentionContext::new(&batch, &cache, &rope, 4, 2, &Default::default())
    }

    #[test]
    fn spans_and_group_tiled_masks() {
        // A generic backend gets mask tensors.
        let context = sample_context::<Autodiff<Flex>>();
        assert_eq!(context.group_size(), 2);
        assert_eq!(context.num_rows(), 3);
        let spans = context.spans();
        assert_eq!(
            (spans[0].slot, spans[0].start, spans[0].len, spans[0].cached),
            (0, 0, 1, 0)
        );
        assert!(spans[0].mask.is_none());
        assert_eq!(
            (spans[1].slot, spans[1].start, spans[1].len, spans[1].cached),
            (2, 1, 2, 2)
        );
        assert_eq!(spans[1].visibility, SpanVisibility::Causal);
        let mask = spans[1].mask.clone().unwrap();
        assert_eq!(mask.dims(), [1, 1, 4, 4]);
        let masked: Vec<bool> = mask.into_data().to_vec().unwrap();
        // Each group repeats rows (new row 0, new row 1) over 2 cached + 2 new columns.
        let block = [false, false, false, true, false, false, false, false];
        assert_eq!(masked, [block, block].concat());

        // The CPU backend's kernel reads the visibility instead.
        let context = sample_context::<Flex>();
        assert!(context.spans().iter().all(|s| s.mask.is_none()));
        assert_eq!(context.spans()[1].visibility, SpanVisibility::Causal);
        // burn's attention on it (a fallback) still gets the same mask, built on demand.
        let device = Default::default();
        assert!(context.spans()[0].generic_mask(2, &device).is_none());
        let built = context.spans()[1].generic_mask(2, &device).unwrap();
        let built: Vec<bool> = built.into_data().to_vec().unwrap();
        assert_eq!(built, [block, block].concat());
    }

    #[test]
    fn explicit_visibility_joins_history_and_tree_masks() {
        let mut sequence = SequenceInput::new(0, vec![1, 2], 2);
        sequence.mask = Some(vec![vec![true, false], vec![false, true]]);
        sequence.history_mask = Some(vec![vec![true, false], vec![true, true]]);
        let visibility = SpanVisibility::of(&sequence, 2, None);
        let expected = [true, false, true, false, true, true, false, true];
        assert_eq!(visibility, SpanVisibility::Explicit(expected.to_vec()));
        for (i, &e) in expected.iter().enumerate() {
            assert_eq!(visibility.sees(i / 4, i % 4, 2, 2), e);
        }
    }

    #[test]
    fn sliding_window_hides_keys_older_than_the_window() {
        // Two cached rows (positions 0, 1), new rows at positions 2 and 3, window 2.
        let sequence = SequenceInput::new(0, vec![1, 2], 2);
        let visibility = SpanVisibility::of(&sequence, 2, Some(2));
        let expected = [false, true, true, false, false, false, true, true];
        assert_eq!(visibility, SpanVisibility::Explicit(expected.to_vec()));
        // A window wider than every position changes nothing.
        assert_eq!(
            SpanVisibility::of(&sequence, 2, Some(4)),
            SpanVisibility::Causal
        );
    }
}
