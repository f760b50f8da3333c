//! Per-request estimates of how likely each draft row is to be accepted, smoothed over the
//! request's verification outcomes; the engine-wide estimate and the measured share of a
//! request's own deviation from it that persists ([`AcceptancePrior`]); and the probing of
//! requests that do not draft, whose estimates would otherwise go stale.

use std::ops::Range;

/// Weight of one verification outcome in a request's estimate: a few unlucky verifications of
/// a useful drafter (acceptance about a third) must not stop its drafts, while one that never
/// succeeds stops within about ten.
const REQUEST_SMOOTHING: f64 = 0.15;

/// Weight of one verification outcome in the engine-wide estimate new requests start from
/// (after the first outcomes of a row, which weigh alike): about the last hundred outcomes
/// count, so that with one or two requests in flight the estimate stays the drafter's typical
/// acceptance instead of following the running request's streaks, which its own estimate
/// already follows.
const PRIOR_SMOOTHING: f64 = 0.01;

/// Acceptance of the first draft row in the estimate an engine starts with, and the factor
/// for each further row: optimistic enough that a new engine tries its drafter.
const INITIAL_FIRST_ROW: f64 = 0.6;

/// Engine-wide acceptance of the first draft row from which the drafter counts as useful: a
/// request of a useful drafter that stopped drafting is more likely unlucky than badly served.
const PROBE_BELOW: f64 = 0.2;

/// Steps a request of a drafter that is not useful waits before its first probe; each failed
/// probe doubles it up to [`MAX_PROBE_INTERVAL`], an accepted one resets it.
const FIRST_PROBE_INTERVAL: u32 = 4;

/// Longest wait between two probes.
pub(crate) const MAX_PROBE_INTERVAL: u32 = 64;

/// The estimated probability that draft row `j` (chain position `j`, or tree node `j` in node
/// order) is accepted, for `j = 1..=rows`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct AcceptanceEstimate {
    /// `rates[j - 1]` for draft row `j`.
    rates: Vec<f64>,
    /// Steps since the request last drafted.
    steps_without_draft: u32,
    /// Steps to wait before the next probe.
    probe_interval: u32,
}

impl AcceptanceEstimate {
    /// An estimate starting at `rates`.
    pub fn new(rates: Vec<f64>) -> Self {
        Self {
            rates,
            steps_without_draft: 0,
            probe_interval: FIRST_PROBE_INTERVAL,
        }
    }

    /// The optimistic estimate of an engine that has verified nothing yet, for `rows` draft
    /// rows.
    pub fn initial(rows: usize) -> Self {
        let rates = (1..=rows)
            .map(|j| INITIAL_FIRST_ROW.powi(j as i32))
            .collect();
        Self::new(rates)
    }

    /// The request's own estimated acceptance of draft rows `1..`, made non-increasing (a row
    /// is only worth what the rows before it allow); the policy uses
    /// [`AcceptancePrior::expected_gains`].
    #[cfg(test)]
    pub fn gains(&self) -> Vec<f64> {
        let mut floor = 1.0_f64;
        self.rates
            .iter()
            .map(|&rate| {
                floor = floor.min(rate);
                floor
            })
            .collect()
    }

    /// Takes in one verification of `fed` draft rows of which `accepted` (1-based rows, in any
    /// order) were accepted.
    pub fn observe(&mut self, fed: usize, accepted: &[usize]) {
        smooth(&mut self.rates, 0..fed, accepted, REQUEST_SMOOTHING);
        if accepted.is_empty() {
            self.probe_interval = (self.probe_interval * 2).min(MAX_PROBE_INTERVAL);
        } else {
            self.probe_interval = FIRST_PROBE_INTERVAL;
        }
    }

    /// Takes in draft rows (0-based `rows`) that a confidence-gated chain did not reach: they
    /// count as rejected.
    pub fn observe_unreached(&mut self, rows: Range<usize>) {
        smooth(&mut self.rates, rows, &[], REQUEST_SMOOTHING);
    }

