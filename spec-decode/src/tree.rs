//! Draft token trees (EAGLE-2 style): structure, attention mask, positions and path retrieval.
//!
//! Node 0 is the root: the last committed token (the token the target sampled last step, not yet
//! in the target's KV cache). Every other node is a draft token whose parent is an earlier node,
//! so node order is always parent-before-child and the tree's rows can be fed to the target in
//! node order. A node's score is its cumulative draft log-probability (root 0).

/// A malformed draft tree or an impossible tree operation.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum TreeError {
    /// A node's parent is not an earlier node of the tree.
    #[error("parent {parent} of node {node} must be an earlier node (the tree has {len} nodes)")]
    InvalidParent {
        /// The node being added.
        node: usize,
        /// The parent it named.
        parent: usize,
        /// Nodes in the tree before it.
        len: usize,
    },
    /// Node 0 was given a parent, or a later node none.
    #[error("node {node} {problem}")]
    Root {
        /// The offending node.
        node: usize,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// The parts given to [`DraftTree::from_parts`] have different lengths or are empty.
    #[error("draft tree parts must be non-empty and of equal length: {tokens} tokens, {parents} parents, {scores} scores")]
    PartLengths {
        /// Number of tokens given.
        tokens: usize,
        /// Number of parents given.
        parents: usize,
        /// Number of scores given.
        scores: usize,
    },
    /// [`DraftTree::prune_to_best`] was asked to keep no node (the root always stays).
    #[error("max_nodes must be at least 1 (the root), got 0")]
    ZeroBudget,
}

/// A tree of draft tokens rooted at the last committed token.
#[derive(Clone, Debug, PartialEq)]
pub struct DraftTree {
    tokens: Vec<u32>,
    parents: Vec<Option<usize>>,
    depths: Vec<usize>,
    scores: Vec<f32>,
    children: Vec<Vec<usize>>,
}

impl DraftTree {
    /// A tree holding only the root token (depth 0, score 0).
    pub fn new(root_token: u32) -> Self {
        Self {
            tokens: vec![root_token],
            parents: vec![None],
            depths: vec![0],
            scores: vec![0.0],
            children: vec![Vec::new()],
        }
    }

    /// A tree from per-node parts; `parents[0]` must be `None` and every other parent an
    /// earlier node.
    pub fn from_parts(
        tokens: Vec<u32>,
        parents: Vec<Option<usize>>,
        scores: Vec<f32>,
    ) -> Result<Self, TreeError> {
        if tokens.is_empty() || tokens.len() != parents.len() || tokens.len() != scores.len() {
            return Err(TreeError::PartLengths {
                tokens: tokens.len(),
                parents: parents.len(),
                scores: scores.len(),
            });
        }
        if parents[0].is_some() {
            return Err(TreeError::Root {
                node: 0,
                problem: "is the root and must have no parent",
            });
        }
        let mut tree = Self::new(tokens[0]);
        tree.scores[0] = scores[0];
        for node in 1..tokens.len() {
            let parent = parents[node].ok_or(TreeError::Root {
                node,
                problem: "is not the root and needs a parent",
            })?;
            tree.push(parent, tokens[node], scores[node])?;
        }
        Ok(tree)
    }

    /// Adds a draft token under `parent` with cumulative score `score` and returns its index.
    pub fn push(&mut self, parent: usize, token: u32, score: f32) -> Result<usize, TreeError> {
        let node = self.tokens.len();
        if parent >= node {
            return Err(TreeError::InvalidParent {
                node,
                parent,
                len: node,
            });
        }
        Ok(self.attach(parent, token, score))
    }

    /// Adds a draft token under `parent`, an existing node, and returns its index.
    fn attach(&mut self, parent: usize, token: u32, score: f32) -> usize {
        let node = self.tokens.len();
        self.tokens.push(token);
        self.parents.push(Some(parent));
        self.depths.push(self.depths[parent] + 1);
        self.scores.push(score);
        self.children.push(Vec::new());
        self.children[parent].push(node);
        node
    }

