//! Speculative decoding in the engine: the configured drafter (EAGLE-1/EAGLE-3 head, draft
//! language model, n-gram lookup, or a custom proposer), the target features it needs, and the
//! drafting call made after every target forward.

use std::collections::HashSet;
use std::path::Path;

use aquila_model_loader::backend::KernelBackend;
use aquila_model_loader::model::{FeatureTap, LlamaModel, WeightStorage};
use aquila_model_loader::quant::WeightFormat;
use aquila_spec_decode::eagle::EagleHead;
use aquila_spec_decode::ngram::{NgramConfig, NgramProposer};
use aquila_spec_decode::proposer::{
    Draft, DraftModelProposer, DraftModelProposerConfig, DraftSampling, EagleProposer,
    EagleProposerConfig, EagleTreeConfig, LookupAssisted, ProposeBatch, ProposeError,
    ProposeRequest, Proposer, TargetKeyValues,
};
use burn::module::Module;
use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

use crate::config::{
    DraftModelDrafter, DraftPick, NgramDrafter, SpeculativeConfig, SpeculativeMethod,
};
use crate::error::EngineError;
use crate::output::RequestId;

/// A proposer that reads no target features (replayed scripts, lookups), as
/// [`crate::Llm::with_proposer`] accepts it.
pub type FeaturelessProposer = Box<dyn Proposer<()> + Send>;

/// Lets a custom featureless proposer serve an engine whose forwards produce burn feature
/// tensors.
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

/// Where a drafter's weights live: the target's device, and the target's weight format, in
/// which an EAGLE head's or a draft model's projections and lm_head are stored on backends
/// whose kernels do not read packed weights, unless its configuration names a format
/// ([`crate::EagleDrafter::weights`], [`crate::DraftModelDrafter::weights`]); and the
/// target's directory (a draft model loaded from it is the target itself).
#[derive(Debug)]
pub(crate) struct DraftPlacement<'a, B: Backend> {
    /// The device.
    pub device: &'a B::Device,
    /// The target's weight format.
    pub target_weights: WeightFormat,
    /// The target's directory.
    pub target_dir: &'a Path,
}

impl<B: KernelBackend> DraftPlacement<'_, B> {
    /// The format of a drafter's weights: `configured`, else `packed` where the kernels read
    /// packed weights (a drafter reads its weights once per draft token), else the target's.
    fn weights(&self, configured: Option<WeightFormat>, packed: WeightFormat) -> WeightFormat {
        configured.unwrap_or(if B::PACKED_WEIGHTS {
            packed
        } else {
            self.target_weights
        })
    }
}

/// The packed format of an EAGLE head's weights by default: trained `f32` values, whose
/// drafts lose acceptance at four bits.
const HEAD_WEIGHTS: WeightFormat = WeightFormat::Q8_0;

/// The packed format of a draft model's weights by default: 4-bit layers (a Q4_1 file's own
/// values, exactly) beside a Q8_0 lm_head, the fewest bytes per draft token.
const DRAFT_MODEL_WEIGHTS: WeightFormat = WeightFormat::Q4_1;

