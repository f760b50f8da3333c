//! The engine's online model of what a step costs: the target forward by number of rows, the
//! drafting call by draft depth and draft tokens, and the rest of the step, from the engine's
//! own timings. Forward costs are those of decode steps, every row a request's known token or
//! one of its drafts: a step with prefill work computes the logits of few of its rows and runs
//! its many rows through a matrix product that costs less per row than a decode batch's
//! few-row kernels, so its cost per row would price verification rows too cheap (on a 2-core
//! CPU, a 340-row prefill chunk about 1 ms per row, rows added to 8 decode rows about 2).
//! They are medians of the recent timings per row count (a step that the operating system
//! preempted takes twice as long, and an average would carry that into the cost of a row,
//! which decides how much to draft), or the fastest timing of a row count timed only once or
//! twice, and no more than the cheap side below says where it lies beyond every row count
//! timed three times or more (one slow first timing would otherwise keep a row count the
//! policy then stops asking for from ever being timed again); the curve is the lower convex
//! hull of those costs (a size measured above it was measured in worse conditions), taken
//! first over the row counts up to the largest timed three times or more and then continued
//! through the capped ones beyond, so that a cheap side never lowers the cost of a row count
//! timed often enough; interpolated between its points; below the smallest it stays flat
//! (memory-bound). Beyond the largest decode step measured, the cost grows as the hull of
//! all steps' timings (prefill chunks included) grows there, or in proportion to the rows where
//! nothing larger was timed: a row count no decode step has reached yet is priced on the cheap
//! side, so the policy may draft it and so measure it.
//! Drafting costs are a least-squares fit over the recent drafting calls: each draft step (a
//! depth) costs a fixed part, each draft token a part of its own.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

/// Weight of a new timing in a smoothed average: large enough to follow a changing machine,
/// small enough that one outlier moves an estimate by a fifth of its error.
const SMOOTHING: f64 = 0.2;

/// Smallest cost of one more forward row, as a fraction of the cheapest forward: rows are never
/// modelled as free, so a draft token with (almost) no chance of acceptance never pays.
const MIN_ROW_COST: f64 = 0.005;

/// An exponentially smoothed average.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Smoothed(f64);

impl Smoothed {
    fn update(&mut self, value: f64) {
        self.0 += SMOOTHING * (value - self.0);
    }
}

/// Drafting calls the draft-cost fit keeps.
const DRAFT_WINDOW: usize = 64;

/// A measured size and its estimated seconds.
type Point = (usize, f64);

/// Timings per forward size whose median is its cost: about the last two seconds of decoding,
/// and more than twice as many as the outliers of a busy machine's usual burst.
const FORWARD_WINDOW: usize = 9;

/// Fewest timings of a size whose median is its cost. With fewer, the fastest is: a preempted
/// step only ever takes longer, and the median of two timings is their mean, so one preempted
/// step among two would make a size that is rarely run (and so rarely measured again) look
/// many times dearer than it is.
const MIN_MEDIAN_TIMINGS: usize = 3;

/// The cost of one size from its latest [`FORWARD_WINDOW`] timings: their median, or their
/// minimum while there are fewer than [`MIN_MEDIAN_TIMINGS`]. The cost is kept up to date as
/// timings arrive, since the policy reads every size's cost several times per step.
#[derive(Clone, Debug, Default, PartialEq)]
struct RecentTimings {
    recent: VecDeque<f64>,
    cost: f64,
}

impl RecentTimings {
    fn observe(&mut self, seconds: f64) {
        if self.recent.len() == FORWARD_WINDOW {
            self.recent.pop_front();
        }
        self.recent.push_back(seconds);
        self.cost = median_or_fastest(&self.recent);
    }

    /// Whether enough timings were taken for their median to be the cost.
    fn settled(&self) -> bool {
        self.recent.len() >= MIN_MEDIAN_TIMINGS
    }

