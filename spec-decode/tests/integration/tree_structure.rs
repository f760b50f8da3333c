//! Draft tree structure: attention mask, positions, path retrieval and EAGLE-2 reranking.

use aquila_spec_decode::sampling::{top_logprobs, RequestRng};
use aquila_spec_decode::tree::{DraftTree, TreeError};

/// ```text
/// 0 (root, token 10)
/// ├── 1 (11) ── 3 (13) ── 5 (15)
/// └── 2 (12) ── 4 (14)
/// ```
fn sample_tree() -> DraftTree {
    let mut tree = DraftTree::new(10);
    tree.push(0, 11, -0.1).unwrap();
    tree.push(0, 12, -0.5).unwrap();
    tree.push(1, 13, -0.3).unwrap();
    tree.push(2, 14, -0.9).unwrap();
    tree.push(3, 15, -0.4).unwrap();
    tree
}

#[test]
fn mask_lets_each_node_see_exactly_its_ancestors_and_itself() {
    let tree = sample_tree();
    let n = tree.num_nodes();
    let mask = tree.attention_mask();
    let rows: Vec<String> = mask
        .chunks(n)
        .map(|row| row.iter().map(|&b| if b { '1' } else { '.' }).collect())
        .collect();
    assert_eq!(
        rows,
        vec!["1.....", "11....", "1.1...", "11.1..", "1.1.1.", "11.1.1"]
    );
    for i in 0..n {
        let ancestors = tree.path_to(i);
        for j in 0..n {
            assert_eq!(mask[i * n + j], ancestors.contains(&j), "mask[{i}][{j}]");
        }
    }
}

#[test]
fn positions_are_root_position_plus_depth() {
    let tree = sample_tree();
    assert_eq!(tree.positions(100), vec![100, 101, 101, 102, 102, 103]);
    assert_eq!(tree.max_depth(), 3);
    assert_eq!(tree.num_drafts(), 5);
}

#[test]
fn paths_and_leaves_give_retrieve_indices() {
    let tree = sample_tree();
    assert_eq!(tree.path_to(5), vec![0, 1, 3, 5]);
    assert_eq!(tree.path_to(0), vec![0]);
    assert_eq!(tree.leaves(), vec![4, 5]);
    assert_eq!(tree.leaf_paths(), vec![vec![0, 2, 4], vec![0, 1, 3, 5]]);
    assert_eq!(tree.children(0), &[1, 2]);
    assert_eq!(tree.parent(4), Some(2));
    assert_eq!(tree.parent(0), None);
    let tokens: Vec<u32> = tree.path_to(5).iter().map(|&i| tree.tokens()[i]).collect();
    assert_eq!(tokens, vec![10, 11, 13, 15]);
}

#[test]
fn from_parts_round_trips() {
    let tree = sample_tree();
    let parents = (0..tree.num_nodes()).map(|i| tree.parent(i)).collect();
    let rebuilt =
        DraftTree::from_parts(tree.tokens().to_vec(), parents, tree.scores().to_vec()).unwrap();
    assert_eq!(rebuilt, tree);
}

#[test]
fn pruning_keeps_the_best_scores_in_node_order() {
    let tree = sample_tree();
    // Best drafts: 1 (-0.1), 3 (-0.3), 5 (-0.4).
    let (pruned, original) = tree.prune_to_best(4).unwrap();
    assert_eq!(original, vec![0, 1, 3, 5]);
    assert_eq!(pruned.tokens(), &[10, 11, 13, 15]);
    assert_eq!(pruned.leaf_paths(), vec![vec![0, 1, 2, 3]]);
    // Node 2 (-0.5) comes next.
    let (pruned, original) = tree.prune_to_best(5).unwrap();
    assert_eq!(original, vec![0, 1, 2, 3, 5]);
    assert_eq!(pruned.parent(4), Some(3));
    assert_eq!(pruned.scores(), &[0.0, -0.1, -0.5, -0.3, -0.4]);
    // Root only, and a budget larger than the tree.
    assert_eq!(tree.prune_to_best(1).unwrap().1, vec![0]);
    assert_eq!(tree.prune_to_best(50).unwrap().0, tree);
    assert_eq!(tree.prune_to_best(0).unwrap_err(), TreeError::ZeroBudget);
}

#[test]
fn pruning_is_closed_under_ancestors_even_when_scores_tie_or_rise() {
    // A child scoring above its parent (rounding, p = 1 in low precision) must bring the
    // parent along, and is skipped when parent and child do not both fit.
    let mut tree = DraftTree::new(0);
    tree.push(0, 1, -2.0).unwrap(); // 1
    tree.push(1, 2, -0.0).unwrap(); // 2, scores above its parent
    tree.push(0, 3, -1.0).unwrap(); // 3
    tree.push(0, 4, -1.5).unwrap(); // 4
    let (_, original) = tree.prune_to_best(3).unwrap();
    assert_eq!(original, vec![0, 1, 2]);
    let (_, original) = tree.prune_to_best(2).unwrap();
    assert_eq!(original, vec![0, 3]);
    // NaN scores rank last.
    let mut tree = DraftTree::new(0);
    tree.push(0, 1, f32::NAN).unwrap();
    tree.push(0, 2, -5.0).unwrap();
    assert_eq!(tree.prune_to_best(2).unwrap().1, vec![0, 2]);
}

#[test]
fn eagle2_expansion_then_reranking_keeps_the_global_top_scores() {
    // Expand a tree like EAGLE-2: top-K children per frontier node from random draft logits,
    // cumulative log-prob scores, global top-K frontier per level; then rerank to N nodes.
    const VOCAB: usize = 30;
    const TOP_K: usize = 3;
    const DEPTH: usize = 4;
    const KEEP: usize = 10;
    let mut rng = RequestRng::new(99);
    let mut tree = DraftTree::new(0);
    let mut frontier = vec![0usize];
    for _ in 0..DEPTH {
        let mut level = Vec::new();
        for &parent in &frontier {
            let logits: Vec<f32> = (0..VOCAB).map(|_| rng.uniform() as f32 * 4.0).collect();
            for (token, logprob) in top_logprobs(&logits, TOP_K) {
                let score = tree.scores()[parent] + logprob;
                level.push(tree.push(parent, token, score).unwrap());
            }
        }
        level.sort_by(|&a, &b| tree.scores()[b].total_cmp(&tree.scores()[a]));
        frontier = level[..TOP_K].to_vec();
    }
    let (pruned, original) = tree.prune_to_best(KEEP).unwrap();
    assert_eq!(pruned.num_nodes(), KEEP);
    let mut drafts: Vec<f32> = tree.scores()[1..].to_vec();
    drafts.sort_by(|a, b| b.total_cmp(a));
    let mut kept: Vec<f32> = original[1..].iter().map(|&i| tree.scores()[i]).collect();
    kept.sort_by(|a, b| b.total_cmp(a));
    assert_eq!(kept, drafts[..KEEP - 1].to_vec());
    for (new, &old) in original.iter().enumerate().skip(1) {
        let parent_old = tree.parent(old).unwrap();
        assert_eq!(original[pruned.parent(new).unwrap()], parent_old);
        assert_eq!(pruned.tokens()[new], tree.tokens()[old]);
        assert_eq!(pruned.depth(new), tree.depth(old));
    }
}
