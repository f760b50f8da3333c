//! [`DraftModelProposer`]: chains of draft tokens from a separate language model that shares
//! the target's vocabulary, the speculative decoding of Leviathan et al. and Chen et al.: a
//! smaller model of the same family, or the target itself with narrower weights (a Q4_1 or
//! Q8_0 copy of an `f32` target agrees with it on nearly every greedy token at a fraction of
//! its cost).
//!
//! The proposer remembers the tokens whose rows each request's slot of the draft KV cache
//! holds, its own drafts included. Each call, for every request that drafts:
//!
//! 1. **Catch-up.** The slot is cut back to the longest prefix it shares with the request's
//!    committed tokens (the drafts the target accepted stay; the first one it rejected and
//!    everything after it go), and the tokens after that prefix, through the new root, run
//!    through the draft model in one batched forward; the root's logits give draft token 1.
//!    After a round whose drafts were all accepted this is two rows (the last draft, which was
//!    never fed, and the root), else one (the root).
//! 2. **Chain.** Each further step feeds every chain's newest token, batched over the
//!    requests still drafting, until each has its `k` tokens or its [`super::ChainStop`] ends
//!    it (the draft model's probability of each token is its confidence). The fed drafts stay
//!    in the slot for the next catch-up to keep or cut.
//!
//! A request that drafts nothing in a call is left as it is: its tokens are all in
//! [`ProposeRequest::tokens`], so the next catch-up takes them in; only a backlog longer than
//! [`MAX_PENDING_ROWS`] (a long prompt prefilled in chunks) runs through the draft model
//! without drafting, unless the request's drafting is suspended
//! ([`ProposeRequest::drafting_suspended`]: too many requests run for drafts to pay). Rows
//! left by a suspension cost nothing unless the request drafts again: a request that finishes
//! first never runs them, one that drafts again takes them in when it is next asked for
//! drafts, at most [`DraftModelProposerConfig::max_catch_up_rows`] a call (drafting nothing until the rest are in), so
//! that no call runs far more rows than a prefill chunk.
//!
//! A draft model that is the target itself in other weights
//! ([`DraftModelProposerConfig::copies_target_cache`]) runs none of the committed rows: the
//! engine offers the target's KV cache with each batch ([`ProposeBatch::target_kv`]), and the
//! catch-up copies the target's keys and values of the rows from the last forward's first
//! position to the root instead (the rows the target computed for the accepted drafts replace
//! the draft model's own), so only the roots and the drafts run through the draft model, and
//! a prompt is prefilled once, by the target. A request that does not draft leaves its rows in
//! the target's cache until it drafts again, however many.

mod config;

pub use config::{DraftModelError, DraftModelProposerConfig, DEFAULT_MAX_CATCH_UP_ROWS};

use aquila_model_loader::backend::KernelBackend;
use aquila_model_loader::config::LlamaConfig;
use aquila_model_loader::model::{FeatureTap, ForwardBatch, KvCache, LlamaModel, SequenceInput};
use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

use super::chain_growth::ChainGrowth;
use super::pick::pick_rows;
use super::slots::{RequestState, SlotTable};
use super::{
    ChainDraft, Draft, ProposeBatch, ProposeError, ProposeRequest, Proposer, TargetKeyValues,
};

/// The target's KV cache as the engine offers it to a burn proposer.
type TargetCache<'a, B> = &'a dyn TargetKeyValues<Tensor<B, 2>>;

/// Most committed rows a request that does not draft leaves for its next catch-up; past this
/// they run through the draft model at once, in the batch of the call. Small, so that the
/// drafting call that ends a pause (a probe) costs about what a drafting call costs, and the
/// rows of a long pause go through in batches of this size, a fraction of a row each.
pub const MAX_PENDING_ROWS: usize = 16;

/// Drafts chains of tokens with a draft language model, keeping one draft KV-cache slot per
/// request.
#[derive(Debug)]
pub struct DraftModelProposer<B: Backend> {
    model: LlamaModel<B>,
    config: DraftModelProposerConfig,
    cache: KvCache<B>,
    slots: SlotTable,
    /// For each slot, the tokens whose rows its draft KV cache holds, in order.
    fed: Vec<Vec<u32>>,
    /// The target's context length: draft `j` of a request with `n` tokens is verified at
    /// position `n - 1 + j`, which must lie inside it.
    target_positions: usize,
    /// Rows the draft model has run through its forward (taken-in rows and fed drafts).
    forwarded_rows: u64,
}

