//! Turns each request's target logits rows into emitted tokens.
//!
//! Every decode goes through spec-decode's [`RejectionSampler`]: a request feeds its root token
//! plus its draft tokens, and the sampler verifies the drafts against the rows and appends the
//! bonus or recovered token. Without drafts that is one row sampled through the request's own
//! pipeline (penalties, temperature, min-p, top-k, top-p) with its own random stream: one code
//! path for plain and speculative decoding.
//!
//! Before verification, EOS and stop token ids are masked in rows whose position comes before
//! `min_tokens`, and the requested log-probabilities are read from the raw rows.

use aquila_spec_decode::rejection::{
    ChainRequest, DraftProbs, RejectionError, RejectionSampler, TargetRows, TreeRequest,
    VerifyOutcome,
};
use aquila_spec_decode::sampling::{log_sum_exp, top_logprobs, RequestRng, SamplingConfig};
use aquila_spec_decode::tree::DraftTree;

use crate::output::{PositionLogprobs, TokenLogprob};

/// One request's rows and sampling state.
pub(crate) struct VerifyInput<'a> {
    /// `(1 + drafts.len()) × vocab_size` raw logits: the root's row, then each draft's (tree
    /// drafts in node order).
    pub rows: &'a mut [f32],
    /// The request's prompt tokens.
    pub prompt: &'a [u32],
    /// The request's output tokens so far (the root is the last one, or the last prompt token
    /// right after prefill).
    pub output: &'a [u32],
    /// Draft tokens fed after the root.
    pub drafts: &'a [u32],
    /// The tree of the root and `drafts`, or `None` for a chain.
    pub tree: Option<&'a DraftTree>,
    /// The distributions the drafts were sampled from (chain: `drafts.len()` rows; tree: one
    /// row per node, the root's included), or one-hot.
    pub draft_probs: DraftProbs<'a>,
    /// The request's sampling pipeline.
    pub config: &'a SamplingConfig,
    /// The request's random stream.
    pub rng: &'a mut RequestRng,
    /// Tokens that may not be emitted from rows of depth below `suppressed_rows` (min_tokens).
    pub suppressed_tokens: &'a [u32],
    /// Row depth (root 0, then the draft's depth) below which `suppressed_tokens` are masked.
    pub suppressed_rows: usize,
    /// Top log-probabilities to return per emitted token, if any.
    pub num_logprobs: Option<usize>,
}

/// What verification produced for one request.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Verified {
    /// Emitted tokens and the rows kept in the KV cache.
    pub outcome: VerifyOutcome,
    /// Log-probabilities of each emitted token, when requested.
    pub logprobs: Option<Vec<PositionLogprobs>>,
}

/// Verifies batches of requests against one vocabulary.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Verifier {
    sampler: RejectionSampler,
}

impl Verifier {
    /// A verifier for rows of `vocab_size` logits.
    pub fn new(vocab_size: usize) -> Result<Self, RejectionError> {
        Ok(Self {
            sampler: RejectionSampler::new(vocab_size)?,
        })
    }