impl<B: KernelBackend> Drafter<B> {
    /// Builds the drafter `config` describes for `target` where `placement` says, with draft
    /// state for `max_num_seqs` concurrent requests; `custom` is the proposer of
    /// [`SpeculativeMethod::Custom`].
    pub fn from_config(
        config: &SpeculativeConfig,
        custom: Option<FeaturelessProposer>,
        target: &LlamaModel<B>,
        placement: DraftPlacement<'_, B>,
        max_num_seqs: usize,
    ) -> Result<Self, EngineError> {
        let device = placement.device;
        let k = config.num_speculative_tokens;
        match (&config.method, custom) {
            (SpeculativeMethod::Custom, Some(proposer)) => {
                let depth = proposer.max_draft_depth();
                if depth != k {
                    return Err(EngineError::Config {
                        field: "speculative.num_speculative_tokens",
                        reason: format!("{k}, but the given proposer drafts {depth} deep"),
                    });
                }
                Ok(Self::custom(proposer))
            }
            (SpeculativeMethod::Custom, None) => Err(EngineError::Config {
                field: "speculative.method",
                reason: "method custom drafts with a proposer given to Llm::with_proposer".into(),
            }),
            (method, Some(_)) => Err(EngineError::Config {
                field: "speculative.method",
                reason: format!("a proposer was given, but speculative.method is {method}"),
            }),
            (SpeculativeMethod::Ngram(ngram), None) => {
                let ngram = lookup_proposer(ngram, k, "speculative.ngram")?;
                Ok(Self {
                    proposer: Box::new(ngram),
                    tap: FeatureTap::None,
                    disabled: HashSet::new(),
                })
            }
            (SpeculativeMethod::DraftModel(drafter), None) => {
                let proposer = draft_model_proposer(drafter, k, target, &placement, max_num_seqs)?;
                Ok(Self {
                    proposer: Box::new(proposer),
                    tap: FeatureTap::None,
                    disabled: HashSet::new(),
                })
            }
            (SpeculativeMethod::Eagle(eagle) | SpeculativeMethod::Eagle3(eagle), None) => {
                let dir = &eagle.draft_model;
                let draft_error = |reason: String| EngineError::DraftModel {
                    dir: dir.clone(),
                    reason,
                };
                let weights = placement.weights(eagle.weights, HEAD_WEIGHTS);
                let storage = WeightStorage::for_backend::<B>(weights);
                let head = EagleHead::<B>::load_stored(dir, target.config(), device, storage)
                    .map_err(|e| draft_error(e.to_string()))?
                    .no_grad();
                head.back_with_huge_pages();
                let head_method = match head {
                    EagleHead::Eagle1(_) => "eagle",
                    EagleHead::Eagle3(_) => "eagle3",
                };
                if head_method != config.method.name() {
                    return Err(draft_error(format!(
                        "the head is an {head_method} head, but speculative.method is {}",
                        config.method
                    )));
                }
                let proposer_config = match eagle.tree {
                    Some(tree) => EagleProposerConfig::tree(EagleTreeConfig {
                        depth: k,
                        top_k: tree.top_k,
                        num_nodes: tree.num_nodes,
                    }),
                    None => EagleProposerConfig {
                        sampling: draft_sampling(eagle.draft_pick),
                        ..EagleProposerConfig::greedy(k)
                    },
                };
                // A head drafting through the target's lm_head runs it once per draft token:
                // it gets its own copy in the head's format (a quarter of an f32 lm_head's
                // bytes in Q8_0), where the target's is stored wider.
                let draft_target = if head.uses_target_lm_head() {
                    &target.with_lm_head_packed(weights)
                } else {
                    target
                };
                let proposer =
                    EagleProposer::new(head, draft_target, proposer_config, max_num_seqs)
                        .map_err(|e| draft_error(e.to_string()))?;
                let tap = proposer.feature_tap();
                let proposer: Box<dyn Proposer<Tensor<B, 2>> + Send> = match eagle.lookup {
                    Some(lookup) => Box::new(LookupAssisted::new(
                        proposer,
                        lookup_proposer(&lookup, k, "speculative.method.lookup")?,
                    )),
                    None => Box::new(proposer),
                };
                Ok(Self {
                    tap,
                    proposer,
                    disabled: HashSet::new(),
                })
            }
        }
    }

