//! [`LookupAssisted`]: a proposer whose chains are replaced by a prompt lookup's wherever the
//! lookup is expected to be accepted further.
//!
//! Text that repeats what came before (a quoted name, code being edited, a list restated)
//! is where a lookup shines: a long earlier match usually continues for several tokens, while
//! a draft head trained on a limited corpus is unsure of exactly such rare spans. Every step
//! the inner proposer drafts as usual (it also takes in every request's committed rows, so
//! its state stays current); then, for each request, the lookup's chain over the same tokens
//! is built under the same stop rule, and the chain with the larger expected number of
//! accepted tokens is kept. The expectation sums each token's path probability through the
//! request's [`ConfidenceCalibration`] (the engine's, when the chain is gated; else the
//! drafters' confidences taken at their word), so both drafters are judged on one scale.
//!
//! Which chain is verified is decided before the target sees either, so verification stays
//! lossless: a lookup chain is verified with a one-hot `q`, an inner chain with its own.
//!
//! A tree of deterministic drafts (EAGLE-2, verified with a one-hot `q`) gets the lookup's
//! chain grafted in as a branch instead ([`DraftTree::graft_chain`]), scored by the lookup's
//! confidences like the head's nodes by theirs, and is then cut back to its node budget by
//! score: a long match's branch displaces the head's least likely nodes, so the tree's cost
//! does not grow.

use super::{
    ChainDraft, ConfidenceCalibration, Draft, ProposeBatch, ProposeError, ProposeRequest, Proposer,
};
use crate::ngram::NgramProposer;
use crate::tree::DraftTree;

/// Drafts with `inner`, and verifies a prompt lookup's chain instead wherever that chain is
/// expected to be accepted further.
#[derive(Debug)]
pub struct LookupAssisted<P> {
    inner: P,
    lookup: NgramProposer,
}

impl<P> LookupAssisted<P> {
    /// `inner` assisted by `lookup`; a lookup chain holds at most the lookup's own `k` tokens
    /// and the request's draft budget (give it the inner proposer's `k`).
    pub fn new(inner: P, lookup: NgramProposer) -> Self {
        Self { inner, lookup }
    }

    /// The assisted proposer.
    pub fn inner(&self) -> &P {
        &self.inner
    }
}

impl<F, P: Proposer<F>> Proposer<F> for LookupAssisted<P> {
    fn num_speculative_tokens(&self) -> usize {
        self.inner.num_speculative_tokens()
    }

    fn max_draft_depth(&self) -> usize {
        self.inner.max_draft_depth()
    }

    fn needs_target_features(&self) -> bool {
        self.inner.needs_target_features()
    }

    fn draft(&mut self, batch: &ProposeBatch<'_, F>) -> Result<Vec<Draft>, ProposeError> {
        let mut drafts = self.inner.draft(batch)?;
        let uncalibrated = ConfidenceCalibration::new();
        for (request, draft) in batch.requests.iter().zip(&mut drafts) {
            let chain = match draft {
                Draft::Chain(chain) => chain,
                Draft::Tree { tree, probs: None } => {
                    let max_depth = self.inner.max_draft_depth();
                    let max_nodes = self.inner.num_speculative_tokens();
                    self.graft_within(request, tree, max_depth, max_nodes);
                    continue;
                }
                // Sampled draft rows: a deterministic branch would need a `q` row of its own.
                Draft::Tree { .. } => continue,
            };
            let calibration = request.stop.map_or(&uncalibrated, |stop| stop.calibration);
            let lookup = self
                .lookup
                .chain(request.tokens, request.max_draft_tokens, request.stop);
            if expected(calibration, &lookup) > expected(calibration, chain) {
                *chain = lookup;
            }
        }
        Ok(drafts)
    }

    fn release(&mut self, request_id: u64) {
        self.inner.release(request_id);
    }
}

impl<P> LookupAssisted<P> {
    /// Grafts the lookup's chain for `request` into its `tree` (no deeper than `max_depth`, the
    /// inner proposer's deepest draft) and cuts the tree back to `max_nodes` draft tokens by
    /// score, both within the request's budget, and to the nodes that pay for their rows under
    /// the request's stop rule.
    fn graft_within(
        &mut self,
        request: &ProposeRequest<'_>,
        tree: &mut DraftTree,
        max_depth: usize,
        max_nodes: usize,
    ) {
        let budget = request.max_draft_tokens;
        if budget == 0 {
            return;
        }
        let lookup = self
            .lookup
            .chain(request.tokens, budget.min(max_depth), None);
        if !lookup.is_empty() {
            let scores: Vec<f32> = lookup
                .confidences
                .iter()
                .scan(0.0, |score, &confidence| {
                    *score += confidence.ln();
                    Some(*score)
                })
                .collect();
            tree.graft_chain(&lookup.tokens, &scores);
            if let Ok((pruned, _)) = tree.prune_to_best(budget.min(max_nodes) + 1) {
                *tree = pruned;
            }
        }
        if let Some(stop) = request.stop {
            *tree = tree.retain(&stop.tree_nodes(tree)).0;
        }
    }
}

