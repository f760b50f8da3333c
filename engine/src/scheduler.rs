//! Continuous batching: each step picks the model work of running and waiting requests under
//! the sequence limit, the per-step token budget and the KV cache budget.
//!
//! Policy (deterministic, vLLM V1 style):
//! 1. Running requests, oldest admission first, get their uncomputed tokens (a prefill chunk,
//!    or the last generated token plus its drafts), cut to the remaining token budget. When the
//!    KV budget cannot hold a request's new tokens, the newest running request is preempted:
//!    its KV is freed, it keeps its tokens, and it returns to the front of the waiting queue to
//!    be recomputed later. A request that must preempt itself waits for the next step.
//! 2. If nothing was preempted, waiting requests are admitted in queue order while a slot, the
//!    token budget and the KV budget allow; a long prompt is admitted with a first chunk.
//!
//! Every KV change the model runner must mirror (a freed slot, a rolled-back speculative tail)
//! is queued as a [`KvCommand`] and handed out with the next [`SchedulerOutput`].

use std::collections::{HashMap, VecDeque};

use aquila_spec_decode::tree::DraftTree;

use crate::kv_budget::KvBudget;
use crate::output::RequestId;
use crate::request::{Request, RequestStatus};

/// Limits the scheduler enforces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SchedulerConfig {
    /// Most running requests (and KV slots).
    pub max_num_seqs: usize,
    /// Most tokens per step.
    pub max_num_batched_tokens: usize,
    /// Longest sequence of a request (prompt plus output).
    pub max_model_len: usize,
    /// KV cache capacity in token positions.
    pub kv_capacity_tokens: usize,
}

/// A change to a KV cache slot that the model runner applies before the next forward.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum KvCommand {
    /// Empty the slot (its request finished, was aborted or was preempted).
    Reset {
        /// The slot.
        slot: usize,
    },
    /// Keep only the first `len` positions (rejected speculative rows are dropped).
    Truncate {
        /// The slot.
        slot: usize,
        /// Positions to keep.
        len: usize,
    },
    /// Tree commit: keep row `start + rows[i]` at `start + i` and drop every row after them
    /// (the accepted root-to-node path of a draft tree; `rows[0]` is the root, 0).
    Gather {
        /// The slot.
        slot: usize,
        /// Position of the tree's root row.
        start: usize,
        /// Tree nodes to keep, root first.
        rows: Vec<usize>,
    },
}

/// The model work of one request in one step.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ScheduledRequest {
    /// The request.
    pub request_id: RequestId,
    /// Its KV cache slot.
    pub slot: usize,
    /// Position of the first fed token (the number of tokens already in the KV cache).
    pub start_position: usize,
    /// Tokens to feed: known tokens, then `num_draft_tokens` draft tokens.
    pub token_ids: Vec<u32>,
    /// Draft tokens at the end of `token_ids`.
    pub num_draft_tokens: usize,
    /// The tree of the root (the last known token) and the drafts, cut to
    /// `num_draft_tokens + 1` nodes; `None` for chain drafts.
    pub draft_tree: Option<DraftTree>,
    /// Whether the fed known tokens reach the end of the sequence, so the step samples new
    /// tokens from the rows of the last known token and the drafts.
    pub samples: bool,
    /// Whether the request was still processing its prompt (prefill) in this step.
    pub is_prefill: bool,
}

impl ScheduledRequest {
    /// Rows whose logits the step needs: the last known token and every draft, or none for a
    /// prefill chunk that does not reach the end of the sequence.
    pub fn num_logits_rows(&self) -> usize {
        if self.samples {
            1 + self.num_draft_tokens
        } else {
            0
        }
    }

    /// Known (non-draft) tokens fed.
    pub fn num_known_tokens(&self) -> usize {
        self.token_ids.len() - self.num_draft_tokens
    }

    /// Depth of each logits row after the root's (the root row is depth 0): draft `i`'s depth
    /// in the tree, or `i + 1` along a chain.
    pub fn draft_depths(&self) -> Vec<usize> {
        match &self.draft_tree {
            Some(tree) => (1..tree.num_nodes()).map(|node| tree.depth(node)).collect(),
            None => (1..=self.num_draft_tokens).collect(),
        }
    }
}

