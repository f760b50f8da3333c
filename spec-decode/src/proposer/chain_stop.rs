//! Confidence-gated chains: a drafter that knows how sure it is of each token stops a chain
//! where the next token is no longer expected to pay for its verification row and drafting
//! step.
//!
//! The drafter's probability of the token it proposed (its confidence) predicts whether the
//! target accepts it, but not exactly: [`ConfidenceCalibration`] learns the acceptance observed
//! at each confidence and chain position from verification outcomes (the same confidence may
//! mean little for a first token and much for a later one: a lookup's second token, once its
//! first matched, continues a copied span). A chain's tokens are accepted in order, so
//! draft `j` pays only if all before it are accepted: its expected gain is the product of the
//! calibrated acceptances up to it (its path probability). [`ChainStop`] keeps a token while
//! its path probability covers the cost of its verification row, and drafts another while the
//! next token's expected path probability covers that row and one more drafting step. That
//! expectation takes the acceptance measured at the next token's position in the chain: a
//! drafter may be far less sure of its second token than of its first (EAGLE-1 feeds its own
//! predicted features back in), which the acceptance of all tokens together would hide.
//!
//! A draft tree (EAGLE-2) is gated node by node ([`ChainStop::tree_nodes`]): a node's path
//! probability runs from the root through its ancestors, its acceptance is calibrated at its
//! depth as a chain position (learned from verified trees by
//! [`ConfidenceCalibration::observe_tree`]), and the nodes are kept best first while the next
//! one pays for the next verification row.

use crate::tree::DraftTree;

/// Number of equal-width confidence bins.
const BINS: usize = 10;

/// Weight, in outcomes, of the prior that the drafter's confidence is its acceptance.
const PRIOR_OUTCOMES: f64 = 4.0;

/// Most outcomes a bin remembers; older ones fade so that the calibration follows a change of
/// workload.
const MEMORY_OUTCOMES: f64 = 2000.0;

/// Acceptance assumed for the next draft before any outcome.
const INITIAL_MEAN_ACCEPTANCE: f64 = 0.5;

/// Chain positions whose acceptance is measured apart; later positions share the last one.
const POSITIONS: usize = 4;

/// Weight, in outcomes, of the acceptance of all positions in the estimate of one position.
const POSITION_PRIOR_OUTCOMES: f64 = 4.0;

/// Weight, in outcomes, of a confidence bin's acceptance over all positions in the estimate of
/// that bin at one position.
const CELL_PRIOR_OUTCOMES: f64 = 8.0;

/// Fading counts of accepted outcomes among those seen.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Tally {
    accepted: f64,
    seen: f64,
}

impl Tally {
    /// Takes in one outcome; past `MEMORY_OUTCOMES`, older ones weigh less.
    fn add(&mut self, accepted: bool) {
        if self.seen >= MEMORY_OUTCOMES {
            self.fade();
        }
        self.seen += 1.0;
        self.accepted += f64::from(u8::from(accepted));
    }

    /// Weighs every outcome so far as one outcome of `MEMORY_OUTCOMES` less.
    fn fade(&mut self) {
        let keep = (MEMORY_OUTCOMES - 1.0) / MEMORY_OUTCOMES;
        self.seen *= keep;
        self.accepted *= keep;
    }

    /// The accepted share, `prior` counting as `prior_outcomes` outcomes.
    fn rate(&self, prior: f64, prior_outcomes: f64) -> f64 {
        (self.accepted + prior_outcomes * prior) / (self.seen + prior_outcomes)
    }
}

