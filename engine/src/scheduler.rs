//! Continuous batching: each step picks the model work of running and waiting requests under
//! the sequence limit, the per-step token budget and the KV cache budget.
//!
//! Policy (deterministic, vLLM V1 style):
//! 1. Running requests, oldest admission first, get their uncomputed tokens (a prefill chunk,
//!    or the last generated token plus its pending draft), cut to the remaining token budget. When the
//!    KV budget cannot hold a request's new tokens, the newest running request is preempted:
//!    its KV is freed, it keeps its tokens, and it returns to the front of the waiting queue to
//!    be recomputed later. A request that must preempt itself waits for the next step.
//! 2. If nothing was preempted, waiting requests are admitted in queue order while a slot, the
//!    token budget and the KV budget allow; a long prompt is admitted with a first chunk.
//!
//! The scheduler keeps no requests of its own: it decides over the engine's request records
//! (their status, slot, place in the queue and computed tokens) and cuts their pending drafts
//! to what is fed. Every KV change the model runner must mirror (a freed slot, a rolled-back speculative tail)
//! is queued as a [`KvCommand`] and handed out with the next [`SchedulerOutput`].

use std::time::Instant;

use crate::kv_budget::KvBudget;
use crate::output::RequestId;
use crate::request::{Request, RequestStatus};
use crate::requests::Requests;

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

/// The model work of one request in one step: its known tokens from `start_position`, then
/// its pending draft (cut by the scheduler to `num_draft_tokens`).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ScheduledRequest {
    /// The request.
    pub request_id: RequestId,
    /// Its KV cache slot.
    pub slot: usize,
    /// Position of the first fed token (the number of tokens already in the KV cache).
    pub start_position: usize,
    /// Known (non-draft) tokens fed.
    pub num_known_tokens: usize,
    /// Draft tokens fed after the known tokens.
    pub num_draft_tokens: usize,
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

    /// Tokens fed (known and draft).
    pub fn num_tokens(&self) -> usize {
        self.num_known_tokens + self.num_draft_tokens
    }

    /// The tokens fed, read from `request` (this work's request).
    pub fn fed_tokens(&self, request: &Request) -> Vec<u32> {
        let known = self.start_position..self.start_position + self.num_known_tokens;
        let mut tokens = request.token_ids[known].to_vec();
        tokens.extend_from_slice(request.draft.tokens());
        tokens
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
        self.scheduled
            .iter()
            .map(ScheduledRequest::num_tokens)
            .sum()
    }
}

/// Decides each step's batch over the engine's requests, and keeps the KV accounting.
#[derive(Debug)]
pub(crate) struct Scheduler {
    config: SchedulerConfig,
    kv: KvBudget,
    pending_kv_commands: Vec<KvCommand>,
    /// Queue position of the next request queued at the back (positive, increasing).
    next_back: i64,
    /// Queue position of the next request queued at the front (non-positive, decreasing).
    next_front: i64,
    /// Admission order of the next admitted request.
    next_admission: u64,
}

impl Scheduler {
    /// An empty scheduler.
    pub fn new(config: SchedulerConfig) -> Self {
        Self {
            kv: KvBudget::new(config.max_num_seqs, config.kv_capacity_tokens),
            config,
            pending_kv_commands: Vec::new(),
            next_back: 1,
            next_front: 0,
            next_admission: 0,
        }
    }

    /// Queues a new request (waiting) at the back of the waiting queue.
    pub fn enqueue(&mut self, request: &mut Request) {
        debug_assert!(request.num_tokens() < self.config.max_model_len);
        request.queue_position = self.next_back;
        self.next_back += 1;
    }

    /// Fraction of the KV budget reserved, in [0, 1].
    pub fn kv_usage(&self) -> f64 {
        self.kv.usage()
    }

