//! The draft policy checked against the engine's own results: for each number of running
//! requests, the output tokens per second of decode steps that verified drafts and of decode
//! steps that did not.
//!
//! The policy's cost model predicts what a draft costs; this guard measures what drafting
//! actually delivered. Where drafting has delivered clearly fewer tokens per second than plain
//! decoding at the current batch size (see below), nobody drafts, except on an exploration step
//! now and then that lets the policy choose again, so both figures stay current (machines and
//! workloads change).
//! Between explorations the verdict holds. An exploration measures the slower mode afresh for
//! a few steps and compares again; each that confirms the verdict doubles the wait for the next
//! one, and one that confirms it by a wide margin after half its steps ends there and
//! quadruples the wait, so a clear verdict costs little to keep checking.
//!
//! Single steps are noisy (a drafting step emits 1 to k + 1 tokens, and the machine's speed
//! drifts), so a verdict changes only on a clear difference: more than the standard error of
//! the difference of the two rates. The first verdict at a batch size favours drafting (the
//! policy's cost model already expects the drafts it chooses to pay): drafting stops where it
//! measured clearly slower than plain decoding. After that, either mode must measure clearly
//! faster to take over; an explored mode that measures faster within the margin goes on being
//! measured (up to [`MAX_EXPLORATION_STEPS`]) before the verdict stands. So a drafter that
//! loses a little at some batch size stays stopped there rather than coming back whenever the
//! noise hides its loss.
//! A batch size seen for the first time starts from the verdict of the nearest batch size that
//! has one; in a new engine the two modes take turns until both are measured.
//!
//! At one request in flight both rates describe one request's text, and how well a drafter
//! serves text varies from request to request far more than the machine's speed does. So a
//! verdict against drafting reached there lasts only as long as its request: when another
//! request takes its place, drafting is explored at once and the wait starts over. (At larger
//! batches each rate averages over many requests and they are replaced continually, so a
//! verdict holds for its wait.) There, too, plain decoding is priced by the policy's cost
//! model when it can be: a plain step of one request emits one token in the time of a one-row
//! forward and the rest of a step. While drafting measures no clearly slower than that price
//! (by the margin a measured plain rate would need to overturn the verdict), an exploration
//! that falls due before the longest wait confirms the verdict without running a plain step,
//! and the wait grows as after a confirming exploration, up to four times the longest wait
//! elsewhere; plain steps are measured where drafting measures clearly slower than the price,
//! and once the wait has grown to its longest, so that a model that prices plain decoding too
//! dear keeps a losing drafter on for one such wait at most.
//!
//! A step is charged the drafting call that produced the drafts it verifies (made at the end of
//! the previous step) besides its own forward and verification, so that a drafting step carries
//! the whole cost of its drafts.

use crate::output::RequestId;
use std::collections::HashMap;

/// Weight of a new step in the smoothed tokens and seconds of a mode (about the last 20 steps
/// count).
const SMOOTHING: f64 = 0.1;

/// Steps a mode needs at a batch size before its rate counts (also the length of an
/// exploration): one request's drafting steps emit 1 to k + 1 tokens, so a few steps say
/// little.
const MIN_STEPS: u32 = 8;

/// Steps before the first exploration of the mode measured slower; each exploration that
/// confirms the verdict doubles it (see [`EARLY`]), up to [`MAX_EXPLORE_INTERVAL`].
const EXPLORE_EVERY: u64 = 16;

/// Most steps between two explorations.
const MAX_EXPLORE_INTERVAL: u64 = 256;

/// Most steps between two explorations at one request while the cost model prices its plain
/// step and drafting holds against that price: there plain steps only check the price, and
/// each costs the tokens drafting would have added.
const MAX_PRICED_EXPLORE_INTERVAL: u64 = 1024;

/// The evidence a verdict needs: [`MIN_STEPS`] steps of each mode and a difference of more
/// than one standard error (to overturn a verdict, or at the first judgement for plain
/// decoding to win). An exploration that confirms a verdict so doubles the wait for the next.
const FULL: Evidence = Evidence {
    min_steps: MIN_STEPS,
    standard_errors: 1.0,
    interval_growth: 2,
};

/// The evidence that ends an exploration after half its steps: a difference of more than
/// three standard errors (the explored mode's steps judged no less variable than they were
/// before) in favour of the verdict, which then holds four times as long as before.
const EARLY: Evidence = Evidence {
    min_steps: MIN_STEPS / 2,
    standard_errors: 3.0,
    interval_growth: 4,
};

/// Most steps an exploration measures while its difference is within the margin.
const MAX_EXPLORATION_STEPS: u32 = 32;

/// What the guard lets the policy do in the coming step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Allowance {
    /// The policy chooses the draft lengths.
    Draft,
    /// Nobody drafts (no probes either).
    Plain,
}

