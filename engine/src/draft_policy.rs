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
//! failing (where failures persist, as with n-gram lookups) stop drafting and are probed with
//! one draft token now and then. A [`GoodputGuard`] checks the model against the tokens per
//! second drafting steps actually delivered, and stops drafting at batch sizes where it
//! delivered clearly less than plain decoding.

use crate::acceptance::{AcceptanceEstimate, AcceptancePrior};
use crate::config::DraftLength;
use crate::goodput_guard::{Allowance, DecodeStep, GoodputGuard};
use crate::step_costs::{StepCosts, StepTiming};

/// How much faster than drafting only the minimum the chosen drafts must be expected to make a
/// step: the estimates are noisy, and a draft that only seems to pay costs real time.
const MIN_EXPECTED_GAIN: f64 = 0.03;

/// One running request about to draft.
#[derive(Debug)]
pub(crate) struct DraftCandidate<'a> {
    /// Most draft tokens it may get (the drafter's maximum, or less near the context end).
    pub cap: usize,
    /// Its acceptance estimate (probes are recorded in it).
    pub acceptance: &'a mut AcceptanceEstimate,
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
        }
    }

    /// The acceptance estimate a new request starts with.
    pub fn new_estimate(&self) -> AcceptanceEstimate {
        self.prior.estimate()
    }

    /// Takes in one verification of a request's `fed` draft rows, of which the 1-based rows
    /// `accepted` were accepted.
    pub fn observe_verification(
        &mut self,
        estimate: &mut AcceptanceEstimate,
        fed: usize,
        accepted: &[usize],
    ) {
        self.prior.observe(estimate, fed, accepted);
        estimate.observe(fed, accepted);
    }

    /// Takes in one step's timings (after its drafting call).
    pub fn observe_step(&mut self, timing: &StepTiming) {
        self.costs.observe(timing);
        self.guard.observe_draft_call(timing.draft.as_secs_f64());
    }

    /// Takes in a step's result before its drafting call: `Some` for a step in which every
    /// request decoded, `None` for a step with prefill work, which is not compared.
    pub fn observe_decode(&mut self, step: Option<&DecodeStep>) {
        match step {
            Some(step) => self.guard.observe_decode(step),
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
    /// drafts.
    pub fn choose(
        &mut self,
        num_running: usize,
        other_rows: usize,
        candidates: &mut [DraftCandidate<'_>],
    ) -> Vec<usize> {
        if self.max_batch.is_some_and(|limit| num_running > limit) {
            return vec![0; candidates.len()];
        }
        let min_draft_tokens = match self.length {
            DraftLength::Fixed => return candidates.iter().map(|c| c.cap).collect(),
            DraftLength::Adaptive { min_draft_tokens } => min_draft_tokens,
        };
        if self.guard.allowance(num_running) == Allowance::Plain {
            return candidates
                .iter()
                .map(|c| c.cap.min(min_draft_tokens))
                .collect();
        }
        let mut lengths = self.best_lengths(other_rows, candidates, min_draft_tokens);
        let drafter_useful = self.prior.drafter_useful();
        for (length, candidate) in lengths.iter_mut().zip(candidates.iter_mut()) {
            let probe = candidate
                .acceptance
                .drafts_or_probes(*length > 0, drafter_useful);
            if probe && candidate.cap > 0 {
                *length = 1;
            }
        }
        lengths
    }

    /// The lengths that maximize expected tokens per second (all caps before any timing).
    fn best_lengths(
        &self,
        other_rows: usize,
        candidates: &[DraftCandidate<'_>],
        min_draft_tokens: usize,
    ) -> Vec<usize> {
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
        let Some(forward) = self.costs.forward_curve(base_rows, rows.len()) else {
            return candidates.iter().map(|c| c.cap).collect();
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
        let minimum_rate = tokens / cost(0, depth);
        let (mut best, mut best_rate) = (0, minimum_rate);
        for (taken, &(gain, row, _)) in rows.iter().enumerate() {
            tokens += gain;
            depth = depth.max(row.min(self.max_depth));
            let rate = tokens / cost(taken + 1, depth);
            if rate > best_rate {
                (best, best_rate) = (taken + 1, rate);
            }
        }
        if best_rate < minimum_rate * (1.0 + MIN_EXPECTED_GAIN) {
            best = 0;
        }
        let mut lengths = floors;
        for &(_, _, request) in &rows[..best] {
            lengths[request] += 1;
        }
        lengths
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

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
            });
        }
    }

    fn estimates(count: usize, rates: &[f64]) -> Vec<AcceptanceEstimate> {
        (0..count)
            .map(|_| AcceptanceEstimate::new(rates.to_vec()))
            .collect()
    }

    fn choose(
        policy: &mut DraftPolicy,
        estimates: &mut [AcceptanceEstimate],
        cap: usize,
    ) -> Vec<usize> {
        let running = estimates.len();
        let mut candidates: Vec<DraftCandidate<'_>> = estimates
            .iter_mut()
            .map(|acceptance| DraftCandidate { cap, acceptance })
            .collect();
        policy.choose(running, 0, &mut candidates)
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
            policy.observe_verification(&mut request, 4, &[1, 2, 3, 4]);
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
                policy.observe_verification(&mut estimate, n, &[]);
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

    #[test]
    fn fixed_length_and_the_batch_size_limit() {
        let mut fixed = DraftPolicy::new(DraftLength::Fixed, Some(2), 3, 3);
        let mut two = estimates(2, &[0.0; 3]);
        let running = 2;
        let mut candidates: Vec<DraftCandidate<'_>> = two
            .iter_mut()
            .zip([3, 1])
            .map(|(acceptance, cap)| DraftCandidate { cap, acceptance })
            .collect();
        assert_eq!(fixed.choose(running, 0, &mut candidates), vec![3, 1]);
        assert_eq!(fixed.choose(running + 1, 0, &mut candidates), vec![0, 0]);
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
}
