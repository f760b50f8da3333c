//! How many tokens each running request drafts for the coming step.
//!
//! With [`DraftLength::Adaptive`] the policy maximizes the expected output tokens per second of
//! the step: a request drafting `n` tokens is expected to emit `1 + g_1 + ... + g_n` tokens
//! (`g_j`: the acceptance of draft row `j` expected from the engine-wide estimate and the
//! persistent share of the request's own deviation from it, [`AcceptancePrior::expected_gains`]),
//! and the step is expected to take the forward over all rows plus the drafting call at the
//! deepest draft plus the rest of a step ([`StepCosts`]). Every draft row of every request is a
//! candidate; taken in order of falling `g`, the best number of them decides each request's
//! length. A large batch, whose extra rows cost nearly a full row each, drafts little or
//! nothing; one request with a good drafter drafts the maximum. Requests whose drafts keep
//! failing (where failures persist, as with n-gram lookups) stop drafting. A request that does
//! not draft is probed with one draft token now and then, wherever a sure draft token would pay
//! for its row, so that no estimate stays stale below what a row needs; the probes of all
//! requests together cost about a hundredth of a step. A [`GoodputGuard`] checks the model
//! against the tokens per second drafting steps actually delivered (a step whose drafting call
//! asked for drafts counts as drafting, whatever its gated chains kept, unless that call cost
//! next to nothing and drafted no token), and stops drafting at batch sizes where it delivered
//! clearly less than plain decoding. While nobody drafts (more requests run than
//! `disable_by_batch_size`, or the guard's verdict holds), the plan says drafting is suspended
//! ([`DraftPlan::suspended`]): a draft model then leaves the rows of the pause until its
//! requests draft again, and the drafting call that ends the pause, which may take them all
//! in, is neither priced nor charged to the guard.
//!
//! A drafter that reports its confidence in each token (EAGLE chains, n-gram lookups) is gated
//! per token unless a minimum draft length is set: once the policy's [`ConfidenceCalibration`]
//! has seen enough verification outcomes, a drafting request may draft up to its cap, and its
//! chain ends where the next token's calibrated path probability no longer covers the marginal
//! cost of its verification row and drafting step, valued at the step's expected tokens per
//! second ([`StopThresholds`]; each chain position's rows priced where they land in the
//! forward). Draft rows a gated
//! chain did not reach count as rejected in the acceptance estimates, which therefore measure
//! the gain of allowing a row. Where drafting itself costs next to nothing (lookups), every
//! request asks for a gated chain, whatever its estimate: the gate decides per token. EAGLE-2
//! trees are gated node by node under the same thresholds, their `n`-th best node priced as a
//! chain's `n`-th token, and their nodes' outcomes calibrate the same confidences
//! ([`DraftPolicy::observe_tree`]).

use aquila_spec_decode::proposer::{ChainStop, ConfidenceCalibration, DroppedToken};
use aquila_spec_decode::tree::DraftTree;

use crate::acceptance::{AcceptanceEstimate, AcceptancePrior, MAX_PROBE_INTERVAL};
use crate::config::DraftLength;
use crate::goodput_guard::{Allowance, DecodeStep, GoodputGuard, SoleRequest};
use crate::output::RequestId;
use crate::step_costs::{StepCosts, StepTiming};

/// Verification outcomes of confident drafts the calibration needs before chains are gated.
const MIN_CALIBRATION_OUTCOMES: u64 = 32;

/// A drafting call that costs less than this share of a one-row forward is free.
const FREE_DRAFTING_SHARE: f64 = 0.02;

/// Share of a step's expected time that the probes of requests which do not draft may cost
/// together, on average: it sets the shortest interval between two probes of one request.
const PROBE_BUDGET: f64 = 0.01;

/// Fewest steps between two probes of one request.
const MIN_PROBE_INTERVAL: u32 = 4;

/// One running request about to draft.
#[derive(Debug)]
pub(crate) struct DraftCandidate<'a> {
    /// The request's id.
    pub request_id: RequestId,
    /// Most draft tokens it may get (the drafter's maximum, or less near the context end).
    pub cap: usize,
    /// Its acceptance estimate (probes are recorded in it).
    pub acceptance: &'a mut AcceptanceEstimate,
}

/// The expected gains (tokens) a confident chain's token must reach in the coming step, per
/// chain position: the marginal costs of its verification row and of a drafting step, valued
/// at the step's expected tokens per second. The rows of a position are priced where they land
/// in the forward: after the roots and the rows of every gated chain's earlier positions, so
/// that a first draft token, whose row a forward that only streams the weights nearly absorbs,
/// is not held to the price of a later one.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct StopThresholds {
    /// Per position: the value of its verification row.
    pub keep_above: Vec<f64>,
    /// Per position: the value of its verification row and of a drafting step.
    pub extend_above: Vec<f64>,
}

/// The policy's drafting orders for one step.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct DraftPlan {
    /// Most draft tokens of each candidate, in order.
    pub lengths: Vec<usize>,
    /// Per candidate: whether its chain is gated by confidence (not for probes).
    pub gated: Vec<bool>,
    /// The thresholds of gated chains; `None` when no chain is gated.
    pub thresholds: Option<StopThresholds>,
    /// Whether drafting is suspended for every request until further notice (more requests
    /// run than the batch-size limit, or the goodput guard stopped drafting at this batch size
    /// until its next exploration), so that a proposer may leave the rows of the pause for
    /// later.
    pub suspended: bool,
}