/// The acceptance of draft tokens at each drafter confidence, learned from verification
/// outcomes (a token's outcome counts only when every draft before it was accepted, so the
/// calibration is of acceptance given the path so far), at each confidence and chain
/// position, and at each position of a chain.
///
/// The tallies of positions fade with every verified chain, not only with their own outcomes:
/// a position that chains no longer reach (because its acceptance was measured too low to pay)
/// slowly returns to the acceptance of all positions (a confidence at that position, to the
/// acceptance of that confidence), so that chains reach it again now and then and a drafter
/// that got better there is not locked out.
#[derive(Clone, Debug, PartialEq)]
pub struct ConfidenceCalibration {
    /// Outcomes per confidence bin.
    bins: [Tally; BINS],
    /// Outcomes per chain position.
    positions: [Tally; POSITIONS],
    /// Outcomes per chain position and confidence bin.
    cells: [[Tally; BINS]; POSITIONS],
    /// Outcomes taken in, in all.
    observed: u64,
}

impl Default for ConfidenceCalibration {
    fn default() -> Self {
        Self {
            bins: [Tally::default(); BINS],
            positions: [Tally::default(); POSITIONS],
            cells: [[Tally::default(); BINS]; POSITIONS],
            observed: 0,
        }
    }
}

impl ConfidenceCalibration {
    /// A calibration that has seen no outcome: acceptance equals confidence.
    pub fn new() -> Self {
        Self::default()
    }

    /// Outcomes taken in so far.
    pub fn observed(&self) -> u64 {
        self.observed
    }

    /// The estimated probability that a draft token proposed with `confidence` is accepted,
    /// given that the drafts before it were, over all chain positions.
    pub fn acceptance(&self, confidence: f32) -> f64 {
        let confidence = f64::from(confidence).clamp(0.0, 1.0);
        self.bins[bin_of(confidence)].rate(confidence, PRIOR_OUTCOMES)
    }

    /// [`ConfidenceCalibration::acceptance`] of a token at `position` of its chain (0 for the
    /// first): what was measured at that position and confidence, leaning on the acceptance of
    /// the confidence over all positions while that is little.
    pub fn acceptance_at(&self, confidence: f32, position: usize) -> f64 {
        let bin = bin_of(f64::from(confidence).clamp(0.0, 1.0));
        self.cells[position.min(POSITIONS - 1)][bin]
            .rate(self.acceptance(confidence), CELL_PRIOR_OUTCOMES)
    }

    /// The acceptance of a draft token over all confidences and positions seen so far.
    pub fn mean_acceptance(&self) -> f64 {
        let seen: f64 = self.bins.iter().map(|bin| bin.seen).sum();
        if seen == 0.0 {
            return INITIAL_MEAN_ACCEPTANCE;
        }
        self.bins.iter().map(|bin| bin.accepted).sum::<f64>() / seen
    }

    /// The acceptance of the draft token at `position` of a chain (0 for the first), given
    /// that every draft before it was accepted, over all confidences; a position with few
    /// outcomes leans on [`ConfidenceCalibration::mean_acceptance`].
    pub fn mean_acceptance_at(&self, position: usize) -> f64 {
        self.positions[position.min(POSITIONS - 1)]
            .rate(self.mean_acceptance(), POSITION_PRIOR_OUTCOMES)
    }

    /// Takes in one verified chain: its tokens' `confidences` in order, of which the first
    /// `accepted` were accepted. Tokens after the first rejection tell nothing and are skipped.
    pub fn observe_chain(&mut self, confidences: &[f32], accepted: usize) {
        self.fade_positions();
        for (position, &confidence) in confidences.iter().enumerate().take(accepted + 1) {
            self.observe_token(confidence, position, position < accepted);
        }
    }

    /// The expected number of accepted tokens of a chain drafted with these `confidences`:
    /// the sum of its tokens' path probabilities (each the product of the calibrated
    /// acceptances up to it, since a token counts only when all before it are accepted).
    pub fn expected_accepted(&self, confidences: &[f32]) -> f64 {
        confidences
            .iter()
            .enumerate()
            .scan(1.0, |path, (position, &confidence)| {
                *path *= self.acceptance_at(confidence, position);
                Some(*path)
            })
            .sum()
    }