    fn cost(&self) -> f64 {
        self.cost
    }
}

/// The median of `timings`, or the fastest while there are fewer than [`MIN_MEDIAN_TIMINGS`]
/// (0 for none).
fn median_or_fastest(timings: &VecDeque<f64>) -> f64 {
    let mut sorted: Vec<f64> = timings.iter().copied().collect();
    sorted.sort_by(f64::total_cmp);
    let middle = sorted.len() / 2;
    match sorted.len() {
        0 => 0.0,
        len if len < MIN_MEDIAN_TIMINGS => sorted[0],
        len if len % 2 == 1 => sorted[middle],
        _ => (sorted[middle - 1] + sorted[middle]) / 2.0,
    }
}

/// Recent seconds by an integer size (rows).
#[derive(Clone, Debug, Default, PartialEq)]
struct CostCurve {
    by_size: BTreeMap<usize, RecentTimings>,
}

impl CostCurve {
    fn observe(&mut self, size: usize, seconds: f64) {
        if !seconds.is_finite() || seconds < 0.0 {
            return;
        }
        self.by_size.entry(size).or_default().observe(seconds);
    }

    /// The measured sizes and their costs, by size.
    fn points(&self) -> impl Iterator<Item = Point> + '_ {
        self.by_size.iter().map(|(&size, t)| (size, t.cost()))
    }

    /// The largest size measured.
    fn largest(&self) -> Option<usize> {
        self.by_size.keys().next_back().copied()
    }

    /// The measured sizes and their costs that lie on the curve's lower convex hull, by size.
    fn lower_hull(&self) -> Vec<Point> {
        lower_hull(self.points())
    }

    /// The lower convex hull of the sizes timed at least [`MIN_MEDIAN_TIMINGS`] times.
    fn settled_hull(&self) -> Vec<Point> {
        let settled = self.by_size.iter().filter(|(_, t)| t.settled());
        lower_hull(settled.map(|(&size, t)| (size, t.cost())))
    }
}

/// The points of `points` (by increasing size) that lie on their lower convex hull. A forward's
/// cost is convex in its rows (flat while the weights' streaming dominates, then growing by a
/// fixed cost per row), so a size measured above the hull of the others was measured in worse
/// conditions than they were (a longer context, a busy machine, a size last run long ago): the
/// hull, not that median, is its cost.
fn lower_hull(points: impl Iterator<Item = Point>) -> Vec<Point> {
    let mut hull: Vec<Point> = Vec::new();
    for point in points {
        while let [.., a, b] = hull[..] {
            if turns_upward(a, b, point) {
                break;
            }
            hull.pop();
        }
        hull.push(point);
    }
    hull
}

/// Whether the path `a`, `b`, `c` (sizes increasing) bends upward at `b`, so that `b` lies
/// below the chord from `a` to `c`.
fn turns_upward(a: Point, b: Point, c: Point) -> bool {
    let (ab_size, ab_cost) = ((b.0 - a.0) as f64, b.1 - a.1);
    let (ac_size, ac_cost) = ((c.0 - a.0) as f64, c.1 - a.1);
    ab_size * ac_cost - ab_cost * ac_size > 0.0
}

/// Linear interpolation between the points of `hull` (by size) around `size`; `beyond`
/// extends it past the largest size; flat below the smallest. `None` for an empty hull.
fn interpolate(hull: &[Point], size: usize, beyond: impl Fn(usize, f64) -> f64) -> Option<f64> {
    let above = hull.partition_point(|&(s, _)| s <= size);
    match (above.checked_sub(1).map(|i| hull[i]), hull.get(above)) {
        (Some((s, cost)), _) if s == size => Some(cost),
        (Some((s0, c0)), Some(&(s1, c1))) => {
            let t = (size - s0) as f64 / (s1 - s0) as f64;
            Some(c0 + t * (c1 - c0))
        }
        (None, Some(&(_, c1))) => Some(c1),
        (Some((s0, c0)), None) => Some(beyond(s0, c0)),
        (None, None) => None,
    }
}

