//! Tree verification: SGLang's tree fixture (greedy and near-greedy), chain equivalence, and
//! Monte-Carlo checks that the first emitted token follows the target for deterministic
//! siblings (one-hot q) and for sampled siblings (SpecInfer).

use crate::sampling_support;

use aquila_spec_decode::rejection::{
    ChainRequest, DraftProbs, RejectionSampler, TargetRows, TreeRequest, VerifyOutcome,
};
use aquila_spec_decode::sampling::{sample, RequestRng, SamplingConfig};
use aquila_spec_decode::tree::DraftTree;
use sampling_support::{histogram, random_distribution, total_variation, tv_bound};

/// A tree from SGLang's first-child / next-sibling lists and candidate tokens.
fn tree_from_links(tokens: &[u32], next_token: &[i64], next_sibling: &[i64]) -> DraftTree {
    let mut parents = vec![None; tokens.len()];
    for (node, &first_child) in next_token.iter().enumerate() {
        let mut child = first_child;
        while child >= 0 {
            parents[child as usize] = Some(node);
            child = next_sibling[child as usize];
        }
    }
    DraftTree::from_parts(tokens.to_vec(), parents, vec![0.0; tokens.len()]).unwrap()
}

/// SGLang `test_tree_speculative_sampling_target_only` fixture: logits 1 everywhere, 10 at
/// the listed (row, token) pairs, and 10 at token 18 in every other row; vocab 20.
fn sglang_logits(hot: &[(usize, usize)]) -> Vec<f32> {
    const V: usize = 20;
    let mut logits = vec![1.0f32; 6 * V];
    for &(row, token) in hot {
        logits[row * V + token] = 10.0;
    }
    for row in 0..6 {
        if !hot.iter().any(|&(r, _)| r == row) {
            logits[row * V + 18] = 10.0;
        }
    }
    logits
}

fn verify_tree(
    config: &SamplingConfig,
    tree: &DraftTree,
    logits: &[f32],
    seed: u64,
) -> VerifyOutcome {
    RejectionSampler::new(logits.len() / tree.num_nodes())
        .unwrap()
        .verify_tree(TreeRequest {
            config,
            target: TargetRows::Logits {
                logits,
                prompt: &[],
                output: &[],
            },
            tree,
            draft_probs: DraftProbs::OneHot,
            rng: &mut RequestRng::new(seed),
        })
        .unwrap()
}

#[test]
fn sglang_tree_fixture_greedy_and_near_greedy() {
    let first = tree_from_links(
        &[0, 1, 2, 3, 4, 5],
        &[1, 2, -1, 4, 5, -1],
        &[-1, 3, -1, -1, -1, -1],
    );
    let first_logits = sglang_logits(&[(0, 3), (3, 4), (4, 5)]);
    let second = tree_from_links(
        &[7, 8, 9, 10, 11, 12],
        &[4, 2, 3, -1, 5, -1],
        &[-1, -1, -1, -1, 1, -1],
    );
    let second_logits = sglang_logits(&[(0, 11), (4, 12)]);
    let near_greedy = SamplingConfig {
        temperature: 0.01,
        ..SamplingConfig::default()
    };
    for seed in 0..20 {
        for config in [SamplingConfig::greedy(), near_greedy] {
            let outcome = verify_tree(&config, &first, &first_logits, seed);
            assert_eq!(outcome.path, vec![0, 3, 4, 5]);
            assert_eq!(outcome.tokens, vec![3, 4, 5, 18]);
            let outcome = verify_tree(&config, &second, &second_logits, seed);
            assert_eq!(outcome.path, vec![0, 4, 5]);
            assert_eq!(outcome.tokens, vec![11, 12, 18]);
        }
    }
}

#[test]
fn greedy_tree_stops_where_no_child_matches() {
    let tree = tree_from_links(&[0, 1, 2, 3], &[1, -1, -1, -1], &[-1, 2, 3, -1]);
    let mut logits = vec![0.0f32; 4 * 8];
    logits[2] = 1.0; // row 0 picks 2: node 2
    logits[2 * 8 + 7] = 1.0; // node 2 is a leaf: bonus 7
    let outcome = verify_tree(&SamplingConfig::greedy(), &tree, &logits, 0);
    assert_eq!((outcome.path, outcome.tokens), (vec![0, 2], vec![2, 7]));
    logits[2] = 0.0;
    logits[5] = 1.0; // row 0 picks 5: no such child
    let outcome = verify_tree(&SamplingConfig::greedy(), &tree, &logits, 0);
    assert_eq!((outcome.path, outcome.tokens), (vec![0], vec![5]));
}

#[test]
fn a_chain_shaped_tree_verifies_exactly_like_the_chain() {
    const V: usize = 12;
    let mut setup = RequestRng::new(31);
    let drafts = [4u32, 9, 1];
    let mut tree = DraftTree::new(0);
    for (i, &token) in drafts.iter().enumerate() {
        tree.push(i, token, 0.0).unwrap();
    }
    let p: Vec<f32> = (0..4)
        .flat_map(|_| random_distribution(V, &mut setup))
        .collect();
    let q: Vec<f32> = (0..4)
        .flat_map(|_| random_distribution(V, &mut setup))
        .collect();
    let sampler = RejectionSampler::new(V).unwrap();
    let config = SamplingConfig::default();
    for seed in 0..200 {
        for (chain_q, tree_q) in [
            (DraftProbs::OneHot, DraftProbs::OneHot),
            (DraftProbs::Rows(&q[..3 * V]), DraftProbs::Rows(&q)),
        ] {
            let chain = sampler
                .verify_chain(ChainRequest {
                    config: &config,
                    target: TargetRows::Probs(&p),
                    draft_tokens: &drafts,
                    draft_probs: chain_q,
                    rng: &mut RequestRng::new(seed),
                })
                .unwrap();
            let as_tree = sampler
                .verify_tree(TreeRequest {
                    config: &config,
                    target: TargetRows::Probs(&p),
                    tree: &tree,
                    draft_probs: tree_q,
                    rng: &mut RequestRng::new(seed),
                })
                .unwrap();
            assert_eq!(chain, as_tree, "seed {seed}");
        }
    }
}