    /// Grafts the chain `tokens` under the root, its tokens scored `scores` (cumulative, like
    /// the tree's own): where the tree already holds a prefix of the chain, its nodes are
    /// followed and their scores raised to the chain's where lower; the rest of the chain
    /// continues from there as new nodes. Existing nodes keep their indices, and siblings stay
    /// distinct tokens. Extra `scores` are ignored; a chain token without a score is not
    /// grafted.
    pub fn graft_chain(&mut self, tokens: &[u32], scores: &[f32]) {
        let mut node = 0;
        for (&token, &score) in tokens.iter().zip(scores) {
            let existing = self.children[node]
                .iter()
                .copied()
                .find(|&child| self.tokens[child] == token);
            node = match existing {
                Some(child) => {
                    if self.scores[child].is_nan() || self.scores[child] < score {
                        self.scores[child] = score;
                    }
                    child
                }
                None => self.attach(node, token, score),
            };
        }
    }

    /// Number of nodes, the root included.
    pub fn num_nodes(&self) -> usize {
        self.tokens.len()
    }

    /// Number of draft tokens (nodes other than the root).
    pub fn num_drafts(&self) -> usize {
        self.tokens.len() - 1
    }

    /// The tokens of all nodes in node order (the target's input rows), root first.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// Cumulative draft log-probabilities of all nodes in node order (root 0 unless given).
    pub fn scores(&self) -> &[f32] {
        &self.scores
    }

    /// The parent of `node` (`None` for the root). Panics if `node` is out of range.
    pub fn parent(&self, node: usize) -> Option<usize> {
        self.parents[node]
    }

    /// The depth of `node` (root 0). Panics if `node` is out of range.
    pub fn depth(&self, node: usize) -> usize {
        self.depths[node]
    }

    /// The children of `node` in insertion order. Panics if `node` is out of range.
    pub fn children(&self, node: usize) -> &[usize] {
        &self.children[node]
    }

    /// The largest node depth (0 for a root-only tree): the longest possible accepted run.
    pub fn max_depth(&self) -> usize {
        self.depths.iter().copied().max().unwrap_or(0)
    }

    /// Node indices from the root to `node`, both included. Panics if `node` is out of range.
    pub fn path_to(&self, node: usize) -> Vec<usize> {
        let mut path = vec![node];
        let mut current = node;
        while let Some(parent) = self.parents[current] {
            path.push(parent);
            current = parent;
        }
        path.reverse();
        path
    }

    /// Nodes without children, in node order.
    pub fn leaves(&self) -> Vec<usize> {
        (0..self.num_nodes())
            .filter(|&n| self.children[n].is_empty())
            .collect()
    }

    /// One root-to-leaf path of node indices per leaf (EAGLE's retrieve indices, unpadded).
    pub fn leaf_paths(&self) -> Vec<Vec<usize>> {
        self.leaves()
            .into_iter()
            .map(|leaf| self.path_to(leaf))
            .collect()
    }

    /// The tree attention mask among the tree's rows, `num_nodes × num_nodes` row-major:
    /// `mask[i * n + j]` is true when node `i` may attend to node `j`, i.e. `j` is `i` or one
    /// of its ancestors. (Every row also attends to the whole committed prefix, which is not
    /// part of this block.)
    pub fn attention_mask(&self) -> Vec<bool> {
        let n = self.num_nodes();
        let mut mask = vec![false; n * n];
        for node in 0..n {
            if let Some(parent) = self.parents[node] {
                // Parents come first, so the parent's row is complete.
                let (before, row) = mask.split_at_mut(node * n);
                row[..n].copy_from_slice(&before[parent * n..parent * n + n]);
            }
            mask[node * n + node] = true;
        }
        mask
    }

    /// Position ids of the tree's rows: `root_position + depth` (siblings share a position).
    pub fn positions(&self, root_position: usize) -> Vec<usize> {
        self.depths.iter().map(|d| root_position + d).collect()
    }

    /// The first `num_nodes` nodes (at least the root, at most all): parents come before their
    /// children, so every prefix in node order is itself a tree. A scheduler cuts a draft tree
    /// to its token budget this way.
    pub fn prefix(&self, num_nodes: usize) -> DraftTree {
        let n = num_nodes.clamp(1, self.num_nodes());
        let mut children: Vec<Vec<usize>> = self.children[..n].to_vec();
        for list in &mut children {
            list.retain(|&child| child < n);
        }
        DraftTree {
            tokens: self.tokens[..n].to_vec(),
            parents: self.parents[..n].to_vec(),
            depths: self.depths[..n].to_vec(),
            scores: self.scores[..n].to_vec(),
            children,
        }
    }