/// One step's measured phases.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct StepTiming {
    /// Rows the target forward computed.
    pub rows: usize,
    /// The target forward.
    pub forward: Duration,
    /// The deepest draft asked of the drafter.
    pub draft_depth: usize,
    /// Draft tokens asked of the drafter, over all requests.
    pub draft_tokens: usize,
    /// The drafting call.
    pub draft: Duration,
    /// Everything else of the step (verification, commit, outputs).
    pub other: Duration,
    /// Whether every row of the forward was a decode row: one known token of a request or
    /// one of its drafts, each with its logits (no prefill work).
    pub decode_rows_only: bool,
}

/// Seconds of drafting calls: taking in committed rows alone (depth 0), and drafting as a
/// fixed cost per draft step plus a cost per draft token.
#[derive(Clone, Debug, Default, PartialEq)]
struct DraftCosts {
    taking_in: Option<Smoothed>,
    /// Recent drafting calls: depth, tokens, and seconds beyond taking in.
    recent: VecDeque<(f64, f64, f64)>,
    /// Seconds per draft step and per draft token, fitted to `recent`.
    per_step: f64,
    per_token: f64,
}

impl DraftCosts {
    fn observe(&mut self, depth: usize, tokens: usize, seconds: f64) {
        if !seconds.is_finite() || seconds < 0.0 {
            return;
        }
        if depth == 0 {
            match &mut self.taking_in {
                Some(smoothed) => smoothed.update(seconds),
                None => self.taking_in = Some(Smoothed(seconds)),
            }
            return;
        }
        let beyond = (seconds - self.taking_in()).max(0.0);
        if self.recent.len() == DRAFT_WINDOW {
            self.recent.pop_front();
        }
        self.recent.push_back((depth as f64, tokens as f64, beyond));
        self.fit();
    }

    /// Least squares of seconds over (depth, tokens) without intercept, slightly regularized
    /// so that collinear calls (one request: tokens = depth) split the cost evenly; falls back
    /// to a cost per token alone when a coefficient comes out negative.
    fn fit(&mut self) {
        let (mut dd, mut dt, mut tt, mut dy, mut ty) = (0.0, 0.0, 0.0, 0.0, 0.0);
        for &(d, t, y) in &self.recent {
            (dd, dt, tt) = (dd + d * d, dt + d * t, tt + t * t);
            (dy, ty) = (dy + d * y, ty + t * y);
        }
        let ridge = 1e-3 * (dd + tt) / 2.0;
        let (a, b, c) = (dd + ridge, dt, tt + ridge);
        let det = a * c - b * b;
        let (per_step, per_token) = if det > 0.0 {
            ((c * dy - b * ty) / det, (a * ty - b * dy) / det)
        } else {
            (-1.0, 0.0)
        };
        (self.per_step, self.per_token) = if per_step >= 0.0 && per_token >= 0.0 {
            (per_step, per_token)
        } else if tt > 0.0 {
            (0.0, (ty / tt).max(0.0))
        } else {
            (0.0, 0.0)
        };
    }

    fn taking_in(&self) -> f64 {
        self.taking_in.map_or(0.0, |smoothed| smoothed.0)
    }

    fn estimate(&self, depth: usize, tokens: usize) -> f64 {
        self.taking_in() + self.per_step * depth as f64 + self.per_token * tokens as f64
    }
}

/// The engine's cost model.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct StepCosts {
    /// Forward timings of decode steps.
    forward: CostCurve,
    /// Forward timings of every step, prefill work included.
    any_forward: CostCurve,
    draft: DraftCosts,
    other: Option<Smoothed>,
}

