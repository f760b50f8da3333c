//! EAGLE-2 dynamic draft trees (Li et al. 2024, arXiv 2406.16858): step 2 of
//! [`EagleProposer::draft`](super::EagleProposer) when the proposer has an [`EagleTreeConfig`].
//!
//! Every drafting request grows one tree rooted at its root token, batched over requests:
//!
//! 1. **Root expansion.** The head output of the last committed row gives the root's `top_k`
//!    likeliest children (ranked in the draft vocabulary, mapped to target ids), each scored by
//!    its draft log-probability.
//! 2. **Expansion rounds.** Round `d = 2..=depth` feeds the frontier, the `top_k` best nodes of
//!    depth `d - 1` by cumulative score, as one head forward: per node one row with its token,
//!    the head output that drafted it as hidden input (for depth-1 nodes the last committed
//!    row's), at the position of the chain's step `d - 1` (siblings share it). A row sees the
//!    committed rows and the rows of its own ancestors appended in earlier rounds (history mask),
//!    and among the new rows only itself. Each row's `top_k` likeliest children join the tree
//!    with score parent score + log-probability. A request stops after its depth budget; with
//!    a [`ChainStop`], only frontier nodes whose children are expected to pay for a row and a
//!    drafting step are expanded ([`ChainStop::expands`]), and a tree with none stops growing.
//! 3. **Rerank.** The request's `num_nodes` best draft tokens, closed under ancestors
//!    ([`DraftTree::prune_to_best`]), are its draft, verified with a one-hot `q`; with a
//!    [`ChainStop`], only those of them whose calibrated path probability pays for their
//!    verification rows ([`ChainStop::tree_nodes`]).
//!
//! The rows appended here are speculative: the proposer cuts them after the call.

use aquila_model_loader::backend::KernelBackend;
use aquila_model_loader::model::{ForwardBatch, SequenceInput};
use burn::tensor::Tensor;

use super::super::pick;
use super::{drafting_rows, select_rows, EagleProposer, EagleTreeConfig, Planned};
use crate::proposer::{ChainStop, Draft, ProposeError, ProposeRequest};
use crate::tree::DraftTree;

/// One request's tree while it grows.
#[derive(Debug)]
struct GrowingTree {
    /// The request's index in the batch.
    request: usize,
    /// The request's draft-cache slot.
    slot: usize,
    /// Expansion rounds it gets: the deepest draft token (>= 1).
    depth: usize,
    /// Draft tokens it keeps after reranking.
    num_nodes: usize,
    /// Rows its draft cache held before this call's speculative rows (its committed rows).
    committed: usize,
    /// The candidate tree.
    tree: DraftTree,
    /// Per node: the row of the head outputs whose logits drafted it (the root's is unused).
    source: Vec<usize>,
    /// Per node: the draft-cache row it was fed at, once it has been expanded.
    cache_row: Vec<Option<usize>>,
}

impl GrowingTree {
    /// A root-only tree for `request`.
    fn new(
        index: usize,
        request: &ProposeRequest<'_>,
        planned: &Planned,
        shape: &EagleTreeConfig,
    ) -> Self {
        Self {
            request: index,
            slot: planned.slot,
            depth: planned.budget,
            num_nodes: shape.num_nodes.min(request.max_draft_tokens),
            committed: request.tokens.len() - 1,
            tree: DraftTree::new(request.next_token()),
            source: vec![0],
            cache_row: vec![None],
        }
    }

    /// Adds the `children` (target id, log-probability) of `parent`, drafted from head output
    /// row `source`.
    fn adopt(&mut self, parent: usize, source: usize, children: &[(u32, f32)]) {
        let base = self.tree.scores()[parent];
        for &(token, logprob) in children {
            self.tree
                .push(parent, token, base + logprob)
                .expect("the parent is a node of the tree");
            self.source.push(source);
            self.cache_row.push(None);
        }
    }