    /// A drafter around a custom proposer that reads no target features.
    pub fn custom(proposer: FeaturelessProposer) -> Self {
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

    /// Whether the drafting calls should offer the target's KV cache.
    pub fn reads_target_kv(&self) -> bool {
        self.proposer.reads_target_kv()
    }

    /// Most draft tokens per request and step (`k`).
    pub fn num_speculative_tokens(&self) -> usize {
        self.proposer.num_speculative_tokens()
    }

    /// The deepest draft position (chains: `k`; trees: their depth).
    pub fn max_draft_depth(&self) -> usize {
        self.proposer.max_draft_depth()
    }

    /// Takes in the rows `requests` committed in the forward that tapped `features` (or
    /// copies them from `target_kv`, the target's KV cache, for a proposer that reads it) and
    /// drafts each request's next chain or tree (one draft per request, in order). A failed
    /// drafting call changes no proposer state; its requests get no drafts now and are
    /// excluded from drafting until they end, so the engine keeps decoding them without
    /// speculation.
    pub fn draft(
        &mut self,
        features: Option<&Tensor<B, 2>>,
        target_kv: Option<&dyn TargetKeyValues<Tensor<B, 2>>>,
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
            target_kv,
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

/// How drafts are picked for requests that sample, as [`DraftPick`] asks.
fn draft_sampling(pick: DraftPick) -> DraftSampling {
    match pick {
        DraftPick::Sample => DraftSampling::FollowRequests,
        DraftPick::Argmax => DraftSampling::Greedy,
    }
}

/// Loads the draft model `drafter` names where `placement` says and builds its proposer of
/// chains of `k` for `target`, with draft-cache room for `max_num_seqs` requests.
fn draft_model_proposer<B: KernelBackend>(
    drafter: &DraftModelDrafter,
    k: usize,
    target: &LlamaModel<B>,
    placement: &DraftPlacement<'_, B>,
    max_num_seqs: usize,
) -> Result<DraftModelProposer<B>, EngineError> {
    let draft_error = |reason: String| EngineError::DraftModel {
        dir: drafter.model.clone(),
        reason,
    };
    let weights = placement.weights(drafter.weights, DRAFT_MODEL_WEIGHTS);
    let model = LlamaModel::<B>::load_in_format(&drafter.model, weights, placement.device)
        .map_err(|e| draft_error(e.to_string()))?
        .no_grad();
    B::back_with_huge_pages(&model);
    let is_the_target = same_directory(&drafter.model, placement.target_dir);
    let config = DraftModelProposerConfig {
        sampling: draft_sampling(drafter.draft_pick),
        copies_target_cache: drafter.copies_target_cache.unwrap_or(is_the_target),
        ..DraftModelProposerConfig::greedy(k)
    };
    DraftModelProposer::new(model, target.config(), config, max_num_seqs)
        .map_err(|e| draft_error(e.to_string()))
}

/// Whether `a` and `b` name one directory (compared as given where either cannot be resolved).
fn same_directory(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// The prompt lookup of `ngram`'s settings drafting up to `k` tokens; an invalid setting is a
/// configuration error of `field`.
fn lookup_proposer(
    ngram: &NgramDrafter,
    k: usize,
    field: &'static str,
) -> Result<NgramProposer, EngineError> {
    NgramProposer::new(NgramConfig {
        min_n: ngram.min_n,
        max_n: ngram.max_n,
        k,
    })
    .map_err(|e| EngineError::Config {
        field,
        reason: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use aquila_spec_decode::proposer::{ChainDraft, ReplayProposer};
    use burn::backend::Flex;

    fn chain(tokens: &[u32]) -> Draft {
        Draft::Chain(ChainDraft::deterministic(tokens.to_vec()))
    }

    fn request(id: u64, tokens: &[u32]) -> ProposeRequest<'_> {
        ProposeRequest {
            request_id: id,
            tokens,
            first_new_position: 0,
            feature_rows: &[],
            max_draft_tokens: 8,
            stop: None,
            temperature: 0.0,
            seed: 0,
            drafting_suspended: false,
        }
    }

    #[test]
    fn custom_proposers_draft_without_a_tap() {
        let replay = ReplayProposer::new(2, vec![vec![1, 2, 3, 4, 5]]);
        let mut drafter = Drafter::<Flex>::custom(Box::new(replay));
        assert_eq!(drafter.feature_tap(), &FeatureTap::None);
        assert_eq!(drafter.num_speculative_tokens(), 2);
        let drafts = drafter.draft(None, None, &[request(0, &[1, 2]), request(1, &[7, 7])]);
        assert_eq!(drafts, vec![chain(&[3, 4]), Draft::empty()]);
    }

    #[test]
    fn a_failed_call_disables_drafting_for_its_requests_only_until_release() {
        let replay = ReplayProposer::new(2, vec![vec![1, 2, 3, 4, 5]]);
        let mut drafter = Drafter::<Flex>::custom(Box::new(replay));
        // A request without a committed row is rejected by the proposer.
        let drafts = drafter.draft(None, None, &[request(0, &[1])]);
        assert_eq!(drafts, vec![Draft::empty()]);
        assert_eq!(
            drafter.draft(None, None, &[request(0, &[1, 2])]),
            vec![Draft::empty()]
        );
        assert_eq!(
            drafter.draft(None, None, &[request(1, &[1, 2])]),
            vec![chain(&[3, 4])]
        );
        drafter.release(0);
        assert_eq!(
            drafter.draft(None, None, &[request(0, &[1, 2])]),
            vec![chain(&[3, 4])]
        );
    }
}