    /// Records whether the request drafts in the coming step; returns whether a request that
    /// was not going to draft is due for a probe (then it drafts one token and this counts as
    /// drafting). `probe_every` is the policy's shortest interval between two probes of one
    /// request (`None` where even a sure draft token would not pay, so no estimate can change
    /// the choice). While `drafter_useful` (its drafts are accepted often enough engine-wide),
    /// failed probes do not space the next ones out further: a request of a useful drafter
    /// that stopped after a run of bad luck, or whose estimate sits just below what a row
    /// needs, is probed at that interval until one succeeds, instead of being locked out like
    /// a request of a drafter that never succeeds.
    pub fn drafts_or_probes(
        &mut self,
        drafts: bool,
        probe_every: Option<u32>,
        drafter_useful: bool,
    ) -> bool {
        if drafts {
            self.steps_without_draft = 0;
            return false;
        }
        self.steps_without_draft = self.steps_without_draft.saturating_add(1);
        let Some(every) = probe_every else {
            return false;
        };
        let interval = if drafter_useful {
            every
        } else {
            self.probe_interval.max(every)
        };
        if self.steps_without_draft >= interval {
            self.steps_without_draft = 0;
            return true;
        }
        false
    }
}

/// Weight of one outcome in the engine-wide measure of how far a request's own history
/// predicts its next outcomes (after the first outcomes, which weigh alike): about the last
/// five hundred outcomes count, because a regression slope over a hundred accepted-or-rejected
/// outcomes swings by tens of percent from one window to the next, and a slope that happens
/// to read high stops the drafts of every request after an unlucky run.
const PERSISTENCE_SMOOTHING: f64 = 0.002;

/// How much of a request's deviation from the engine-wide estimate is trusted before outcomes
/// measured it.
const INITIAL_PERSISTENCE: f64 = 0.5;

/// Outcomes measured before the measured persistence replaces [`INITIAL_PERSISTENCE`].
const MIN_PERSISTENCE_OUTCOMES: u64 = 64;

/// The engine-wide acceptance estimate new requests start from, and how much a request's own
/// history tells about its next verification.
///
/// Whether a request's recent outcomes predict its next ones depends on the drafter: n-gram
/// matches come in runs (a copied passage), while an EAGLE head's acceptance on chat is
/// nearly independent from one step to the next, so a run of rejections mostly says nothing
/// and stopping its drafts would only give up tokens. The engine therefore measures, over
/// all verifications, the regression slope ("persistence") of an outcome's deviation from the
/// engine-wide rate on the request's smoothed deviation before it, and expects each request to
/// keep only that share of its deviation.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct AcceptancePrior {
    rates: Vec<f64>,
    /// Outcomes measured per row.
    counts: Vec<u64>,
    /// Smoothed moments of a request's deviation from `rates` and of the next outcome's.
    moments: Moments,
}

/// Smoothed first and second moments of pairs `(x, y)`, for a regression slope of `y` on `x`.
#[derive(Clone, Debug, Default, PartialEq)]
struct Moments {
    x: f64,
    y: f64,
    xx: f64,
    xy: f64,
    count: u64,
}

impl Moments {
    /// Takes in one pair: the plain mean of the first pairs, smoothed after that.
    fn observe(&mut self, x: f64, y: f64) {
        self.count += 1;
        let weight = PERSISTENCE_SMOOTHING.max(1.0 / self.count as f64);
        self.x += weight * (x - self.x);
        self.y += weight * (y - self.y);
        self.xx += weight * (x * x - self.xx);
        self.xy += weight * (x * y - self.xy);
    }

    /// The slope of `y` on `x` (centred, so that a shift both share, such as an engine-wide
    /// estimate still settling, does not count), once enough pairs spread enough.
    fn slope(&self) -> Option<f64> {
        let variance = self.xx - self.x * self.x;
        (self.count >= MIN_PERSISTENCE_OUTCOMES && variance > 1e-6)
            .then(|| (self.xy - self.x * self.y) / variance)
    }
}

impl AcceptancePrior {
    /// The optimistic prior of a new engine, for `rows` draft rows.
    pub fn new(rows: usize) -> Self {
        Self {
            rates: AcceptanceEstimate::initial(rows).rates,
            counts: vec![0; rows],
            moments: Moments::default(),
        }
    }

    /// Takes in the outcomes of the 0-based draft `rows` of `request` (1-based rows
    /// `accepted` were accepted, the others not), before `request` takes them in (see
    /// [`AcceptanceEstimate::observe`]).
    pub fn observe(
        &mut self,
        request: &AcceptanceEstimate,
        rows: Range<usize>,
        accepted: &[usize],
    ) {
        let rows = rows.start..rows.end.min(self.rates.len());
        for index in rows.clone() {
            let rate = self.rates[index];
            let own = request.rates[index];
            self.moments
                .observe(own - rate, outcome(index, accepted) - rate);
        }
        // The optimistic start is a guess: the first outcomes of each row weigh alike, so the
        // estimate is their mean until it is smoothed.
        for index in rows {
            let count = &mut self.counts[index];
            *count += 1;
            let weight = PRIOR_SMOOTHING.max(1.0 / *count as f64);
            let rate = &mut self.rates[index];
            *rate += weight * (outcome(index, accepted) - *rate);
        }
    }