/// The request running alone, and what the cost model expects a plain step of it to take.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct SoleRequest {
    /// The request.
    pub id: RequestId,
    /// Seconds of one plain step (a one-row forward and the rest of a step) by the cost
    /// model; `None` before the model has timed a forward.
    pub plain_step_seconds: Option<f64>,
}

/// One decode step as the guard sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct DecodeStep {
    /// Requests running when the step was scheduled.
    pub num_running: usize,
    /// Output tokens it emitted.
    pub tokens: usize,
    /// Seconds of its forward, verification and commit.
    pub seconds: f64,
}

/// Smoothed tokens and seconds of one mode's steps, and the smoothed mean and variance of
/// single steps' tokens per second (for the standard error of the rate).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Rate {
    tokens: f64,
    seconds: f64,
    step_rate: f64,
    step_rate_variance: f64,
    steps: u32,
    /// The variance of single steps measured before the rate started over, a floor for the
    /// variance of its first few new steps (four steps that happen to emit alike say little
    /// about how much steps vary).
    earlier_variance: f64,
}

impl Rate {
    /// Takes in one step: the plain mean of the first steps (so that the steps of an
    /// exploration weigh alike, rather than the first one deciding), smoothed after that.
    fn observe(&mut self, tokens: f64, seconds: f64) {
        self.steps = self.steps.saturating_add(1);
        let weight = SMOOTHING.max(1.0 / f64::from(self.steps));
        self.tokens += weight * (tokens - self.tokens);
        self.seconds += weight * (seconds - self.seconds);
        let deviation = tokens / seconds - self.step_rate;
        self.step_rate += weight * deviation;
        self.step_rate_variance =
            (1.0 - weight) * (self.step_rate_variance + weight * deviation * deviation);
    }

    /// The squared standard error of [`Rate::per_second`]: the variance of single steps over
    /// the number of steps the smoothing averages (about `2 / SMOOTHING`), less one.
    fn variance_of_mean(&self) -> f64 {
        let averaged = f64::from(self.steps).min((2.0 - SMOOTHING) / SMOOTHING);
        let variance = if self.steps < MIN_STEPS {
            self.step_rate_variance.max(self.earlier_variance)
        } else {
            self.step_rate_variance
        };
        variance / (averaged - 1.0).max(1.0)
    }

    /// Starts measuring afresh, keeping the variance of single steps measured so far as the
    /// floor of the first new steps'.
    fn restart(&mut self) {
        let earlier_variance = if self.steps >= MIN_STEPS {
            self.step_rate_variance
        } else {
            self.earlier_variance
        };
        *self = Rate {
            earlier_variance,
            ..Rate::default()
        };
    }

    /// Tokens per second, once measured in at least `min_steps` steps.
    fn per_second(&self, min_steps: u32) -> Option<f64> {
        (self.steps >= min_steps && self.seconds > 0.0).then(|| self.tokens / self.seconds)
    }
}

/// The two modes' rates at one batch size, how many steps have been decided there, the
/// verdict, and when the slower mode is tried next.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct BatchRates {
    drafting: Rate,
    plain: Rate,
    decided: u64,
    /// The mode judged faster at the last exploration (or when both were first measured); it
    /// holds until the next exploration, so that the smoothed rate of the running mode, which moves
    /// from step to step while the other's stands still, cannot switch modes by chance.
    verdict: Option<Allowance>,
    /// Whether the mode other than the verdict is being measured afresh.
    exploring: bool,
    interval: u64,
    next_exploration: u64,
    /// At one request in flight, the request of the last step.
    sole_request: Option<RequestId>,
}

