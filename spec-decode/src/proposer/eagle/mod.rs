//! [`EagleProposer`]: chains or EAGLE-2 dynamic trees of draft tokens from an EAGLE-1 or
//! EAGLE-3 head.
//!
//! Each call takes in the rows every request committed in the last target forward and drafts
//! its next chain (or tree, see the `tree` module):
//!
//! 1. **Committed rows, from target features.** Draft row `t` consumes the pair
//!    `(h_t, x_{t+1})` at RoPE position `t`: the target feature of committed row `t` and the
//!    token after it, so the input tokens are the committed tokens shifted left by one with the
//!    new root appended (`tokens[first_new_position + 1..]`). One batched head forward over
//!    all these rows appends them to the request's draft KV cache, which therefore only ever
//!    holds committed rows computed from target features.
//! 2. **Chain.** The last committed row's output gives draft token 1. Step `j` then feeds
//!    token `j` with the previous output recycled as hidden input (EAGLE-1: `f̂`; EAGLE-3: the
//!    pre-norm output, without `fc`) at position `last + j - 1`, batched over the requests still
//!    drafting, until each has its `k` tokens, or until its [`super::ChainStop`] ends the chain
//!    (the head's probability of each token is its confidence). With an [`EagleTreeConfig`]
//!    this step grows an EAGLE-2 tree instead.
//! 3. **Rollback.** The speculative rows of step 2 are cut from the draft cache, so the next
//!    round starts from committed rows only and recomputes the accepted ones from target
//!    features.
//!
//! A request that drafts nothing in a call keeps its committed rows' features aside instead of
//! running them through the head (the `deferred` module); they go through step 1 with its next
//! draft, or once enough of them have piled up.

mod config;
mod deferred;
mod tree;

pub use config::{EagleProposerConfig, EagleTreeConfig};

use aquila_model_loader::backend::KernelBackend;
use aquila_model_loader::model::{FeatureTap, ForwardBatch, KvCache, LlamaModel, SequenceInput};
use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor, TensorData};

use super::chain_growth::ChainGrowth;
use super::pick::{self, Pick};
use super::slots::{RequestState, SlotTable};
use super::{ChainDraft, Draft, ProposeBatch, ProposeError, ProposeRequest, Proposer};
use crate::eagle::{EagleError, EagleHead};
use crate::sampling::SamplingError;
use deferred::{DeferredRows, MAX_DEFERRED_ROWS};

/// Drafts chains of tokens (or EAGLE-2 trees) with an EAGLE head, keeping one draft KV-cache
/// slot per request.
///
/// The proposer holds a clone of the target model for the embeddings and lm_head the head
/// shares with it; cloning a burn module only adds references to its weights.
#[derive(Debug)]
pub struct EagleProposer<B: Backend> {
    head: EagleHead<B>,
    target: LlamaModel<B>,
    config: EagleProposerConfig,
    cache: KvCache<B>,
    slots: SlotTable,
    deferred: DeferredRows<B>,
}

/// Where one request's rows go this step, decided before anything changes.
#[derive(Debug, Clone, Copy)]
struct Planned {
    slot: usize,
    is_new: bool,
    /// Rows in the request's draft cache before the call.
    cached: usize,
    /// Whether its deferred and new rows go through the head in this call (always when it
    /// drafts); otherwise they are deferred.
    takes_in: bool,
    /// Draft steps to run: chain tokens, or tree depth (after the proposer's `k` or tree depth,
    /// the request's budget and the context limit).
    budget: usize,
}

impl<B: KernelBackend> EagleProposer<B> {
    /// A proposer drafting with `head` for `target`, with draft-cache room for `num_slots`
    /// concurrent requests (the engine's maximum number of running requests). A tree's `top_k`
    /// must not exceed the head's draft vocabulary.
    pub fn new(
        head: EagleHead<B>,
        target: &LlamaModel<B>,
        config: EagleProposerConfig,
        num_slots: usize,
    ) -> Result<Self, EagleError> {
        config.validate()?;
        if num_slots == 0 {
            return Err(SamplingError {
                name: "num_slots",
                expected: "at least 1",
                value: 0.0,
            }
            .into());
        }
        head.check_target(target.config())?;
        if let Some(tree) = config.tree {
            if tree.top_k > head.vocab_map().draft_vocab_size() {
                return Err(SamplingError {
                    name: "tree.top_k",
                    expected: "at most the head's draft vocabulary size",
                    value: tree.top_k as f32,
                }
                .into());
            }
        }
        Ok(Self {
            cache: head.new_kv_cache(num_slots),
            head,
            target: target.clone(),
            config,
            slots: SlotTable::new(num_slots),
            deferred: DeferredRows::default(),
        })
    }