    /// The `n` best nodes of depth `depth` by score (descending; NaN counts as `-inf`), then
    /// index: the frontier an EAGLE-2 expansion round feeds. Fewer when the depth has fewer.
    pub fn best_at_depth(&self, depth: usize, n: usize) -> Vec<usize> {
        let mut nodes: Vec<usize> = (0..self.num_nodes())
            .filter(|&node| self.depths[node] == depth)
            .collect();
        nodes.sort_by(|&a, &b| {
            self.rank_score(b)
                .total_cmp(&self.rank_score(a))
                .then(a.cmp(&b))
        });
        nodes.truncate(n);
        nodes
    }

    /// The score `node` is ranked by: its score, with NaN as `-inf`.
    fn rank_score(&self, node: usize) -> f32 {
        let score = self.scores[node];
        if score.is_nan() {
            f32::NEG_INFINITY
        } else {
            score
        }
    }

    /// The sub-tree of at most `max_nodes` nodes (root included) with the best scores, closed
    /// under ancestors, with the kept nodes' original indices (in the new node order).
    ///
    /// EAGLE-2 reranking: nodes are taken by score (descending; NaN counts as `-inf`), then
    /// depth, then index; a node whose ancestors are not all kept yet is taken together with
    /// them if they fit, skipped otherwise. With log-probability scores a child never outscores
    /// its parent, so this is the plain top-N; the closure rule only matters for ties and
    /// rounding. Kept nodes stay in their original relative order.
    pub fn prune_to_best(&self, max_nodes: usize) -> Result<(DraftTree, Vec<usize>), TreeError> {
        if max_nodes == 0 {
            return Err(TreeError::ZeroBudget);
        }
        let mut order: Vec<usize> = (1..self.num_nodes()).collect();
        order.sort_by(|&a, &b| {
            self.rank_score(b)
                .total_cmp(&self.rank_score(a))
                .then(self.depths[a].cmp(&self.depths[b]))
                .then(a.cmp(&b))
        });
        let mut kept = vec![false; self.num_nodes()];
        kept[0] = true;
        let mut count = 1;
        for node in order {
            if count == max_nodes {
                break;
            }
            if kept[node] {
                continue;
            }
            let mut missing = vec![node];
            let mut current = node;
            while let Some(parent) = self.parents[current].filter(|&p| !kept[p]) {
                missing.push(parent);
                current = parent;
            }
            if count + missing.len() <= max_nodes {
                count += missing.len();
                for n in missing {
                    kept[n] = true;
                }
            }
        }
        self.subtree(&kept)
    }

    /// The sub-tree of the root, `nodes` and all their ancestors, with the kept nodes'
    /// original indices (in the new node order, which keeps their relative order). Panics if
    /// a node is out of range.
    pub fn retain(&self, nodes: &[usize]) -> (DraftTree, Vec<usize>) {
        let mut kept = vec![false; self.num_nodes()];
        kept[0] = true;
        for &node in nodes {
            let mut current = Some(node);
            while let Some(n) = current.filter(|&n| !kept[n]) {
                kept[n] = true;
                current = self.parents[n];
            }
        }
        self.subtree(&kept)
            .expect("a kept node's parent is kept and comes before it")
    }

    /// The drafter's probability of `node`'s token given its parent's (its confidence):
    /// `exp(score - parent's score)`, within `[0, 1]` (a NaN score counts as `-inf`); 1 for
    /// the root.
    pub fn confidence(&self, node: usize) -> f32 {
        match self.parents[node] {
            Some(parent) => (self.rank_score(node) - self.rank_score(parent))
                .exp()
                .clamp(0.0, 1.0),
            None => 1.0,
        }
    }