/// What one call to [`Scheduler::schedule`] decided.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct SchedulerOutput {
    /// KV changes to apply before the forward, in order.
    pub kv_commands: Vec<KvCommand>,
    /// The requests to run, running ones first, then newly admitted ones.
    pub scheduled: Vec<ScheduledRequest>,
    /// Requests preempted in this step.
    pub preempted: Vec<RequestId>,
    /// Requests admitted from the waiting queue in this step (new or recomputed).
    pub admitted: Vec<RequestId>,
}

impl SchedulerOutput {
    /// Tokens fed to the model in this step.
    pub fn num_batched_tokens(&self) -> usize {
        self.scheduled.iter().map(|s| s.token_ids.len()).sum()
    }
}

/// Owns the unfinished requests and decides each step's batch.
#[derive(Debug)]
pub(crate) struct Scheduler {
    config: SchedulerConfig,
    kv: KvBudget,
    requests: HashMap<RequestId, Request>,
    waiting: VecDeque<RequestId>,
    running: Vec<RequestId>,
    pending_kv_commands: Vec<KvCommand>,
}

impl Scheduler {
    /// An empty scheduler.
    pub fn new(config: SchedulerConfig) -> Self {
        Self {
            kv: KvBudget::new(config.max_num_seqs, config.kv_capacity_tokens),
            config,
            requests: HashMap::new(),
            waiting: VecDeque::new(),
            running: Vec::new(),
            pending_kv_commands: Vec::new(),
        }
    }

    /// Queues a new request at the back of the waiting queue.
    pub fn add(&mut self, request: Request) {
        debug_assert!(request.num_tokens() < self.config.max_model_len);
        self.waiting.push_back(request.id);
        self.requests.insert(request.id, request);
    }

    /// The request with `id`, if unfinished.
    pub fn get(&self, id: RequestId) -> Option<&Request> {
        self.requests.get(&id)
    }

    /// Requests holding a slot.
    pub fn num_running(&self) -> usize {
        self.running.len()
    }

    /// Requests queued (new or preempted).
    pub fn num_waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Whether any request is unfinished.
    pub fn has_unfinished(&self) -> bool {
        !self.requests.is_empty()
    }

    /// Fraction of the KV budget reserved, in [0, 1].
    pub fn kv_usage(&self) -> f64 {
        self.kv.usage()
    }

    /// Decides this step's batch.
    pub fn schedule(&mut self) -> SchedulerOutput {
        let mut token_budget = self.config.max_num_batched_tokens;
        let mut scheduled = Vec::new();
        let mut preempted = Vec::new();
        let mut admitted = Vec::new();

        let mut index = 0;
        while index < self.running.len() && token_budget > 0 {
            let id = self.running[index];
            let wanted = self.fit_drafts_to_kv(id, token_budget);
            let Some(slot) = self.reserve_or_preempt(id, wanted, &mut preempted) else {
                break; // The request preempted itself; everything after it is gone too.
            };
            scheduled.push(self.scheduled_request(id, slot, wanted));
            token_budget -= wanted;
            index += 1;
        }

        if preempted.is_empty() {
            while token_budget > 0 && self.running.len() < self.config.max_num_seqs {
                let Some(&id) = self.waiting.front() else {
                    break;
                };
                let wanted = self.num_tokens_wanted(id).min(token_budget);
                let Some(slot) = self.admit(id, wanted) else {
                    break;
                };
                scheduled.push(self.scheduled_request(id, slot, wanted));
                admitted.push(id);
                token_budget -= wanted;
            }
        }

        SchedulerOutput {
            kv_commands: std::mem::take(&mut self.pending_kv_commands),
            scheduled,
            preempted,
            admitted,
        }
    }

