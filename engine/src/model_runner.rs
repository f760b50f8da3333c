//! Runs the target model on one step's scheduled work and hands back each request's logits rows.

use aquila_model_loader::backend::KernelBackend;
use aquila_model_loader::model::{FeatureTap, ForwardBatch, KvCache, LlamaModel, SequenceInput};
use burn::tensor::backend::Backend;

use aquila_spec_decode::tree::DraftTree;

use crate::error::EngineError;
use crate::requests::BatchEntry;
use crate::scheduler::{KvCommand, ScheduledRequest};

/// The logits rows one step produced, row-major `f32`, in scheduled order.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct StepLogits {
    /// `Σ rows × vocab_size` values.
    values: Vec<f32>,
    /// Values per row.
    vocab_size: usize,
    /// Rows of each scheduled request, in order.
    rows_per_request: Vec<usize>,
}

impl StepLogits {
    /// Splits the rows into one mutable block per scheduled request (empty for requests that
    /// do not sample in this step).
    pub fn per_request(&mut self) -> Vec<&mut [f32]> {
        let mut rest = self.values.as_mut_slice();
        let mut blocks = Vec::with_capacity(self.rows_per_request.len());
        for &rows in &self.rows_per_request {
            let (block, tail) = rest.split_at_mut(rows * self.vocab_size);
            blocks.push(block);
            rest = tail;
        }
        blocks
    }
}

/// What one target forward produced: the logits rows of the sampling requests and, when a tap
/// was asked for, the features of every fed token (`[fed tokens, width]`, in scheduled order).
pub(crate) struct StepForward<B: Backend> {
    /// The logits rows.
    pub logits: StepLogits,
    /// The tapped target features.
    pub features: Option<burn::tensor::Tensor<B, 2>>,
}

/// The target model and its KV cache.
pub(crate) struct ModelRunner<B: Backend> {
    model: LlamaModel<B>,
    kv_cache: KvCache<B>,
    vocab_size: usize,
}

impl<B: KernelBackend> ModelRunner<B> {
    /// A runner for `model` with `num_slots` KV cache slots.
    pub fn new(model: LlamaModel<B>, num_slots: usize) -> Self {
        let kv_cache = model.new_kv_cache(num_slots);
        let vocab_size = model.config().vocab_size;
        Self {
            model,
            kv_cache,
            vocab_size,
        }
    }

    /// The target model (a clone shares its weights).
    pub fn model(&self) -> &LlamaModel<B> {
        &self.model
    }

    /// The target's KV cache.
    pub fn kv_cache(&self) -> &KvCache<B> {
        &self.kv_cache
    }

