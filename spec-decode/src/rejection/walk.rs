//! The verification walks, shared by chains and trees.
//!
//! A chain is the tree whose node `i` has the single child `i + 1`, so one greedy walk and one
//! stochastic walk serve both. The stochastic walk is multi-draft recursive rejection
//! (SpecInfer): at a node with distribution `p'` (initially the target's `p`), each child `x`
//! is accepted with probability `min(1, p'(x) / q(x))`; after a rejection `p'` becomes
//! `norm(max(0, p' - q))` (one-hot `q`: `p'` with `x` removed). The first accepted child is
//! descended into; when every child is rejected the recovered token is sampled from `p'`, and
//! at a leaf the bonus token is sampled from `p`. Each emitted token is then distributed
//! exactly as the target's `p` at its position.

use super::target::TargetDistributions;
use super::{DraftProbs, VerifyOutcome};
use crate::sampling::{sample, total_weight, weight, RequestRng};
use crate::tree::DraftTree;

/// The structure of a draft: tokens and children of nodes (node 0 is the root).
pub(crate) trait DraftShape {
    /// The token of draft node `node` (`node >= 1`).
    fn token(&self, node: usize) -> u32;
    /// The children of `node`, in the order they are tried.
    fn children(&self, node: usize) -> impl Iterator<Item = usize> + '_;
    /// Draft nodes after the root.
    fn num_drafts(&self) -> usize;
    /// The deepest draft position (the root is depth 0).
    fn draft_depth(&self) -> usize;

    /// The outcome of a walk that kept `path` and emitted `tokens` over this draft.
    fn outcome(&self, path: Vec<usize>, tokens: Vec<u32>) -> VerifyOutcome {
        VerifyOutcome {
            path,
            tokens,
            num_draft_tokens: self.num_drafts(),
            draft_depth: self.draft_depth(),
        }
    }
}

/// A chain draft: node `i >= 1` holds draft token `i - 1`.
pub(crate) struct ChainShape<'a> {
    pub(crate) drafts: &'a [u32],
}

impl DraftShape for ChainShape<'_> {
    fn token(&self, node: usize) -> u32 {
        self.drafts[node - 1]
    }

    fn children(&self, node: usize) -> impl Iterator<Item = usize> + '_ {
        (node + 1)..(node + 2).min(self.drafts.len() + 1)
    }

    fn num_drafts(&self) -> usize {
        self.drafts.len()
    }

    fn draft_depth(&self) -> usize {
        self.drafts.len()
    }
}

impl DraftShape for DraftTree {
    fn token(&self, node: usize) -> u32 {
        self.tokens()[node]
    }

    fn children(&self, node: usize) -> impl Iterator<Item = usize> + '_ {
        DraftTree::children(self, node).iter().copied()
    }

    fn num_drafts(&self) -> usize {
        DraftTree::num_drafts(self)
    }

    fn draft_depth(&self) -> usize {
        self.max_depth()
    }
}

/// Greedy verification: follow the child whose token is the target's argmax; the argmax at
/// the first node without such a child is the recovered (or, at a leaf, bonus) token.
pub(crate) fn greedy_walk(
    shape: &impl DraftShape,
    target: &mut TargetDistributions,
) -> VerifyOutcome {
    let mut path = vec![0];
    let mut tokens = Vec::new();
    loop {
        let node = path[path.len() - 1];
        let best = target.argmax(node, &tokens);
        tokens.push(best);
        match shape
            .children(node)
            .find(|&child| shape.token(child) == best)
        {
            Some(child) => path.push(child),
            None => return shape.outcome(path, tokens),
        }
    }
}

/// Stochastic verification (module docs); `q` rows are validated to `num_nodes × vocab_size`.
pub(crate) fn stochastic_walk(
    shape: &impl DraftShape,
    target: &mut TargetDistributions,
    q: DraftProbs,
    vocab_size: usize,
    rng: &mut RequestRng,
) -> VerifyOutcome {
    let mut path = vec![0];
    let mut tokens = Vec::new();
    let mut residual = Vec::with_capacity(vocab_size);
    loop {
        let node = path[path.len() - 1];
        target.probs_into(node, &tokens, &mut residual);
        let q_row = match q {
            DraftProbs::OneHot => None,
            // Validation gives every node with children a row; only a chain's last node
            // (which has no children) lacks one.
            DraftProbs::Rows(rows) => rows
                .get(node * vocab_size..(node + 1) * vocab_size)
                .map(DraftRow::new),
        };
        match try_children(shape, node, &mut residual, q_row.as_ref(), rng) {
            Some(child) => {
                path.push(child);
                tokens.push(shape.token(child));
            }
            None => {
                if !usable(total_weight(&residual)) {
                    // Degenerate residual (only possible through rounding or bad inputs):
                    // sample from the target's p instead.
                    target.probs_into(node, &tokens, &mut residual);
                }
                tokens.push(sample(&residual, rng));
                return shape.outcome(path, tokens);
            }
        }
    }
}

/// Tests the children of `node` in turn against `residual` (on entry the target's p at `node`,
/// residualized after each rejection); returns the first accepted child, or `None` with
/// `residual` holding the distribution to recover from.
fn try_children(
    shape: &impl DraftShape,
    node: usize,
    residual: &mut [f32],
    q_row: Option<&DraftRow>,
    rng: &mut RequestRng,
) -> Option<usize> {
    let mut mass = total_weight(residual);
    for child in shape.children(node) {
        if !usable(mass) {
            return None;
        }
        let token = shape.token(child);
        let p = residual
            .get(token as usize)
            .map_or(0.0, |&p| f64::from(weight(p)) / mass);
        let q = q_row.map_or(1.0, |row| row.prob(token));
        if p > 0.0 && q > 0.0 && rng.uniform() < p / q {
            return Some(child);
        }
        match q_row {
            None => {
                if let Some(entry) = residual.get_mut(token as usize) {
                    *entry = 0.0;
                }
            }
            Some(row) => row.subtract_from(residual, mass),
        }
        mass = total_weight(residual);
    }
    None
}

/// One draft distribution row, with its total so unnormalized rows behave as distributions.
struct DraftRow<'a> {
    row: &'a [f32],
    mass: f64,
}

impl<'a> DraftRow<'a> {
    fn new(row: &'a [f32]) -> Self {
        Self {
            row,
            mass: total_weight(row),
        }
    }

    /// `q(token)`, 0 for ids outside the row or a degenerate row.
    fn prob(&self, token: u32) -> f64 {
        match self.row.get(token as usize) {
            Some(&q) if usable(self.mass) => f64::from(weight(q)) / self.mass,
            _ => 0.0,
        }
    }

    /// `residual ← max(0, residual / residual_mass - q)`.
    fn subtract_from(&self, residual: &mut [f32], residual_mass: f64) {
        let p_scale = (1.0 / residual_mass) as f32;
        let q_scale = if usable(self.mass) {
            (1.0 / self.mass) as f32
        } else {
            0.0
        };
        for (r, &q) in residual.iter_mut().zip(self.row) {
            let q = weight(q) * q_scale;
            let p = weight(*r) * p_scale;
            *r = (p - q).max(0.0);
        }
    }
}

/// Whether a total weight can normalize a distribution.
fn usable(mass: f64) -> bool {
    mass > 0.0 && mass.is_finite()
}