    /// Records the result of a scheduled step for one request: the fed known tokens (and the
    /// drafts `accepted_nodes`, 1-based draft indices in acceptance order: `1..=n` along a
    /// chain, a root-to-node path in a tree) are now in the KV cache, and `new_token_ids` were
    /// generated. Rejected draft rows are rolled back; accepted tree rows are moved up behind
    /// the root.
    pub fn commit(
        &mut self,
        work: &ScheduledRequest,
        accepted_nodes: &[usize],
        new_token_ids: &[u32],
    ) {
        let request = self
            .requests
            .get_mut(&work.request_id)
            .expect("committed request is unfinished");
        debug_assert_eq!(request.num_computed_tokens, work.start_position);
        let num_accepted = accepted_nodes.len();
        debug_assert!(num_accepted <= work.num_draft_tokens);
        let known = work.num_known_tokens();
        request.num_computed_tokens = work.start_position + known + num_accepted;
        request.token_ids.extend_from_slice(new_token_ids);
        request.draft_token_ids.clear();
        request.draft_tree = None;
        if num_accepted == work.num_draft_tokens {
            return;
        }
        let len = request.num_computed_tokens;
        self.kv.truncate(work.slot, len);
        let is_prefix = accepted_nodes.iter().enumerate().all(|(i, &n)| n == i + 1);
        let command = if is_prefix {
            KvCommand::Truncate {
                slot: work.slot,
                len,
            }
        } else {
            KvCommand::Gather {
                slot: work.slot,
                start: work.start_position + known - 1,
                rows: std::iter::once(0)
                    .chain(accepted_nodes.iter().copied())
                    .collect(),
            }
        };
        self.pending_kv_commands.push(command);
    }

    /// Sets the draft tokens running request `id` feeds after its root in its next decode step,
    /// with the tree they form (`None`: a chain); the scheduler may feed fewer (a prefix in
    /// node order) when the token or KV budget is short.
    pub fn set_drafts(
        &mut self,
        id: RequestId,
        draft_token_ids: Vec<u32>,
        draft_tree: Option<DraftTree>,
    ) {
        if let Some(request) = self.requests.get_mut(&id) {
            request.draft_token_ids = draft_token_ids;
            request.draft_tree = draft_tree;
        }
    }

    /// Removes a request (finished or aborted), freeing its slot; `None` if unknown.
    pub fn remove(&mut self, id: RequestId) -> Option<Request> {
        let mut request = self.requests.remove(&id)?;
        match request.status {
            RequestStatus::Waiting => self.waiting.retain(|&w| w != id),
            RequestStatus::Running => self.running.retain(|&r| r != id),
        }
        if let Some(slot) = request.slot.take() {
            self.free_slot(slot);
        }
        Some(request)
    }

    /// Tokens `id` would feed with an unlimited token budget: its uncomputed tokens plus its
    /// drafts, the drafts capped so no position reaches `max_model_len`.
    fn num_tokens_wanted(&self, id: RequestId) -> usize {
        let request = &self.requests[&id];
        let room = self
            .config
            .max_model_len
            .saturating_sub(request.num_tokens());
        request.num_uncomputed_tokens() + request.draft_token_ids.len().min(room)
    }

    /// Tokens running request `id` feeds this step within `token_budget`: with its drafts when
    /// the KV budget can hold them (they are reserved then), otherwise only its known tokens;
    /// drafts never cause a preemption.
    fn fit_drafts_to_kv(&mut self, id: RequestId, token_budget: usize) -> usize {
        let request = &self.requests[&id];
        let known = request.num_uncomputed_tokens().min(token_budget);
        let computed = request.num_computed_tokens;
        let slot = request.slot.expect("running request holds a slot");
        let wanted = self.num_tokens_wanted(id).min(token_budget);
        if wanted > known && !self.kv.try_reserve(slot, computed + wanted) {
            return known;
        }
        wanted
    }

    /// Reserves KV for `num_new_tokens` more tokens of running request `id`, preempting the
    /// newest running requests until it fits. Returns the slot, or `None` when `id` itself had
    /// to be preempted.
    fn reserve_or_preempt(
        &mut self,
        id: RequestId,
        num_new_tokens: usize,
        preempted: &mut Vec<RequestId>,
    ) -> Option<usize> {
        let request = &self.requests[&id];
        let slot = request.slot.expect("running request holds a slot");
        let total = request.num_computed_tokens + num_new_tokens;
        while !self.kv.try_reserve(slot, total) {
            let victim = self.running.pop().expect("the running list holds `id`");
            self.preempt(victim);
            preempted.push(victim);
            if victim == id {
                return None;
            }
        }
        Some(slot)
    }