    /// Decides this step's batch over `requests`; preemptions and admissions are timed at
    /// `now`.
    pub fn schedule(&mut self, requests: &mut Requests, now: Instant) -> SchedulerOutput {
        let mut token_budget = self.config.max_num_batched_tokens;
        let mut scheduled = Vec::new();
        let mut preempted = Vec::new();
        let mut admitted = Vec::new();
        let (mut running, mut waiting): (Vec<&mut Request>, Vec<&mut Request>) =
            requests.iter_mut().partition(|r| r.is_running());
        running.sort_unstable_by_key(|r| r.admission);
        waiting.sort_unstable_by_key(|r| r.queue_position);

        let mut index = 0;
        'running: while index < running.len() && token_budget > 0 {
            let RequestStatus::Running { slot } = running[index].status else {
                break; // The partition above holds running requests only.
            };
            let wanted = self.fit_drafts_to_kv(running[index], slot, token_budget);
            while !self
                .kv
                .try_reserve(slot, running[index].num_computed_tokens + wanted)
            {
                // Preempt the newest running request; it may be this one.
                let Some(victim) = running.pop() else {
                    break 'running;
                };
                preempted.push(victim.id);
                self.preempt(victim, now);
                if running.len() == index {
                    break 'running;
                }
            }
            scheduled.push(self.scheduled_request(running[index], slot, wanted));
            token_budget -= wanted;
            index += 1;
        }