impl StepCosts {
    /// Takes in one step's timings.
    pub fn observe(&mut self, timing: &StepTiming) {
        // The drafting call after a step with prefill work also takes in the prompt's rows (a
        // draft model runs them all), which says nothing of what drafting costs.
        if timing.decode_rows_only {
            self.draft.observe(
                timing.draft_depth,
                timing.draft_tokens,
                timing.draft.as_secs_f64(),
            );
        }
        self.observe_without_drafting(timing);
    }

    /// Takes in one step's timings but its drafting call's, whose cost is not drafting's.
    pub fn observe_without_drafting(&mut self, timing: &StepTiming) {
        if timing.rows > 0 {
            let seconds = timing.forward.as_secs_f64();
            self.any_forward.observe(timing.rows, seconds);
            if timing.decode_rows_only {
                self.forward.observe(timing.rows, seconds);
            }
        }
        let other = timing.other.as_secs_f64();
        match &mut self.other {
            Some(smoothed) => smoothed.update(other),
            None => self.other = Some(Smoothed(other)),
        }
    }

    /// Estimated seconds of steps whose forward computes `first_rows`, `first_rows + 1`, ...
    /// `first_rows + extra_rows` rows: non-decreasing, each row costing at least a small
    /// fraction of the cheapest measured forward. `None` before any measured forward.
    pub fn forward_curve(&self, first_rows: usize, extra_rows: usize) -> Option<Vec<f64>> {
        let settled = self.forward.settled_hull();
        let largest = self.forward.largest()?;
        // Every size beyond the largest timed often enough was timed once or twice.
        let cap_beyond = settled
            .last()
            .map(|&(size, _)| size)
            .filter(|&size| size < largest);
        // All steps' hull only where the curve reaches beyond the decode steps measured, or
        // where sizes timed once or twice are priced from it.
        let any_hull = if first_rows + extra_rows > largest || cap_beyond.is_some() {
            self.any_forward.lower_hull()
        } else {
            Vec::new()
        };
        let proportional = |s0: usize, c0: f64, rows: usize| c0 * rows as f64 / s0.max(1) as f64;
        let any_at =
            |rows: usize| interpolate(&any_hull, rows, |s0, c0| proportional(s0, c0, rows));
        let beyond = |s0: usize, c0: f64, rows: usize| match (any_at(s0), any_at(rows)) {
            (Some(from), Some(to)) => c0 + (to - from).max(0.0),
            _ => proportional(s0, c0, rows),
        };
        // A size beyond those timed often enough costs no more than the cheap side of the
        // sizes that were says: one slow first timing of a size that the policy then stops
        // asking for would otherwise price it out of ever being timed again.
        let cheap_side = |rows: usize| interpolate(&settled, rows, |s0, c0| beyond(s0, c0, rows));
        // The capped sizes shape the curve beyond the settled ones only: a cheap side drawn
        // from prefill chunks lies below the decode rows' own cost per row, and in one hull
        // with them it would pull the settled sizes' costs down too.
        let (within, capped): (Vec<Point>, Vec<Point>) = self
            .forward
            .points()
            .partition(|&(size, _)| cap_beyond.is_none_or(|from| size <= from));
        let mut hull = lower_hull(within.into_iter());
        let join = hull.last().copied();
        let beyond_settled = lower_hull(
            join.into_iter().chain(
                capped
                    .into_iter()
                    .map(|(size, cost)| (size, cheap_side(size).map_or(cost, |c| cost.min(c)))),
            ),
        );
        hull.extend(beyond_settled.into_iter().skip(usize::from(join.is_some())));
        let at = |rows: usize| interpolate(&hull, rows, |s0, c0| beyond(s0, c0, rows));
        let cheapest = hull.first()?.1;
        let min_step = MIN_ROW_COST * cheapest;
        let mut curve = Vec::with_capacity(extra_rows + 1);
        let mut previous = f64::NEG_INFINITY;
        for rows in first_rows..=first_rows + extra_rows {
            let cost = at(rows)?.max(previous + min_step);
            curve.push(cost);
            previous = cost;
        }
        Some(curve)
    }