    /// Frees `id`'s KV and puts it back at the front of the waiting queue.
    fn preempt(&mut self, id: RequestId) {
        let request = self
            .requests
            .get_mut(&id)
            .expect("preempted request exists");
        let slot = request.slot.take().expect("running request holds a slot");
        request.status = RequestStatus::Waiting;
        request.num_computed_tokens = 0;
        request.draft_token_ids.clear();
        request.draft_tree = None;
        request.num_preemptions += 1;
        self.waiting.push_front(id);
        self.free_slot(slot);
    }

    /// Moves the front waiting request `id` to running with `num_new_tokens` reserved; `None`
    /// (nothing changed) when no slot or not enough KV budget is free.
    fn admit(&mut self, id: RequestId, num_new_tokens: usize) -> Option<usize> {
        let slot = self.kv.allocate_slot()?;
        if !self.kv.try_reserve(slot, num_new_tokens) {
            self.kv.free(slot);
            return None;
        }
        self.waiting.pop_front();
        self.running.push(id);
        let request = self.requests.get_mut(&id).expect("waiting request exists");
        request.status = RequestStatus::Running;
        request.slot = Some(slot);
        Some(slot)
    }

    /// Releases a slot and tells the model runner to empty it.
    fn free_slot(&mut self, slot: usize) {
        self.kv.free(slot);
        self.pending_kv_commands.push(KvCommand::Reset { slot });
    }