    /// Applies the step's KV commands, then runs one forward over every request of `batch`,
    /// tapping `tap`, and returns the logits rows of the requests that sample.
    pub fn execute(
        &mut self,
        kv_commands: &[KvCommand],
        batch: &[BatchEntry<'_>],
        tap: &FeatureTap,
    ) -> Result<StepForward<B>, EngineError> {
        for command in kv_commands {
            match command {
                &KvCommand::Reset { slot } => self.kv_cache.reset(slot),
                &KvCommand::Truncate { slot, len } => self.kv_cache.truncate(slot, len),
                KvCommand::Gather { slot, start, rows } => {
                    self.kv_cache.gather(*slot, *start, rows)
                }
            }
        }
        let rows_per_request: Vec<usize> = batch
            .iter()
            .map(|entry| entry.work.num_logits_rows())
            .collect();
        let num_rows: usize = rows_per_request.iter().sum();
        if batch.is_empty() {
            return Ok(StepForward {
                logits: StepLogits {
                    values: Vec::new(),
                    vocab_size: self.vocab_size,
                    rows_per_request,
                },
                features: None,
            });
        }
        let batch = ForwardBatch {
            sequences: batch
                .iter()
                .map(|entry| {
                    let tokens = entry.work.fed_tokens(entry.request);
                    sequence_input(entry.work, tokens, entry.request.draft.tree())
                })
                .collect(),
        };
        let forward = self
            .model
            .forward(&batch, &mut self.kv_cache, tap)
            .map_err(|e| EngineError::Model(e.to_string()))?;
        let values = forward
            .logits
            .into_data()
            .convert::<f32>()
            .into_vec::<f32>()
            .map_err(|e| EngineError::Model(format!("reading the logits: {e:?}")))?;
        if values.len() != num_rows * self.vocab_size {
            return Err(EngineError::Model(format!(
                "the forward returned {} logits, expected {num_rows} rows of {}",
                values.len(),
                self.vocab_size
            )));
        }
        Ok(StepForward {
            logits: StepLogits {
                values,
                vocab_size: self.vocab_size,
                rows_per_request,
            },
            features: forward.features,
        })
    }
}

/// The model input of one scheduled request feeding `tokens` (known, then drafts forming
/// `tree` when it is one): its tokens from the KV length, logits for the last known token and
/// the drafts. Known tokens and chain drafts sit at consecutive positions
/// under causal attention; tree drafts sit at the root's position plus their depth and see the
/// known tokens and their own ancestors only.
fn sequence_input(
    work: &ScheduledRequest,
    tokens: Vec<u32>,
    tree: Option<&DraftTree>,
) -> SequenceInput {
    let len = tokens.len();
    let start = work.start_position;
    let (positions, mask) = match tree.filter(|_| work.num_draft_tokens > 0) {
        Some(tree) => {
            let root_row = work.num_known_tokens - 1;
            let positions = (start..start + root_row)
                .chain(tree.positions(start + root_row))
                .collect();
            (positions, Some(tree_mask(root_row, tree)))
        }
        None => ((start..start + len).collect(), None),
    };
    SequenceInput {
        slot: work.slot,
        tokens,
        positions,
        logits_rows: (len - work.num_logits_rows()..len).collect(),
        mask,
        history_mask: None,
    }
}

/// The mask among `root_row` known rows followed by the tree's rows: known rows are causal;
/// tree row `i` sees every known row and the tree rows of its ancestors and itself.
fn tree_mask(root_row: usize, tree: &DraftTree) -> Vec<Vec<bool>> {
    let nodes = tree.num_nodes();
    let block = tree.attention_mask();
    let n = root_row + nodes;
    let known = (0..root_row).map(|row| (0..n).map(|col| col <= row).collect());
    let drafts = block.chunks(nodes).map(|ancestors| {
        std::iter::repeat_n(true, root_row)
            .chain(ancestors.iter().copied())
            .collect()
    });
    known.chain(drafts).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn work(tokens: usize, start: usize, drafts: usize, samples: bool) -> ScheduledRequest {
        ScheduledRequest {
            request_id: 0,
            slot: 3,
            start_position: start,
            num_known_tokens: tokens - drafts,
            num_draft_tokens: drafts,
            samples,
            is_prefill: false,
        }
    }

    #[test]
    fn prefill_chunk_without_sampling_asks_for_no_logits() {
        let input = sequence_input(&work(3, 10, 0, false), vec![5, 6, 7], None);
        assert_eq!(input.slot, 3);
        assert_eq!(input.positions, vec![10, 11, 12]);
        assert!(input.logits_rows.is_empty());
        assert!(input.mask.is_none());
    }

    #[test]
    fn decode_with_drafts_asks_for_the_root_and_draft_rows() {
        let input = sequence_input(&work(3, 4, 2, true), vec![9, 20, 21], None);
        assert_eq!(input.positions, vec![4, 5, 6]);
        assert_eq!(input.logits_rows, vec![0, 1, 2]);
        let input = sequence_input(&work(4, 0, 0, true), vec![1, 2, 3, 4], None);
        assert_eq!(input.logits_rows, vec![3]);
    }

    #[test]
    fn tree_drafts_sit_at_their_depth_and_see_only_their_ancestors() {
        // Known tokens 5, 6 (root 6 at position 11); drafts 1 and 2 under the root, 3 under 2.
        let tree = DraftTree::from_parts(
            vec![6, 1, 2, 3],
            vec![None, Some(0), Some(0), Some(2)],
            vec![0.0; 4],
        )
        .unwrap();
        let input = sequence_input(&work(5, 10, 3, true), vec![5, 6, 1, 2, 3], Some(&tree));
        assert_eq!(input.positions, vec![10, 11, 12, 12, 13]);
        assert_eq!(input.logits_rows, vec![1, 2, 3, 4]);
        let t = true;
        let f = false;
        assert_eq!(
            input.mask.unwrap(),
            vec![
                vec![t, f, f, f, f],
                vec![t, t, f, f, f],
                vec![t, t, t, f, f],
                vec![t, t, f, t, f],
                vec![t, t, f, t, t],
            ]
        );
    }

    #[test]
    fn step_logits_split_per_request() {
        let mut logits = StepLogits {
            values: (0..6).map(|v| v as f32).collect(),
            vocab_size: 2,
            rows_per_request: vec![1, 0, 2],
        };
        let blocks = logits.per_request();
        assert_eq!(blocks.len(), 3);
        assert_eq!(blocks[0], &[0.0, 1.0]);
        assert!(blocks[1].is_empty());
        assert_eq!(blocks[2], &[2.0, 3.0, 4.0, 5.0]);
    }
}