impl BatchRates {
    /// The mode of the coming step. A batch size seen for the first time takes `inherited` as
    /// its verdict when given; without a verdict the two modes take turns until both are
    /// measured; a verdict holds until an exploration is due, which measures the other mode
    /// afresh (its rate starts over) and compares again. `sole` is the request running when it
    /// is the only one: a verdict against drafting reached on another request is explored at
    /// once, and a verdict for drafting that measures faster than the model's price of a plain
    /// step is confirmed without exploring.
    fn allowance(&mut self, inherited: Option<Allowance>, sole: Option<SoleRequest>) -> Allowance {
        let sole_request = sole.map(|sole| sole.id);
        self.decided += 1;
        if let (1, None, Some(verdict)) = (self.decided, self.verdict, inherited) {
            self.settle(verdict, EXPLORE_EVERY);
        }
        if sole_request.is_some() && sole_request != self.sole_request {
            if self.verdict == Some(Allowance::Plain) && !self.exploring {
                self.interval = EXPLORE_EVERY;
                self.next_exploration = self.decided;
            }
            self.sole_request = sole_request;
        }
        let Some(verdict) = self.verdict else {
            if let Some(judgement) = self.judge(FULL) {
                self.settle(judgement.verdict, EXPLORE_EVERY);
                return judgement.verdict;
            }
            // The mode with fewer measured steps goes next.
            return if self.plain.steps < self.drafting.steps {
                Allowance::Plain
            } else {
                Allowance::Draft
            };
        };
        let explored = verdict.other();
        if self.exploring {
            let explored_steps = self.rate_mut(explored).steps;
            if self
                .judge(EARLY)
                .is_some_and(|early| early.clear && early.faster == verdict)
            {
                self.confirm(verdict, EARLY, explored_steps);
                return verdict;
            }
            return match self.judge(FULL) {
                // An explored mode that measures faster within the margin is measured longer
                // before the verdict stands.
                Some(judgement)
                    if !judgement.clear
                        && judgement.faster == explored
                        && explored_steps < MAX_EXPLORATION_STEPS =>
                {
                    explored
                }
                // Only a clear difference overturns a verdict.
                Some(judgement) if judgement.clear && judgement.faster != verdict => {
                    self.exploring = false;
                    self.settle(explored, EXPLORE_EVERY);
                    self.trace_exploration(explored_steps);
                    explored
                }
                Some(_) => {
                    self.confirm(verdict, FULL, explored_steps);
                    verdict
                }
                _ if self.rate_mut(explored).per_second(MIN_STEPS).is_none() => explored,
                // A verdict taken over from another batch size, not yet measured here.
                _ => verdict,
            };
        }
        if self.decided < self.next_exploration {
            return verdict;
        }
        let plain_step_seconds = sole.and_then(|sole| sole.plain_step_seconds);
        if verdict == Allowance::Draft
            && self.interval < MAX_PRICED_EXPLORE_INTERVAL
            && self.drafting_holds_against_priced_plain(plain_step_seconds)
        {
            let interval = self.interval * FULL.interval_growth;
            self.settle(verdict, interval.min(MAX_PRICED_EXPLORE_INTERVAL));
            return verdict;
        }
        self.exploring = true;
        self.rate_mut(explored).restart();
        explored
    }

    /// Whether drafting measures no clearly fewer tokens per second than one request's plain
    /// steps of `plain_step_seconds` each (one token a step) would emit: not below by more
    /// than the margin of [`FULL`] evidence, the standard error of the drafting rate (the
    /// price has none), as a measured plain rate would have to show to overturn the verdict.
    fn drafting_holds_against_priced_plain(&self, plain_step_seconds: Option<f64>) -> bool {
        match (self.drafting.per_second(MIN_STEPS), plain_step_seconds) {
            (Some(drafting), Some(seconds)) if seconds > 0.0 => {
                let margin = FULL.standard_errors * self.drafting.variance_of_mean().sqrt();
                drafting + margin > 1.0 / seconds
            }
            _ => false,
        }
    }

    /// Ends an exploration that confirmed `verdict` with `evidence`: the wait for the next one
    /// grows by its factor.
    fn confirm(&mut self, verdict: Allowance, evidence: Evidence, explored_steps: u32) {
        self.exploring = false;
        let interval = self.interval * evidence.interval_growth;
        self.settle(verdict, interval.min(MAX_EXPLORE_INTERVAL));
        self.trace_exploration(explored_steps);
    }

    fn trace_exploration(&self, explored_steps: u32) {
        tracing::trace!(
            drafting_tokens_per_s = self.drafting.per_second(1),
            plain_tokens_per_s = self.plain.per_second(1),
            explored_steps,
            verdict = ?self.verdict,
            "goodput guard explored"
        );
    }

    /// What the two modes' rates say with `evidence`.
    fn judge(&self, evidence: Evidence) -> Option<Judgement> {
        judge(&self.drafting, &self.plain, evidence)
    }

    /// Makes `verdict` hold for the next `interval` steps.
    fn settle(&mut self, verdict: Allowance, interval: u64) {
        self.verdict = Some(verdict);
        self.interval = interval;
        self.next_exploration = self.decided + interval;
    }

    fn rate_mut(&mut self, mode: Allowance) -> &mut Rate {
        match mode {
            Allowance::Draft => &mut self.drafting,
            Allowance::Plain => &mut self.plain,
        }
    }
}

/// The guard of one engine.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct GoodputGuard {
    by_batch: HashMap<usize, BatchRates>,
    /// Seconds of the last drafting call, charged to the step that verifies its drafts.
    pending_draft_seconds: f64,
    /// Whether the step that verifies the last drafting call's drafts goes unmeasured
    /// ([`GoodputGuard::discard_draft_call`]).
    discard_next_decode: bool,
}

impl GoodputGuard {
    /// What the coming step at `num_running` requests may do. A batch size seen for the first
    /// time starts from the verdict of the nearest one that has one (drafting rarely pays at 15
    /// requests where it lost at 16), so that a batch shrinking one request at a time does not
    /// measure both modes anew at every size.
    ///
    /// `sole` names the request running when `num_running` is 1 and the model's price of its
    /// plain step (`None` otherwise, or where unknown).
    pub fn allowance(&mut self, num_running: usize, sole: Option<SoleRequest>) -> Allowance {
        // Only a batch size met for the first time looks for a neighbour's verdict.
        let nearest = if self.by_batch.contains_key(&num_running) {
            None
        } else {
            self.by_batch
                .iter()
                .filter_map(|(&size, rates)| Some((size, rates.verdict?)))
                .min_by_key(|&(size, _)| (size.abs_diff(num_running), size < num_running))
                .map(|(_, verdict)| verdict)
        };
        self.by_batch
            .entry(num_running)
            .or_default()
            .allowance(nearest, sole.filter(|_| num_running == 1))
    }