        if preempted.is_empty() {
            for (num_running, request) in (running.len()..).zip(waiting) {
                if token_budget == 0 || num_running >= self.config.max_num_seqs {
                    break;
                }
                let wanted = self.num_tokens_wanted(request).min(token_budget);
                let Some(slot) = self.admit(request, wanted, now) else {
                    break;
                };
                scheduled.push(self.scheduled_request(request, slot, wanted));
                admitted.push(request.id);
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

    /// Records the result of `work` for its `request`: the fed known tokens (and the drafts
    /// `accepted_nodes`, 1-based draft indices in acceptance order: `1..=n` along a chain, a
    /// root-to-node path in a tree) are now in the KV cache, and `new_token_ids` were
    /// generated. Rejected draft rows are rolled back; accepted tree rows are moved up behind
    /// the root; the pending draft is consumed.
    pub fn commit(
        &mut self,
        work: &ScheduledRequest,
        request: &mut Request,
        accepted_nodes: &[usize],
        new_token_ids: &[u32],
    ) {
        debug_assert_eq!(request.num_computed_tokens, work.start_position);
        let num_accepted = accepted_nodes.len();
        debug_assert!(num_accepted <= work.num_draft_tokens);
        let known = work.num_known_tokens;
        request.num_computed_tokens = work.start_position + known + num_accepted;
        request.token_ids.extend_from_slice(new_token_ids);
        request.draft = Default::default();
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

    /// Frees the slot of `request`, which finished or was aborted (it leaves the engine).
    pub fn release(&mut self, request: &mut Request) {
        if let RequestStatus::Running { slot } = request.status {
            request.status = RequestStatus::Waiting;
            self.free_slot(slot);
        }
    }

    /// Tokens `request` would feed with an unlimited token budget: its uncomputed tokens plus
    /// its drafts, the drafts capped so no position reaches `max_model_len`.
    fn num_tokens_wanted(&self, request: &Request) -> usize {
        let room = self
            .config
            .max_model_len
            .saturating_sub(request.num_tokens());
        request.num_uncomputed_tokens() + request.draft.num_tokens().min(room)
    }

    /// Tokens running `request` (in `slot`) feeds this step within `token_budget`: with its drafts when
    /// the KV budget can hold them (they are reserved then), otherwise only its known tokens;
    /// drafts never cause a preemption.
    fn fit_drafts_to_kv(&mut self, request: &Request, slot: usize, token_budget: usize) -> usize {
        let known = request.num_uncomputed_tokens().min(token_budget);
        let wanted = self.num_tokens_wanted(request).min(token_budget);
        if wanted > known
            && !self
                .kv
                .try_reserve(slot, request.num_computed_tokens + wanted)
        {
            return known;
        }
        wanted
    }

    /// Frees `request`'s KV and puts it at the front of the waiting queue.
    fn preempt(&mut self, request: &mut Request, now: Instant) {
        self.release(request);
        request.queue_position = self.next_front;
        self.next_front -= 1;
        request.num_computed_tokens = 0;
        request.draft = Default::default();
        request.num_preemptions += 1;
        request.timing.preempted(now);
    }

    /// Moves waiting `request` to running with `num_new_tokens` reserved; returns its slot,
    /// or `None` (nothing changed) when no slot or not enough KV budget is free.
    fn admit(
        &mut self,
        request: &mut Request,
        num_new_tokens: usize,
        now: Instant,
    ) -> Option<usize> {
        let slot = self.kv.allocate_slot()?;
        if !self.kv.try_reserve(slot, num_new_tokens) {
            self.kv.free(slot);
            return None;
        }
        request.status = RequestStatus::Running { slot };
        request.admission = self.next_admission;
        self.next_admission += 1;
        request.timing.scheduled(now);
        Some(slot)
    }

    /// Releases a slot and tells the model runner to empty it.
    fn free_slot(&mut self, slot: usize) {
        self.kv.free(slot);
        self.pending_kv_commands.push(KvCommand::Reset { slot });
    }

    /// The work item feeding `num_new_tokens` tokens of `request`, running in `slot` (known
    /// tokens first, then drafts); its pending draft is cut to the drafts fed.
    fn scheduled_request(
        &self,
        request: &mut Request,
        slot: usize,
        num_new_tokens: usize,
    ) -> ScheduledRequest {
        let start = request.num_computed_tokens;
        let known = num_new_tokens.min(request.num_uncomputed_tokens());
        let samples = start + known == request.num_tokens();
        let num_draft_tokens = if samples { num_new_tokens - known } else { 0 };
        request.draft.truncate(num_draft_tokens);
        ScheduledRequest {
            request_id: request.id,
            slot,
            start_position: start,
            num_known_tokens: known,
            num_draft_tokens,
            samples,
            is_prefill: start < request.num_prompt_tokens,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pending_draft::PendingDraft;
    use crate::request::tests::request;
    use aquila_spec_decode::proposer::{ChainDraft, Draft};
    use aquila_spec_decode::tree::DraftTree;

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

    /// A scheduler deciding over its own request records.
    struct Harness {
        scheduler: Scheduler,
        requests: Requests,
    }

    impl Harness {
        fn new(config: SchedulerConfig) -> Self {
            Self {
                scheduler: Scheduler::new(config),
                requests: Requests::default(),
            }
        }

        fn add(&mut self, id: RequestId, prompt: Vec<u32>) {
            let mut request = request(id, prompt);
            self.scheduler.enqueue(&mut request);
            self.requests.insert(request);
        }

        fn get(&self, id: RequestId) -> &Request {
            self.requests.get(id).unwrap()
        }

        fn schedule(&mut self) -> SchedulerOutput {
            self.scheduler.schedule(&mut self.requests, Instant::now())
        }

        fn commit(&mut self, work: &ScheduledRequest, accepted: &[usize], new: &[u32]) {
            let request = self.requests.get_mut(work.request_id).unwrap();
            self.scheduler.commit(work, request, accepted, new);
        }

        /// Runs one step in which every sampling request generates token `token`.
        fn step(&mut self, token: u32) -> SchedulerOutput {
            let out = self.schedule();
            for work in &out.scheduled {
                let new: &[u32] = if work.samples { &[token] } else { &[] };
                self.commit(work, &[], new);
            }
            out
        }

        fn remove(&mut self, id: RequestId) {
            let mut request = self.requests.remove(id).unwrap();
            self.scheduler.release(&mut request);
        }

        fn set_chain(&mut self, id: RequestId, tokens: &[u32]) {
            let draft = Draft::Chain(ChainDraft::deterministic(tokens.to_vec()));
            self.requests.get_mut(id).unwrap().draft = PendingDraft::new(draft, 0, 1).unwrap();
        }

        fn set_tree(&mut self, id: RequestId, tree: DraftTree) {
            let root = tree.tokens()[0];
            let draft = Draft::Tree { tree, probs: None };
            self.requests.get_mut(id).unwrap().draft = PendingDraft::new(draft, root, 1).unwrap();
        }

        fn fed(&self, work: &ScheduledRequest) -> Vec<u32> {
            work.fed_tokens(self.get(work.request_id))
        }
    }

    fn ids(out: &SchedulerOutput) -> Vec<RequestId> {
        out.scheduled.iter().map(|s| s.request_id).collect()
    }

    #[test]
    fn admits_up_to_max_num_seqs_then_batches_decodes() {
        let mut h = Harness::new(config(2, 100, 1000));
        for id in 0..3 {
            h.add(id, prompt(4));
        }
        let out = h.step(7);
        assert_eq!(ids(&out), vec![0, 1]);
        assert_eq!(out.admitted, vec![0, 1]);
        assert!(out.scheduled.iter().all(|s| s.samples && s.is_prefill));
        assert_eq!(out.num_batched_tokens(), 8);
        assert_eq!(h.requests.num_waiting(), 1);

        let out = h.step(8);
        assert_eq!(ids(&out), vec![0, 1]);
        assert!(out.admitted.is_empty());
        for work in &out.scheduled {
            assert_eq!(h.fed(work)[..1], [7]);
            assert_eq!(work.num_tokens(), 1);
            assert_eq!(work.start_position, 4);
            assert!(!work.is_prefill);
        }

        h.remove(0);
        let out = h.step(9);
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
        let mut h = Harness::new(config(4, 8, 1000));
        h.add(0, prompt(20));
        h.add(1, prompt(3));
        let out = h.schedule();
        assert_eq!(ids(&out), vec![0]);
        assert_eq!(h.fed(&out.scheduled[0]), prompt(8));
        assert!(!out.scheduled[0].samples);
        h.commit(&out.scheduled[0], &[], &[]);
        let out = h.schedule();
        assert_eq!(h.fed(&out.scheduled[0]), (8..16).collect::<Vec<u32>>());
        h.commit(&out.scheduled[0], &[], &[]);
        let out = h.schedule();
        assert_eq!(
            ids(&out),
            vec![0, 1],
            "the last chunk leaves room for a new request"
        );
        assert_eq!(h.fed(&out.scheduled[0]), (16..20).collect::<Vec<u32>>());
        assert!(out.scheduled[0].samples);
        assert_eq!(h.fed(&out.scheduled[1]), prompt(3));
        for work in &out.scheduled {
            h.commit(work, &[], &[1]);
        }
        assert_eq!(h.get(0).output_token_ids(), &[1]);
        assert!(out.num_batched_tokens() <= 8);
    }

    #[test]
    fn kv_pressure_preempts_the_newest_request_and_recomputes_it() {
        // Three 4-token prompts in 13 KV positions: the third step needs 15.
        let mut h = Harness::new(config(3, 100, 13));
        for id in 0..3 {
            h.add(id, prompt(4));
        }
        h.step(5); // 12 positions reserved, each request has 1 output token.
        let out = h.step(6);
        assert_eq!(out.preempted, vec![2]);
        assert_eq!(ids(&out), vec![0, 1]);
        assert_eq!(
            out.kv_commands,
            vec![KvCommand::Reset { slot: 2 }],
            "the victim's slot is emptied before the forward"
        );
        assert_eq!(h.requests.num_waiting(), 1);
        let victim = h.get(2);
        assert_eq!(victim.num_computed_tokens, 0);
        assert_eq!(
            victim.output_token_ids(),
            &[5],
            "a preempted request keeps its tokens"
        );
        assert_eq!(victim.num_preemptions, 1);

        // The victim waits until enough KV is free.
        let out = h.step(7);
        assert_eq!(ids(&out), vec![0, 1]);
        h.remove(0);
        h.remove(1);
        let out = h.step(8);
        assert_eq!(ids(&out), vec![2]);
        let work = &out.scheduled[0];
        assert_eq!(
            h.fed(work)[..5],
            [0, 1, 2, 3, 5],
            "prompt and output are recomputed"
        );
        assert!(work.samples);
        assert_eq!(h.get(2).output_token_ids(), &[5, 8]);
    }

    #[test]
    fn a_request_that_cannot_fit_beside_older_ones_preempts_itself() {
        let mut h = Harness::new(config(2, 100, 9));
        h.add(0, prompt(4));
        h.add(1, prompt(4));
        h.step(1); // 8 of 9 positions.
        let out = h.step(2); // Request 0 takes the last position.
        assert_eq!(out.preempted, vec![1]);
        assert_eq!(ids(&out), vec![0]);
        assert_eq!(h.requests.num_running(), 1);
    }

    #[test]
    fn preempted_requests_are_readmitted_before_newer_ones() {
        let mut h = Harness::new(config(2, 100, 9));
        h.add(0, prompt(4));
        h.add(1, prompt(4));
        h.step(1);
        h.add(2, prompt(2));
        assert_eq!(h.step(2).preempted, vec![1]);
        h.remove(0);
        let out = h.step(3);
        assert_eq!(
            ids(&out),
            vec![1, 2],
            "the victim is at the front of the queue"
        );
    }

    #[test]
    fn scheduling_is_deterministic() {
        let run = || {
            let mut h = Harness::new(config(3, 7, 20));
            for id in 0..5 {
                h.add(id, prompt(3 + id as usize));
            }
            let mut trace = Vec::new();
            for token in 0..12 {
                let out = h.step(token);
                trace.push((ids(&out), out.preempted.clone(), out.kv_commands.clone()));
                let finished: Vec<RequestId> = out
                    .scheduled
                    .iter()
                    .filter(|w| h.get(w.request_id).output_token_ids().len() >= 3)
                    .map(|w| w.request_id)
                    .collect();
                for id in finished {
                    h.remove(id);
                }
            }
            trace
        };
        assert_eq!(run(), run());
    }

    #[test]
    fn drafts_are_fed_after_the_root_and_rejected_rows_rolled_back() {
        let mut h = Harness::new(config(1, 100, 100));
        h.add(0, prompt(4));
        h.step(9);
        h.set_chain(0, &[20, 21, 22]);
        let out = h.schedule();
        let work = out.scheduled[0].clone();
        assert_eq!(h.fed(&work), vec![9, 20, 21, 22]);
        assert_eq!(work.num_draft_tokens, 3);
        assert_eq!(work.num_logits_rows(), 4);
        // One draft accepted: root and draft 20 stay in KV, 20 and the bonus 30 are emitted.
        h.commit(&work, &[1], &[20, 30]);
        let request = h.get(0);
        assert_eq!(request.num_computed_tokens, 6);
        assert_eq!(request.output_token_ids(), &[9, 20, 30]);
        assert_eq!(request.draft, PendingDraft::default());
        let out = h.schedule();
        assert_eq!(
            out.kv_commands,
            vec![KvCommand::Truncate { slot: 0, len: 6 }]
        );
        assert_eq!(h.fed(&out.scheduled[0]), vec![30]);
        assert!(
            (h.scheduler.kv_usage() - 0.07).abs() < 1e-12,
            "7 of 100 positions"
        );
    }

    #[test]
    fn drafts_are_capped_at_max_model_len() {
        let mut h = Harness::new(SchedulerConfig {
            max_model_len: 7,
            ..config(1, 100, 100)
        });
        h.add(0, prompt(5));
        h.step(9); // 6 tokens: room for 1 draft.
        h.set_chain(0, &[20, 21, 22]);
        let out = h.schedule();
        assert_eq!(h.fed(&out.scheduled[0]), vec![9, 20]);
    }

    #[test]
    fn removing_a_waiting_request_needs_no_kv_reset() {
        let mut h = Harness::new(config(1, 100, 100));
        h.add(0, prompt(4));
        h.add(1, prompt(4));
        h.step(1);
        assert_eq!(h.get(1).status, RequestStatus::Waiting);
        h.remove(1);
        assert!(h.requests.get(1).is_none());
        let out = h.schedule();
        assert!(out.kv_commands.is_empty());
        assert_eq!(h.requests.num_waiting(), 0);
        assert!(!h.requests.is_empty());
        assert!(h.scheduler.kv_usage() > 0.0);
    }

    #[test]
    fn drafts_that_do_not_fit_the_kv_budget_are_dropped_without_preemption() {
        let mut h = Harness::new(config(2, 100, 11));
        h.add(0, prompt(4));
        h.add(1, prompt(4));
        h.step(7);
        h.set_chain(0, &[1, 2, 3]);
        h.set_chain(1, &[1]);
        // Request 0 would need 4 + 1 + 3 = 8 positions (12 in all): it feeds its root only;
        // request 1's root and draft fit in the rest.
        let out = h.schedule();
        assert!(out.preempted.is_empty());
        assert_eq!(h.fed(&out.scheduled[0]), vec![7]);
        assert_eq!(out.scheduled[0].num_draft_tokens, 0);
        assert_eq!(h.fed(&out.scheduled[1]), vec![7, 1]);
        assert_eq!(out.scheduled[1].num_draft_tokens, 1);
    }

    #[test]
    fn drafts_are_cut_to_the_token_budget_and_rolled_back_when_rejected() {
        let mut h = Harness::new(config(1, 3, 100));
        h.add(0, prompt(2));
        h.step(7);
        h.set_chain(0, &[1, 2, 3]);
        let out = h.schedule();
        let work = &out.scheduled[0];
        assert_eq!(h.fed(work), vec![7, 1, 2]);
        assert_eq!(work.num_draft_tokens, 2);
        // One draft accepted: the root and draft 1 stay, draft 2's row is rolled back.
        h.commit(work, &[1], &[1, 9]);
        let out = h.schedule();
        assert_eq!(
            out.kv_commands,
            vec![KvCommand::Truncate { slot: 0, len: 4 }]
        );
        assert_eq!(out.scheduled[0].start_position, 4);
        assert_eq!(h.fed(&out.scheduled[0]), vec![9], "drafts were consumed");
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
        let mut h = Harness::new(config(1, 4, 100));
        h.add(0, prompt(2));
        h.step(7);
        h.set_tree(0, tree());
        let out = h.schedule();
        let work = &out.scheduled[0];
        assert_eq!(
            h.fed(work),
            vec![7, 1, 2, 3],
            "cut to the token budget of 4"
        );
        assert_eq!(h.get(0).draft.tree(), Some(&tree().prefix(4)));
        // Path root -> 2 -> 3 accepted: rows 2 and 3 of the tree move behind the root.
        h.commit(work, &[2, 3], &[2, 3, 5]);
        let request = h.get(0);
        assert_eq!(request.num_computed_tokens, 5);
        assert!(request.draft.tree().is_none());
        let out = h.schedule();
        assert_eq!(
            out.kv_commands,
            vec![KvCommand::Gather {
                slot: 0,
                start: 2,
                rows: vec![0, 2, 3]
            }]
        );
        assert_eq!(out.scheduled[0].start_position, 5);
        assert_eq!(h.fed(&out.scheduled[0]), vec![5]);
    }

    #[test]
    fn a_tree_path_along_the_node_order_is_a_plain_truncation() {
        let mut h = Harness::new(config(1, 100, 100));
        h.add(0, prompt(2));
        h.step(7);
        h.set_tree(0, tree());
        let out = h.schedule();
        h.commit(&out.scheduled[0], &[1], &[1, 6]);
        assert_eq!(
            h.schedule().kv_commands,
            vec![KvCommand::Truncate { slot: 0, len: 4 }]
        );
    }
}
