//! The draft policy checked against the engine's own results: for each number of running
//! requests, the output tokens per second of decode steps that verified drafts and of decode
//! steps that did not.
//!
//! The policy's cost model predicts what a draft costs; this guard measures what drafting
//! actually delivered. Where drafting has delivered fewer tokens per second than plain decoding
//! at the current batch size, nobody drafts, except on an exploration step now and then that
//! lets the policy choose again, so both figures stay current (machines and workloads change).
//! An exploration measures the slower mode afresh for a few steps; each that confirms the
//! verdict doubles the wait for the next one, so a clear verdict costs little to keep checking.
//! At a batch size seen for the first time the two take turns until both are measured.
//!
//! A step is charged the drafting call that produced the drafts it verifies (made at the end of
//! the previous step) besides its own forward and verification, so that a drafting step carries
//! the whole cost of its drafts.

use std::collections::HashMap;

/// Weight of a new step in the smoothed tokens and seconds of a mode.
const SMOOTHING: f64 = 0.15;

/// Steps a mode needs at a batch size before its rate counts (also the length of an
/// exploration): the tokens of one drafting step vary with its acceptance, so one step says
/// little.
const MIN_STEPS: u32 = 4;

/// Steps before the first exploration of the mode measured slower; each exploration that
/// confirms the verdict doubles it, up to [`MAX_EXPLORE_INTERVAL`].
const EXPLORE_EVERY: u64 = 16;

/// Most steps between two explorations.
const MAX_EXPLORE_INTERVAL: u64 = 256;

/// How much more drafting must deliver than plain decoding to be kept. The policy already
/// drafts only what its cost model expects to pay, so the guard only has to catch drafting
/// that measures slower; a margin above 1 would give up drafting that pays a little (one
/// request with a modest head).
const DRAFTING_MARGIN: f64 = 1.0;

/// What the guard lets the policy do in the coming step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Allowance {
    /// The policy chooses the draft lengths.
    Draft,
    /// Nobody drafts (no probes either).
    Plain,
}

/// One decode step as the guard sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct DecodeStep {
    /// Requests running when the step was scheduled.
    pub num_running: usize,
    /// Whether its forward verified any draft token.
    pub verified_drafts: bool,
    /// Output tokens it emitted.
    pub tokens: usize,
    /// Seconds of its forward, verification and commit.
    pub seconds: f64,
}

/// Smoothed tokens and seconds of one mode's steps.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Rate {
    tokens: f64,
    seconds: f64,
    steps: u32,
}

impl Rate {
    /// Takes in one step: the plain mean of the first steps (so that the few steps of an
    /// exploration weigh alike, rather than the first one deciding), smoothed after that.
    fn observe(&mut self, tokens: f64, seconds: f64) {
        self.steps = self.steps.saturating_add(1);
        let weight = SMOOTHING.max(1.0 / f64::from(self.steps));
        self.tokens += weight * (tokens - self.tokens);
        self.seconds += weight * (seconds - self.seconds);
    }

    /// Tokens per second, once measured often enough.
    fn per_second(&self) -> Option<f64> {
        (self.steps >= MIN_STEPS && self.seconds > 0.0).then(|| self.tokens / self.seconds)
    }
}

/// The two modes' rates at one batch size, how many steps have been decided there, and when
/// the slower mode is tried next.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct BatchRates {
    drafting: Rate,
    plain: Rate,
    decided: u64,
    /// The faster mode at the last exploration (or when both were first measured).
    verdict: Option<Allowance>,
    interval: u64,
    next_exploration: u64,
}