    /// Takes in the seconds of the drafting call just made (for the drafts of the next step).
    pub fn observe_draft_call(&mut self, seconds: f64) {
        self.pending_draft_seconds = seconds;
    }

    /// Takes in one finished decode step (call before [`GoodputGuard::observe_draft_call`] of
    /// the same step, whose drafts the next step verifies); `drafted`: whether the drafting
    /// call before it asked any request for a draft. A step counts as drafting by what was
    /// asked, not by what it verified: a confidence-gated chain may end before its first
    /// token, and the call that drafted nothing is still a cost of drafting (the policy passes
    /// `false` after a call that cost next to nothing and drafted nothing).
    pub fn observe_decode(&mut self, step: &DecodeStep, drafted: bool) {
        if std::mem::take(&mut self.discard_next_decode) {
            self.pending_draft_seconds = 0.0;
            return;
        }
        let seconds = step.seconds + std::mem::take(&mut self.pending_draft_seconds);
        if !seconds.is_finite() || seconds <= 0.0 {
            return;
        }
        let rates = self.by_batch.entry(step.num_running).or_default();
        let mode = if drafted {
            Allowance::Draft
        } else {
            Allowance::Plain
        };
        rates.rate_mut(mode).observe(step.tokens as f64, seconds);
    }

    /// Forgets the drafting call of a step that was not followed by a decode step (a prefill
    /// chunk or a mixed batch, which the guard does not measure).
    pub fn skip_step(&mut self) {
        self.pending_draft_seconds = 0.0;
        self.discard_next_decode = false;
    }

    /// Forgets the drafting call just made and leaves the step that verifies its drafts
    /// unmeasured: a call whose cost is not drafting's (the first after a suspension, which
    /// may take in every row of the pause).
    pub fn discard_draft_call(&mut self) {
        self.pending_draft_seconds = 0.0;
        self.discard_next_decode = true;
    }
}

/// What the measured rates of the two modes say.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Judgement {
    /// The first verdict at a batch size: plain decoding where drafting measured slower by
    /// more than the margin, else drafting (the policy drafts only where its cost model expects
    /// drafts to pay).
    verdict: Allowance,
    /// The mode that measured faster, however narrowly.
    faster: Allowance,
    /// Whether the difference lies outside the margin (either way).
    clear: bool,
}

/// How much measurement a comparison of the two modes needs.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Evidence {
    /// Steps of each mode.
    min_steps: u32,
    /// The margin of a clear difference, in standard errors of the difference of the rates.
    standard_errors: f64,
    /// How much longer a verdict this evidence confirms holds than it did.
    interval_growth: u64,
}

/// Judges the two modes once both are measured in `evidence.min_steps` steps.
fn judge(drafting: &Rate, plain: &Rate, evidence: Evidence) -> Option<Judgement> {
    let difference =
        drafting.per_second(evidence.min_steps)? - plain.per_second(evidence.min_steps)?;
    let margin =
        evidence.standard_errors * (drafting.variance_of_mean() + plain.variance_of_mean()).sqrt();
    let verdict = if difference < -margin {
        Allowance::Plain
    } else {
        Allowance::Draft
    };
    let faster = if difference < 0.0 {
        Allowance::Plain
    } else {
        Allowance::Draft
    };
    Some(Judgement {
        verdict,
        faster,
        clear: difference.abs() > margin,
    })
}