/// Where one request's rows go this call, decided before anything changes.
#[derive(Debug, Clone, Copy)]
struct Planned {
    slot: usize,
    is_new: bool,
    /// Rows of the slot that continue the request's committed tokens (the rest of the slot is
    /// cut when the request takes in).
    kept: usize,
    /// End of the rows copied from the target's KV cache after `kept` when it takes in (equal
    /// to `kept` when nothing is copied); the draft model runs the tokens from here to `end`.
    copied: usize,
    /// Whether its rows not yet cached run through the draft model in this call.
    takes_in: bool,
    /// End of the tokens it takes in: through the root when it drafts, the config's
    /// `max_catch_up_rows` after `kept` when it was asked to draft behind a longer backlog,
    /// else through its last committed token.
    end: usize,
    /// Draft tokens to propose (after the proposer's `k`, the request's budget and the
    /// context).
    budget: usize,
}

impl<B: KernelBackend> DraftModelProposer<B> {
    /// A proposer drafting with `model` for a target configured as `target`, with draft-cache
    /// room for `num_slots` concurrent requests (the engine's maximum number of running
    /// requests). The models must share a vocabulary (checked: its size), and the draft
    /// model's context must be at least the target's.
    pub fn new(
        model: LlamaModel<B>,
        target: &LlamaConfig,
        config: DraftModelProposerConfig,
        num_slots: usize,
    ) -> Result<Self, DraftModelError> {
        config.validate()?;
        if num_slots == 0 {
            return Err(DraftModelError::NoSlots);
        }
        let draft = model.config();
        if draft.vocab_size != target.vocab_size {
            return Err(DraftModelError::VocabMismatch {
                draft: draft.vocab_size,
                target: target.vocab_size,
            });
        }
        if draft.max_position_embeddings < target.max_position_embeddings {
            return Err(DraftModelError::ShortContext {
                draft: draft.max_position_embeddings,
                target: target.max_position_embeddings,
            });
        }
        if config.copies_target_cache && cache_layout(draft) != cache_layout(target) {
            return Err(DraftModelError::CacheMismatch {
                draft: cache_layout(draft),
                target: cache_layout(target),
            });
        }
        Ok(Self {
            cache: model.new_kv_cache(num_slots),
            model,
            config,
            slots: SlotTable::new(num_slots),
            fed: vec![Vec::new(); num_slots],
            target_positions: target.max_position_embeddings,
            forwarded_rows: 0,
        })
    }

    /// Rows the draft model has run through its forward since it was built: the rows it took
    /// in and the drafts it fed (rows copied from the target's KV cache are not among them).
    pub fn forwarded_rows(&self) -> u64 {
        self.forwarded_rows
    }

    /// The draft model.
    pub fn model(&self) -> &LlamaModel<B> {
        &self.model
    }

    /// The proposer's settings.
    pub fn config(&self) -> &DraftModelProposerConfig {
        &self.config
    }

    /// Number of requests that hold a draft-cache slot.
    pub fn num_requests(&self) -> usize {
        self.slots.len()
    }

    /// Rows of `request_id` in the draft KV cache (its committed tokens and the drafts fed after
    /// them), or `None` for a request the proposer does not know.
    pub fn cached_rows(&self, request_id: u64) -> Option<usize> {
        self.slots
            .get(request_id)
            .map(|state| self.cache.len(state.slot))
    }