    /// The work item feeding `num_new_tokens` tokens of `id` (known tokens first, then drafts).
    fn scheduled_request(
        &self,
        id: RequestId,
        slot: usize,
        num_new_tokens: usize,
    ) -> ScheduledRequest {
        let request = &self.requests[&id];
        let start = request.num_computed_tokens;
        let known = num_new_tokens.min(request.num_uncomputed_tokens());
        let mut token_ids = request.token_ids[start..start + known].to_vec();
        let samples = start + known == request.num_tokens();
        let num_draft_tokens = if samples { num_new_tokens - known } else { 0 };
        token_ids.extend_from_slice(&request.draft_token_ids[..num_draft_tokens]);
        let draft_tree = match &request.draft_tree {
            Some(tree) if num_draft_tokens > 0 => Some(tree.prefix(num_draft_tokens + 1)),
            _ => None,
        };
        ScheduledRequest {
            request_id: id,
            slot,
            start_position: start,
            token_ids,
            num_draft_tokens,
            draft_tree,
            samples,
            is_prefill: start < request.num_prompt_tokens,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(max_num_seqs: usize, max_num_batched_tokens: usize, kv: usize) -> SchedulerConfig {
        SchedulerConfig {
            max_num_seqs,
            max_num_batched_tokens,
            max_model_len: 1000,
            kv_capacity_tokens: kv,
        }
    }

    fn prompt(len: usize) -> Vec<u32> {
        (0..len as u32).collect()
    }

    /// Runs one step in which every sampling request generates token `token`.
    fn step(scheduler: &mut Scheduler, token: u32) -> SchedulerOutput {
        let out = scheduler.schedule();
        for work in &out.scheduled {
            let new: &[u32] = if work.samples { &[token] } else { &[] };
            scheduler.commit(work, &[], new);
        }
        out
    }

    fn ids(out: &SchedulerOutput) -> Vec<RequestId> {
        out.scheduled.iter().map(|s| s.request_id).collect()
    }

    #[test]
    fn admits_up_to_max_num_seqs_then_batches_decodes() {
        let mut scheduler = Scheduler::new(config(2, 100, 1000));
        for id in 0..3 {
            scheduler.add(Request::new(id, prompt(4)));
        }
        let out = step(&mut scheduler, 7);
        assert_eq!(ids(&out), vec![0, 1]);
        assert_eq!(out.admitted, vec![0, 1]);
        assert!(out.scheduled.iter().all(|s| s.samples && s.is_prefill));
        assert_eq!(out.num_batched_tokens(), 8);
        assert_eq!(scheduler.num_waiting(), 1);

        let out = step(&mut scheduler, 8);
        assert_eq!(ids(&out), vec![0, 1]);
        assert!(out.admitted.is_empty());
        for work in &out.scheduled {
            assert_eq!(work.token_ids, vec![7]);
            assert_eq!(work.start_position, 4);
            assert!(!work.is_prefill);
        }

        scheduler.remove(0).unwrap();
        let out = step(&mut scheduler, 9);
        assert_eq!(out.kv_commands, vec![KvCommand::Reset { slot: 0 }]);
        assert_eq!(
            ids(&out),
            vec![1, 2],
            "the freed slot admits the waiting request"
        );
        assert_eq!(out.scheduled[1].slot, 0);
    }

    #[test]
    fn long_prompts_are_prefilled_in_chunks_within_the_token_budget() {
        let mut scheduler = Scheduler::new(config(4, 8, 1000));
        scheduler.add(Request::new(0, prompt(20)));
        scheduler.add(Request::new(1, prompt(3)));
        let out = step(&mut scheduler, 1);
        assert_eq!(ids(&out), vec![0]);
        assert_eq!(out.scheduled[0].token_ids, prompt(8));
        assert!(!out.scheduled[0].samples);
        let out = step(&mut scheduler, 1);
        assert_eq!(out.scheduled[0].token_ids, (8..16).collect::<Vec<u32>>());
        let out = step(&mut scheduler, 1);
        assert_eq!(
            ids(&out),
            vec![0, 1],
            "the last chunk leaves room for a new request"
        );
        assert_eq!(out.scheduled[0].token_ids, (16..20).collect::<Vec<u32>>());
        assert!(out.scheduled[0].samples);
        assert_eq!(out.scheduled[1].token_ids, prompt(3));
        assert_eq!(scheduler.get(0).unwrap().output_token_ids(), &[1]);
        assert!(out.num_batched_tokens() <= 8);
    }

    #[test]
    fn kv_pressure_preempts_the_newest_request_and_recomputes_it() {
        // Three 4-token prompts in 13 KV positions: the third step needs 15.
        let mut scheduler = Scheduler::new(config(3, 100, 13));
        for id in 0..3 {
            scheduler.add(Request::new(id, prompt(4)));
        }
        step(&mut scheduler, 5); // 12 positions reserved, each request has 1 output token.
        let out = step(&mut scheduler, 6);
        assert_eq!(out.preempted, vec![2]);
        assert_eq!(ids(&out), vec![0, 1]);
        assert_eq!(
            out.kv_commands,
            vec![KvCommand::Reset { slot: 2 }],
            "the victim's slot is emptied before the forward"
        );
        assert_eq!(scheduler.num_waiting(), 1);
        let victim = scheduler.get(2).unwrap();
        assert_eq!(victim.num_computed_tokens, 0);
        assert_eq!(
            victim.output_token_ids(),
            &[5],
            "a preempted request keeps its tokens"
        );
        assert_eq!(victim.num_preemptions, 1);

        // The victim waits until enough KV is free.
        let out = step(&mut scheduler, 7);
        assert_eq!(ids(&out), vec![0, 1]);
        scheduler.remove(0).unwrap();
        scheduler.remove(1).unwrap();
        let out = step(&mut scheduler, 8);
        assert_eq!(ids(&out), vec![2]);
        let work = &out.scheduled[0];
        assert_eq!(
            work.token_ids,
            vec![0, 1, 2, 3, 5],
            "prompt and output are recomputed"
        );
        assert!(work.samples);
        assert_eq!(scheduler.get(2).unwrap().output_token_ids(), &[5, 8]);
    }

    #[test]
    fn a_request_that_cannot_fit_beside_older_ones_preempts_itself() {
        let mut scheduler = Scheduler::new(config(2, 100, 9));
        scheduler.add(Request::new(0, prompt(4)));
        scheduler.add(Request::new(1, prompt(4)));
        step(&mut scheduler, 1); // 8 of 9 positions.
        let out = step(&mut scheduler, 2); // Request 0 takes the last position.
        assert_eq!(out.preempted, vec![1]);
        assert_eq!(ids(&out), vec![0]);
        assert_eq!(scheduler.num_running(), 1);
    }

    #[test]
    fn scheduling_is_deterministic() {
        let run = || {
            let mut scheduler = Scheduler::new(config(3, 7, 20));
            for id in 0..5 {
                scheduler.add(Request::new(id, prompt(3 + id as usize)));
            }
            let mut trace = Vec::new();
            for token in 0..12 {
                let out = step(&mut scheduler, token);
                trace.push((ids(&out), out.preempted.clone(), out.kv_commands.clone()));
                let finished: Vec<RequestId> = out
                    .scheduled
                    .iter()
                    .filter(|w| {
                        scheduler
                            .get(w.request_id)
                            .unwrap()
                            .output_token_ids()
                            .len()
                            >= 3
                    })
                    .map(|w| w.request_id)
                    .collect();
                for id in finished {
                    scheduler.remove(id);
                }
            }
            trace
        };
        assert_eq!(run(), run());
    }

    #[test]
    fn drafts_are_fed_after_the_root_and_rejected_rows_rolled_back() {
        let mut scheduler = Scheduler::new(config(1, 100, 100));
        scheduler.add(Request::new(0, prompt(4)));
        step(&mut scheduler, 9);
        scheduler.requests.get_mut(&0).unwrap().draft_token_ids = vec![20, 21, 22];
        let out = scheduler.schedule();
        let work = out.scheduled[0].clone();
        assert_eq!(work.token_ids, vec![9, 20, 21, 22]);
        assert_eq!(work.num_draft_tokens, 3);
        assert_eq!(work.num_logits_rows(), 4);
        // One draft accepted: root and draft 20 stay in KV, 20 and the bonus 30 are emitted.
        scheduler.commit(&work, &[1], &[20, 30]);
        let request = scheduler.get(0).unwrap();
        assert_eq!(request.num_computed_tokens, 6);
        assert_eq!(request.output_token_ids(), &[9, 20, 30]);
        assert!(request.draft_token_ids.is_empty());
        let out = scheduler.schedule();
        assert_eq!(
            out.kv_commands,
            vec![KvCommand::Truncate { slot: 0, len: 6 }]
        );
        assert_eq!(out.scheduled[0].token_ids, vec![30]);
        assert!(
            (scheduler.kv_usage() - 0.07).abs() < 1e-12,
            "7 of 100 positions"
        );
    }

    #[test]
    fn drafts_are_capped_at_max_model_len() {
        let mut scheduler = Scheduler::new(SchedulerConfig {
            max_model_len: 7,
            ..config(1, 100, 100)
        });
        scheduler.add(Request::new(0, prompt(5)));
        step(&mut scheduler, 9); // 6 tokens: room for 1 draft.
        scheduler.requests.get_mut(&0).unwrap().draft_token_ids = vec![20, 21, 22];
        let out = scheduler.schedule();
        assert_eq!(out.scheduled[0].token_ids, vec![9, 20]);
    }

    #[test]
    fn removing_a_waiting_request_needs_no_kv_reset() {
        let mut scheduler = Scheduler::new(config(1, 100, 100));
        scheduler.add(Request::new(0, prompt(4)));
        scheduler.add(Request::new(1, prompt(4)));
        step(&mut scheduler, 1);
        let removed = scheduler.remove(1).unwrap();
        assert_eq!(removed.status, RequestStatus::Waiting);
        assert!(scheduler.remove(1).is_none());
        let out = scheduler.schedule();
        assert!(out.kv_commands.is_empty());
        assert_eq!(scheduler.num_waiting(), 0);
        assert!(scheduler.has_unfinished());
        assert!(scheduler.kv_usage() > 0.0);
    }

    #[test]
    fn drafts_that_do_not_fit_the_kv_budget_are_dropped_without_preemption() {
        let mut scheduler = Scheduler::new(config(2, 100, 11));
        scheduler.add(Request::new(0, prompt(4)));
        scheduler.add(Request::new(1, prompt(4)));
        step(&mut scheduler, 7);
        scheduler.set_drafts(0, vec![1, 2, 3], None);
        scheduler.set_drafts(1, vec![1], None);
        // Request 0 would need 4 + 1 + 3 = 8 positions (12 in all): it feeds its root only;
        // request 1's root and draft fit in the rest.
        let out = scheduler.schedule();
        assert!(out.preempted.is_empty());
        assert_eq!(out.scheduled[0].token_ids, vec![7]);
        assert_eq!(out.scheduled[0].num_draft_tokens, 0);
        assert_eq!(out.scheduled[1].token_ids, vec![7, 1]);
        assert_eq!(out.scheduled[1].num_draft_tokens, 1);
    }

    #[test]
    fn drafts_are_cut_to_the_token_budget_and_rolled_back_when_rejected() {
        let mut scheduler = Scheduler::new(config(1, 3, 100));
        scheduler.add(Request::new(0, prompt(2)));
        step(&mut scheduler, 7);
        scheduler.set_drafts(0, vec![1, 2, 3], None);
        let out = scheduler.schedule();
        let work = &out.scheduled[0];
        assert_eq!(work.token_ids, vec![7, 1, 2]);
        assert_eq!(work.num_draft_tokens, 2);
        // One draft accepted: the root and draft 1 stay, draft 2's row is rolled back.
        scheduler.commit(work, &[1], &[1, 9]);
        let out = scheduler.schedule();
        assert_eq!(
            out.kv_commands,
            vec![KvCommand::Truncate { slot: 0, len: 4 }]
        );
        assert_eq!(out.scheduled[0].start_position, 4);
        assert_eq!(out.scheduled[0].token_ids, vec![9], "drafts were consumed");
    }

    /// Root 7 with children 1 and 2; 3 under 2; 4 under 1.
    fn tree() -> DraftTree {
        DraftTree::from_parts(
            vec![7, 1, 2, 3, 4],
            vec![None, Some(0), Some(0), Some(2), Some(1)],
            vec![0.0, -1.0, -1.5, -2.0, -2.5],
        )
        .unwrap()
    }

    #[test]
    fn tree_drafts_are_cut_in_node_order_and_their_accepted_path_gathered() {
        let mut scheduler = Scheduler::new(config(1, 4, 100));
        scheduler.add(Request::new(0, prompt(2)));
        step(&mut scheduler, 7);
        let tree = tree();
        scheduler.set_drafts(0, tree.tokens()[1..].to_vec(), Some(tree.clone()));
        let out = scheduler.schedule();
        let work = &out.scheduled[0];
        assert_eq!(
            work.token_ids,
            vec![7, 1, 2, 3],
            "cut to the token budget of 4"
        );
        assert_eq!(work.draft_tree, Some(tree.prefix(4)));
        assert_eq!(work.draft_depths(), vec![1, 1, 2]);
        // Path root -> 2 -> 3 accepted: rows 2 and 3 of the tree move behind the root.
        scheduler.commit(work, &[2, 3], &[2, 3, 5]);
        let request = scheduler.get(0).unwrap();
        assert_eq!(request.num_computed_tokens, 5);
        assert!(request.draft_tree.is_none());
        let out = scheduler.schedule();
        assert_eq!(
            out.kv_commands,
            vec![KvCommand::Gather {
                slot: 0,
                start: 2,
                rows: vec![0, 2, 3]
            }]
        );
        assert_eq!(out.scheduled[0].start_position, 5);
        assert_eq!(out.scheduled[0].token_ids, vec![5]);
        assert_eq!(out.scheduled[0].draft_tree, None);
    }

    #[test]
    fn a_tree_path_along_the_node_order_is_a_plain_truncation() {
        let mut scheduler = Scheduler::new(config(1, 100, 100));
        scheduler.add(Request::new(0, prompt(2)));
        step(&mut scheduler, 7);
        let tree = tree();
        scheduler.set_drafts(0, tree.tokens()[1..].to_vec(), Some(tree));
        let out = scheduler.schedule();
        scheduler.commit(&out.scheduled[0], &[1], &[1, 6]);
        assert_eq!(
            scheduler.schedule().kv_commands,
            vec![KvCommand::Truncate { slot: 0, len: 4 }]
        );
    }
}