impl DraftPlan {
    fn ungated(lengths: Vec<usize>) -> Self {
        Self {
            gated: vec![false; lengths.len()],
            lengths,
            thresholds: None,
            suspended: false,
        }
    }

    fn suspended(candidates: usize) -> Self {
        Self {
            suspended: true,
            ..Self::ungated(vec![0; candidates])
        }
    }
}

/// The draft-length policy of one engine.
#[derive(Clone, Debug)]
pub(crate) struct DraftPolicy {
    length: DraftLength,
    /// Speculate only while at most this many requests run.
    max_batch: Option<usize>,
    /// The drafter's deepest draft position (a tree of `n` nodes is at most `n` deep).
    max_depth: usize,
    costs: StepCosts,
    prior: AcceptancePrior,
    guard: GoodputGuard,
    calibration: ConfidenceCalibration,
    /// Whether the last drafting call asked any request for a draft (a probe included), so
    /// that the guard charges the step verifying its drafts to drafting even where a gated
    /// chain drafted nothing; false after a free call that drafted nothing.
    asked: bool,
    /// Whether the last plan suspended drafting ([`DraftPlan::suspended`]).
    suspended: bool,
    /// Whether the last drafting call was the first after a suspension: a proposer may have
    /// taken in every row of the pause in it, so its seconds say nothing of what drafting
    /// costs and are neither priced nor charged to the step that verifies its drafts.
    resumed: bool,
}

impl DraftPolicy {
    /// The policy of a drafter proposing at most `max_draft_tokens` per request and step, at
    /// most `max_depth` deep; no request drafts while more than `max_batch` run.
    pub fn new(
        length: DraftLength,
        max_batch: Option<usize>,
        max_draft_tokens: usize,
        max_depth: usize,
    ) -> Self {
        Self {
            length,
            max_batch,
            max_depth,
            costs: StepCosts::default(),
            prior: AcceptancePrior::new(max_draft_tokens),
            guard: GoodputGuard::default(),
            calibration: ConfidenceCalibration::new(),
            asked: false,
            suspended: false,
            resumed: false,
        }
    }

    /// The acceptance estimate a new request starts with.
    pub fn new_estimate(&self) -> AcceptanceEstimate {
        self.prior.estimate()
    }

    /// Takes in one verification of a request's `fed` draft rows, of which the 1-based rows
    /// `accepted` were accepted; `confidences` are the drafter's for a chain's tokens (empty
    /// when it gave none).
    pub fn observe_verification(
        &mut self,
        estimate: &mut AcceptanceEstimate,
        fed: usize,
        accepted: &[usize],
        confidences: &[f32],
    ) {
        tracing::debug!(fed, accepted = accepted.len(), "draft verified");
        self.prior.observe(estimate, 0..fed, accepted);
        estimate.observe(fed, accepted);
        if confidences.len() >= fed {
            self.calibration
                .observe_chain(&confidences[..fed], accepted.len());
        }
    }

    /// Takes in a verified draft tree whose `accepted` nodes (in order from the root) were
    /// accepted: the calibration of tree nodes' confidences.
    pub fn observe_tree(&mut self, tree: &DraftTree, accepted: &[usize]) {
        self.calibration.observe_tree(tree, accepted);
    }

    /// Takes in a token a gate dropped right after a draft of `position` tokens that was
    /// accepted whole, and whether the target's next token matched it.
    pub fn observe_dropped(&mut self, dropped: DroppedToken, position: usize, accepted: bool) {
        self.calibration
            .observe_token(dropped.confidence, position, accepted);
    }

    /// Takes in a gated chain that ended after `drafted` of its `allowed` tokens: the rows it
    /// did not reach count as rejected.
    pub fn observe_gated_end(
        &mut self,
        estimate: &mut AcceptanceEstimate,
        drafted: usize,
        allowed: usize,
    ) {
        if drafted < allowed {
            self.prior.observe(estimate, drafted..allowed, &[]);
            estimate.observe_unreached(drafted..allowed);
        }
    }

    /// The stop rule of gated chains under `thresholds`.
    pub fn chain_stop<'a>(&'a self, thresholds: &'a StopThresholds) -> ChainStop<'a> {
        ChainStop {
            calibration: &self.calibration,
            keep_above: &thresholds.keep_above,
            extend_above: &thresholds.extend_above,
        }
    }

    /// Takes in one step's timings (after its drafting call). A drafting call that costs next
    /// to nothing and drafted no token leaves the next step a plain one, and the guard counts
    /// it as such: its plain rate is then measured without stopping anyone's drafts, and its
    /// drafting rate describes the steps that verified drafts. The call that ended a
    /// suspension is neither priced nor charged to the guard, nor is the step verifying its
    /// drafts measured.
    pub fn observe_step(&mut self, timing: &StepTiming) {
        if self.resumed {
            self.costs.observe_without_drafting(timing);
            self.guard.discard_draft_call();
        } else {
            self.costs.observe(timing);
            self.guard.observe_draft_call(timing.draft.as_secs_f64());
        }
        if timing.draft_tokens == 0 && self.drafting_is_free() {
            self.asked = false;
        }
    }

