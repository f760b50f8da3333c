//! Per-request estimates of how likely each draft row is to be accepted, smoothed over the
//! request's verification outcomes, and the probing of requests that stopped drafting because
//! their drafts kept failing.

/// Weight of one verification outcome in a request's estimate: a few unlucky verifications of
/// a useful drafter (acceptance about a third) must not stop its drafts, while one that never
/// succeeds stops within about ten.
const REQUEST_SMOOTHING: f64 = 0.15;

/// Weight of one verification outcome in the engine-wide estimate new requests start from.
const PRIOR_SMOOTHING: f64 = 0.05;

/// Acceptance of the first draft row in the estimate an engine starts with, and the factor
/// for each further row: optimistic enough that a new engine tries its drafter.
const INITIAL_FIRST_ROW: f64 = 0.6;

/// Below this estimated acceptance of its first draft row, a request that does not draft is
/// probed now and then (its estimate may be stale).
const PROBE_BELOW: f64 = 0.2;

/// Steps a failing request waits before its first probe; each failed probe doubles it up to
/// [`MAX_PROBE_INTERVAL`], an accepted one resets it.
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

    /// The estimated acceptance of draft rows `1..`, made non-increasing (a row is only worth
    /// what the rows before it allow).
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
        smooth(&mut self.rates, fed, accepted, REQUEST_SMOOTHING);
        if accepted.is_empty() {
            self.probe_interval = (self.probe_interval * 2).min(MAX_PROBE_INTERVAL);
        } else {
            self.probe_interval = FIRST_PROBE_INTERVAL;
        }
    }

    /// Records whether the request drafts in the coming step; returns whether a request that
    /// was not going to draft is due for a probe (then it drafts one token and this counts as
    /// drafting). While `drafter_useful` (its drafts are accepted often enough engine-wide),
    /// failed probes do not space the next ones out: a request of a useful drafter that stopped
    /// after a run of bad luck is probed every few steps until one succeeds, instead of being
    /// locked out like a request of a drafter that never succeeds.
    pub fn drafts_or_probes(&mut self, drafts: bool, drafter_useful: bool) -> bool {
        if drafts {
            self.steps_without_draft = 0;
            return false;
        }
        let failing = self.rates.first().is_some_and(|&rate| rate < PROBE_BELOW);
        self.steps_without_draft += 1;
        let interval = if drafter_useful {
            FIRST_PROBE_INTERVAL
        } else {
            self.probe_interval
        };
        if failing && self.steps_without_draft >= interval {
            self.steps_without_draft = 0;
            return true;
        }
        false
    }
}

/// The engine-wide acceptance estimate new requests start from.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct AcceptancePrior {
    rates: Vec<f64>,
}

impl AcceptancePrior {
    /// The optimistic prior of a new engine, for `rows` draft rows.
    pub fn new(rows: usize) -> Self {
        Self {
            rates: AcceptanceEstimate::initial(rows).rates,
        }
    }

    /// Takes in one verification (see [`AcceptanceEstimate::observe`]).
    pub fn observe(&mut self, fed: usize, accepted: &[usize]) {
        smooth(&mut self.rates, fed, accepted, PRIOR_SMOOTHING);
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

/// Moves `rates[j - 1]` towards 1 (row `j` in `accepted`) or 0, for every fed row `j`.
fn smooth(rates: &mut [f64], fed: usize, accepted: &[usize], weight: f64) {
    for (index, rate) in rates.iter_mut().enumerate().take(fed) {
        let outcome = if accepted.contains(&(index + 1)) {
            1.0
        } else {
            0.0
        };
        *rate += weight * (outcome - *rate);
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
            if estimate.drafts_or_probes(false, false) {
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
            (0..100).all(|_| !good.drafts_or_probes(false, true)),
            "requests with good drafts that do not draft (cost) are not probed"
        );
    }

    #[test]
    fn an_unlucky_request_of_a_useful_drafter_keeps_being_probed_often() {
        let mut estimate = AcceptanceEstimate::new(vec![0.05; 3]);
        let mut probes = Vec::new();
        for step in 0..40 {
            if estimate.drafts_or_probes(false, true) {
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
            prior.observe(2, &[]);
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
            prior.observe(2, &[]);
        }
        assert!(prior.estimate().gains()[0] < 0.01);
    }
}