    /// Takes in one verified tree: `accepted` are its accepted nodes, in order from the root.
    /// Every draft node whose parent was reached (the root, or an accepted node) is an outcome
    /// at its confidence and at its depth as chain position: accepted or not. Nodes under a
    /// rejected node tell nothing and are skipped, as tokens after a chain's first rejection.
    pub fn observe_tree(&mut self, tree: &DraftTree, accepted: &[usize]) {
        self.fade_positions();
        let reached = |node: usize| node == 0 || accepted.contains(&node);
        for node in 1..tree.num_nodes() {
            if tree.parent(node).is_some_and(reached) {
                let position = tree.depth(node) - 1;
                self.observe_token(tree.confidence(node), position, accepted.contains(&node));
            }
        }
    }

    /// Fades the tallies of every position and cell by one verified draft, so that positions
    /// drafts no longer reach lean again on the acceptance of all positions.
    fn fade_positions(&mut self) {
        for position in &mut self.positions {
            position.fade();
        }
        for cell in self.cells.iter_mut().flatten() {
            cell.fade();
        }
    }

    /// Takes in the outcome of one token at `position` of its chain, given that every draft
    /// before it was accepted (a verified token, or a token a gate dropped judged by the
    /// target's next token).
    pub fn observe_token(&mut self, confidence: f32, position: usize, accepted: bool) {
        let bin = bin_of(f64::from(confidence).clamp(0.0, 1.0));
        let position = position.min(POSITIONS - 1);
        self.bins[bin].add(accepted);
        self.positions[position].add(accepted);
        self.cells[position][bin].add(accepted);
        self.observed += 1;
    }
}

fn bin_of(confidence: f64) -> usize {
    ((confidence * BINS as f64) as usize).min(BINS - 1)
}

/// Where a confidence-gated chain stops, for one request and step: see the module
/// documentation. The thresholds are expected gains, in tokens, that a draft token's path
/// probability must reach, one per chain position (0 for the first token; positions past the
/// last take the last, and an empty list is a threshold of 0): a later position's verification
/// row may cost more than an earlier one's (a forward's cost grows faster with its rows once
/// they no longer only stream the weights).
#[derive(Clone, Copy, Debug)]
pub struct ChainStop<'a> {
    /// The calibration that turns confidences into acceptance probabilities.
    pub calibration: &'a ConfidenceCalibration,
    /// Per position: a drafted token there is verified while its path probability is at least
    /// this (the value of the verification row it takes).
    pub keep_above: &'a [f64],
    /// Per position: a token there is drafted while its expected path probability is at least
    /// this (the value of its verification row and a drafting step).
    pub extend_above: &'a [f64],
}

/// The threshold of chain `position` in per-position `thresholds`.
fn at_position(thresholds: &[f64], position: usize) -> f64 {
    thresholds
        .get(position)
        .or(thresholds.last())
        .copied()
        .unwrap_or(0.0)
}

/// A chain's progress under a [`ChainStop`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ChainStep {
    /// Keep the token and draft another.
    Extend,
    /// Keep the token; the chain ends with it.
    KeepAndEnd,
    /// Drop the token; the chain ends before it.
    Drop,
}

