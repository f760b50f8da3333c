//! Speculative decoding in the engine: the configured drafter (EAGLE-1/EAGLE-3 head or n-gram
//! lookup, or a proposer injected by tests), the target features it needs, and the drafting
//! call made after every target forward.

use std::collections::HashSet;

use aquila_model_loader::backend::KernelBackend;
use aquila_model_loader::model::{FeatureTap, LlamaModel};
use aquila_spec_decode::eagle::EagleHead;
use aquila_spec_decode::ngram::{NgramConfig, NgramProposer};
use aquila_spec_decode::proposer::{
    Draft, EagleProposer, EagleProposerConfig, EagleTreeConfig, ProposeBatch, ProposeError,
    ProposeRequest, Proposer,
};
use aquila_spec_decode::tree::DraftTree;
use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

use crate::config::{SpeculativeConfig, SpeculativeMethod};
use crate::error::EngineError;
use crate::output::RequestId;

/// A proposer that reads no target features (n-gram lookup, replayed scripts), as
/// [`crate::Llm::with_proposer`] accepts it.
pub type FeaturelessProposer = Box<dyn Proposer<()> + Send>;

/// Lets a featureless proposer serve an engine whose forwards produce burn feature tensors.
struct Featureless(FeaturelessProposer);

impl<B: KernelBackend> Proposer<Tensor<B, 2>> for Featureless {
    fn num_speculative_tokens(&self) -> usize {
        self.0.num_speculative_tokens()
    }

    fn max_draft_depth(&self) -> usize {
        self.0.max_draft_depth()
    }

    fn needs_target_features(&self) -> bool {
        false
    }

    fn draft(
        &mut self,
        batch: &ProposeBatch<'_, Tensor<B, 2>>,
    ) -> Result<Vec<Draft>, ProposeError> {
        self.0
            .draft(&ProposeBatch::without_features(batch.requests))
    }

    fn release(&mut self, request_id: u64) {
        self.0.release(request_id);
    }
}

/// The engine's drafter: a proposer and the features every target forward must tap for it.
pub(crate) struct Drafter<B: Backend> {
    proposer: Box<dyn Proposer<Tensor<B, 2>> + Send>,
    tap: FeatureTap,
    /// Requests whose drafting failed: they decode without drafts until they end.
    disabled: HashSet<RequestId>,
}

impl<B: KernelBackend> Drafter<B> {
    /// Builds the drafter `config` describes for `target` on `device`, with draft state for
    /// `max_num_seqs` concurrent requests.
    pub fn from_config(
        config: &SpeculativeConfig,
        target: &LlamaModel<B>,
        device: &B::Device,
        max_num_seqs: usize,
    ) -> Result<Self, EngineError> {
        let k = config.num_speculative_tokens;
        match config.method {
            SpeculativeMethod::Ngram => {
                let ngram = NgramProposer::new(NgramConfig {
                    min_n: config.ngram_min,
                    max_n: config.ngram_max,
                    k,
                })
                .map_err(|e| EngineError::Config {
                    field: "speculative.ngram_min",
                    reason: e.to_string(),
                })?;
                Ok(Self::featureless(Box::new(ngram)))
            }
            SpeculativeMethod::Eagle | SpeculativeMethod::Eagle3 => {
                let dir = config.draft_model.as_ref().ok_or(EngineError::Config {
                    field: "speculative.draft_model",
                    reason: format!("method {} needs a draft model directory", config.method),
                })?;
                let draft_error = |reason: String| EngineError::DraftModel {
                    dir: dir.clone(),
                    reason,
                };
                let head = EagleHead::<B>::load(dir, target.config(), device)
                    .map_err(|e| draft_error(e.to_string()))?
                    .no_grad();
                let head_method = match head {
                    EagleHead::Eagle1(_) => SpeculativeMethod::Eagle,
                    EagleHead::Eagle3(_) => SpeculativeMethod::Eagle3,
                };
                if head_method != config.method {
                    return Err(draft_error(format!(
                        "the head is an {head_method} head, but speculative.method is {}",
                        config.method
                    )));
                }
                let proposer_config = match config.tree {
                    Some(tree) => EagleProposerConfig::tree(EagleTreeConfig {
                        depth: k,
                        top_k: tree.top_k,
                        num_nodes: tree.num_nodes,
                    }),
                    None => EagleProposerConfig::greedy(k),
                };
                let proposer = EagleProposer::new(head, target, proposer_config, max_num_seqs)
                    .map_err(|e| draft_error(e.to_string()))?;
                Ok(Self {
                    tap: proposer.feature_tap(),
                    proposer: Box::new(proposer),
                    disabled: HashSet::new(),
                })
            }
        }
    }