    /// Verifies every input (chains and trees, each kind in parallel); outcomes are in input
    /// order.
    pub fn verify(&self, inputs: &mut [VerifyInput<'_>]) -> Result<Vec<Verified>, RejectionError> {
        let vocab_size = self.sampler.vocab_size();
        let mut top = Vec::with_capacity(inputs.len());
        let mut chains = Vec::new();
        let mut trees = Vec::new();
        let mut is_tree = Vec::with_capacity(inputs.len());
        for input in inputs.iter_mut() {
            top.push(
                input
                    .num_logprobs
                    .map(|n| raw_top_logprobs(input.rows, vocab_size, n)),
            );
            suppress(input, vocab_size);
            let target = TargetRows::Logits {
                logits: &*input.rows,
                prompt: input.prompt,
                output: input.output,
            };
            is_tree.push(input.tree.is_some());
            match input.tree {
                Some(tree) => trees.push(TreeRequest {
                    config: input.config,
                    target,
                    tree,
                    draft_probs: input.draft_probs,
                    rng: &mut *input.rng,
                }),
                None => chains.push(ChainRequest {
                    config: input.config,
                    target,
                    draft_tokens: input.drafts,
                    draft_probs: input.draft_probs,
                    rng: &mut *input.rng,
                }),
            }
        }
        let mut chain_outcomes = self.sampler.verify_chain_batch(chains)?.into_iter();
        let mut tree_outcomes = self.sampler.verify_tree_batch(trees)?.into_iter();
        let outcomes = is_tree.into_iter().map(|tree| {
            let outcomes = if tree {
                &mut tree_outcomes
            } else {
                &mut chain_outcomes
            };
            outcomes.next().expect("one outcome per request")
        });
        Ok(outcomes
            .into_iter()
            .zip(top)
            .zip(inputs.iter())
            .map(|((outcome, top), input)| Verified {
                logprobs: top.map(|top| emitted_logprobs(&outcome, input.rows, vocab_size, top)),
                outcome,
            })
            .collect())
    }
}

/// Masks the input's suppressed tokens in its rows of depth below `suppressed_rows`.
fn suppress(input: &mut VerifyInput<'_>, vocab_size: usize) {
    if input.suppressed_rows == 0 || input.suppressed_tokens.is_empty() {
        return;
    }
    let tree = input.tree;
    let depth = |row: usize| tree.map_or(row, |tree| tree.depth(row));
    for (row, logits) in input.rows.chunks_mut(vocab_size).enumerate() {
        if depth(row) >= input.suppressed_rows {
            continue;
        }
        for &token in input.suppressed_tokens {
            if let Some(logit) = logits.get_mut(token as usize) {
                *logit = f32::NEG_INFINITY;
            }
        }
    }
}

/// Per row of `rows`: its log-normalizer and its top `n` tokens with log-probabilities, read
/// from the raw logits (before masking).
fn raw_top_logprobs(rows: &[f32], vocab_size: usize, n: usize) -> Vec<(f32, Vec<(u32, f32)>)> {
    rows.chunks(vocab_size)
        .map(|row| (log_sum_exp(row), top_logprobs(row, n)))
        .collect()
}

/// The log-probabilities of the tokens `outcome` emitted: token `i` was sampled from row
/// `path[i]`. A token is only emitted where it was not masked, so its logit in `rows` is raw.
fn emitted_logprobs(
    outcome: &VerifyOutcome,
    rows: &[f32],
    vocab_size: usize,
    top: Vec<(f32, Vec<(u32, f32)>)>,
) -> Vec<PositionLogprobs> {
    outcome
        .tokens
        .iter()
        .zip(&outcome.path)
        .map(|(&token_id, &row)| {
            let (normalizer, top) = &top[row];
            PositionLogprobs {
                sampled: TokenLogprob {
                    token_id,
                    logprob: rows[row * vocab_size + token_id as usize] - normalizer,
                },
                top: top
                    .iter()
                    .map(|&(token_id, logprob)| TokenLogprob { token_id, logprob })
                    .collect(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const VOCAB: usize = 4;

    fn input<'a>(
        rows: &'a mut [f32],
        drafts: &'a [u32],
        config: &'a SamplingConfig,
        rng: &'a mut RequestRng,
    ) -> VerifyInput<'a> {
        VerifyInput {
            rows,
            prompt: &[0],
            output: &[],
            drafts,
            tree: None,
            draft_probs: DraftProbs::OneHot,
            config,
            rng,
            suppressed_tokens: &[],
            suppressed_rows: 0,
            num_logprobs: None,
        }
    }

    #[test]
    fn one_row_without_drafts_emits_the_argmax_for_greedy_requests() {
        let verifier = Verifier::new(VOCAB).unwrap();
        let config = SamplingConfig::greedy();
        let mut rng = RequestRng::new(0);
        let mut rows = vec![0.0, 3.0, 1.0, 2.0];
        let out = verifier
            .verify(&mut [input(&mut rows, &[], &config, &mut rng)])
            .unwrap();
        assert_eq!(out[0].outcome.tokens, vec![1]);
        assert_eq!(out[0].outcome.path, vec![0]);
        assert_eq!(out[0].logprobs, None);
    }

    #[test]
    fn drafts_are_accepted_until_the_first_mismatch() {
        let verifier = Verifier::new(VOCAB).unwrap();
        let config = SamplingConfig::greedy();
        let mut rng = RequestRng::new(0);
        let mut rows = vec![
            0.0, 0.0, 5.0, 0.0, // root predicts 2
            0.0, 0.0, 0.0, 5.0, // after 2 predicts 3
            5.0, 0.0, 0.0, 0.0, // after 1 (rejected) — never reached
        ];
        let out = verifier
            .verify(&mut [input(&mut rows, &[2, 1], &config, &mut rng)])
            .unwrap();
        assert_eq!(out[0].outcome.tokens, vec![2, 3]);
        assert_eq!(out[0].outcome.num_accepted(), 1);
    }

    #[test]
    fn suppressed_tokens_are_masked_only_in_early_rows() {
        let verifier = Verifier::new(VOCAB).unwrap();
        let config = SamplingConfig::greedy();
        let mut rng = RequestRng::new(0);
        let mut rows = vec![0.0, 1.0, 9.0, 0.0];
        let mut masked = input(&mut rows, &[], &config, &mut rng);
        masked.suppressed_tokens = &[2];
        masked.suppressed_rows = 1;
        masked.num_logprobs = Some(2);
        let out = verifier.verify(&mut [masked]).unwrap();
        assert_eq!(out[0].outcome.tokens, vec![1], "EOS-like token 2 is masked");
        let logprobs = out[0].logprobs.as_ref().unwrap();
        let raw = [0.0f32, 1.0, 9.0, 0.0];
        let normalizer = log_sum_exp(&raw);
        assert!((logprobs[0].sampled.logprob - (1.0 - normalizer)).abs() < 1e-6);
        let top: Vec<u32> = logprobs[0].top.iter().map(|t| t.token_id).collect();
        assert_eq!(top, vec![2, 1], "log-probabilities come from the raw row");
    }

    #[test]
    fn trees_accept_the_path_the_argmax_follows_and_mask_by_depth() {
        let verifier = Verifier::new(VOCAB).unwrap();
        let config = SamplingConfig::greedy();
        let mut rng = RequestRng::new(0);
        // Root 0 with children 1 and 2; node 3 (token 3) under node 2.
        let tree = DraftTree::from_parts(
            vec![0, 1, 2, 3],
            vec![None, Some(0), Some(0), Some(2)],
            vec![0.0, -1.0, -1.0, -2.0],
        )
        .unwrap();
        let mut rows = vec![
            0.0, 0.0, 5.0, 0.0, // root predicts 2: node 2
            9.0, 0.0, 0.0, 0.0, // after node 1 — never reached
            0.0, 0.0, 0.0, 5.0, // after node 2 predicts 3: node 3
            0.0, 7.0, 6.0, 0.0, // after node 3 predicts 1, masked by depth: 2
        ];
        let mut input = input(&mut rows, &[1, 2, 3], &config, &mut rng);
        input.tree = Some(&tree);
        input.suppressed_tokens = &[1];
        input.suppressed_rows = 4; // every row is shallower than 4
        let out = verifier.verify(&mut [input]).unwrap();
        assert_eq!(out[0].outcome.path, vec![0, 2, 3]);
        assert_eq!(out[0].outcome.tokens, vec![2, 3, 2]);
    }

    #[test]
    fn seeded_sampling_depends_only_on_the_request_stream() {
        let verifier = Verifier::new(VOCAB).unwrap();
        let config = SamplingConfig::default();
        let sample = |seed: u64, with_neighbour: bool| {
            let mut rng = RequestRng::new(seed);
            let mut other_rng = RequestRng::new(99);
            let mut rows = vec![1.0, 1.0, 1.0, 1.0];
            let mut other_rows = vec![1.0, 2.0, 3.0, 4.0];
            let mut inputs = Vec::new();
            if with_neighbour {
                inputs.push(input(&mut other_rows, &[], &config, &mut other_rng));
            }
            inputs.push(input(&mut rows, &[], &config, &mut rng));
            let out = verifier.verify(&mut inputs).unwrap();
            out.last().unwrap().outcome.tokens[0]
        };
        for seed in 0..20 {
            assert_eq!(sample(seed, false), sample(seed, true));
        }
    }
}