impl Allowance {
    fn other(self) -> Self {
        match self {
            Allowance::Draft => Allowance::Plain,
            Allowance::Plain => Allowance::Draft,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A machine where a plain step emits one token per request in `plain_seconds`, and a
    /// drafting step emits `tokens` in `seconds` after a drafting call of `call_seconds`.
    #[derive(Clone, Copy)]
    struct Machine {
        plain_seconds: f64,
        tokens: usize,
        seconds: f64,
        call_seconds: f64,
    }

    /// Runs `steps` decode steps at `num_running` requests in the engine's order (the guard
    /// decides, the drafting call runs, the step runs); returns how many steps drafted.
    fn run(guard: &mut GoodputGuard, num_running: usize, steps: usize, machine: Machine) -> usize {
        run_priced(guard, num_running, steps, machine, None)
    }

    /// The request running alone (id 0), its plain step priced at `plain_step_seconds`.
    fn alone(plain_step_seconds: Option<f64>) -> Option<SoleRequest> {
        Some(SoleRequest {
            id: 0,
            plain_step_seconds,
        })
    }

    /// [`run`] with the cost model's price of a plain step at one request, where given.
    fn run_priced(
        guard: &mut GoodputGuard,
        num_running: usize,
        steps: usize,
        machine: Machine,
        plain_step_seconds: Option<f64>,
    ) -> usize {
        let sole = plain_step_seconds.and_then(|price| alone(Some(price)));
        let mut drafted = 0;
        for _ in 0..steps {
            let drafts = guard.allowance(num_running, sole) == Allowance::Draft;
            drafted += usize::from(drafts);
            guard.observe_draft_call(if drafts { machine.call_seconds } else { 0.0 });
            guard.observe_decode(
                &DecodeStep {
                    num_running,
                    tokens: if drafts { machine.tokens } else { num_running },
                    seconds: if drafts {
                        machine.seconds
                    } else {
                        machine.plain_seconds
                    },
                },
                drafts,
            );
        }
        drafted
    }

    #[test]
    fn a_discarded_drafting_call_leaves_its_step_unmeasured() {
        let mut guard = GoodputGuard::default();
        run(&mut guard, 2, 40, BATCH_OF_8);
        let before = guard.clone();
        guard.discard_draft_call();
        let slow = DecodeStep {
            num_running: 2,
            tokens: 1,
            seconds: 30.0,
        };
        guard.observe_decode(&slow, true);
        assert_eq!(
            guard, before,
            "the step after a discarded call counts nowhere"
        );
        // The next call is charged again.
        guard.observe_draft_call(30.0);
        guard.observe_decode(&slow, true);
        assert_ne!(guard, before);
    }

    /// 8 requests: drafting emits 11 tokens in 0.2 s, plain decoding 8 in 0.1 s.
    const BATCH_OF_8: Machine = Machine {
        plain_seconds: 0.1,
        tokens: 11,
        seconds: 0.19,
        call_seconds: 0.01,
    };

    /// 1 request: drafting emits 3 tokens in 0.045 s, plain decoding 1 in 0.03 s.
    const ONE_REQUEST: Machine = Machine {
        plain_seconds: 0.03,
        tokens: 3,
        seconds: 0.04,
        call_seconds: 0.005,
    };

    /// 4 requests on a machine where drafting pays: 10 tokens in 0.045 s against 4 in 0.03 s.
    const ONE_REQUEST_BATCH_OF_4: Machine = Machine {
        plain_seconds: 0.03,
        tokens: 10,
        seconds: 0.04,
        call_seconds: 0.005,
    };

    /// Steps of the slower mode in 320 steps after the first verdict on a noiseless machine:
    /// explorations that end early, after `EARLY.min_steps` steps, 16 and 64 steps after the
    /// verdict and the first exploration (the next is due 256 steps later).
    const EXPLORED: usize = 2 * EARLY.min_steps as usize;

    /// Steps the two modes take turns at a new batch size.
    const TURNS: usize = 2 * MIN_STEPS as usize;

    #[test]
    fn drafting_that_measures_slower_is_left_to_rare_exploration() {
        let mut guard = GoodputGuard::default();
        let drafted = run(&mut guard, 8, 320, BATCH_OF_8);
        assert_eq!(drafted, TURNS / 2 + EXPLORED);
    }

    #[test]
    fn drafting_that_measures_faster_keeps_drafting() {
        let mut guard = GoodputGuard::default();
        let drafted = run(&mut guard, 1, 320, ONE_REQUEST);
        assert_eq!(drafted, 320 - TURNS / 2 - EXPLORED);
    }

    #[test]
    fn at_one_request_drafting_faster_than_the_priced_plain_step_runs_no_plain_step() {
        let priced = Some(ONE_REQUEST.plain_seconds);
        let drafted = run_priced(&mut GoodputGuard::default(), 1, 320, ONE_REQUEST, priced);
        assert_eq!(drafted, 320 - TURNS / 2);
        // Once the wait has grown to the longest, plain steps are measured again.
        let drafted = run_priced(&mut GoodputGuard::default(), 1, 3000, ONE_REQUEST, priced);
        assert!(drafted < 3000 - TURNS / 2, "{drafted}");
    }

    #[test]
    fn at_one_request_drafting_slower_than_the_priced_plain_step_is_still_stopped() {
        // 2 tokens in 0.06 s against 1 in 0.02 s, priced right or too dear.
        let machine = Machine {
            plain_seconds: 0.02,
            tokens: 2,
            seconds: 0.02,
            call_seconds: 0.04,
        };
        for price in [0.02, 0.04] {
            let drafted = run_priced(&mut GoodputGuard::default(), 1, 320, machine, Some(price));
            assert_eq!(drafted, TURNS / 2 + EXPLORED, "priced at {price} s");
        }
    }

    #[test]
    fn at_one_request_a_priced_plain_step_keeps_more_of_a_small_gain() {
        // Drafting 6% faster than plain decoding through noisy steps: the explorations the
        // price saves are plain steps that would have emitted less.
        let efficiency = |price| mean_efficiency_at_one_request(0.049, price);
        let (explored, priced) = (efficiency(None), efficiency(Some(0.0395)));
        assert!(priced > explored, "{priced} against {explored}");
        assert!(priced >= 0.995, "{priced}");
    }

    #[test]
    fn at_one_request_a_gain_within_the_noise_of_the_price_is_kept() {
        // Drafting 3.5% and 2.5% faster than plain decoding, priced right, through noisy
        // steps: drafting that measures below the price within the noise is confirmed without
        // plain steps, which would have emitted less.
        for seconds in [0.0505, 0.051] {
            let efficiency = mean_efficiency_at_one_request(seconds, Some(0.0395));
            assert!(efficiency >= 0.997, "{seconds} s: {efficiency}");
        }
    }

    /// The mean efficiency over 40 seeds of one request whose single draft tokens are
    /// accepted with probability 0.32, drafting steps of `seconds` against plain steps of
    /// 0.0395 s, plain steps priced at `price` where given.
    fn mean_efficiency_at_one_request(seconds: f64, price: Option<f64>) -> f64 {
        (0..40)
            .map(|seed| run_changing(seed, |_| (0, 0.32), seconds, 0.0395, price).efficiency)
            .sum::<f64>()
            / 40.0
    }

    #[test]
    fn a_new_batch_size_starts_from_the_nearest_verdict_then_is_judged_apart() {
        let mut guard = GoodputGuard::default();
        run(&mut guard, 8, 320, BATCH_OF_8);
        // 7 requests: the verdict of 8 (plain) holds until the first exploration.
        assert_eq!(run(&mut guard, 7, EXPLORE_EVERY as usize, BATCH_OF_8), 0);
        // 1 request, where drafting pays: plain at first (from 7), drafting from the first
        // exploration on, less the explorations of plain decoding.
        let drafted = run(&mut guard, 1, 320, ONE_REQUEST);
        let plain_first = EXPLORE_EVERY as usize;
        assert!(drafted <= 320 - plain_first, "{drafted}");
        assert!(drafted >= 320 - plain_first - 2 * EXPLORED, "{drafted}");
        // 8 requests are still judged by their own measurements.
        assert!(run(&mut guard, 8, 64, BATCH_OF_8) <= MIN_STEPS as usize);
    }

    #[test]
    fn a_changed_verdict_restarts_frequent_exploration() {
        let mut guard = GoodputGuard::default();
        run(&mut guard, 4, 600, BATCH_OF_8);
        // The machine changes: drafting now pays, and an exploration finds it out.
        let drafted = run(&mut guard, 4, 600, ONE_REQUEST_BATCH_OF_4);
        assert!(
            drafted >= 600 - MAX_EXPLORE_INTERVAL as usize - 30,
            "{drafted}"
        );
    }

    #[test]
    fn the_first_steps_of_a_mode_weigh_alike() {
        let mut rate = Rate::default();
        for tokens in [1.0, 4.0, 4.0, 4.0, 4.0, 4.0, 4.0, 4.0] {
            rate.observe(tokens, 0.1);
        }
        // The mean of 3.625 tokens per 0.1 s, not mostly the unlucky first step.
        let per_second = rate
            .per_second(MIN_STEPS)
            .expect("measured after MIN_STEPS steps");
        assert!((per_second - 36.25).abs() < 1e-9, "{per_second}");
        // Later steps are smoothed: after enough of them, one step moves the rate by the
        // smoothing weight only.
        for _ in 0..40 {
            rate.observe(4.0, 0.1);
        }
        rate.observe(0.0, 0.1);
        let expected = 4.0 * (1.0 - SMOOTHING) / 0.1;
        assert!((rate.per_second(MIN_STEPS).unwrap() - expected).abs() < 0.5);
    }

    /// A drafting step's tokens as one request with a modest head emits them: 1 to 4, 1.5 on
    /// average, from a fixed pseudo-random sequence.
    fn noisy_tokens(step: usize) -> usize {
        const PATTERN: [usize; 8] = [1, 1, 2, 1, 4, 1, 1, 1];
        PATTERN[(step * 5 + step / 8) % PATTERN.len()]
    }

    /// Runs `steps` steps of one request whose drafting steps take `seconds` (their call
    /// included) for [`noisy_tokens`] tokens, and plain steps `plain_seconds`; returns the
    /// drafting steps.
    fn run_noisy(
        guard: &mut GoodputGuard,
        steps: usize,
        seconds: f64,
        plain_seconds: f64,
    ) -> usize {
        let mut drafted = 0;
        for step in 0..steps {
            let drafts = guard.allowance(1, alone(None)) == Allowance::Draft;
            drafted += usize::from(drafts);
            guard.observe_draft_call(if drafts { 0.005 } else { 0.0 });
            let step = DecodeStep {
                num_running: 1,
                tokens: if drafts { noisy_tokens(step) } else { 1 },
                seconds: if drafts {
                    seconds - 0.005
                } else {
                    plain_seconds
                },
            };
            guard.observe_decode(&step, drafts);
        }
        drafted
    }

    #[test]
    fn noisy_drafting_that_pays_is_not_given_up_by_chance() {
        // Drafting delivers 1.5 tokens per 0.045 s (33 tokens/s) against plain decoding's 1
        // per 0.035 s (29 tokens/s); single drafting steps swing from 22 to 89 tokens/s.
        let steps = 2000;
        let drafted = run_noisy(&mut GoodputGuard::default(), steps, 0.045, 0.035);
        assert!(
            drafted * 100 >= steps * 95,
            "{drafted} of {steps} steps drafted"
        );
    }

    #[test]
    fn noisy_drafting_that_loses_is_still_stopped() {
        // 1.5 tokens per 0.06 s (25 tokens/s) against 1 per 0.03 s (33 tokens/s).
        let steps = 2000;
        let drafted = run_noisy(&mut GoodputGuard::default(), steps, 0.06, 0.03);
        assert!(
            drafted * 100 <= steps * 10,
            "{drafted} of {steps} steps drafted"
        );
    }

    /// Pseudo-random numbers in [0, 1) from a fixed seed (a linear congruential generator).
    struct Noise(u64);

    impl Noise {
        fn next(&mut self) -> f64 {
            self.0 = self
                .0
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (self.0 >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    /// What a run of [`run_jittered`] did.
    struct JitteredRun {
        drafted: usize,
        /// Its tokens per second over those of the faster mode had it run throughout.
        efficiency: f64,
    }

    /// Runs 2,000 steps of one request drafting one token, accepted with probability
    /// `acceptance`, in `seconds` per drafting step against `plain_seconds` per plain step,
    /// every step's time varying by up to 10% either way; `seed` seeds the noise.
    fn run_jittered(seed: u64, acceptance: f64, seconds: f64, plain_seconds: f64) -> JitteredRun {
        run_changing(seed, |_| (0, acceptance), seconds, plain_seconds, None)
    }

    /// [`run_jittered`] with the request and its acceptance depending on the step
    /// (`request(step)`), and plain steps priced at `plain_step_seconds` where given; the
    /// efficiency is against the faster mode at the run's mean acceptance.
    fn run_changing(
        seed: u64,
        request: impl Fn(usize) -> (RequestId, f64),
        seconds: f64,
        plain_seconds: f64,
        plain_step_seconds: Option<f64>,
    ) -> JitteredRun {
        let mut guard = GoodputGuard::default();
        let mut noise = Noise(seed);
        let (mut drafted, mut total_tokens, mut total_seconds) = (0, 0, 0.0);
        for step in 0..2000 {
            let (id, acceptance) = request(step);
            let sole = SoleRequest {
                id,
                plain_step_seconds,
            };
            let drafts = guard.allowance(1, Some(sole)) == Allowance::Draft;
            drafted += usize::from(drafts);
            let jitter = 0.9 + 0.2 * noise.next();
            let (tokens, seconds) = match drafts {
                true => (1 + usize::from(noise.next() < acceptance), seconds * jitter),
                false => (1, plain_seconds * jitter),
            };
            (total_tokens, total_seconds) = (total_tokens + tokens, total_seconds + seconds);
            guard.observe_draft_call(0.0);
            let step = DecodeStep {
                num_running: 1,
                tokens,
                seconds,
            };
            guard.observe_decode(&step, drafts);
        }
        let mean_acceptance = (0..2000).map(|step| request(step).1).sum::<f64>() / 2000.0;
        let faster = ((1.0 + mean_acceptance) / seconds).max(1.0 / plain_seconds);
        JitteredRun {
            drafted,
            efficiency: total_tokens as f64 / total_seconds / faster,
        }
    }

    /// The mean and the lowest efficiency of [`run_jittered`] over 40 seeds.
    fn efficiency_over_seeds(acceptance: f64, seconds: f64, plain_seconds: f64) -> (f64, f64) {
        let runs: Vec<f64> = (0..40)
            .map(|seed| run_jittered(seed, acceptance, seconds, plain_seconds).efficiency)
            .collect();
        let mean = runs.iter().sum::<f64>() / runs.len() as f64;
        (mean, runs.iter().copied().fold(f64::INFINITY, f64::min))
    }

    #[test]
    fn a_small_gain_measured_through_noisy_steps_keeps_drafting() {
        // 1.32 tokens per 0.049 s against 1 per 0.0395 s: 6% more tokens per second.
        let drafted = run_jittered(7, 0.32, 0.049, 0.0395).drafted;
        assert!(drafted >= 1800, "{drafted} of 2000 steps drafted");
    }

    #[test]
    fn a_small_loss_measured_through_noisy_steps_is_stopped() {
        // 1.32 tokens per 0.058 s against 1 per 0.0395 s: 10% fewer tokens per second.
        let drafted = run_jittered(7, 0.32, 0.058, 0.0395).drafted;
        assert!(drafted <= 300, "{drafted} of 2000 steps drafted");
    }

    /// Asserts that runs of drafting steps of each of `drafting_seconds` (against plain steps
    /// of 0.0395 s) reach `min_mean` of the faster mode's rate on average over the seeds, and
    /// `min_lowest` in every seed.
    fn assert_efficient(drafting_seconds: &[f64], min_mean: f64, min_lowest: f64) {
        for &seconds in drafting_seconds {
            let (mean, lowest) = efficiency_over_seeds(0.32, seconds, 0.0395);
            assert!(mean >= min_mean, "{seconds} s: mean efficiency {mean}");
            assert!(
                lowest >= min_lowest,
                "{seconds} s: lowest efficiency {lowest}"
            );
        }
    }

    #[test]
    fn losses_within_the_noise_cost_little_in_any_run() {
        // Drafting 3%, 7% and 10% slower than plain decoding, within the noise of an
        // exploration's measurement: once stopped, drafting comes back only where it measures
        // clearly faster, so no run loses much to it.
        assert_efficient(&[0.054, 0.056, 0.058], 0.985, 0.96);
    }

    #[test]
    fn gains_within_the_noise_are_mostly_kept() {
        // Drafting 4%, 9% and 13% faster than plain decoding.
        assert_efficient(&[0.046, 0.048, 0.050], 0.985, 0.95);
    }

    /// The mean and the lowest efficiency over 40 seeds of [`run_changing`] through requests
    /// of `request_steps` steps each, drafting 1 token per 0.049 s against 1 per 0.0395 s, with
    /// the acceptance of each request given by `acceptance(request)`.
    fn efficiency_over_requests(
        request_steps: usize,
        acceptance: impl Fn(usize) -> f64,
        tell_requests: bool,
    ) -> (f64, f64) {
        let runs: Vec<f64> = (0..40)
            .map(|seed| {
                let request = |step: usize| {
                    let request = step / request_steps;
                    let id = if tell_requests {
                        request as RequestId
                    } else {
                        0
                    };
                    (id, acceptance(request))
                };
                run_changing(seed, request, 0.049, 0.0395, None).efficiency
            })
            .collect();
        let mean = runs.iter().sum::<f64>() / runs.len() as f64;
        (mean, runs.iter().copied().fold(f64::INFINITY, f64::min))
    }

    /// The acceptance of a drafter serving text well (0.55) or badly (0.05).
    fn served_well(well: bool) -> f64 {
        if well {
            0.55
        } else {
            0.05
        }
    }

    #[test]
    fn a_drafter_that_pays_over_changing_prompts_is_not_locked_out() {
        // Stretches of 150 steps that the drafter serves badly (acceptance 0.05) and well
        // (0.55) in turn, within one request: drafting 1.3 tokens per 0.049 s on average
        // against 1 per 0.0395 s, 5% more tokens per second, but 15% fewer in the bad
        // stretches. Stopped in a bad stretch, drafting must come back in the good ones, so
        // that the guard costs little against always drafting.
        let alternating = |stretch: usize| served_well(!stretch.is_multiple_of(2));
        let (mean, lowest) = efficiency_over_requests(150, alternating, false);
        assert!(mean >= 0.97, "mean efficiency {mean}");
        assert!(lowest >= 0.95, "lowest efficiency {lowest}");
    }

    #[test]
    fn at_one_request_a_verdict_against_drafting_lasts_only_its_request() {
        // Requests of 60 steps: the first three served badly (acceptance 0.05: drafting 15%
        // slower than plain decoding), then one in four badly and the rest well (0.55: 23%
        // faster). Stopped by the first ones, drafting must come back with the requests after
        // them, so that the guard, told which request runs, beats either mode run throughout.
        let acceptance = |request: usize| served_well(request >= 3 && !request.is_multiple_of(4));
        let (mean, lowest) = efficiency_over_requests(60, acceptance, true);
        assert!(mean >= 1.0, "mean efficiency {mean}");
        assert!(lowest >= 0.98, "lowest efficiency {lowest}");
        // A drafter that loses on every request is measured once per request: that costs
        // little.
        let (mean, lowest) = efficiency_over_requests(60, |_| served_well(false), true);
        assert!(mean >= 0.97, "mean efficiency {mean}");
        assert!(lowest >= 0.965, "lowest efficiency {lowest}");
    }

    #[test]
    fn a_step_is_charged_the_drafting_call_of_its_drafts() {
        // Drafting steps emit 2 tokens in 0.02 s of forward, but their drafts take 0.04 s to
        // make: 2 tokens in 0.06 s lose to 1 token in 0.02 s.
        let machine = Machine {
            plain_seconds: 0.02,
            tokens: 2,
            seconds: 0.02,
            call_seconds: 0.04,
        };
        let mut guard = GoodputGuard::default();
        let drafted = run(&mut guard, 1, 320, machine);
        assert_eq!(drafted, TURNS / 2 + EXPLORED);
    }
}