    /// The share of a request's deviation from the engine-wide estimate that its next
    /// outcomes keep, between 0 and 1.
    pub fn persistence(&self) -> f64 {
        self.moments
            .slope()
            .map_or(INITIAL_PERSISTENCE, |slope| slope.clamp(0.0, 1.0))
    }

    /// What `request` is expected to gain from each draft row: the probability that rows
    /// `1..=j` are all accepted, from the engine-wide estimate moved by the persistent share
    /// of the request's own deviation; never rising with `j`.
    pub fn expected_gains(&self, request: &AcceptanceEstimate) -> Vec<f64> {
        let persistence = self.persistence();
        let mut floor = 1.0_f64;
        request
            .rates
            .iter()
            .zip(&self.rates)
            .map(|(&own, &rate)| {
                floor = floor.min((rate + persistence * (own - rate)).clamp(0.0, 1.0));
                floor
            })
            .collect()
    }

    /// The estimate of a new request.
    pub fn estimate(&self) -> AcceptanceEstimate {
        AcceptanceEstimate::new(self.rates.clone())
    }

    /// Whether the engine's drafts are accepted often enough that a request which stopped
    /// drafting is more likely unlucky than served by a bad drafter: the engine-wide
    /// acceptance of the first draft row is at least the probing threshold.
    pub fn drafter_useful(&self) -> bool {
        self.rates.first().is_some_and(|&rate| rate >= PROBE_BELOW)
    }
}

/// 1 when draft row `index + 1` is in `accepted`, else 0.
fn outcome(index: usize, accepted: &[usize]) -> f64 {
    if accepted.contains(&(index + 1)) {
        1.0
    } else {
        0.0
    }
}