impl BatchRates {
    /// The faster mode, or the slower one when an exploration is due: its rate starts over,
    /// so the next steps measure it afresh until it counts again.
    fn exploit_or_explore(&mut self, faster: Allowance) -> Allowance {
        match self.verdict {
            None => {
                self.verdict = Some(faster);
                self.interval = EXPLORE_EVERY;
                self.next_exploration = self.decided + self.interval;
                faster
            }
            Some(_) if self.decided < self.next_exploration => faster,
            Some(verdict) => {
                self.interval = if verdict == faster {
                    (self.interval * 2).min(MAX_EXPLORE_INTERVAL)
                } else {
                    EXPLORE_EVERY
                };
                self.verdict = Some(faster);
                self.next_exploration = self.decided + self.interval;
                let slower = faster.other();
                *self.rate_mut(slower) = Rate::default();
                slower
            }
        }
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
}

impl GoodputGuard {
    /// What the coming step at `num_running` requests may do.
    pub fn allowance(&mut self, num_running: usize) -> Allowance {
        let rates = self.by_batch.entry(num_running).or_default();
        rates.decided += 1;
        match (rates.drafting.per_second(), rates.plain.per_second()) {
            (Some(drafting), Some(plain)) => {
                let faster = if drafting >= plain * DRAFTING_MARGIN {
                    Allowance::Draft
                } else {
                    Allowance::Plain
                };
                let allowance = rates.exploit_or_explore(faster);
                tracing::trace!(
                    num_running,
                    drafting_tokens_per_s = drafting,
                    plain_tokens_per_s = plain,
                    ?allowance,
                    "goodput guard"
                );
                allowance
            }
            // Until both are measured, the mode with fewer measured steps goes next.
            (Some(_), None) => Allowance::Plain,
            (None, Some(_)) => Allowance::Draft,
            (None, None) if rates.plain.steps < rates.drafting.steps => Allowance::Plain,
            (None, None) => Allowance::Draft,
        }
    }

    /// Takes in the seconds of the drafting call just made (for the drafts of the next step).
    pub fn observe_draft_call(&mut self, seconds: f64) {
        self.pending_draft_seconds = seconds;
    }

    /// Takes in one finished decode step (call before [`GoodputGuard::observe_draft_call`] of
    /// the same step, whose drafts the next step verifies).
    pub fn observe_decode(&mut self, step: &DecodeStep) {
        let seconds = step.seconds + std::mem::take(&mut self.pending_draft_seconds);
        if !seconds.is_finite() || seconds <= 0.0 {
            return;
        }
        let rates = self.by_batch.entry(step.num_running).or_default();
        let mode = if step.verified_drafts {
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
    }
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
        let mut drafted = 0;
        for _ in 0..steps {
            let drafts = guard.allowance(num_running) == Allowance::Draft;
            drafted += usize::from(drafts);
            guard.observe_draft_call(if drafts { machine.call_seconds } else { 0.0 });
            guard.observe_decode(&DecodeStep {
                num_running,
                verified_drafts: drafts,
                tokens: if drafts { machine.tokens } else { num_running },
                seconds: if drafts {
                    machine.seconds
                } else {
                    machine.plain_seconds
                },
            });
        }
        drafted
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

    /// Steps of the slower mode in 320 steps after the first verdict: explorations of
    /// `MIN_STEPS` steps after 16, 32, 64 and 128 more steps.
    const EXPLORED: usize = 4 * MIN_STEPS as usize;

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
    fn batch_sizes_are_judged_apart() {
        let mut guard = GoodputGuard::default();
        run(&mut guard, 8, 320, BATCH_OF_8);
        let drafted = run(&mut guard, 1, 320, ONE_REQUEST);
        assert_eq!(drafted, 320 - TURNS / 2 - EXPLORED);
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
        for tokens in [1.0, 4.0, 4.0, 4.0] {
            rate.observe(tokens, 0.1);
        }
        // The mean of 3.25 tokens per 0.1 s, not mostly the unlucky first step.
        let per_second = rate.per_second().expect("measured after MIN_STEPS steps");
        assert!((per_second - 32.5).abs() < 1e-9, "{per_second}");
        // Later steps are smoothed: after enough of them, one step moves the rate by the
        // smoothing weight only.
        for _ in 0..20 {
            rate.observe(4.0, 0.1);
        }
        rate.observe(0.0, 0.1);
        let expected = 4.0 * (1.0 - SMOOTHING) / 0.1;
        assert!((rate.per_second().unwrap() - expected).abs() < 0.5);
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