/// A chain's expected accepted tokens; a chain without confidences counts as sure of none.
fn expected(calibration: &ConfidenceCalibration, chain: &ChainDraft) -> f64 {
    calibration.expected_accepted(&chain.confidences)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ngram::NgramConfig;
    use crate::proposer::{ChainStop, ProposeRequest};

    /// A proposer that drafts the same chain with the same confidences for every request.
    #[derive(Debug, Default)]
    struct Fixed {
        tokens: Vec<u32>,
        confidences: Vec<f32>,
        released: Vec<u64>,
        calls: usize,
    }

    impl Proposer<()> for Fixed {
        fn num_speculative_tokens(&self) -> usize {
            3
        }

        fn needs_target_features(&self) -> bool {
            false
        }

        fn draft(&mut self, batch: &ProposeBatch<'_, ()>) -> Result<Vec<Draft>, ProposeError> {
            self.calls += 1;
            Ok(batch
                .requests
                .iter()
                .map(|request| {
                    let n = request.max_draft_tokens.min(self.tokens.len());
                    Draft::Chain(ChainDraft::cut(
                        self.tokens[..n].to_vec(),
                        self.confidences[..n].to_vec(),
                        request.stop,
                    ))
                })
                .collect())
        }

        fn release(&mut self, request_id: u64) {
            self.released.push(request_id);
        }
    }

    /// "1 2 3" occurred before, followed by 4 5 6: a lookup matches 3 tokens (confidence 3/4
    /// each).
    const REPEATING: [u32; 10] = [1, 2, 3, 4, 5, 6, 7, 1, 2, 3];

    /// An inner proposer drafting 90 91 92 with `confidences`, assisted by [`lookup`].
    fn assisted(confidences: [f32; 3]) -> LookupAssisted<Fixed> {
        let inner = Fixed {
            tokens: vec![90, 91, 92],
            confidences: confidences.to_vec(),
            ..Fixed::default()
        };
        LookupAssisted::new(inner, lookup())
    }

    fn lookup() -> NgramProposer {
        NgramProposer::new(NgramConfig {
            min_n: 2,
            max_n: 4,
            k: 3,
        })
        .unwrap()
    }

    fn request(tokens: &[u32], max_draft_tokens: usize) -> ProposeRequest<'_> {
        ProposeRequest {
            request_id: 1,
            tokens,
            first_new_position: tokens.len() - 1,
            feature_rows: &[],
            max_draft_tokens,
            stop: None,
            temperature: 0.0,
            seed: 0,
            drafting_suspended: false,
        }
    }

    fn draft(proposer: &mut LookupAssisted<Fixed>, requests: &[ProposeRequest<'_>]) -> Vec<Draft> {
        proposer
            .draft(&ProposeBatch::without_features(requests))
            .unwrap()
    }

    #[test]
    fn a_long_match_replaces_an_unsure_chain_and_no_match_keeps_it() {
        let mut proposer = assisted([0.4, 0.3, 0.2]);
        let repeating = REPEATING;
        let fresh = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10];
        let drafts = draft(
            &mut proposer,
            &[
                request(&repeating, 3),
                request(&fresh, 3),
                request(&repeating, 0),
            ],
        );
        let chains: Vec<&ChainDraft> = drafts.iter().map(|d| d.as_chain().unwrap()).collect();
        assert_eq!(chains[0].tokens, vec![4, 5, 6]);
        assert_eq!(chains[0].confidences, vec![0.75; 3]);
        assert!(chains[0].probs.is_none());
        assert_eq!(chains[1].tokens, vec![90, 91, 92]);
        assert!(chains[2].is_empty());
        assert_eq!(proposer.inner().calls, 1);
        Proposer::<()>::release(&mut proposer, 7);
        assert_eq!(proposer.inner().released, vec![7]);
    }

    #[test]
    fn a_surer_inner_chain_is_kept_and_budgets_hold() {
        let mut proposer = assisted([0.99, 0.98, 0.97]);
        let repeating = REPEATING;
        let drafts = draft(&mut proposer, &[request(&repeating, 3)]);
        assert_eq!(drafts[0].as_chain().unwrap().tokens, vec![90, 91, 92]);

        // Under a budget of one token, the lookup's single token (0.75) beats an inner one at
        // 0.5, and never exceeds the budget.
        proposer.inner.confidences = vec![0.5, 0.5, 0.5];
        let drafts = draft(&mut proposer, &[request(&repeating, 1)]);
        assert_eq!(drafts[0].as_chain().unwrap().tokens, vec![4]);
    }

    /// A proposer that drafts the same tree for every request: under the root, 90 (-0.5) and
    /// 91 (-1.0), then 92 under 90 (-1.2) and 93 under 91 (-2.0); with draft rows when `probs`.
    #[derive(Debug)]
    struct FixedTree {
        probs: bool,
    }

    impl Proposer<()> for FixedTree {
        fn num_speculative_tokens(&self) -> usize {
            4
        }

        fn max_draft_depth(&self) -> usize {
            2
        }

        fn needs_target_features(&self) -> bool {
            false
        }

        fn draft(&mut self, batch: &ProposeBatch<'_, ()>) -> Result<Vec<Draft>, ProposeError> {
            Ok(batch
                .requests
                .iter()
                .map(|request| {
                    let root = *request.tokens.last().unwrap();
                    let tree = DraftTree::from_parts(
                        vec![root, 90, 91, 92, 93],
                        vec![None, Some(0), Some(0), Some(1), Some(2)],
                        vec![0.0, -0.5, -1.0, -1.2, -2.0],
                    )
                    .unwrap();
                    let probs = self.probs.then(|| vec![0.0; 5]);
                    Draft::Tree { tree, probs }
                })
                .collect())
        }

        fn release(&mut self, _request_id: u64) {}
    }

    fn tree_tokens(draft: &Draft) -> Vec<u32> {
        match draft {
            Draft::Tree { tree, .. } => tree.tokens().to_vec(),
            Draft::Chain(_) => panic!("a chain"),
        }
    }

    #[test]
    fn a_match_is_grafted_into_trees_within_their_budgets() {
        let mut proposer = LookupAssisted::new(FixedTree { probs: false }, lookup());
        let repeating = REPEATING;
        let fresh = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10];
        let requests = [
            request(&repeating, 4),
            request(&repeating, 2),
            request(&fresh, 4),
        ];
        let drafts =
            Proposer::<()>::draft(&mut proposer, &ProposeBatch::without_features(&requests))
                .unwrap();
        // The match continues 4 5 (the inner proposer's depth of two), each token at 3/4:
        // scores -0.29 and -0.58 outrank the head's 92 and 93, which are cut to keep 4 nodes.
        assert_eq!(tree_tokens(&drafts[0]), vec![3, 90, 91, 4, 5]);
        // A budget of two draft tokens keeps the two best: the graft's first and the head's.
        assert_eq!(tree_tokens(&drafts[1]), vec![3, 90, 4]);
        // No match: the head's tree stays whole.
        assert_eq!(tree_tokens(&drafts[2]), vec![10, 90, 91, 92, 93]);
        // A tree with draft rows is left as it is.
        let mut sampled = LookupAssisted::new(FixedTree { probs: true }, lookup());
        let drafts = Proposer::<()>::draft(
            &mut sampled,
            &ProposeBatch::without_features(&requests[..1]),
        )
        .unwrap();
        assert_eq!(tree_tokens(&drafts[0]), vec![3, 90, 91, 92, 93]);
    }

    #[test]
    fn a_stop_rule_cuts_grafted_trees_to_the_nodes_that_pay() {
        let mut proposer = LookupAssisted::new(FixedTree { probs: false }, lookup());
        let calibration = ConfidenceCalibration::new();
        let repeating = REPEATING;
        let fresh = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10];
        let gated = |tokens| {
            let mut request = request(tokens, 4);
            request.stop = Some(ChainStop {
                calibration: &calibration,
                keep_above: &[0.5],
                extend_above: &[0.5],
            });
            request
        };
        let requests = [gated(&repeating), gated(&fresh)];
        let drafts =
            Proposer::<()>::draft(&mut proposer, &ProposeBatch::without_features(&requests))
                .unwrap();
        // Uncalibrated paths: the graft's 4 and 5 at 0.75 and 0.56, the head's 90 at 0.61; 91
        // (0.37) and the head's deeper nodes fall below 0.5.
        assert_eq!(tree_tokens(&drafts[0]), vec![3, 90, 4, 5]);
        assert_eq!(tree_tokens(&drafts[1]), vec![10, 90]);
    }

    #[test]
    fn the_calibration_of_the_stop_rule_judges_both_chains() {
        // The engine has learned that tokens at confidence 0.75 are never accepted, and that
        // the inner drafter's 0.4 tokens are: the inner chain wins despite its lower words.
        let mut calibration = ConfidenceCalibration::new();
        for _ in 0..500 {
            calibration.observe_chain(&[0.75], 0);
            calibration.observe_chain(&[0.4], 1);
        }
        let mut proposer = assisted([0.4, 0.4, 0.4]);
        let repeating = REPEATING;
        let mut gated = request(&repeating, 3);
        gated.stop = Some(ChainStop {
            calibration: &calibration,
            keep_above: &[],
            extend_above: &[],
        });
        let drafts = draft(&mut proposer, &[gated]);
        assert_eq!(drafts[0].as_chain().unwrap().tokens, vec![90, 91, 92]);
        // Without the calibration, the lookup's 0.75 is taken at its word and wins.
        let drafts = draft(&mut proposer, &[request(&repeating, 3)]);
        assert_eq!(drafts[0].as_chain().unwrap().tokens, vec![4, 5, 6]);
    }
}