    /// The nodes marked in `kept` (root included, ancestors of kept nodes kept), in their
    /// original relative order, with their original indices.
    fn subtree(&self, kept: &[bool]) -> Result<(DraftTree, Vec<usize>), TreeError> {
        let original: Vec<usize> = (0..self.num_nodes()).filter(|&n| kept[n]).collect();
        let mut new_index = vec![usize::MAX; self.num_nodes()];
        let mut pruned = DraftTree::new(self.tokens[0]);
        pruned.scores[0] = self.scores[0];
        new_index[0] = 0;
        for &old in &original[1..] {
            let parent = self.parents[old].map(|p| new_index[p]).unwrap_or(0);
            new_index[old] = pruned.push(parent, self.tokens[old], self.scores[old])?;
        }
        Ok((pruned, original))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_rejects_unknown_parents() {
        let mut tree = DraftTree::new(1);
        assert_eq!(
            tree.push(1, 5, -0.1),
            Err(TreeError::InvalidParent {
                node: 1,
                parent: 1,
                len: 1
            })
        );
        assert_eq!(tree.push(0, 5, -0.1), Ok(1));
        assert_eq!(tree.depth(1), 1);
    }

    #[test]
    fn a_grafted_chain_follows_the_nodes_it_shares_and_continues_below_them() {
        // Root 1 with children 5 (-0.5) and 6 (-1.0); 5 has child 7 (-1.5).
        let mut tree = DraftTree::from_parts(
            vec![1, 5, 6, 7],
            vec![None, Some(0), Some(0), Some(1)],
            vec![0.0, -0.5, -1.0, -1.5],
        )
        .unwrap();
        // The chain 6 8 9 shares node 2, whose score rises to the chain's; 8 and 9 are new.
        tree.graft_chain(&[6, 8, 9], &[-0.3, -0.6, -0.9]);
        assert_eq!(tree.tokens(), &[1, 5, 6, 7, 8, 9]);
        assert_eq!(tree.scores(), &[0.0, -0.5, -0.3, -1.5, -0.6, -0.9]);
        assert_eq!(tree.children(2), &[4]);
        assert_eq!((tree.parent(5), tree.depth(5)), (Some(4), 3));
        // A chain the tree holds whole adds nothing, and a higher score is kept.
        let before = tree.clone();
        tree.graft_chain(&[5, 7], &[-0.9, -2.0]);
        assert_eq!(tree, before);
        // Pruned to four nodes, the graft's path outranks the head's weaker nodes.
        let (pruned, kept) = tree.prune_to_best(4).unwrap();
        assert_eq!(kept, vec![0, 1, 2, 4]);
        assert_eq!(pruned.tokens(), &[1, 5, 6, 8]);
    }

    #[test]
    fn from_parts_validates_shape_and_root() {
        assert!(matches!(
            DraftTree::from_parts(vec![1, 2], vec![None], vec![0.0, 0.0]),
            Err(TreeError::PartLengths { .. })
        ));
        assert!(matches!(
            DraftTree::from_parts(vec![1], vec![Some(0)], vec![0.0]),
            Err(TreeError::Root { node: 0, .. })
        ));
        assert!(matches!(
            DraftTree::from_parts(vec![1, 2], vec![None, None], vec![0.0, 0.0]),
            Err(TreeError::Root { node: 1, .. })
        ));
        assert!(matches!(
            DraftTree::from_parts(vec![1, 2, 3], vec![None, Some(2), Some(0)], vec![0.0; 3]),
            Err(TreeError::InvalidParent {
                node: 1,
                parent: 2,
                ..
            })
        ));
    }

    #[test]
    fn prefixes_keep_the_first_nodes_and_drop_their_missing_children() {
        let tree = DraftTree::from_parts(
            vec![7, 1, 2, 3],
            vec![None, Some(0), Some(0), Some(1)],
            vec![0.0, -0.1, -0.2, -0.3],
        )
        .unwrap();
        let cut = tree.prefix(3);
        assert_eq!(cut.tokens(), &[7, 1, 2]);
        assert_eq!(cut.children(1), &[] as &[usize], "node 3 was cut");
        assert_eq!(cut.children(0), &[1, 2]);
        assert_eq!(cut.max_depth(), 1);
        assert_eq!(tree.prefix(0).num_nodes(), 1, "the root always stays");
        assert_eq!(tree.prefix(9), tree);
    }

    #[test]
    fn best_at_depth_ranks_by_score_then_index() {
        let mut tree = DraftTree::new(0);
        tree.push(0, 1, -0.5).unwrap(); // 1
        tree.push(0, 2, -0.1).unwrap(); // 2
        tree.push(1, 3, -0.6).unwrap(); // 3
        tree.push(2, 4, f32::NAN).unwrap(); // 4
        tree.push(2, 5, -0.6).unwrap(); // 5
        tree.push(2, 6, -0.2).unwrap(); // 6
        assert_eq!(tree.best_at_depth(1, 5), vec![2, 1]);
        assert_eq!(tree.best_at_depth(2, 3), vec![6, 3, 5]);
        assert_eq!(tree.best_at_depth(2, 9), vec![6, 3, 5, 4]);
        assert_eq!(tree.best_at_depth(0, 2), vec![0]);
        assert!(tree.best_at_depth(3, 2).is_empty());
    }

    #[test]
    fn prune_with_zero_budget_is_an_error() {
        assert_eq!(
            DraftTree::new(0).prune_to_best(0).unwrap_err(),
            TreeError::ZeroBudget
        );
    }
}