const VOCAB: usize = 12;
const TRIALS: usize = 60_000;

/// Root with `siblings` children, each with one child; every depth-1 row is `p1`.
fn two_level_tree(root_children: &[u32], grandchild: u32) -> DraftTree {
    let mut tree = DraftTree::new(0);
    for &token in root_children {
        let child = tree.push(0, token, 0.0).unwrap();
        tree.push(child, grandchild, 0.0).unwrap();
    }
    tree
}

/// Rows for `two_level_tree`: root `p0`, depth-1 nodes `p1`, leaves `p2`.
fn tree_rows(tree: &DraftTree, p: &[Vec<f32>; 3]) -> Vec<f32> {
    (0..tree.num_nodes())
        .flat_map(|n| p[tree.depth(n)].clone())
        .collect()
}

/// Emitted tokens at positions 0 and 1 over many tree verifications.
fn assert_tree_law(p: &[Vec<f32>; 3], mut verify: impl FnMut(&mut RequestRng) -> VerifyOutcome) {
    let mut rng = RequestRng::new(123);
    let mut first = Vec::with_capacity(TRIALS);
    let mut second = Vec::new();
    for _ in 0..TRIALS {
        let outcome = verify(&mut rng);
        first.push(outcome.tokens[0]);
        if let Some(&t) = outcome.tokens.get(1) {
            second.push(t);
        }
    }
    let tv = total_variation(&histogram(&first, VOCAB), &p[0]);
    assert!(tv < tv_bound(VOCAB, TRIALS), "first token TV {tv:.4}");
    assert!(
        second.len() > 10_000,
        "too few accepted first drafts: {}",
        second.len()
    );
    let tv = total_variation(&histogram(&second, VOCAB), &p[1]);
    assert!(
        tv < tv_bound(VOCAB, second.len()),
        "second token TV {tv:.4}"
    );
}

#[test]
fn deterministic_siblings_with_one_hot_q_give_the_target_distribution() {
    let mut setup = RequestRng::new(41);
    let p = [0, 1, 2].map(|_| random_distribution(VOCAB, &mut setup));
    // Top-3 style siblings, including a duplicate that must not change the law.
    let tree = two_level_tree(&[2, 7, 5, 7], 3);
    let rows = tree_rows(&tree, &p);
    let sampler = RejectionSampler::new(VOCAB).unwrap();
    let config = SamplingConfig::default();
    assert_tree_law(&p, |rng| {
        sampler
            .verify_tree(TreeRequest {
                config: &config,
                target: TargetRows::Probs(&rows),
                tree: &tree,
                draft_probs: DraftProbs::OneHot,
                rng,
            })
            .unwrap()
    });
}

#[test]
fn sampled_siblings_with_q_give_the_target_distribution() {
    let mut setup = RequestRng::new(42);
    let p = [0, 1, 2].map(|_| random_distribution(VOCAB, &mut setup));
    let q_root = random_distribution(VOCAB, &mut setup);
    let q_child = random_distribution(VOCAB, &mut setup);
    let sampler = RejectionSampler::new(VOCAB).unwrap();
    let config = SamplingConfig::default();
    assert_tree_law(&p, |rng| {
        // Three i.i.d. children of the root from q_root (repeats allowed), one grandchild each
        // from q_child.
        let mut tree = DraftTree::new(0);
        for _ in 0..3 {
            let child = tree.push(0, sample(&q_root, rng), 0.0).unwrap();
            tree.push(child, sample(&q_child, rng), 0.0).unwrap();
        }
        let rows = tree_rows(&tree, &p);
        let q: Vec<f32> = (0..tree.num_nodes())
            .flat_map(|n| {
                if n == 0 {
                    q_root.clone()
                } else {
                    q_child.clone()
                }
            })
            .collect();
        sampler
            .verify_tree(TreeRequest {
                config: &config,
                target: TargetRows::Probs(&rows),
                tree: &tree,
                draft_probs: DraftProbs::Rows(&q),
                rng,
            })
            .unwrap()
    });
}

#[test]
fn tree_penalties_see_the_accepted_path() {
    // Root children 3 and 5; row of node 1 (token 3) and node 2 (token 5) both prefer token 3
    // unless 3 is penalized as in-flight output.
    const V: usize = 8;
    let tree = tree_from_links(&[0, 3, 5], &[1, -1, -1], &[-1, 2, -1]);
    let mut logits = vec![0.0f32; 3 * V];
    logits[3] = 1.0;
    for row in [1, 2] {
        logits[row * V + 3] = 2.0;
        logits[row * V + 6] = 1.5;
    }
    let config = SamplingConfig {
        presence_penalty: 1.0,
        ..SamplingConfig::greedy()
    };
    let outcome = verify_tree(&config, &tree, &logits, 0);
    assert_eq!(outcome.tokens, vec![3, 6]);
}