    /// The head input of expansion round `round` for the `frontier` nodes, appended after
    /// the slot's `cached` rows; records where each node's row goes.
    fn feed(&mut self, frontier: &[usize], cached: usize, round: usize) -> SequenceInput {
        let n = frontier.len();
        let history: Vec<Vec<bool>> = frontier
            .iter()
            .map(|&node| {
                let mut visible = vec![false; cached];
                visible[..self.committed].fill(true);
                let mut ancestor = self.tree.parent(node);
                while let Some(a) = ancestor {
                    if let Some(row) = self.cache_row[a] {
                        visible[row] = true;
                    }
                    ancestor = self.tree.parent(a);
                }
                visible
            })
            .collect();
        for (i, &node) in frontier.iter().enumerate() {
            self.cache_row[node] = Some(cached + i);
        }
        let identity = (0..n)
            .map(|row| (0..n).map(|col| col == row).collect())
            .collect();
        let sees_everything = history.iter().all(|row| row.iter().all(|&v| v));
        SequenceInput {
            slot: self.slot,
            tokens: frontier
                .iter()
                .map(|&node| self.tree.tokens()[node])
                .collect(),
            // The chain's step `round - 1` feeds its token at `committed + round - 2`.
            positions: vec![self.committed + round - 2; n],
            logits_rows: (0..n).collect(),
            // One row, or rows that may see every cached row, need no explicit mask: the
            // causal default then means the same, on the faster path.
            mask: (n > 1).then_some(identity),
            history_mask: (!sees_everything).then_some(history),
        }
    }

    /// The reranked draft: the best `num_nodes` draft tokens with their ancestors, of which a
    /// `stop` keeps those that pay for their verification rows.
    fn finish(self, stop: Option<ChainStop<'_>>) -> Draft {
        let (tree, _) = self
            .tree
            .prune_to_best(self.num_nodes + 1)
            .expect("the budget keeps at least the root");
        let tree = match stop {
            Some(stop) => tree.retain(&stop.tree_nodes(&tree)).0,
            None => tree,
        };
        Draft::Tree { tree, probs: None }
    }
}

impl<B: KernelBackend> EagleProposer<B> {
    /// Grows every drafting request's tree (steps 1–3 of the module documentation) from the
    /// head outputs of the committed rows; requests without a budget get an empty draft.
    pub(super) fn grow_trees(
        &mut self,
        outputs: Tensor<B, 2>,
        requests: &[ProposeRequest<'_>],
        plan: &[Planned],
        shape: EagleTreeConfig,
    ) -> Result<Vec<Draft>, ProposeError> {
        let mut drafts = vec![Draft::empty(); requests.len()];
        let (active, last_rows) = drafting_rows(requests, plan);
        let mut trees: Vec<GrowingTree> = active
            .iter()
            .map(|&i| GrowingTree::new(i, &requests[i], &plan[i], &shape))
            .collect();
        if trees.is_empty() {
            return Ok(drafts);
        }
        let mut hidden = select_rows(outputs, &last_rows);
        let roots = self.children(hidden.clone(), shape.top_k);
        for (row, (tree, children)) in trees.iter_mut().zip(roots).enumerate() {
            tree.adopt(0, row, &children);
        }
        let deepest = trees.iter().map(|tree| tree.depth).max().unwrap_or(0);
        for round in 2..=deepest {
            let mut sequences = Vec::new();
            let mut sources = Vec::new();
            let mut expanded = Vec::new();
            for (t, tree) in trees.iter_mut().enumerate() {
                if tree.depth < round {
                    continue;
                }
                let mut frontier = tree.tree.best_at_depth(round - 1, shape.top_k);
                if let Some(stop) = requests[tree.request].stop {
                    let paths = stop.tree_paths(&tree.tree);
                    frontier.retain(|&node| stop.expands(round - 1, paths[node]));
                }
                if frontier.is_empty() {
                    // Nothing deeper can pay: the tree is done growing.
                    tree.depth = round - 1;
                    continue;
                }
                sources.extend(frontier.iter().map(|&node| tree.source[node]));
                sequences.push(tree.feed(&frontier, self.cache.len(tree.slot), round));
                expanded.extend(frontier.into_iter().map(|node| (t, node)));
            }
            if sequences.is_empty() {
                break;
            }
            hidden = self.head.forward(
                &self.target,
                &ForwardBatch::new(sequences),
                select_rows(hidden, &sources),
                &mut self.cache,
            )?;
            let children = self.children(hidden.clone(), shape.top_k);
            for (row, ((t, node), children)) in expanded.into_iter().zip(children).enumerate() {
                trees[t].adopt(node, row, &children);
            }
        }
        for tree in trees {
            let request = tree.request;
            drafts[request] = tree.finish(requests[request].stop);
        }
        Ok(drafts)
    }

    /// The `top_k` likeliest draft tokens (target ids) after every row of head outputs
    /// `hidden`, with their draft log-probabilities, best first.
    fn children(&self, hidden: Tensor<B, 2>, top_k: usize) -> Vec<Vec<(u32, f32)>> {
        let map = self.head.vocab_map();
        pick::top_k_rows(self.head.logits(&self.target, hidden), top_k)
            .into_iter()
            .map(|row| {
                row.into_iter()
                    .map(|(id, logprob)| (map.to_target(id), logprob))
                    .collect()
            })
            .collect()
    }
}