    /// A drafter around a proposer that reads no target features.
    pub fn featureless(proposer: FeaturelessProposer) -> Self {
        Self {
            proposer: Box::new(Featureless(proposer)),
            tap: FeatureTap::None,
            disabled: HashSet::new(),
        }
    }

    /// The features every target forward must tap.
    pub fn feature_tap(&self) -> &FeatureTap {
        &self.tap
    }

    /// Most draft tokens per request and step (`k`).
    pub fn num_speculative_tokens(&self) -> usize {
        self.proposer.num_speculative_tokens()
    }

    /// The deepest draft position (chains: `k`; trees: their depth).
    pub fn max_draft_depth(&self) -> usize {
        self.proposer.max_draft_depth()
    }

    /// Takes in the rows `requests` committed in the forward that tapped `features` and drafts
    /// each request's next chain or tree (one draft per request, in order). A failed drafting
    /// call changes no proposer state; its requests get no drafts now and are excluded from
    /// drafting until they end, so the engine keeps decoding them without speculation.
    pub fn draft(
        &mut self,
        features: Option<&Tensor<B, 2>>,
        requests: &[ProposeRequest<'_>],
    ) -> Vec<Draft> {
        let empty = Draft::empty;
        let live: Vec<ProposeRequest<'_>> = requests
            .iter()
            .filter(|r| !self.disabled.contains(&r.request_id))
            .copied()
            .collect();
        if live.is_empty() {
            return requests.iter().map(|_| empty()).collect();
        }
        let batch = ProposeBatch {
            features,
            requests: &live,
        };
        let drafts = match self.proposer.draft(&batch) {
            Ok(drafts) if drafts.len() == live.len() => drafts,
            Ok(drafts) => {
                self.disable(
                    &live,
                    &format!("{} drafts for {} requests", drafts.len(), live.len()),
                );
                return requests.iter().map(|_| empty()).collect();
            }
            Err(error) => {
                self.disable(&live, &error.to_string());
                return requests.iter().map(|_| empty()).collect();
            }
        };
        let mut drafts = live.iter().map(|r| r.request_id).zip(drafts);
        let mut next = drafts.next();
        requests
            .iter()
            .map(|request| match &next {
                Some((id, _)) if *id == request.request_id => {
                    let (_, draft) = next.take().expect("matched above");
                    next = drafts.next();
                    draft
                }
                _ => empty(),
            })
            .collect()
    }

    /// Frees the draft state of `id` (finished, aborted or preempted).
    pub fn release(&mut self, id: RequestId) {
        self.disabled.remove(&id);
        self.proposer.release(id);
    }

    /// Stops drafting for `requests` after a failed drafting call.
    fn disable(&mut self, requests: &[ProposeRequest<'_>], reason: &str) {
        tracing::warn!(
            requests = requests.len(),
            reason,
            "drafting failed; the requests continue without speculation"
        );
        for request in requests {
            self.proposer.release(request.request_id);
            self.disabled.insert(request.request_id);
        }
    }
}

/// A draft as the engine keeps it until the request's next step.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct StoredDraft {
    /// The draft tokens after the root (tree: its nodes after the root, in node order).
    pub tokens: Vec<u32>,
    /// The tree of the root and `tokens`; `None` for a chain.
    pub tree: Option<DraftTree>,
    /// The `q` rows the tokens were sampled from (chain: one per token; tree: one per node,
    /// the root's first), or `None` for one-hot.
    pub probs: Option<Vec<f32>>,
}

impl StoredDraft {
    /// Checks a proposer's draft for a request whose last token (the root) is `root`: `q`
    /// rows must cover every token, and a tree must grow from `root`.
    pub fn new(draft: Draft, root: u32, vocab_size: usize) -> Result<Self, &'static str> {
        let (tokens, tree, probs, rows) = match draft {
            Draft::Chain(chain) => {
                let rows = chain.tokens.len();
                (chain.tokens, None, chain.probs, rows)
            }
            Draft::Tree { tree, probs } => {
                if tree.tokens()[0] != root {
                    return Err("the tree's root is not the request's last token");
                }
                let rows = tree.num_nodes();
                (tree.tokens()[1..].to_vec(), Some(tree), probs, rows)
            }
        };
        if probs.as_ref().is_some_and(|q| q.len() != rows * vocab_size) {
            return Err("the draft's q rows do not match its tokens");
        }
        if tokens.is_empty() {
            return Ok(Self::default());
        }
        Ok(Self {
            tokens,
            tree,
            probs,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aquila_spec_decode::proposer::{ChainDraft, ReplayProposer};
    use burn::backend::Flex;

    fn chain(tokens: &[u32]) -> Draft {
        Draft::Chain(ChainDraft::deterministic(tokens.to_vec()))
    }

    #[test]
    fn stored_drafts_check_the_root_and_the_q_rows() {
        let tree = DraftTree::from_parts(vec![5, 1, 2], vec![None, Some(0), Some(1)], vec![0.0; 3])
            .unwrap();
        let as_tree = |probs| Draft::Tree {
            tree: tree.clone(),
            probs,
        };
        let stored = StoredDraft::new(as_tree(None), 5, 4).unwrap();
        assert_eq!(stored.tokens, vec![1, 2]);
        assert_eq!(stored.tree.as_ref(), Some(&tree));
        assert!(StoredDraft::new(as_tree(None), 6, 4).is_err(), "wrong root");
        assert!(StoredDraft::new(as_tree(Some(vec![0.25; 12])), 5, 4).is_ok());
        assert!(
            StoredDraft::new(as_tree(Some(vec![0.25; 8])), 5, 4).is_err(),
            "a tree needs a q row per node"
        );
        let sampled = Draft::Chain(ChainDraft {
            tokens: vec![1],
            probs: Some(vec![0.5; 3]),
        });
        assert!(StoredDraft::new(sampled, 5, 4).is_err());
        assert_eq!(
            StoredDraft::new(chain(&[]), 5, 4).unwrap(),
            StoredDraft::default()
        );
    }

    fn request(id: u64, tokens: &[u32]) -> ProposeRequest<'_> {
        ProposeRequest {
            request_id: id,
            tokens,
            first_new_position: 0,
            feature_rows: &[],
            max_draft_tokens: 8,
        }
    }

    #[test]
    fn featureless_proposers_draft_without_a_tap() {
        let replay = ReplayProposer::new(2, vec![vec![1, 2, 3, 4, 5]]);
        let mut drafter = Drafter::<Flex>::featureless(Box::new(replay));
        assert_eq!(drafter.feature_tap(), &FeatureTap::None);
        assert_eq!(drafter.num_speculative_tokens(), 2);
        let drafts = drafter.draft(None, &[request(0, &[1, 2]), request(1, &[7, 7])]);
        assert_eq!(drafts, vec![chain(&[3, 4]), Draft::empty()]);
    }

    #[test]
    fn a_failed_call_disables_drafting_for_its_requests_only_until_release() {
        let replay = ReplayProposer::new(2, vec![vec![1, 2, 3, 4, 5]]);
        let mut drafter = Drafter::<Flex>::featureless(Box::new(replay));
        // A request without a committed row is rejected by the proposer.
        let drafts = drafter.draft(None, &[request(0, &[1])]);
        assert_eq!(drafts, vec![Draft::empty()]);
        assert_eq!(
            drafter.draft(None, &[request(0, &[1, 2])]),
            vec![Draft::empty()]
        );
        assert_eq!(
            drafter.draft(None, &[request(1, &[1, 2])]),
            vec![chain(&[3, 4])]
        );
        drafter.release(0);
        assert_eq!(
            drafter.draft(None, &[request(0, &[1, 2])]),
            vec![chain(&[3, 4])]
        );
    }
}