    /// Decides each request's slot, the rows of its slot that stay, the rows it copies from
    /// the target's KV cache (when `copies`) and its draft budget; changes nothing.
    fn plan(
        &self,
        requests: &[ProposeRequest<'_>],
        copies: bool,
    ) -> Result<Vec<Planned>, ProposeError> {
        let vocab_size = self.model.config().vocab_size;
        let mut free = self.slots.free_slots();
        requests
            .iter()
            .map(|request| {
                let request_id = request.request_id;
                let (slot, is_new) = self.slots.place(request_id, &mut free)?;
                let committed = &request.tokens[..request.tokens.len() - 1];
                let kept = if is_new {
                    0
                } else if copies {
                    // The rows of the last forward come from the target.
                    shared_prefix(&self.fed[slot], committed).min(request.first_new_position)
                } else {
                    shared_prefix(&self.fed[slot], committed)
                };
                if let Some(&token) = request.tokens[kept..]
                    .iter()
                    .find(|&&t| t as usize >= vocab_size)
                {
                    return Err(ProposeError::TokenOutOfVocab {
                        request_id,
                        token,
                        vocab_size,
                    });
                }
                let pending = committed.len() - kept;
                // A request asked to draft behind a backlog of more than a call's rows takes in
                // a call's rows instead (copies cost no forward, so they have no such limit).
                let catch_up_rows = self.config.max_catch_up_rows;
                let behind = !copies && pending > catch_up_rows;
                let room = self.target_positions.saturating_sub(request.tokens.len());
                let budget = if behind {
                    0
                } else {
                    request
                        .max_draft_tokens
                        .min(self.config.num_speculative_tokens)
                        .min(room)
                };
                let catches_up = behind && request.max_draft_tokens > 0;
                let runs_backlog = !copies && pending > MAX_PENDING_ROWS;
                let takes_in =
                    budget > 0 || catches_up || (runs_backlog && !request.drafting_suspended);
                let end = if budget > 0 {
                    request.tokens.len()
                } else if catches_up {
                    kept + catch_up_rows
                } else {
                    committed.len()
                };
                let copied = if copies && takes_in {
                    committed.len()
                } else {
                    kept
                };
                Ok(Planned {
                    slot,
                    is_new,
                    kept,
                    copied,
                    takes_in,
                    end,
                    budget,
                })
            })
            .collect()
    }

    /// Step 1: cuts every taking-in request's slot to its kept rows, copies the rows planned
    /// from `target_kv` and runs its tokens after them through the draft model (through the
    /// root, for the requests that draft); returns the roots' logits, one row per drafting
    /// request in order, or `None` when no request drafts.
    fn catch_up(
        &mut self,
        requests: &[ProposeRequest<'_>],
        plan: &[Planned],
        target_kv: Option<TargetCache<'_, B>>,
    ) -> Result<Option<Tensor<B, 2>>, ProposeError> {
        let mut sequences = Vec::new();
        for (request, planned) in requests.iter().zip(plan) {
            if !planned.takes_in {
                continue;
            }
            self.cut(planned.slot, planned.kept);
            if let Some(target_kv) = target_kv.filter(|_| planned.copied > planned.kept) {
                self.copy_rows(target_kv, request, planned)?;
            }
            let drafts = planned.budget > 0;
            let tokens = &request.tokens[planned.copied..planned.end];
            self.fed[planned.slot].extend_from_slice(tokens);
            let input = SequenceInput::new(planned.slot, tokens.to_vec(), planned.copied);
            sequences.push(if drafts {
                input
            } else {
                input.with_logits_rows(Vec::new())
            });
        }
        if sequences.is_empty() {
            return Ok(None);
        }
        let drafting = plan.iter().any(|planned| planned.budget > 0);
        let output = self.forward(sequences)?;
        Ok(drafting.then_some(output))
    }

    /// Appends the target's keys and values of `request`'s rows `planned.kept..planned.copied`
    /// to its slot, in every layer.
    fn copy_rows(
        &mut self,
        target_kv: TargetCache<'_, B>,
        request: &ProposeRequest<'_>,
        planned: &Planned,
    ) -> Result<(), ProposeError> {
        let (slot, rows) = (planned.slot, planned.kept..planned.copied);
        let [_, kv_heads, head_dim] = target_kv.shape();
        let device = self.model.device();
        for layer in 0..self.cache.num_layers() {
            let (keys, values) = target_kv.layer_rows(request.request_id, layer, rows.clone())?;
            let shape = [kv_heads, rows.len(), head_dim];
            let (keys, values) = (keys.reshape(shape), values.reshape(shape));
            let dtype = keys.dtype();
            self.cache.append_with(
                layer,
                slot,
                rows.len(),
                [kv_heads, head_dim],
                (&device, dtype),
                |key_buffer, value_buffer, new_rows| {
                    let at = [0..kv_heads, new_rows, 0..head_dim];
                    (
                        key_buffer.slice_assign(at.clone(), keys),
                        value_buffer.slice_assign(at, values),
                    )
                },
            );
        }
        self.cache.advance(slot, rows.len());
        self.fed[slot].extend_from_slice(&request.tokens[rows]);
        Ok(())
    }

    /// Runs `sequences` through the draft model and returns the logits rows they ask for.
    fn forward(&mut self, sequences: Vec<SequenceInput>) -> Result<Tensor<B, 2>, ProposeError> {
        self.forwarded_rows += sequences.iter().map(|s| s.tokens.len() as u64).sum::<u64>();
        let batch = ForwardBatch::new(sequences);
        Ok(self
            .model
            .forward(&batch, &mut self.cache, &FeatureTap::None)?
            .logits)
    }

    /// Step 2: the chains, from the roots' logits of the drafting requests.
    fn extend_chains(
        &mut self,
        root_logits: Tensor<B, 2>,
        requests: &[ProposeRequest<'_>],
        plan: &[Planned],
    ) -> Result<Vec<ChainDraft>, ProposeError> {
        let mut growth = ChainGrowth::new(requests.len());
        let budgets: Vec<usize> = plan.iter().map(|planned| planned.budget).collect();
        let mut active: Vec<usize> = (0..requests.len()).filter(|&i| budgets[i] > 0).collect();
        let mut logits = root_logits;
        for step in 1.. {
            let sampling = self.config.sampling;
            let picks = pick_rows(logits, &active, requests, sampling, &mut self.slots);
            let keep = growth.push(step, &active, picks, requests, &budgets);
            if keep.is_empty() {
                break;
            }
            active = keep.iter().map(|&a| active[a]).collect();
            let sequences = active
                .iter()
                .map(|&i| {
                    let slot = plan[i].slot;
                    let token = growth.last_token(i);
                    self.fed[slot].push(token);
                    SequenceInput::new(slot, vec![token], self.cache.len(slot))
                })
                .collect();
            logits = self.forward(sequences)?;
        }
        Ok(growth.into_chains())
    }

    /// Cuts `slot` to its first `rows` rows.
    fn cut(&mut self, slot: usize, rows: usize) {
        self.cache.truncate(slot, rows);
        self.fed[slot].truncate(rows);
    }

    /// After a failed call: cuts every request's slot to its kept rows (which continue its
    /// committed tokens whatever the call fed) and forgets the requests first seen in it.
    fn roll_back(&mut self, requests: &[ProposeRequest<'_>], plan: &[Planned]) {
        for (request, planned) in requests.iter().zip(plan) {
            self.cut(planned.slot, planned.kept);
            if planned.is_new {
                self.slots.remove(request.request_id);
            }
        }
    }

    /// [`Proposer::draft`] on the calling thread.
    fn draft_here(
        &mut self,
        requests: &[ProposeRequest<'_>],
        target_kv: Option<TargetCache<'_, B>>,
    ) -> Result<Vec<Draft>, ProposeError> {
        if requests.is_empty() {
            return Ok(Vec::new());
        }
        let target_kv = target_kv.filter(|_| self.config.copies_target_cache);
        let plan = self.plan(requests, target_kv.is_some())?;
        for (request, planned) in requests.iter().zip(&plan) {
            if planned.is_new {
                let rng = self.config.sampling.stream_for(request);
                let state = RequestState {
                    slot: planned.slot,
                    rng,
                };
                self.slots.insert(request.request_id, state);
            }
        }
        let chains = match self.catch_up(requests, &plan, target_kv) {
            Ok(Some(logits)) => self.extend_chains(logits, requests, &plan),
            Ok(None) => Ok(vec![ChainDraft::default(); requests.len()]),
            Err(err) => Err(err),
        };
        match chains {
            Ok(chains) => Ok(chains.into_iter().map(Draft::Chain).collect()),
            Err(err) => {
                self.roll_back(requests, &plan);
                Err(err)
            }
        }
    }
}

impl<B: KernelBackend> Proposer<Tensor<B, 2>> for DraftModelProposer<B> {
    fn num_speculative_tokens(&self) -> usize {
        self.config.num_speculative_tokens
    }

    fn needs_target_features(&self) -> bool {
        false
    }

    fn reads_target_kv(&self) -> bool {
        self.config.copies_target_cache
    }

    /// Drafts the whole round (the draft model's forwards and picks) as one pass on the
    /// backend's kernel threads ([`KernelBackend::on_kernel_threads`]).
    fn draft(
        &mut self,
        batch: &ProposeBatch<'_, Tensor<B, 2>>,
    ) -> Result<Vec<Draft>, ProposeError> {
        batch.check(None)?;
        B::on_kernel_threads(|| self.draft_here(batch.requests, batch.target_kv))
    }

    fn release(&mut self, request_id: u64) {
        if let Some(slot) = self.slots.remove(request_id) {
            self.cut(slot, 0);
        }
    }
}

/// What makes one model's keys and values another's: its layers, KV heads, head width and
/// RoPE.
fn cache_layout(config: &LlamaConfig) -> String {
    format!(
        "{} layers of {} KV heads x {} wide, {:?}",
        config.num_hidden_layers, config.num_key_value_heads, config.head_dim, config.rope
    )
}

/// Length of the longest common prefix of `a` and `b`.
fn shared_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}