    /// The target features the engine must tap in every target forward and pass to
    /// [`Proposer::draft`].
    pub fn feature_tap(&self) -> FeatureTap {
        self.head.feature_tap()
    }

    /// The draft head.
    pub fn head(&self) -> &EagleHead<B> {
        &self.head
    }

    /// The proposer's settings.
    pub fn config(&self) -> &EagleProposerConfig {
        &self.config
    }

    /// Number of requests that hold a draft-cache slot.
    pub fn num_requests(&self) -> usize {
        self.slots.len()
    }

    /// Number of draft-cache slots.
    pub fn num_slots(&self) -> usize {
        self.slots.capacity()
    }

    /// Committed rows of `request_id` the proposer holds (in its draft KV cache, or deferred
    /// until it drafts), or `None` for a request the proposer does not know.
    pub fn cached_rows(&self, request_id: u64) -> Option<usize> {
        self.slots
            .get(request_id)
            .map(|state| self.cache.len(state.slot) + self.deferred.len(request_id))
    }

    /// Committed rows of `request_id` deferred until it drafts (not yet in the draft KV cache).
    pub fn deferred_rows(&self, request_id: u64) -> usize {
        self.deferred.len(request_id)
    }

    /// Decides each request's slot and draft budget and checks that its rows continue its
    /// cache; changes nothing.
    fn plan(&self, requests: &[ProposeRequest<'_>]) -> Result<Vec<Planned>, ProposeError> {
        let target = self.target.config();
        let mut free = self.slots.free_slots();
        requests
            .iter()
            .map(|request| {
                let request_id = request.request_id;
                let (slot, is_new) = self.slots.place(request_id, &mut free)?;
                let cached = if is_new { 0 } else { self.cache.len(slot) };
                let held = cached
                    + if is_new {
                        0
                    } else {
                        self.deferred.len(request_id)
                    };
                if request.first_new_position != held {
                    return Err(ProposeError::PositionGap {
                        request_id,
                        cached: held,
                        first_new_position: request.first_new_position,
                    });
                }
                let inputs = &request.tokens[request.first_new_position + 1..];
                if let Some(&token) = inputs.iter().find(|&&t| t as usize >= target.vocab_size) {
                    return Err(ProposeError::TokenOutOfVocab {
                        request_id,
                        token,
                        vocab_size: target.vocab_size,
                    });
                }
                // Draft j (tree: depth j) is verified at position len - 1 + j, which must be
                // inside the context.
                let room = target
                    .max_position_embeddings
                    .saturating_sub(request.tokens.len());
                let budget = request
                    .max_draft_tokens
                    .min(self.config.max_draft_depth())
                    .min(room);
                let waiting = request.tokens.len() - 1 - cached;
                Ok(Planned {
                    slot,
                    is_new,
                    cached,
                    takes_in: budget > 0 || waiting > MAX_DEFERRED_ROWS,
                    budget,
                })
            })
            .collect()
    }

    /// The target features of every request's newly committed rows, one tensor per request.
    fn new_rows(features: &Tensor<B, 2>, requests: &[ProposeRequest<'_>]) -> Vec<Tensor<B, 2>> {
        let rows: Vec<usize> = requests
            .iter()
            .flat_map(|r| r.feature_rows.iter().copied())
            .collect();
        let selected = select_rows(features.clone(), &rows);
        let mut start = 0;
        requests
            .iter()
            .map(|request| {
                let count = request.feature_rows.len();
                start += count;
                selected.clone().narrow(0, start - count, count)
            })
            .collect()
    }

    /// Runs the deferred and new rows of every request that takes them in through the head
    /// (step 1); returns the head outputs of those rows, or `None` when no request takes in.
    fn absorb(
        &mut self,
        requests: &[ProposeRequest<'_>],
        plan: &[Planned],
        new_rows: &[Tensor<B, 2>],
    ) -> Result<Option<Tensor<B, 2>>, ProposeError> {
        let mut sequences = Vec::new();
        let mut features = Vec::new();
        for ((request, planned), rows) in requests.iter().zip(plan).zip(new_rows) {
            if !planned.takes_in {
                continue;
            }
            sequences.push(SequenceInput {
                slot: planned.slot,
                tokens: request.tokens[planned.cached + 1..].to_vec(),
                positions: (planned.cached..request.tokens.len() - 1).collect(),
                logits_rows: Vec::new(),
                mask: None,
                history_mask: None,
            });
            features.push(self.deferred.joined(request.request_id, rows.clone()));
        }
        if sequences.is_empty() {
            return Ok(None);
        }
        let hidden = self.head.project(Tensor::cat(features, 0));
        let outputs = self.head.forward(
            &self.target,
            &ForwardBatch::new(sequences),
            hidden,
            &mut self.cache,
        )?;
        Ok(Some(outputs))
    }

    /// Drafts the chains (step 2) from the head outputs of the committed rows.
    fn extend_chains(
        &mut self,
        outputs: Tensor<B, 2>,
        requests: &[ProposeRequest<'_>],
        plan: &[Planned],
    ) -> Result<Vec<ChainDraft>, ProposeError> {
        let mut growth = ChainGrowth::new(requests.len());
        let (mut active, last_rows) = drafting_rows(requests, plan);
        if active.is_empty() {
            return Ok(growth.into_chains());
        }
        let budgets: Vec<usize> = plan.iter().map(|planned| planned.budget).collect();
        let mut hidden = select_rows(outputs, &last_rows);
        for step in 1.. {
            let logits = self.head.logits(&self.target, hidden.clone());
            let picks = self.pick(logits, &active, requests);
            let keep = growth.push(step, &active, picks, requests, &budgets);
            if keep.is_empty() {
                break;
            }
            if keep.len() < active.len() {
                hidden = select_rows(hidden, &keep);
                active = keep.iter().map(|&a| active[a]).collect();
            }
            let sequences = active
                .iter()
                .map(|&i| {
                    let slot = plan[i].slot;
                    SequenceInput::new(slot, vec![growth.last_token(i)], self.cache.len(slot))
                })
                .collect();
            hidden = self.head.forward(
                &self.target,
                &ForwardBatch::new(sequences),
                hidden,
                &mut self.cache,
            )?;
        }
        Ok(growth.into_chains())
    }

    /// The draft token (target id) of every active request from its logits row, with the
    /// head's probability of it and, where the request's drafts are sampled (see
    /// [`super::DraftSampling::temperature_for`]), the distribution over the target vocabulary it was
    /// sampled from.
    fn pick(
        &mut self,
        logits: Tensor<B, 2>,
        active: &[usize],
        requests: &[ProposeRequest<'_>],
    ) -> Vec<Pick> {
        let map = self.head.vocab_map();
        let sampling = self.config.sampling;
        pick::pick_rows(logits, active, requests, sampling, &mut self.slots)
            .into_iter()
            .map(|pick| Pick {
                token: map.to_target(pick.token),
                confidence: pick.confidence,
                probs: pick.probs.map(|row| map.scatter_row(&row, 0.0)),
            })
            .collect()
    }

    /// Cuts every request's cache back to the rows it held before this call and forgets the
    /// requests first seen in it (on error: nothing of the call remains).
    fn roll_back(&mut self, requests: &[ProposeRequest<'_>], plan: &[Planned]) {
        for (request, planned) in requests.iter().zip(plan) {
            if planned.is_new {
                self.slots.remove(request.request_id);
                self.cache.reset(planned.slot);
            } else {
                self.cache.truncate(planned.slot, planned.cached);
            }
        }
    }

    /// After a successful call: the cache of every request that took its rows in keeps
    /// exactly its committed rows, and the others keep their new rows deferred.
    fn commit(
        &mut self,
        requests: &[ProposeRequest<'_>],
        plan: &[Planned],
        new_rows: Vec<Tensor<B, 2>>,
    ) {
        for ((request, planned), rows) in requests.iter().zip(plan).zip(new_rows) {
            let id = request.request_id;
            if planned.takes_in {
                self.cache.truncate(planned.slot, request.tokens.len() - 1);
                self.deferred.clear(id);
            } else {
                self.deferred.push(id, rows);
            }
        }
    }

    /// [`Proposer::draft`] on the calling thread.
    fn draft_here(
        &mut self,
        batch: &ProposeBatch<'_, Tensor<B, 2>>,
    ) -> Result<Vec<Draft>, ProposeError> {
        let features = batch.features.ok_or(ProposeError::MissingFeatures)?;
        let [rows, width] = features.dims();
        let expected = self.head.feature_width();
        if width != expected {
            return Err(ProposeError::FeatureWidth {
                expected,
                got: width,
            });
        }
        batch.check(Some(rows))?;
        let requests = batch.requests;
        if requests.is_empty() {
            return Ok(Vec::new());
        }
        let plan = self.plan(requests)?;
        let new_rows = Self::new_rows(features, requests);
        let outputs = self.absorb(requests, &plan, &new_rows)?;
        for (request, planned) in requests.iter().zip(&plan) {
            if planned.is_new {
                let rng = self.config.sampling.stream_for(request);
                self.slots.insert(
                    request.request_id,
                    RequestState {
                        slot: planned.slot,
                        rng,
                    },
                );
            }
        }
        let drafts = match (outputs, self.config.tree) {
            (None, _) => Ok(vec![Draft::empty(); requests.len()]),
            (Some(outputs), None) => self
                .extend_chains(outputs, requests, &plan)
                .map(|chains| chains.into_iter().map(Draft::Chain).collect()),
            (Some(outputs), Some(shape)) => self.grow_trees(outputs, requests, &plan, shape),
        };
        match drafts {
            Ok(drafts) => {
                self.commit(requests, &plan, new_rows);
                Ok(drafts)
            }
            Err(err) => {
                self.roll_back(requests, &plan);
                Err(err)
            }
        }
    }
}

impl<B: KernelBackend> Proposer<Tensor<B, 2>> for EagleProposer<B> {
    fn num_speculative_tokens(&self) -> usize {
        self.config.num_speculative_tokens
    }

    fn max_draft_depth(&self) -> usize {
        self.config
            .tree
            .map_or(self.config.num_speculative_tokens, |tree| tree.depth)
    }

    fn needs_target_features(&self) -> bool {
        true
    }

    /// Drafts the whole round (the head's forwards, logits and picks) as one pass on the
    /// backend's kernel threads ([`KernelBackend::on_kernel_threads`]), so that its many small
    /// parallel loops start on threads that are already awake.
    fn draft(
        &mut self,
        batch: &ProposeBatch<'_, Tensor<B, 2>>,
    ) -> Result<Vec<Draft>, ProposeError> {
        B::on_kernel_threads(|| self.draft_here(batch))
    }

    fn release(&mut self, request_id: u64) {
        if let Some(slot) = self.slots.remove(request_id) {
            self.cache.reset(slot);
        }
        self.deferred.clear(request_id);
    }
}

/// The requests that draft this call (budget above 0) and, for each, the row of its last
/// committed token among the head outputs of step 1 (whose output gives its first draft).
fn drafting_rows(requests: &[ProposeRequest<'_>], plan: &[Planned]) -> (Vec<usize>, Vec<usize>) {
    let mut active = Vec::new();
    let mut last_rows = Vec::new();
    let mut end = 0;
    for (i, (request, planned)) in requests.iter().zip(plan).enumerate() {
        if planned.takes_in {
            end += request.tokens.len() - 1 - planned.cached;
        }
        if planned.budget > 0 {
            active.push(i);
            last_rows.push(end - 1);
        }
    }
    (active, last_rows)
}

/// Rows `rows` of `x`, in order (`x` itself when that is every row).
fn select_rows<B: Backend>(x: Tensor<B, 2>, rows: &[usize]) -> Tensor<B, 2> {
    let [n, _] = x.dims();
    if rows.len() == n && rows.iter().enumerate().all(|(i, &r)| i == r) {
        return x;
    }
    let ids: Vec<i64> = rows.iter().map(|&r| r as i64).collect();
    let ids = Tensor::<B, 1, Int>::from_data(TensorData::new(ids, [rows.len()]), &x.device());
    x.select(0, ids)
}