impl ChainStop<'_> {
    /// Takes the path probability of the chain so far (1 before its first token) and the
    /// confidence of its newest token, at `position` of the chain (0 for the first); returns
    /// the decision and the path probability through that token.
    pub fn step(&self, position: usize, path: f64, confidence: f32) -> (ChainStep, f64) {
        let path = path * self.calibration.acceptance_at(confidence, position);
        let next = self.calibration.mean_acceptance_at(position + 1);
        let decision = if path < at_position(self.keep_above, position) {
            ChainStep::Drop
        } else if path * next < at_position(self.extend_above, position + 1) {
            ChainStep::KeepAndEnd
        } else {
            ChainStep::Extend
        };
        (decision, path)
    }

    /// The draft nodes of `tree` worth their verification rows, best first: nodes ranked by
    /// their calibrated path probability (the product of the calibrated acceptances from the
    /// root, each node's at its confidence and depth), and the `n`-th of them kept while its
    /// path probability reaches the threshold of position `n` (the `n`-th row a request's
    /// draft adds to the forward). A child's path probability never exceeds its parent's,
    /// and ties go to the shallower node, so the kept nodes hold every ancestor of each.
    pub fn tree_nodes(&self, tree: &DraftTree) -> Vec<usize> {
        let path = self.tree_paths(tree);
        let mut ranked: Vec<usize> = (1..tree.num_nodes()).collect();
        ranked.sort_by(|&a, &b| {
            path[b]
                .total_cmp(&path[a])
                .then(tree.depth(a).cmp(&tree.depth(b)))
                .then(a.cmp(&b))
        });
        let kept = ranked
            .iter()
            .enumerate()
            .take_while(|&(rank, &node)| path[node] >= at_position(self.keep_above, rank))
            .count();
        ranked.truncate(kept);
        ranked
    }

    /// The calibrated path probability of every node of `tree` (the root's is 1): the product
    /// of the calibrated acceptances from the root, each node's at its confidence and depth.
    pub fn tree_paths(&self, tree: &DraftTree) -> Vec<f64> {
        let mut path = vec![1.0; tree.num_nodes()];
        for node in 1..tree.num_nodes() {
            let parent = tree.parent(node).unwrap_or(0);
            let acceptance = self
                .calibration
                .acceptance_at(tree.confidence(node), tree.depth(node) - 1);
            path[node] = path[parent] * acceptance;
        }
        path
    }

    /// Whether a tree node at `depth` (1 for the root's children) with calibrated path
    /// probability `path` is worth expanding: its child is expected to pay for its
    /// verification row and a drafting step, as a chain's next token must (chain position
    /// `depth`).
    pub fn expands(&self, depth: usize, path: f64) -> bool {
        path * self.calibration.mean_acceptance_at(depth) >= at_position(self.extend_above, depth)
    }

    /// How many leading tokens of a chain drafted whole with these `confidences` to keep, for
    /// drafters whose tokens cost nothing to draft (lookups): the chain ends at the first
    /// token this rule drops, or after the first it ends on.
    pub fn cut(&self, confidences: &[f32]) -> usize {
        let mut path = 1.0;
        for (index, &confidence) in confidences.iter().enumerate() {
            let decision;
            (decision, path) = self.step(index, path, confidence);
            match decision {
                ChainStep::Extend => {}
                ChainStep::KeepAndEnd => return index + 1,
                ChainStep::Drop => return index,
            }
        }
        confidences.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_uncalibrated_drafter_is_taken_at_its_word() {
        let calibration = ConfidenceCalibration::new();
        assert!((calibration.acceptance(0.85) - 0.85).abs() < 1e-6);
        assert_eq!(calibration.mean_acceptance(), INITIAL_MEAN_ACCEPTANCE);
    }

    #[test]
    fn expected_accepted_sums_the_path_probabilities() {
        let mut calibration = ConfidenceCalibration::new();
        // Uncalibrated: 0.5 + 0.5 * 0.8 = 0.9.
        assert!((calibration.expected_accepted(&[0.5, 0.8]) - 0.9).abs() < 1e-6);
        assert_eq!(calibration.expected_accepted(&[]), 0.0);
        // Tokens at 0.95 that are never accepted make every later token worthless.
        for _ in 0..500 {
            calibration.observe_chain(&[0.95], 0);
        }
        assert!(calibration.expected_accepted(&[0.95, 0.5, 0.5]) < 0.02);
    }

    #[test]
    fn outcomes_replace_the_prior_per_bin() {
        let mut calibration = ConfidenceCalibration::new();
        // An overconfident drafter: at 0.92 only a fifth is accepted; at 0.15 half is.
        for i in 0..200 {
            calibration.observe_chain(&[0.92], usize::from(i % 5 == 0));
            calibration.observe_chain(&[0.15], usize::from(i % 2 == 0));
        }
        assert!((calibration.acceptance(0.95) - 0.2).abs() < 0.03);
        assert!((calibration.acceptance(0.12) - 0.5).abs() < 0.03);
        assert!((calibration.mean_acceptance() - 0.35).abs() < 1e-9);
        assert_eq!(calibration.observed(), 400);
        // A bin never observed keeps the prior.
        assert!((calibration.acceptance(0.55) - 0.55).abs() < 1e-6);
    }

    #[test]
    fn tokens_after_the_first_rejection_are_not_counted() {
        let mut calibration = ConfidenceCalibration::new();
        calibration.observe_chain(&[0.95, 0.95, 0.05, 0.05], 2);
        assert_eq!(calibration.observed(), 3);
        assert_eq!(
            calibration.bins[9],
            Tally {
                accepted: 2.0,
                seen: 2.0
            }
        );
        assert_eq!(
            calibration.bins[0],
            Tally {
                accepted: 0.0,
                seen: 1.0
            }
        );
    }

    #[test]
    fn old_outcomes_fade() {
        let mut calibration = ConfidenceCalibration::new();
        for _ in 0..3000 {
            calibration.observe_chain(&[0.5], 1);
        }
        for _ in 0..3000 {
            calibration.observe_chain(&[0.5], 0);
        }
        assert!(calibration.acceptance(0.5) < 0.25);
        assert!(calibration.bins[5].seen <= MEMORY_OUTCOMES + 1.0);
    }

    #[test]
    fn chains_stop_where_the_path_no_longer_pays() {
        let calibration = ConfidenceCalibration::new();
        let stop = ChainStop {
            calibration: &calibration,
            keep_above: &[0.1],
            extend_above: &[0.2],
        };
        // Mean acceptance 0.5: extending needs a path of 0.4.
        let (decision, path) = stop.step(0, 1.0, 0.9);
        assert_eq!(decision, ChainStep::Extend);
        let (decision, path) = stop.step(1, path, 0.5);
        assert!((path - 0.45).abs() < 1e-6);
        assert_eq!(decision, ChainStep::Extend);
        let (decision, path) = stop.step(2, path, 0.6);
        assert_eq!(decision, ChainStep::KeepAndEnd, "path {path}");
        assert_eq!(stop.step(3, path, 0.2).0, ChainStep::Drop);
        assert_eq!(stop.step(0, 1.0, 0.05).0, ChainStep::Drop);
        assert_eq!(stop.cut(&[0.9, 0.5, 0.6, 0.9]), 3);
        assert_eq!(stop.cut(&[0.9, 0.5, 0.2]), 2);
        assert_eq!(stop.cut(&[0.9, 0.9]), 2);
        assert_eq!(stop.cut(&[0.05, 0.9]), 0);
    }

    #[test]
    fn each_position_meets_its_own_threshold() {
        let calibration = ConfidenceCalibration::new();
        // The second position's row costs three times the first's.
        let stop = ChainStop {
            calibration: &calibration,
            keep_above: &[0.1, 0.3],
            extend_above: &[0.1, 0.3],
        };
        // A path of 0.6 expects 0.3 at the next position: drafted there, and kept while its
        // path stays at 0.3 or more.
        assert_eq!(stop.cut(&[0.6, 0.5, 0.9]), 2);
        assert_eq!(stop.cut(&[0.6, 0.45]), 1);
        // A path of 0.5 expects 0.25 at the second position, below its 0.3.
        assert_eq!(stop.step(0, 1.0, 0.5).0, ChainStep::KeepAndEnd);
        // Past the last threshold given, positions take the last one.
        assert_eq!(stop.step(5, 0.4, 0.7).0, ChainStep::Drop);
        assert_eq!(stop.step(5, 0.4, 0.8).0, ChainStep::KeepAndEnd);
        // No thresholds: every token pays.
        let free = ChainStop {
            calibration: &calibration,
            keep_above: &[],
            extend_above: &[],
        };
        assert_eq!(free.cut(&[0.01, 0.01, 0.01]), 3);
    }

    /// A calibration that has seen `chains` chains of two tokens at confidence 0.9, the first
    /// accepted with probability 0.8 and the second, after it, with probability 0.1.
    fn second_tokens_seldom_accepted(chains: usize) -> ConfidenceCalibration {
        let mut calibration = ConfidenceCalibration::new();
        for i in 0..chains {
            let accepted = match (i % 10 < 8, i % 10 == 0) {
                (true, true) => 2,
                (true, false) => 1,
                (false, _) => 0,
            };
            calibration.observe_chain(&[0.9, 0.9], accepted);
        }
        calibration
    }

    #[test]
    fn each_position_of_a_chain_has_its_own_acceptance() {
        let calibration = second_tokens_seldom_accepted(500);
        assert!((calibration.mean_acceptance_at(0) - 0.8).abs() < 0.02);
        assert!((calibration.mean_acceptance_at(1) - 0.125).abs() < 0.03);
        // Later positions share the last one measured apart, which nothing reached yet.
        assert_eq!(
            calibration.mean_acceptance_at(9),
            calibration.mean_acceptance_at(POSITIONS - 1)
        );
        // A confident first token is worth its row, but not the drafting of a second that
        // is seldom accepted.
        let stop = ChainStop {
            calibration: &calibration,
            keep_above: &[0.05],
            extend_above: &[0.2],
        };
        assert_eq!(stop.step(0, 1.0, 0.9).0, ChainStep::KeepAndEnd);
        // Taken over all positions, the acceptance would have drafted it.
        assert!(calibration.mean_acceptance() * calibration.acceptance(0.9) > 0.2);
    }

    #[test]
    fn a_confidence_is_calibrated_at_each_position() {
        let mut calibration = ConfidenceCalibration::new();
        // A lookup's chains at one confidence: the first token is accepted one time in five,
        // the second, once the first was, four times in five.
        for i in 0..500 {
            let accepted = match (i % 10 < 2, (i / 10) % 5 != 0) {
                (true, true) => 2,
                (true, false) => 1,
                (false, _) => 0,
            };
            calibration.observe_chain(&[0.6, 0.6], accepted);
        }
        assert!((calibration.acceptance_at(0.6, 0) - 0.2).abs() < 0.03);
        assert!((calibration.acceptance_at(0.6, 1) - 0.8).abs() < 0.05);
        assert!(calibration.acceptance(0.6) < 0.4);
        // The second token's path (0.2 * 0.8) pays for a row of 0.12; the acceptance over
        // all positions would have dropped it.
        let stop = ChainStop {
            calibration: &calibration,
            keep_above: &[0.05, 0.12],
            extend_above: &[0.05, 0.12],
        };
        assert_eq!(stop.cut(&[0.6, 0.6]), 2);
        assert!(calibration.acceptance(0.6).powi(2) < 0.12);
        // A position never measured at some confidence takes the confidence's acceptance.
        assert_eq!(
            calibration.acceptance_at(0.95, 2),
            calibration.acceptance(0.95)
        );
    }

    #[test]
    fn a_position_chains_stopped_reaching_is_tried_again() {
        let mut calibration = second_tokens_seldom_accepted(500);
        let stop = |calibration: &ConfidenceCalibration| {
            let stop = ChainStop {
                calibration,
                keep_above: &[0.05],
                extend_above: &[0.2],
            };
            stop.step(0, 1.0, 0.9).0
        };
        assert_eq!(stop(&calibration), ChainStep::KeepAndEnd);
        // Chains of one token, mostly accepted: what was measured at the second position
        // fades, and chains reach it again.
        let mut chains = 0;
        while stop(&calibration) == ChainStep::KeepAndEnd {
            calibration.observe_chain(&[0.9], usize::from(chains % 10 < 8));
            chains += 1;
            assert!(chains < 20_000, "never tried again");
        }
        assert!(chains > 1_000, "tried again after {chains} chains");
    }

    /// Root 5 with children 1 (confidence 0.8) and 2 (0.15); node 3 (0.5) under node 1.
    fn small_tree() -> DraftTree {
        let (a, b) = (0.8f32.ln(), 0.15f32.ln());
        DraftTree::from_parts(
            vec![5, 1, 2, 3],
            vec![None, Some(0), Some(0), Some(1)],
            vec![0.0, a, b, a + 0.5f32.ln()],
        )
        .unwrap()
    }

    #[test]
    fn tree_nodes_are_kept_best_path_first_while_they_pay() {
        let calibration = ConfidenceCalibration::new();
        let tree = small_tree();
        let stop = |keep_above: &'static [f64]| ChainStop {
            calibration: &calibration,
            keep_above,
            extend_above: keep_above,
        };
        // Uncalibrated paths: node 1 0.8, node 3 0.4, node 2 0.15.
        assert_eq!(stop(&[0.0]).tree_nodes(&tree), vec![1, 3, 2]);
        assert_eq!(stop(&[0.1, 0.3, 0.3]).tree_nodes(&tree), vec![1, 3]);
        assert_eq!(stop(&[0.1, 0.5]).tree_nodes(&tree), vec![1]);
        assert!(stop(&[0.9]).tree_nodes(&tree).is_empty());
        let (kept, original) = tree.retain(&stop(&[0.1, 0.3, 0.3]).tree_nodes(&tree));
        assert_eq!(original, vec![0, 1, 3]);
        assert_eq!(kept.tokens(), &[5, 1, 3]);
    }

    #[test]
    fn tree_nodes_expand_where_a_chain_token_would_extend() {
        let calibration = ConfidenceCalibration::new();
        let stop = ChainStop {
            calibration: &calibration,
            keep_above: &[0.1],
            extend_above: &[0.1, 0.2],
        };
        let tree = small_tree();
        let paths = stop.tree_paths(&tree);
        assert!((paths[3] - 0.4).abs() < 1e-6, "{paths:?}");
        // Uncalibrated mean acceptance 0.5: node 1 (0.8) expects 0.4, node 2 (0.15) 0.075.
        assert!(stop.expands(1, paths[1]));
        assert!(!stop.expands(1, paths[2]));
        for (position, path) in [(1, 0.4), (2, 0.35)] {
            assert_eq!(
                stop.expands(position, path),
                stop.step(position - 1, path, 1.0).0 == ChainStep::Extend,
                "a chain token of the same path at position {position}"
            );
        }
    }

    #[test]
    fn verified_trees_calibrate_the_nodes_whose_parent_was_reached() {
        let mut calibration = ConfidenceCalibration::new();
        let tree = small_tree();
        // Node 1 accepted, then node 3 rejected: nodes 1, 2 and 3 are outcomes.
        calibration.observe_tree(&tree, &[1]);
        assert_eq!(calibration.observed(), 3);
        assert_eq!(calibration.bins[8].accepted, 1.0);
        assert_eq!(calibration.bins[1].seen, 1.0);
        assert_eq!(calibration.bins[5].accepted, 0.0);
        // Node 2 accepted: node 3, under rejected node 1, tells nothing.
        calibration.observe_tree(&tree, &[2]);
        assert_eq!(calibration.observed(), 5);
        // A tree whose first children keep failing makes its second ones the better bet.
        for _ in 0..300 {
            calibration.observe_tree(&tree, &[2]);
        }
        let stop = ChainStop {
            calibration: &calibration,
            keep_above: &[0.1],
            extend_above: &[0.1],
        };
        assert_eq!(stop.tree_nodes(&tree), vec![2]);
    }
}