/// Moves the rates of the 0-based `rows` toward their outcomes (1-based rows `accepted`).
fn smooth(rates: &mut [f64], rows: Range<usize>, accepted: &[usize], weight: f64) {
    let end = rows.end.min(rates.len());
    let start = rows.start.min(end);
    for (index, rate) in rates[start..end].iter_mut().enumerate() {
        *rate += weight * (outcome(start + index, accepted) - *rate);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_close(actual: &[f64], expected: &[f64]) {
        assert_eq!(actual.len(), expected.len(), "{actual:?}");
        for (a, e) in actual.iter().zip(expected) {
            assert!((a - e).abs() < 1e-12, "{actual:?} vs {expected:?}");
        }
    }

    #[test]
    fn estimates_follow_outcomes_of_the_fed_rows_only() {
        let mut estimate = AcceptanceEstimate::new(vec![0.5, 0.5, 0.5]);
        for _ in 0..30 {
            estimate.observe(2, &[1]);
        }
        let gains = estimate.gains();
        assert!(gains[0] > 0.99 && gains[1] < 0.01, "{gains:?}");
        assert!(gains[2] <= gains[1], "gains never rise: {gains:?}");
        assert_eq!(estimate.rates[2], 0.5, "row 3 was never fed");
    }

    #[test]
    fn tree_rows_count_when_on_the_accepted_path() {
        let mut estimate = AcceptanceEstimate::new(vec![0.5; 4]);
        estimate.observe(4, &[2, 4]);
        let (down, up) = (0.5 - 0.5 * REQUEST_SMOOTHING, 0.5 + 0.5 * REQUEST_SMOOTHING);
        assert_close(&estimate.rates, &[down, up, down, up]);
        assert_close(&estimate.gains(), &[down; 4]);
    }

    #[test]
    fn failing_requests_are_probed_ever_more_rarely() {
        let mut estimate = AcceptanceEstimate::new(vec![0.0; 3]);
        let mut probes = Vec::new();
        for step in 0..400 {
            if estimate.drafts_or_probes(false, Some(FIRST_PROBE_INTERVAL), false) {
                probes.push(step);
                estimate.observe(1, &[]);
            }
        }
        let gaps: Vec<i32> = probes.windows(2).map(|w| w[1] - w[0]).collect();
        assert_eq!(gaps[..4], [8, 16, 32, 64], "{probes:?}");
        assert!(gaps[4..]
            .iter()
            .all(|&gap| gap == MAX_PROBE_INTERVAL as i32));
        let mut good = AcceptanceEstimate::new(vec![0.9; 3]);
        assert!(
            (0..100).all(|_| !good.drafts_or_probes(false, None, true)),
            "where even a sure draft token would not pay, nobody is probed"
        );
    }

    #[test]
    fn an_unlucky_request_of_a_useful_drafter_keeps_being_probed_often() {
        let mut estimate = AcceptanceEstimate::new(vec![0.05; 3]);
        let mut probes = Vec::new();
        for step in 0..40 {
            if estimate.drafts_or_probes(false, Some(FIRST_PROBE_INTERVAL), true) {
                probes.push(step);
                estimate.observe(1, &[]);
            }
        }
        let gaps: Vec<i32> = probes.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(gaps.len() >= 8, "{probes:?}");
        assert!(
            gaps.iter().all(|&gap| gap == FIRST_PROBE_INTERVAL as i32),
            "{probes:?}"
        );
        let mut prior = AcceptancePrior::new(2);
        assert!(prior.drafter_useful(), "a new engine tries its drafter");
        for _ in 0..100 {
            let request = prior.estimate();
            prior.observe(&request, 0..2, &[]);
        }
        assert!(!prior.drafter_useful());
    }

    #[test]
    fn an_accepted_probe_resets_the_interval() {
        let mut estimate = AcceptanceEstimate::new(vec![0.1]);
        estimate.observe(1, &[]);
        estimate.observe(1, &[]);
        assert_eq!(estimate.probe_interval, 16);
        estimate.observe(1, &[1]);
        assert_eq!(estimate.probe_interval, FIRST_PROBE_INTERVAL);
    }

    #[test]
    fn new_requests_start_from_the_engine_wide_estimate() {
        let mut prior = AcceptancePrior::new(2);
        assert_close(&prior.estimate().rates, &[0.6, 0.36]);
        for _ in 0..200 {
            let request = prior.estimate();
            prior.observe(&request, 0..2, &[]);
        }
        assert!(prior.estimate().gains()[0] < 0.01);
    }

    /// Runs `requests` requests of `steps` one-row verifications each through `prior`, request
    /// `r`'s step `s` accepted when `accepted(r, s)`; returns the last request's estimate.
    fn serve(
        prior: &mut AcceptancePrior,
        requests: usize,
        steps: usize,
        accepted: impl Fn(usize, usize) -> bool,
    ) -> AcceptanceEstimate {
        let mut last = prior.estimate();
        for r in 0..requests {
            let mut estimate = prior.estimate();
            for s in 0..steps {
                let rows: &[usize] = if accepted(r, s) { &[1] } else { &[] };
                prior.observe(&estimate, 0..1, rows);
                estimate.observe(1, rows);
            }
            last = estimate;
        }
        last
    }

    #[test]
    fn a_run_of_rejections_says_little_where_outcomes_are_independent() {
        // About a third of the drafts are accepted, independently of the request's history
        // (a fixed pseudo-random pattern).
        let mut prior = AcceptancePrior::new(1);
        let independent = |r: usize, s: usize| (r * 7 + s * 13 + (r * s) % 5).is_multiple_of(3);
        serve(&mut prior, 40, 64, independent);
        assert!(prior.persistence() < 0.3, "{}", prior.persistence());
        // A request whose last ten drafts were rejected is still expected to do about as
        // well as any other.
        let mut unlucky = prior.estimate();
        for _ in 0..10 {
            unlucky.observe(1, &[]);
        }
        let expected = prior.expected_gains(&unlucky)[0];
        assert!(unlucky.gains()[0] < 0.1 && expected > 0.2, "{expected}");
    }

    #[test]
    fn a_request_that_keeps_failing_is_believed_where_outcomes_persist() {
        // Half the requests copy text (every draft accepted), half never match.
        let mut prior = AcceptancePrior::new(1);
        let persistent = |r: usize, _s: usize| r.is_multiple_of(2);
        let failing = serve(&mut prior, 40, 64, persistent);
        assert!(prior.persistence() > 0.8, "{}", prior.persistence());
        assert!(prior.expected_gains(&failing)[0] < 0.1);
    }
}