    /// Estimated seconds of a drafting call whose deepest draft is `depth`, asking `tokens` draft
    /// tokens in all (0, 0: taking in committed rows only); 0 before any measurement.
    pub fn draft(&self, depth: usize, tokens: usize) -> f64 {
        self.draft.estimate(depth, tokens)
    }

    /// Estimated seconds of the rest of a step.
    pub fn other(&self) -> f64 {
        self.other.map_or(0.0, |smoothed| smoothed.0)
    }

    /// Estimated seconds of a step of one request that drafts nothing: a one-row forward and
    /// the rest of a step; `None` before any forward is timed.
    pub fn plain_step(&self) -> Option<f64> {
        Some(self.forward_curve(1, 0)?[0] + self.other())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn forward(costs: &mut StepCosts, rows: usize, ms: u64) {
        timed_forward(costs, rows, ms, true);
    }

    /// Takes in a step whose forward of `rows` rows took `ms`, with prefill work unless
    /// `decode_rows_only`.
    fn timed_forward(costs: &mut StepCosts, rows: usize, ms: u64, decode_rows_only: bool) {
        costs.observe(&StepTiming {
            rows,
            forward: Duration::from_millis(ms),
            draft_depth: 0,
            draft_tokens: 0,
            draft: Duration::ZERO,
            other: Duration::ZERO,
            decode_rows_only,
        });
    }

    #[test]
    fn a_size_measured_above_the_lower_hull_costs_what_the_hull_says() {
        let mut costs = StepCosts::default();
        for _ in 0..3 {
            forward(&mut costs, 1, 19);
            // Last measured in a longer context: dearer than one more row can be.
            forward(&mut costs, 2, 23);
            forward(&mut costs, 9, 27);
        }
        let curve = costs.forward_curve(1, 8).unwrap();
        assert!(
            (curve[1] - 0.020).abs() < 1e-9,
            "row 2 on the hull: {curve:?}"
        );
        assert!((curve[8] - 0.027).abs() < 1e-9, "{curve:?}");
        assert!((curve[0] - 0.019).abs() < 1e-9, "{curve:?}");
    }

    #[test]
    fn steps_with_prefill_rows_do_not_price_verification_rows() {
        // A CPU's forward by rows: 8 and 12 decode rows, and a 340-row prefill chunk whose
        // rows cost about 1 ms each where a row added to the decode batch costs 2.
        let mut costs = StepCosts::default();
        for _ in 0..3 {
            forward(&mut costs, 8, 31);
            forward(&mut costs, 12, 39);
            timed_forward(&mut costs, 340, 350, false);
        }
        let curve = costs.forward_curve(8, 4).unwrap();
        assert!((curve[4] - 0.039).abs() < 1e-9, "{curve:?}");
        assert!((curve[2] - 0.035).abs() < 1e-9, "{curve:?}");
    }

    #[test]
    fn beyond_the_largest_decode_step_rows_cost_what_all_steps_say() {
        // One-row decode steps only, and a 21-row prefill chunk 10 ms dearer than one row:
        // the two-row step no decode step has run yet costs half a millisecond more, not twice
        // the one-row forward.
        let mut costs = StepCosts::default();
        forward(&mut costs, 1, 20);
        timed_forward(&mut costs, 21, 30, false);
        let curve = costs.forward_curve(1, 1).unwrap();
        assert!((curve[1] - 0.0205).abs() < 1e-9, "{curve:?}");
    }

    #[test]
    fn a_size_timed_once_beyond_the_settled_ones_is_priced_on_the_cheap_side() {
        // One- and two-row decode steps timed often, a 40-row prefill chunk, and one slow
        // four-row step (the first multi-row forward of a process): until four rows are timed
        // three times they cost what the cheap side says, so that they get timed again.
        let mut costs = StepCosts::default();
        let timings = [(1, 27), (2, 28)].repeat(3);
        timings
            .iter()
            .for_each(|&(rows, ms)| forward(&mut costs, rows, ms));
        timed_forward(&mut costs, 40, 77, false);
        forward(&mut costs, 4, 45);
        let cheap_side = 0.028 + 2.0 * 0.049 / 38.0;
        let curve = costs.forward_curve(2, 2).unwrap();
        assert!((curve[2] - cheap_side).abs() < 1e-9, "{curve:?}");
        assert!(
            (curve[1] - (0.028 + cheap_side) / 2.0).abs() < 1e-9,
            "{curve:?}"
        );
        // Timed three times, its median stands.
        forward(&mut costs, 4, 45);
        forward(&mut costs, 4, 45);
        let curve = costs.forward_curve(2, 2).unwrap();
        assert!((curve[2] - 0.045).abs() < 1e-9, "{curve:?}");
    }

    #[test]
    fn a_cheap_side_beyond_the_settled_sizes_leaves_their_costs_alone() {
        // Decode steps of 4 to 8 rows timed often, 2 ms a row above 4; a 40-row prefill chunk
        // at about 1 ms a row; a 32-row decode step timed once, priced on the cheap side.
        let mut costs = StepCosts::default();
        for _ in 0..3 {
            for rows in 4..=8 {
                forward(&mut costs, rows, 20 + 2 * (rows as u64 - 4));
            }
        }
        timed_forward(&mut costs, 40, 60, false);
        forward(&mut costs, 32, 80);
        let curve = costs.forward_curve(4, 28).unwrap();
        for rows in 4..=8 {
            let settled = 0.020 + 0.002 * (rows - 4) as f64;
            assert!(
                (curve[rows - 4] - settled).abs() < 1e-9,
                "{rows}: {curve:?}"
            );
        }
        // All steps' hull runs from 4 rows straight to the prefill chunk, 40 ms over 36 rows.
        let cheap_side = 0.028 + 24.0 * (0.060 - 0.020) / 36.0;
        assert!((curve[28] - cheap_side).abs() < 1e-9, "{curve:?}");
    }

    #[test]
    fn a_plain_step_costs_a_one_row_forward_and_the_rest_of_a_step() {
        let mut costs = StepCosts::default();
        assert_eq!(costs.plain_step(), None);
        forward(&mut costs, 2, 22);
        costs.observe(&StepTiming {
            rows: 1,
            forward: Duration::from_millis(20),
            draft_depth: 0,
            draft_tokens: 0,
            draft: Duration::ZERO,
            other: Duration::from_millis(1),
            decode_rows_only: true,
        });
        let seconds = costs.plain_step().unwrap();
        // The rest of a step is smoothed from 0 (the first step) towards 1 ms.
        let expected = 0.020 + SMOOTHING * 0.001;
        assert!((seconds - expected).abs() < 1e-9, "{seconds}");
    }

    #[test]
    fn forward_costs_interpolate_and_extrapolate_by_the_rows() {
        let mut costs = StepCosts::default();
        assert_eq!(costs.forward_curve(1, 3), None);
        forward(&mut costs, 4, 20);
        forward(&mut costs, 8, 40);
        let curve = costs.forward_curve(2, 14).unwrap();
        assert!((curve[0] - 0.020).abs() < 1e-9, "flat below: {curve:?}");
        assert!((curve[4] - 0.030).abs() < 1e-9, "6 rows between 4 and 8");
        assert!((curve[14] - 0.080).abs() < 1e-9, "16 rows: twice 8 rows");
    }

    #[test]
    fn the_forward_curve_never_falls_and_rows_are_never_free() {
        let mut costs = StepCosts::default();
        forward(&mut costs, 1, 20);
        forward(&mut costs, 2, 18); // noise: two rows measured faster than one
        let curve = costs.forward_curve(1, 2).unwrap();
        assert!(curve[1] > curve[0] && curve[2] > curve[1], "{curve:?}");
    }

    #[test]
    fn forward_costs_ignore_outliers_and_follow_lasting_changes() {
        let mut costs = StepCosts::default();
        let cost = |costs: &StepCosts| costs.forward_curve(1, 0).unwrap()[0];
        for ms in [10, 10, 60, 10, 55, 10] {
            forward(&mut costs, 1, ms); // two preempted steps
        }
        assert!((cost(&costs) - 0.010).abs() < 1e-9, "{}", cost(&costs));
        // The machine slows down for good: the estimate follows within a few steps.
        for _ in 0..5 {
            forward(&mut costs, 1, 20);
        }
        assert!((cost(&costs) - 0.020).abs() < 1e-9, "{}", cost(&costs));
    }

    #[test]
    fn a_size_timed_twice_costs_its_faster_timing() {
        let mut costs = StepCosts::default();
        let cost = |costs: &StepCosts| costs.forward_curve(10, 0).unwrap()[0];
        forward(&mut costs, 10, 2);
        forward(&mut costs, 10, 40); // preempted
        assert!((cost(&costs) - 0.002).abs() < 1e-9, "{}", cost(&costs));
        forward(&mut costs, 10, 3);
        assert!((cost(&costs) - 0.003).abs() < 1e-9, "the median of three");
    }

    fn draft_call(costs: &mut StepCosts, depth: usize, tokens: usize, ms: f64) {
        costs.observe(&StepTiming {
            rows: 1,
            forward: Duration::from_millis(20),
            draft_depth: depth,
            draft_tokens: tokens,
            draft: Duration::from_secs_f64(ms / 1e3),
            other: Duration::from_millis(2),
            decode_rows_only: true,
        });
    }

    #[test]
    fn draft_costs_split_into_steps_and_tokens() {
        let mut costs = StepCosts::default();
        assert_eq!(costs.draft(3, 3), 0.0);
        draft_call(&mut costs, 0, 0, 1.0);
        // 1 ms to take in, 2 ms per draft step, 0.5 ms per draft token.
        for (depth, tokens) in [(3, 3), (3, 24), (1, 8), (2, 9), (3, 12)] {
            let ms = 1.0 + 2.0 * depth as f64 + 0.5 * tokens as f64;
            draft_call(&mut costs, depth, tokens, ms);
        }
        assert!((costs.draft(0, 0) - 0.001).abs() < 1e-9);
        let expected = 0.001 + 0.002 * 3.0 + 0.0005 * 16.0;
        assert!(
            (costs.draft(3, 16) - expected).abs() < 1e-4,
            "{}",
            costs.draft(3, 16)
        );
        assert!((costs.other() - 0.002).abs() < 1e-9);
    }

    #[test]
    fn drafting_after_prefill_work_is_not_a_drafting_cost() {
        let mut costs = StepCosts::default();
        draft_call(&mut costs, 3, 3, 24.0);
        // The call after a prefill also ran the prompt through a draft model.
        costs.observe(&StepTiming {
            rows: 41,
            forward: Duration::from_millis(120),
            draft_depth: 3,
            draft_tokens: 3,
            draft: Duration::from_millis(90),
            other: Duration::from_millis(2),
            decode_rows_only: false,
        });
        assert!(
            (costs.draft(3, 3) - 0.024).abs() < 1e-4,
            "{}",
            costs.draft(3, 3)
        );
    }

    #[test]
    fn one_request_drafts_cost_per_token() {
        let mut costs = StepCosts::default();
        for depth in [1, 2, 3, 3, 2] {
            draft_call(&mut costs, depth, depth, 3.0 * depth as f64);
        }
        for depth in 1..=3 {
            let cost = costs.draft(depth, depth);
            assert!(
                (cost - 0.003 * depth as f64).abs() < 1e-5,
                "{depth}: {cost}"
            );
        }
    }
}