    /// Takes in a step's result before its drafting call: `Some` for a step in which every
    /// request decoded, `None` for a step with prefill work, which is not compared.
    pub fn observe_decode(&mut self, step: Option<&DecodeStep>) {
        match step {
            Some(step) => self.guard.observe_decode(step, self.asked),
            None => self.guard.skip_step(),
        }
    }

    /// The drafting call's depth for drafts of `lengths` tokens.
    pub fn draft_depth(&self, lengths: &[usize]) -> usize {
        lengths
            .iter()
            .map(|&n| n.min(self.max_depth))
            .max()
            .unwrap_or(0)
    }

    /// The number of tokens each candidate drafts, in order, while `num_running` requests run
    /// and the coming step also feeds `other_rows` rows besides the candidates' roots and
    /// drafts, and which chains are gated by confidence.
    pub fn choose(
        &mut self,
        num_running: usize,
        other_rows: usize,
        candidates: &mut [DraftCandidate<'_>],
    ) -> DraftPlan {
        let plan = self.plan(num_running, other_rows, candidates);
        self.resumed = self.suspended && !plan.suspended;
        self.suspended = plan.suspended;
        self.asked = plan.lengths.iter().any(|&n| n > 0);
        plan
    }

    /// [`DraftPolicy::choose`]'s plan, before it is remembered whether the plan asked for drafts.
    fn plan(
        &mut self,
        num_running: usize,
        other_rows: usize,
        candidates: &mut [DraftCandidate<'_>],
    ) -> DraftPlan {
        if self.max_batch.is_some_and(|limit| num_running > limit) {
            return DraftPlan::suspended(candidates.len());
        }
        let min_draft_tokens = match self.length {
            DraftLength::Fixed => {
                return DraftPlan::ungated(candidates.iter().map(|c| c.cap).collect())
            }
            DraftLength::Adaptive { min_draft_tokens } => min_draft_tokens,
        };
        // The guard prices plain decoding only for a request running alone.
        let sole = match candidates {
            [only] if num_running == 1 => Some(SoleRequest {
                id: only.request_id,
                plain_step_seconds: self.costs.plain_step(),
            }),
            _ => None,
        };
        if self.guard.allowance(num_running, sole) == Allowance::Plain {
            // Until the guard's next exploration nobody drafts, unless a minimum is set.
            if min_draft_tokens == 0 {
                return DraftPlan::suspended(candidates.len());
            }
            return DraftPlan::ungated(
                candidates
                    .iter()
                    .map(|c| c.cap.min(min_draft_tokens))
                    .collect(),
            );
        }
        let Choice {
            mut lengths,
            rate,
            probe_every,
        } = self.best_lengths(other_rows, candidates, min_draft_tokens);
        let may_gate = rate.is_some()
            && min_draft_tokens == 0
            && self.calibration.observed() >= MIN_CALIBRATION_OUTCOMES;
        let free_drafts = may_gate && self.drafting_is_free();
        let chains = lengths
            .iter()
            .zip(candidates.iter())
            .filter(|&(&length, candidate)| length > 0 || (free_drafts && candidate.cap > 0))
            .count();
        let depth = candidates.iter().map(|c| c.cap).max().unwrap_or(0);
        let roots = other_rows + candidates.len();
        let thresholds = rate
            .filter(|_| may_gate && chains > 0)
            .and_then(|rate| self.stop_thresholds(roots, chains, depth, rate))
            .filter(|t| {
                let first = t.extend_above.first().copied().unwrap_or(0.0);
                let gated = first < self.calibration.mean_acceptance();
                if !gated {
                    tracing::debug!(
                        extend_above = first,
                        mean_acceptance = self.calibration.mean_acceptance(),
                        outcomes = self.calibration.observed(),
                        "chains not gated"
                    );
                }
                gated
            });
        let free_gated_drafts = thresholds.is_some() && free_drafts;
        let mut gated = vec![false; candidates.len()];
        let drafter_useful = self.prior.drafter_useful();
        for ((length, gated), candidate) in lengths.iter_mut().zip(&mut gated).zip(candidates) {
            let drafts = *length > 0 || (free_gated_drafts && candidate.cap > 0);
            let probe = candidate
                .acceptance
                .drafts_or_probes(drafts, probe_every, drafter_useful);
            if probe && candidate.cap > 0 {
                *length = 1;
            } else if drafts && thresholds.is_some() {
                (*length, *gated) = (candidate.cap, true);
            }
        }
        DraftPlan {
            lengths,
            gated,
            thresholds,
            suspended: false,
        }
    }

    /// Whether a drafting call costs next to nothing against a forward (lookups): every
    /// request may then ask for a gated chain, since the gate only lets through the tokens
    /// that pay for their rows.
    fn drafting_is_free(&self) -> bool {
        let Some(forward) = self.costs.forward_curve(1, 0) else {
            return false;
        };
        self.costs.draft(1, 1) < FREE_DRAFTING_SHARE * forward[0]
    }

    /// The thresholds of gated chains for `chains` chains of at most `depth` tokens after
    /// `roots` rows, with time valued at `rate` tokens per second; `None` before any timing.
    /// The rows of position `j` (1-based) are priced as the forward's growth from
    /// `roots + chains * (j - 1)` to `roots + chains * j` rows, shared by the chains.
    fn stop_thresholds(
        &self,
        roots: usize,
        chains: usize,
        depth: usize,
        rate: f64,
    ) -> Option<StopThresholds> {
        let forward = self.costs.forward_curve(roots, chains * depth)?;
        let draft_step = self.costs.draft(2, 2) - self.costs.draft(1, 1);
        let keep_above: Vec<f64> = (1..=depth)
            .map(|position| {
                let growth = forward[chains * position] - forward[chains * (position - 1)];
                growth / chains as f64 * rate
            })
            .collect();
        let extend_above = keep_above
            .iter()
            .map(|keep| keep + draft_step * rate)
            .collect();
        Some(StopThresholds {
            keep_above,
            extend_above,
        })
    }

    /// The lengths that maximize expected tokens per second (all caps before any timing), the
    /// expected tokens per second of that choice, and how often requests that do not draft are
    /// probed.
    fn best_lengths(
        &self,
        other_rows: usize,
        candidates: &[DraftCandidate<'_>],
        min_draft_tokens: usize,
    ) -> Choice {
        let floors: Vec<usize> = candidates
            .iter()
            .map(|c| c.cap.min(min_draft_tokens))
            .collect();
        let gains: Vec<Vec<f64>> = candidates
            .iter()
            .map(|c| self.prior.expected_gains(c.acceptance))
            .collect();
        let gain = |request: usize, row: usize| gains[request].get(row - 1).copied().unwrap_or(0.0);
        // Rows beyond each floor, best first; a request's rows stay in order (ties by row).
        let mut rows: Vec<(f64, usize, usize)> = candidates
            .iter()
            .enumerate()
            .flat_map(|(request, candidate)| {
                (floors[request] + 1..=candidate.cap).map(move |row| (request, row))
            })
            .map(|(request, row)| (gain(request, row), row, request))
            .collect();
        rows.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        let base_rows = other_rows + candidates.len() + floors.iter().sum::<usize>();
        let Some(forward) = self.costs.forward_curve(base_rows, rows.len() + 1) else {
            return Choice {
                lengths: candidates.iter().map(|c| c.cap).collect(),
                rate: None,
                probe_every: None,
            };
        };
        let mut tokens: f64 = floors
            .iter()
            .enumerate()
            .map(|(request, &floor)| 1.0 + (1..=floor).map(|row| gain(request, row)).sum::<f64>())
            .sum();
        let mut depth = self.draft_depth(&floors);
        let floor_tokens: usize = floors.iter().sum();
        let cost = |extra: usize, depth: usize| {
            forward[extra] + self.costs.draft(depth, floor_tokens + extra) + self.costs.other()
        };
        let minimum_seconds = cost(0, depth);
        let minimum_rate = tokens / minimum_seconds;
        // The highest expected rate wins, without a margin for the minimum: at one request in
        // flight a draft token that pays gains a few percent, which a margin would give away.
        let (mut best, mut best_rate, mut best_seconds) = (0, minimum_rate, minimum_seconds);
        let base_tokens = tokens;
        let mut best_tokens = tokens;
        for (taken, &(gain, row, _)) in rows.iter().enumerate() {
            tokens += gain;
            depth = depth.max(row.min(self.max_depth));
            let seconds = cost(taken + 1, depth);
            if tokens / seconds > best_rate {
                (best, best_rate, best_seconds) = (taken + 1, tokens / seconds, seconds);
                best_tokens = tokens;
            }
        }
        tracing::debug!(
            candidates = candidates.len(),
            draft_rows = best,
            expected_accepted = best_tokens - base_tokens,
            seconds = best_seconds,
            plain_seconds = minimum_seconds,
            "draft choice"
        );
        let row = forward[best + 1] - forward[best];
        let mut lengths = floors;
        for &(_, _, request) in &rows[..best] {
            lengths[request] += 1;
        }
        let idle = lengths.iter().filter(|&&n| n == 0).count();
        let probe_every = self.probe_every(idle, row, best_rate, best_seconds);
        Choice {
            lengths,
            rate: Some(best_rate),
            probe_every,
        }
    }

    /// The shortest interval between two probes of one request while `idle` requests do not
    /// draft, a verification row costs `row` seconds, and the chosen step is expected to take
    /// `step_seconds` at `rate` tokens per second: so that their probes together cost about
    /// [`PROBE_BUDGET`] of a step. `None` where a sure draft token would not pay for its row
    /// and a one-token drafting call, so no estimate could make a request draft.
    fn probe_every(&self, idle: usize, row: f64, rate: f64, step_seconds: f64) -> Option<u32> {
        let probe_seconds = row + self.costs.draft(1, 1);
        if idle == 0 || probe_seconds * rate >= 1.0 || step_seconds <= 0.0 {
            return None;
        }
        let interval = idle as f64 * probe_seconds / (PROBE_BUDGET * step_seconds);
        Some((interval.ceil() as u32).clamp(MIN_PROBE_INTERVAL, MAX_PROBE_INTERVAL))
    }
}

/// What [`DraftPolicy::best_lengths`] chose.
struct Choice {
    /// Most draft tokens of each candidate, in order.
    lengths: Vec<usize>,
    /// The expected tokens per second of that choice; `None` before any timing.
    rate: Option<f64>,
    /// The shortest interval between two probes of one request; `None` where no probe could
    /// change the choice.
    probe_every: Option<u32>,
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use aquila_spec_decode::proposer::ChainStep;

    const ADAPTIVE: DraftLength = DraftLength::Adaptive {
        min_draft_tokens: 0,
    };

    /// A machine whose forward costs `floor_ms` up to `knee` rows, then grows by `row_ms` per
    /// row (memory-bound, then compute-bound), with free drafting.
    fn measured(policy: &mut DraftPolicy, floor_ms: f64, knee: usize, row_ms: f64) {
        for rows in 1..=128_usize {
            let ms = floor_ms + row_ms * rows.saturating_sub(knee) as f64;
            policy.observe_step(&StepTiming {
                rows,
                forward: Duration::from_secs_f64(ms / 1e3),
                draft_depth: 0,
                draft_tokens: 0,
                draft: Duration::ZERO,
                other: Duration::ZERO,
                decode_rows_only: true,
            });
        }
    }

    fn estimates(count: usize, rates: &[f64]) -> Vec<AcceptanceEstimate> {
        (0..count)
            .map(|_| AcceptanceEstimate::new(rates.to_vec()))
            .collect()
    }

    /// The policy's plan for `estimates`, one running request each, every one capped at `cap`.
    fn plan_all(
        policy: &mut DraftPolicy,
        estimates: &mut [AcceptanceEstimate],
        cap: usize,
    ) -> DraftPlan {
        let running = estimates.len();
        let mut candidates: Vec<DraftCandidate<'_>> = estimates
            .iter_mut()
            .map(|acceptance| DraftCandidate {
                request_id: 0,
                cap,
                acceptance,
            })
            .collect();
        policy.choose(running, 0, &mut candidates)
    }

    fn choose(
        policy: &mut DraftPolicy,
        estimates: &mut [AcceptanceEstimate],
        cap: usize,
    ) -> Vec<usize> {
        plan_all(policy, estimates, cap).lengths
    }

    #[test]
    fn one_request_with_a_good_drafter_drafts_the_maximum() {
        let mut policy = DraftPolicy::new(ADAPTIVE, None, 3, 3);
        measured(&mut policy, 25.0, 8, 3.0);
        let mut one = estimates(1, &[0.7, 0.5, 0.35]);
        assert_eq!(choose(&mut policy, &mut one, 3), vec![3]);
    }

    #[test]
    fn a_large_compute_bound_batch_drafts_less_or_not_at_all() {
        let mut policy = DraftPolicy::new(ADAPTIVE, None, 3, 3);
        measured(&mut policy, 25.0, 12, 3.0);
        let mut sixteen = estimates(16, &[0.4, 0.15, 0.05]);
        let lengths = choose(&mut policy, &mut sixteen, 3);
        assert!(lengths.iter().all(|&n| n == 0), "{lengths:?}");
        let mut eight = estimates(8, &[0.9, 0.8, 0.6]);
        let lengths = choose(&mut policy, &mut eight, 3);
        let total: usize = lengths.iter().sum();
        assert!(total > 0 && total < 24, "{lengths:?}");
    }

    #[test]
    fn better_requests_draft_first() {
        let mut policy = DraftPolicy::new(ADAPTIVE, None, 3, 3);
        measured(&mut policy, 25.0, 2, 3.0);
        let mut mixed = estimates(4, &[0.05, 0.0, 0.0]);
        mixed[2] = AcceptanceEstimate::new(vec![0.95, 0.9, 0.85]);
        let lengths = choose(&mut policy, &mut mixed, 3);
        assert_eq!(lengths, vec![0, 0, 3, 0]);
    }

    #[test]
    fn a_perfect_drafter_drafts_the_maximum_even_in_a_batch() {
        let mut policy = DraftPolicy::new(ADAPTIVE, None, 4, 4);
        measured(&mut policy, 25.0, 8, 2.0);
        // The engine has seen every draft accepted, so new requests start out perfect.
        for _ in 0..200 {
            let mut request = policy.new_estimate();
            policy.observe_verification(&mut request, 4, &[1, 2, 3, 4], &[]);
        }
        let mut perfect: Vec<AcceptanceEstimate> = (0..8).map(|_| policy.new_estimate()).collect();
        assert_eq!(choose(&mut policy, &mut perfect, 4), vec![4; 8]);
    }

    #[test]
    fn drafts_that_are_never_accepted_stop_and_are_only_probed_rarely() {
        let mut policy = DraftPolicy::new(ADAPTIVE, None, 3, 3);
        measured(&mut policy, 25.0, 8, 3.0);
        let mut estimate = policy.new_estimate();
        let mut drafted = Vec::new();
        for _ in 0..300 {
            let n = choose(&mut policy, std::slice::from_mut(&mut estimate), 3)[0];
            drafted.push(n);
            if n > 0 {
                policy.observe_verification(&mut estimate, n, &[], &[]);
            }
        }
        let early: usize = drafted[..20].iter().sum();
        let late: usize = drafted[100..].iter().sum();
        assert!(early > 0, "a new engine tries its drafter");
        assert!(
            late <= 200 / 64 + 1,
            "after a few steps only rare one-token probes remain: {late} tokens in 200 steps"
        );
        assert!(drafted[100..].iter().all(|&n| n <= 1));
    }

    /// Takes in `steps` one-row steps of a 25 ms forward after a drafting call of `draft_ms`.
    fn drafting_costs(policy: &mut DraftPolicy, draft_ms: u64, steps: usize) {
        for _ in 0..steps {
            policy.observe_step(&StepTiming {
                rows: 1,
                forward: Duration::from_millis(25),
                draft_depth: 1,
                draft_tokens: 1,
                draft: Duration::from_millis(draft_ms),
                other: Duration::ZERO,
                decode_rows_only: true,
            });
        }
    }

    #[test]
    fn a_request_just_below_what_a_row_needs_is_still_probed_now_and_then() {
        let mut policy = DraftPolicy::new(ADAPTIVE, None, 3, 3);
        measured(&mut policy, 25.0, 8, 3.0);
        // An 8 ms drafting call against a 25 ms forward: a first row accepted three times in
        // ten does not pay for it, but a sure one would.
        drafting_costs(&mut policy, 8, 20);
        for i in 0..200 {
            let mut request = policy.new_estimate();
            let accepted: &[usize] = if i % 10 < 3 { &[1] } else { &[] };
            policy.observe_verification(&mut request, 1, accepted, &[]);
        }
        let mut estimate = policy.new_estimate();
        let drafted: Vec<usize> = (0..256)
            .map(|_| choose(&mut policy, std::slice::from_mut(&mut estimate), 3)[0])
            .collect();
        let probes = drafted.iter().filter(|&&n| n == 1).count();
        assert!(drafted.iter().all(|&n| n <= 1), "{drafted:?}");
        assert!(
            (2..=256 / MIN_PROBE_INTERVAL as usize / 2).contains(&probes),
            "its stale estimate is checked, at a small share of the steps: {probes} probes"
        );
        // Where a row costs more than a sure token brings, nobody is probed.
        let mut crowded = DraftPolicy::new(ADAPTIVE, None, 3, 3);
        measured(&mut crowded, 25.0, 0, 30.0);
        drafting_costs(&mut crowded, 8, 20);
        let mut estimates = estimates(4, &[0.3, 0.0, 0.0]);
        for _ in 0..256 {
            assert_eq!(choose(&mut crowded, &mut estimates, 3), vec![0; 4]);
        }
    }

    #[test]
    fn fixed_length_and_the_batch_size_limit() {
        let mut fixed = DraftPolicy::new(DraftLength::Fixed, Some(2), 3, 3);
        let mut two = estimates(2, &[0.0; 3]);
        let running = 2;
        let mut candidates: Vec<DraftCandidate<'_>> = two
            .iter_mut()
            .zip([3, 1])
            .map(|(acceptance, cap)| DraftCandidate {
                request_id: 0,
                cap,
                acceptance,
            })
            .collect();
        let plan = fixed.choose(running, 0, &mut candidates);
        assert_eq!(plan, DraftPlan::ungated(vec![3, 1]));
        let plan = fixed.choose(running + 1, 0, &mut candidates);
        assert_eq!(plan, DraftPlan::suspended(2));
    }

    #[test]
    fn the_call_that_ends_a_suspension_is_not_priced_as_drafting() {
        let mut policy = DraftPolicy::new(DraftLength::Fixed, Some(1), 3, 3);
        measured(&mut policy, 25.0, 8, 3.0);
        drafting_costs(&mut policy, 2, 40);
        let price = policy.costs.draft(1, 1);
        let mut estimates = estimates(2, &[0.5; 3]);
        assert!(plan_all(&mut policy, &mut estimates, 3).suspended);
        // One request left: it drafts again, and its first call takes in the pause's rows.
        let plan = plan_all(&mut policy, &mut estimates[..1], 3);
        assert_eq!((plan.lengths, plan.suspended), (vec![3], false));
        drafting_costs(&mut policy, 500, 1);
        assert_eq!(policy.costs.draft(1, 1), price);
        // The calls after it are priced.
        plan_all(&mut policy, &mut estimates[..1], 3);
        drafting_costs(&mut policy, 500, 1);
        assert!(policy.costs.draft(1, 1) > price);
    }

    #[test]
    fn a_verdict_against_drafting_suspends_it_until_the_guards_next_exploration() {
        let mut policy = DraftPolicy::new(ADAPTIVE, None, 3, 3);
        measured(&mut policy, 25.0, 8, 3.0);
        let mut four = estimates(4, &[0.95; 3]);
        // Drafting steps deliver the plain steps' 4 tokens in eight times their time.
        let mut plans = Vec::new();
        let mut drafted = false;
        for _ in 0..200 {
            policy.observe_decode(Some(&DecodeStep {
                num_running: 4,
                tokens: 4,
                seconds: if drafted { 0.2 } else { 0.025 },
            }));
            let plan = plan_all(&mut policy, &mut four, 3);
            drafted = plan.lengths.iter().any(|&n| n > 0);
            assert!(!(drafted && plan.suspended), "{plan:?}");
            plans.push(plan.suspended);
        }
        let suspended = plans.iter().filter(|&&s| s).count();
        assert!(suspended > 150, "{suspended} of 200 steps suspended");
        let explorations = plans.windows(2).filter(|w| w[0] && !w[1]).count();
        assert!(explorations >= 2, "{plans:?}");
    }

    #[test]
    fn the_minimum_is_always_drafted_and_untimed_engines_draft_everything() {
        let mut untimed = DraftPolicy::new(ADAPTIVE, None, 3, 3);
        let mut bad = estimates(2, &[0.0; 3]);
        assert_eq!(choose(&mut untimed, &mut bad, 3), vec![3, 3]);
        let mut policy = DraftPolicy::new(
            DraftLength::Adaptive {
                min_draft_tokens: 2,
            },
            None,
            3,
            3,
        );
        measured(&mut policy, 25.0, 0, 3.0);
        assert_eq!(choose(&mut policy, &mut bad, 3), vec![2, 2]);
    }

    /// A policy that has verified `outcomes` chains of one token drafted with confidence 0.9,
    /// of which `accepted_in_ten` in ten were accepted.
    fn calibrated(policy: &mut DraftPolicy, outcomes: usize, accepted_in_ten: usize) {
        for i in 0..outcomes {
            let mut request = policy.new_estimate();
            let accepted: &[usize] = if i % 10 < accepted_in_ten { &[1] } else { &[] };
            policy.observe_verification(&mut request, 1, accepted, &[0.9]);
        }
    }

    #[test]
    fn a_calibrated_drafter_gates_its_chains_up_to_the_cap() {
        let mut policy = DraftPolicy::new(ADAPTIVE, None, 3, 3);
        measured(&mut policy, 25.0, 8, 3.0);
        let mut one = estimates(1, &[0.4, 0.2, 0.1]);
        let before = plan_all(&mut policy, &mut one, 3);
        assert_eq!(before.thresholds, None, "no outcomes yet: {before:?}");
        calibrated(&mut policy, 64, 9);
        let after = plan_all(&mut policy, &mut one, 3);
        assert_eq!(
            (after.lengths.clone(), after.gated.clone()),
            (vec![3], vec![true])
        );
        let t = after.thresholds.expect("gated");
        // A memory-bound row and free drafting: cheap rows, so low thresholds.
        assert_eq!(t.keep_above.len(), 3);
        assert!(t.keep_above[0] > 0.0 && t.keep_above[0] < 0.1, "{t:?}");
        assert!(t.extend_above[0] >= t.keep_above[0]);
        let stop = policy.chain_stop(&t);
        assert!((stop.calibration.acceptance(0.9) - 0.88).abs() < 0.03);
    }

    #[test]
    fn verified_trees_alone_calibrate_the_gate_of_trees() {
        let mut policy = DraftPolicy::new(ADAPTIVE, None, 3, 3);
        measured(&mut policy, 25.0, 8, 3.0);
        // Root 5 with children 1 (confidence 0.9, always accepted) and 2 (0.3, never).
        let tree = DraftTree::from_parts(
            vec![5, 1, 2],
            vec![None, Some(0), Some(0)],
            vec![0.0, 0.9f32.ln(), 0.3f32.ln()],
        )
        .unwrap();
        let mut one = estimates(1, &[0.6, 0.3, 0.1]);
        assert_eq!(plan_all(&mut policy, &mut one, 3).thresholds, None);
        for _ in 0..MIN_CALIBRATION_OUTCOMES {
            policy.observe_tree(&tree, &[1]);
        }
        let plan = plan_all(&mut policy, &mut one, 3);
        assert_eq!(plan.gated, vec![true], "{plan:?}");
        let thresholds = plan.thresholds.expect("gated");
        let stop = policy.chain_stop(&thresholds);
        assert_eq!(
            stop.tree_nodes(&tree),
            vec![1],
            "the never accepted child is cut"
        );
    }

    #[test]
    fn each_chain_position_is_priced_where_its_rows_land() {
        let mut policy = DraftPolicy::new(ADAPTIVE, None, 3, 3);
        // Two rows stream the weights at 25 ms; every row beyond costs 3 ms.
        measured(&mut policy, 25.0, 2, 3.0);
        calibrated(&mut policy, 64, 9);
        let mut plan =
            |running: usize| plan_all(&mut policy, &mut estimates(running, &[0.9, 0.8, 0.7]), 3);
        let one = plan(1).thresholds.expect("gated");
        let [first, second, third] = one.keep_above[..] else {
            panic!("{one:?}")
        };
        // One request's first draft row fits in the weights' streaming: nearly free, while
        // its second and third cost 3 ms each.
        assert!(first < second / 10.0, "{one:?}");
        assert!(third >= second && third < 1.1 * second, "{one:?}");
        // Two requests: the first position's two rows already cost 3 ms each.
        let two = plan(2).thresholds.expect("gated");
        assert!(two.keep_above[0] > 0.9 * two.keep_above[1], "{two:?}");
        // A token accepted one time in ten pays for one request's first row, not its second.
        let stop = policy.chain_stop(&one);
        let calibration = stop.calibration;
        let unsure = (1..=9)
            .map(|tenth| tenth as f32 / 10.0)
            .find(|&c| (calibration.acceptance(c) - 0.1).abs() < 0.05)
            .unwrap_or(0.1);
        assert_ne!(stop.step(0, 1.0, unsure).0, ChainStep::Drop);
        assert_eq!(stop.step(1, 1.0, unsure).0, ChainStep::Drop, "{one:?}");
    }

    #[test]
    fn tokens_a_gate_drops_still_calibrate_their_confidence() {
        let mut policy = DraftPolicy::new(ADAPTIVE, None, 3, 3);
        calibrated(&mut policy, 64, 9);
        let thresholds = StopThresholds {
            keep_above: vec![0.05],
            extend_above: vec![0.1],
        };
        // Taken at its word, a drafter 3% sure of a token is not worth a row: the gate drops
        // the token, so no verification would ever tell otherwise.
        let dropped = DroppedToken {
            token: 7,
            confidence: 0.03,
        };
        let decision = |policy: &DraftPolicy| policy.chain_stop(&thresholds).step(0, 1.0, 0.03).0;
        assert_eq!(decision(&policy), ChainStep::Drop);
        // The target's next tokens match the dropped ones a third of the time.
        for i in 0..30 {
            policy.observe_dropped(dropped, 0, i % 3 == 0);
        }
        assert_ne!(decision(&policy), ChainStep::Drop);
        let acceptance = policy.calibration.acceptance(0.03);
        assert!((acceptance - 0.3).abs() < 0.05, "{acceptance}");
    }

    #[test]
    fn a_compute_bound_batch_verifies_only_near_certain_tokens() {
        let mut policy = DraftPolicy::new(ADAPTIVE, None, 3, 3);
        measured(&mut policy, 25.0, 1, 3.0);
        calibrated(&mut policy, 64, 9);
        let mut plan = |rates: &[f64]| plan_all(&mut policy, &mut estimates(16, rates), 3);
        // Drafting is free here, so even a poor drafter's requests ask for gated chains.
        let poor = plan(&[0.4, 0.15, 0.05]);
        assert!(poor.gated.iter().all(|&g| g), "{poor:?}");
        let t = poor.thresholds.expect("gated");
        assert!(
            t.keep_above[0] > 0.5,
            "rows cost nearly a token each: {t:?}"
        );
        let strong = plan(&[0.9, 0.8, 0.6]);
        let t = strong.thresholds.expect("a strong drafter drafts");
        assert!(
            t.keep_above[0] > 0.5,
            "rows cost nearly a token each: {t:?}"
        );
    }

    #[test]
    fn free_drafters_ask_for_gated_chains_whatever_the_estimate() {
        let mut policy = DraftPolicy::new(ADAPTIVE, None, 3, 3);
        // Every row costs 3 ms more; a fifth of the first drafts is accepted.
        measured(&mut policy, 25.0, 0, 3.0);
        calibrated(&mut policy, 64, 2);
        let mut hopeless = estimates(1, &[0.0; 3]);
        let mut candidates = [DraftCandidate {
            request_id: 0,
            cap: 3,
            acceptance: &mut hopeless[0],
        }];
        let plan = policy.choose(1, 0, &mut candidates);
        assert_eq!((plan.lengths, plan.gated), (vec![3], vec![true]));
        // A drafting call of 5 ms against a 28 ms forward is not free, and on average the
        // drafts do not pay for it.
        drafting_costs(&mut policy, 5, 20);
        let plan = policy.choose(1, 0, &mut candidates);
        assert_eq!(plan.lengths, vec![0], "{plan:?}");
    }

    #[test]
    fn empty_free_drafts_measure_plain_decoding_without_stopping_drafts() {
        let mut policy = DraftPolicy::new(ADAPTIVE, None, 3, 3);
        measured(&mut policy, 25.0, 8, 3.0);
        calibrated(&mut policy, 64, 5);
        let mut one = estimates(1, &[0.5, 0.3, 0.1]);
        // A lookup that matches one step in four and then gets a token accepted: the steps
        // without a match are plain steps, so the guard never needs to stop the drafts to
        // measure plain decoding.
        let (mut fed, mut stopped) = (0, 0);
        for step in 0..200 {
            policy.observe_decode(Some(&DecodeStep {
                num_running: 1,
                tokens: 1 + fed.min(1),
                seconds: 0.025,
            }));
            let plan = plan_all(&mut policy, &mut one, 3);
            if plan.gated != [true] {
                stopped += 1;
            }
            fed = if plan.gated == [true] && step % 4 == 0 {
                2
            } else {
                0
            };
            policy.observe_step(&StepTiming {
                rows: 1 + fed,
                forward: Duration::from_millis(25),
                draft_depth: fed,
                draft_tokens: fed,
                draft: Duration::ZERO,
                other: Duration::ZERO,
                decode_rows_only: true,
            });
        }
        assert_eq!(stopped, 0);
    }

    #[test]
    fn rows_a_gated_chain_did_not_reach_count_as_rejected() {
        let mut policy = DraftPolicy::new(ADAPTIVE, None, 3, 3);
        let mut estimate = AcceptanceEstimate::new(vec![0.5; 3]);
        policy.observe_gated_end(&mut estimate, 1, 3);
        let gains = estimate.gains();
        assert_eq!(gains[0], 0.5);
        assert!(gains[1] < 0.5 && gains[2] < 0.5, "{gains:?}");
        let unchanged = estimate.clone();
        policy.observe_gated_end(&mut estimate, 3, 3);
        assert_eq!(estimate, unchanged);
    }
}
