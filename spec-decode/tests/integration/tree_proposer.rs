//! EAGLE-2 dynamic trees from the EAGLE proposer: top-1 trees are the greedy chain, children
//! are the head's top-k under reference forwards that see exactly the ancestors, the draft
//! cache keeps only committed rows, batching, budgets, settings, and lossless tree decoding.
#![cfg(feature = "burn")]

use crate::eagle_fixtures;
use crate::proposer_eagle::{
    draft_single, eagle1, eagle3, proposer, request, reversed_batch, rows_from, speculative_decode,
    with_root, PROMPT, ROOT,
};

use aquila_model_loader::model::{FeatureTap, ForwardBatch, KvCache, SequenceInput};
use aquila_spec_decode::eagle::{EagleError, EagleHead};
use aquila_spec_decode::proposer::{
    ChainStop, ConfidenceCalibration, Draft, DraftSampling, EagleProposer, EagleProposerConfig,
    EagleTreeConfig, ProposeBatch, ProposeRequest, Proposer, ReplayProposer,
};
use aquila_spec_decode::sampling::{log_sum_exp, SamplingConfig};
use aquila_spec_decode::tree::DraftTree;
use burn::tensor::Tensor;
use eagle_fixtures::{values, Fixture, B};

/// The heads every test runs with: EAGLE-1, and EAGLE-3 with a 100-token draft vocabulary.
const HEADS: [Option<usize>; 2] = [None, Some(100)];

/// An EAGLE-1 head (`None`) or an EAGLE-3 head with a draft vocabulary of `draft_vocab`.
fn load_head(fixture: &Fixture, draft_vocab: Option<usize>) -> EagleHead<B> {
    match draft_vocab {
        None => eagle1(fixture),
        Some(vocab) => eagle3(fixture, vocab),
    }
}

fn shape(depth: usize, top_k: usize, num_nodes: usize) -> EagleTreeConfig {
    EagleTreeConfig {
        depth,
        top_k,
        num_nodes,
    }
}

/// The tree drafted for one request whose committed rows are all rows of `features`.
fn draft_tree(
    drafter: &mut EagleProposer<B>,
    features: &Tensor<B, 2>,
    id: u64,
    tokens: &[u32],
    first: usize,
    max: usize,
) -> DraftTree {
    match draft_single(drafter, features, id, tokens, first, max).unwrap() {
        Draft::Tree { tree, probs } => {
            assert!(probs.is_none(), "tree drafts are deterministic");
            tree
        }
        Draft::Chain(chain) => panic!("expected a tree, got the chain {chain:?}"),
    }
}

/// Every node's parent, in node order.
fn parents(tree: &DraftTree) -> Vec<Option<usize>> {
    (0..tree.num_nodes()).map(|n| tree.parent(n)).collect()
}

/// Structural invariants every drafted tree keeps.
fn assert_well_formed(tree: &DraftTree, root: u32, config: EagleTreeConfig, max: usize) {
    assert_eq!(tree.tokens()[0], root, "node 0 is the root token");
    assert!(tree.num_drafts() <= config.num_nodes.min(max));
    assert!(tree.max_depth() <= config.depth.min(max));
    for node in 1..tree.num_nodes() {
        let parent = tree.parent(node).unwrap();
        assert!(parent < node, "parent before child");
        assert_eq!(tree.depth(node), tree.depth(parent) + 1);
        assert!(
            tree.scores()[node] <= tree.scores()[parent],
            "scores never increase along a path: {:?}",
            tree.scores()
        );
        assert!(tree.scores()[node].is_finite());
    }
    let positions = tree.positions(40);
    assert!((0..tree.num_nodes()).all(|n| positions[n] == 40 + tree.depth(n)));
}

/// The reference head: the committed rows of `tokens` (all but the root) with their target
/// `features` on a fresh cache; returns the cache and the last row's output.
fn committed_head(
    fixture: &Fixture,
    head: &EagleHead<B>,
    tokens: &[u32],
    features: &Tensor<B, 2>,
) -> (KvCache<B>, Tensor<B, 2>) {
    let mut cache = head.new_kv_cache(1);
    let n = tokens.len() - 1;
    let batch = ForwardBatch::new(vec![SequenceInput::new(0, tokens[1..].to_vec(), 0)]);
    let outputs = head
        .forward(
            &fixture.target,
            &batch,
            head.project(features.clone()),
            &mut cache,
        )
        .unwrap();
    (cache, outputs.narrow(0, n - 1, 1))
}

/// The `k` likeliest target ids after head output `hidden` (one row), with log-probabilities,
/// computed on the host.
fn reference_top_k(
    fixture: &Fixture,
    head: &EagleHead<B>,
    hidden: Tensor<B, 2>,
    k: usize,
) -> Vec<(u32, f32)> {
    let logits = values(head.logits(&fixture.target, hidden));
    let normalizer = log_sum_exp(&logits);
    let mut ids: Vec<usize> = (0..logits.len()).collect();
    ids.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
    ids.into_iter()
        .take(k)
        .map(|id| {
            let token = head.vocab_map().to_target(id as u32);
            (token, logits[id] - normalizer)
        })
        .collect()
}

/// The head output after walking the path from the root to `node` as a chain, one row per
/// step on a copy of `cache`: each step sees the committed rows and the path's earlier rows.
fn path_output(
    fixture: &Fixture,
    head: &EagleHead<B>,
    tree: &DraftTree,
    node: usize,
    cache: &KvCache<B>,
    last: &Tensor<B, 2>,
) -> Tensor<B, 2> {
    let mut cache = cache.clone();
    let mut hidden = last.clone();
    for &step in &tree.path_to(node)[1..] {
        let position = cache.len(0);
        let batch = ForwardBatch::new(vec![SequenceInput::new(
            0,
            vec![tree.tokens()[step]],
            position,
        )]);
        hidden = head
            .forward(&fixture.target, &batch, hidden, &mut cache)
            .unwrap();
    }
    hidden
}

#[test]
fn top_1_trees_are_the_greedy_chain() {
    let fixture = Fixture::new(4);
    let tokens = with_root(&PROMPT, ROOT);
    for head in HEADS {
        let make = |config| proposer(&fixture, load_head(&fixture, head), config);
        let mut chain_drafter = make(EagleProposerConfig::greedy(4));
        let features = fixture.features(&PROMPT, &chain_drafter.feature_tap());
        let chain = draft_single(&mut chain_drafter, &features, 1, &tokens, 0, 4).unwrap();
        let chain = chain.as_chain().unwrap().tokens.clone();
        assert_eq!(chain.len(), 4);
        for num_nodes in [4, 2] {
            let config = shape(4, 1, num_nodes);
            let mut tree_drafter = make(EagleProposerConfig::tree(config));
            assert_eq!(tree_drafter.num_speculative_tokens(), num_nodes);
            let tree = draft_tree(&mut tree_drafter, &features, 1, &tokens, 0, 4);
            assert_well_formed(&tree, ROOT, config, 4);
            assert_eq!(tree.tokens()[1..], chain[..num_nodes], "head {head:?}");
            let expected: Vec<Option<usize>> = (0..=num_nodes).map(|n| n.checked_sub(1)).collect();
            assert_eq!(parents(&tree), expected, "a chain-shaped tree");
        }
    }
}

#[test]
fn depth_1_nodes_are_the_top_k_of_the_head() {
    let fixture = Fixture::new(4);
    let tokens = with_root(&PROMPT, ROOT);
    for draft_vocab in HEADS {
        let head = load_head(&fixture, draft_vocab);
        let features = fixture.features(&PROMPT, &head.feature_tap());
        let (_, last) = committed_head(&fixture, &head, &tokens, &features);
        let expected = reference_top_k(&fixture, &head, last, 5);
        let config = shape(1, 5, 5);
        let mut drafter = proposer(&fixture, head, EagleProposerConfig::tree(config));
        let tree = draft_tree(&mut drafter, &features, 1, &tokens, 0, 5);
        assert_well_formed(&tree, ROOT, config, 5);
        assert_eq!(tree.num_drafts(), 5);
        assert_eq!(tree.children(0), &[1, 2, 3, 4, 5]);
        for (node, &(token, logprob)) in (1..).zip(&expected) {
            assert_eq!(tree.tokens()[node], token);
            assert!((tree.scores()[node] - logprob).abs() < 1e-5);
        }
    }
}

#[test]
fn children_follow_a_reference_forward_that_sees_exactly_the_ancestors() {
    let fixture = Fixture::new(4);
    let tokens = with_root(&PROMPT, ROOT);
    for draft_vocab in HEADS {
        let head = load_head(&fixture, draft_vocab);
        let features = fixture.features(&PROMPT, &head.feature_tap());
        let (cache, last) = committed_head(&fixture, &head, &tokens, &features);
        // 2 + 2 × 2 + 2 × 2 candidates: with 10 kept nodes nothing is pruned.
        let config = shape(3, 2, 10);
        let tree_head = load_head(&fixture, draft_vocab);
        let mut drafter = proposer(&fixture, tree_head, EagleProposerConfig::tree(config));
        let tree = draft_tree(&mut drafter, &features, 1, &tokens, 0, 10);
        assert_well_formed(&tree, ROOT, config, 10);
        assert_eq!(tree.num_drafts(), 10);
        let mut expanded = 0;
        for node in 0..tree.num_nodes() {
            let children = tree.children(node);
            if children.is_empty() {
                continue;
            }
            expanded += 1;
            // The frontier of each round is the best top_k of the depth.
            let depth = tree.depth(node);
            assert!(tree.best_at_depth(depth, 2).contains(&node));
            let hidden = path_output(&fixture, &head, &tree, node, &cache, &last);
            let expected = reference_top_k(&fixture, &head, hidden, 2);
            for (&child, &(token, logprob)) in children.iter().zip(&expected) {
                assert_eq!(tree.tokens()[child], token, "child {child} of {node}");
                let score = tree.scores()[node] + logprob;
                assert!((tree.scores()[child] - score).abs() < 1e-4, "child {child}");
            }
        }
        assert_eq!(expanded, 1 + 2 + 2, "the root, then two nodes per round");
    }
}

#[test]
fn reranking_keeps_the_best_nodes_with_their_ancestors() {
    let fixture = Fixture::new(2);
    let tokens = with_root(&PROMPT, ROOT);
    let features = fixture.features(&PROMPT, &FeatureTap::LastHidden);
    let full = {
        let config = shape(3, 3, 21);
        let mut drafter = proposer(
            &fixture,
            eagle1(&fixture),
            EagleProposerConfig::tree(config),
        );
        draft_tree(&mut drafter, &features, 1, &tokens, 0, 21)
    };
    assert_eq!(full.num_drafts(), 3 + 9 + 9);
    for num_nodes in [1, 4, 7] {
        let config = shape(3, 3, num_nodes);
        let mut drafter = proposer(
            &fixture,
            eagle1(&fixture),
            EagleProposerConfig::tree(config),
        );
        let tree = draft_tree(&mut drafter, &features, 1, &tokens, 0, num_nodes);
        assert_well_formed(&tree, ROOT, config, num_nodes);
        assert_eq!(tree.num_drafts(), num_nodes);
        let (expected, _) = full.prune_to_best(num_nodes + 1).unwrap();
        assert_eq!(tree, expected, "{num_nodes} nodes");
    }
    // Drafting is deterministic: again, on a released slot, and on another proposer.
    let config = shape(3, 3, 7);
    let mut drafter = proposer(
        &fixture,
        eagle1(&fixture),
        EagleProposerConfig::tree(config),
    );
    let first = draft_tree(&mut drafter, &features, 1, &tokens, 0, 7);
    drafter.release(1);
    assert_eq!(drafter.cached_rows(1), None);
    assert_eq!(draft_tree(&mut drafter, &features, 1, &tokens, 0, 7), first);
}

#[test]
fn a_stop_rule_keeps_the_nodes_whose_calibrated_path_pays_for_their_rows() {
    let fixture = Fixture::new(2);
    let tokens = with_root(&PROMPT, ROOT);
    let features = fixture.features(&PROMPT, &FeatureTap::LastHidden);
    let rows: Vec<usize> = (0..PROMPT.len()).collect();
    let config = shape(3, 2, 5);
    let calibration = ConfidenceCalibration::new();
    let draft_with = |keep_above: &[f64], extend_above: &[f64]| {
        let mut drafter = proposer(
            &fixture,
            eagle1(&fixture),
            EagleProposerConfig::tree(config),
        );
        let mut gated = request(1, &tokens, 0, &rows, 5);
        gated.stop = Some(ChainStop {
            calibration: &calibration,
            keep_above,
            extend_above,
        });
        let batch = ProposeBatch {
            features: Some(&features),
            requests: &[gated],
            target_kv: None,
        };
        match drafter.draft(&batch).unwrap().remove(0) {
            Draft::Tree { tree, .. } => tree,
            Draft::Chain(chain) => panic!("expected a tree, got the chain {chain:?}"),
        }
    };
    let draft = |thresholds: &[f64]| draft_with(thresholds, thresholds);
    let mut drafter = proposer(
        &fixture,
        eagle1(&fixture),
        EagleProposerConfig::tree(config),
    );
    let ungated = draft_tree(&mut drafter, &features, 1, &tokens, 0, 5);
    assert_eq!(draft(&[0.0]), ungated, "a free row keeps every node");
    // Drafting steps too dear to pay: the root's children only, every one kept.
    let shallow = draft_with(&[0.0], &[0.0, 1.5]);
    assert_eq!(shallow.max_depth(), 1);
    assert_eq!(shallow.num_drafts(), 2, "top-k 2 children of the root");
    assert_eq!(draft(&[1.5]).num_drafts(), 0, "no path reaches 1.5");
    // Uncalibrated, a node's path is its cumulative draft probability: a threshold between
    // the best and the second-best path keeps the best node with its ancestors.
    let mut paths: Vec<f32> = ungated.scores()[1..].iter().map(|s| s.exp()).collect();
    paths.sort_by(|a, b| b.total_cmp(a));
    let between = f64::from(paths[0] + paths[1]) / 2.0;
    let kept = draft(&[between]);
    let stop = ChainStop {
        calibration: &calibration,
        keep_above: &[between],
        extend_above: &[between],
    };
    assert_eq!(kept, ungated.retain(&stop.tree_nodes(&ungated)).0);
    assert_eq!(
        kept.num_drafts(),
        ungated.depth(stop.tree_nodes(&ungated)[0])
    );
}

#[test]
fn the_draft_cache_keeps_only_committed_rows_and_the_next_round_continues() {
    let fixture = Fixture::new(2);
    let tap = FeatureTap::LastHidden;
    let config = shape(4, 3, 8);
    let mut drafter = proposer(
        &fixture,
        eagle1(&fixture),
        EagleProposerConfig::tree(config),
    );
    let prefill = with_root(&PROMPT, ROOT);
    let first = draft_tree(
        &mut drafter,
        &fixture.features(&PROMPT, &tap),
        1,
        &prefill,
        0,
        8,
    );
    assert_eq!(
        drafter.cached_rows(1),
        Some(PROMPT.len()),
        "every speculative row was rolled back"
    );
    // The target accepted the first two nodes of the deepest path and sampled 9.
    let deepest = (0..first.num_nodes())
        .max_by_key(|&n| (first.depth(n), std::cmp::Reverse(n)))
        .unwrap();
    assert!(first.depth(deepest) >= 2);
    let path = first.path_to(deepest);
    let mut sequence = prefill;
    sequence.extend(path[1..3].iter().map(|&n| first.tokens()[n]));
    sequence.push(9);
    let committed_end = sequence.len() - 1;
    let features = rows_from(&fixture, &sequence[..committed_end], PROMPT.len(), &tap);
    let second = draft_tree(&mut drafter, &features, 1, &sequence, PROMPT.len(), 8);
    assert_eq!(drafter.cached_rows(1), Some(committed_end));
    assert_well_formed(&second, 9, config, 8);

    // A fresh request given every committed row at once drafts the same tree.
    let all = fixture.features(&sequence[..committed_end], &tap);
    let mut fresh = proposer(
        &fixture,
        eagle1(&fixture),
        EagleProposerConfig::tree(config),
    );
    assert_eq!(draft_tree(&mut fresh, &all, 1, &sequence, 0, 8), second);
    // Rows that skip a position are refused.
    assert!(draft_single(&mut drafter, &all, 1, &sequence, 0, 8).is_err());
    assert_eq!(drafter.cached_rows(1), Some(committed_end));
}

#[test]
fn batched_tree_drafting_equals_drafting_each_request_alone() {
    let fixture = Fixture::new(4);
    let tap = FeatureTap::AuxLayers(vec![0, 1, 3]);
    let prompts: [&[u32]; 4] = [
        &PROMPT,
        &[5, 6, 7],
        &[300, 2, 44, 45, 46, 47, 48, 49, 50, 11],
        &[8, 9],
    ];
    let roots = [ROOT, 17, 18, 19];
    let budgets = [6, 2, 0, 1];
    let config = shape(3, 2, 6);
    let sequences: Vec<Vec<u32>> = prompts
        .iter()
        .zip(roots)
        .map(|(p, r)| with_root(p, r))
        .collect();
    let per_request: Vec<Tensor<B, 2>> =
        prompts.iter().map(|p| fixture.features(p, &tap)).collect();
    let tree_proposer = || {
        proposer(
            &fixture,
            eagle3(&fixture, 100),
            EagleProposerConfig::tree(config),
        )
    };

    let alone: Vec<Draft> = (0..4)
        .map(|i| {
            let mut drafter = tree_proposer();
            draft_single(
                &mut drafter,
                &per_request[i],
                i as u64,
                &sequences[i],
                0,
                budgets[i],
            )
            .unwrap()
        })
        .collect();

    let lengths: Vec<usize> = prompts.iter().map(|p| p.len()).collect();
    let (features, rows) = reversed_batch(&per_request, &lengths);
    let requests: Vec<ProposeRequest<'_>> = (0..4)
        .map(|i| request(i as u64, &sequences[i], 0, &rows[i], budgets[i]))
        .collect();
    let mut drafter = tree_proposer();
    let batched = drafter
        .draft(&ProposeBatch {
            features: Some(&features),
            requests: &requests,
            target_kv: None,
        })
        .unwrap();
    for (i, (together, single)) in batched.iter().zip(&alone).enumerate() {
        assert_eq!(drafter.cached_rows(i as u64), Some(lengths[i]));
        let (Draft::Tree { tree: a, .. }, Draft::Tree { tree: b, .. }) = (together, single) else {
            assert_eq!(budgets[i], 0, "request {i}");
            assert_eq!(together, &Draft::empty());
            assert_eq!(single, &Draft::empty());
            continue;
        };
        assert_eq!(a.tokens(), b.tokens(), "request {i}");
        assert_eq!(parents(a), parents(b), "request {i}");
        let diff = a
            .scores()
            .iter()
            .zip(b.scores())
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f32::max);
        assert!(diff < 1e-5, "request {i}");
        assert_well_formed(a, roots[i], config, budgets[i]);
        // A request's max_draft_tokens caps both the depth and the kept nodes.
        assert_eq!(a.num_drafts(), budgets[i].min(6), "request {i}");
    }
}

#[test]
fn trees_stop_at_the_context_limit() {
    let fixture = Fixture::new(2);
    let context = fixture.target.config().max_position_embeddings;
    let prompt: Vec<u32> = (0..context - 3).map(|i| 3 + (i % 300) as u32).collect();
    let tokens = with_root(&prompt, 4);
    let features = fixture.features(&prompt, &FeatureTap::LastHidden);
    let config = shape(5, 2, 8);
    let mut drafter = proposer(
        &fixture,
        eagle1(&fixture),
        EagleProposerConfig::tree(config),
    );
    // The root sits at position context - 3: only depths 1 and 2 fit.
    let tree = draft_tree(&mut drafter, &features, 1, &tokens, 0, 8);
    assert_eq!(tree.max_depth(), 2);
    assert_eq!(
        tree.num_drafts(),
        2 + 4,
        "all candidates of two rounds fit in 8"
    );
    assert!(tree
        .positions(context - 3)
        .iter()
        .all(|&position| position < context));

    // No room at all: an empty draft, the committed rows still taken in.
    let prompt: Vec<u32> = (0..context - 1).map(|i| 3 + (i % 300) as u32).collect();
    let tokens = with_root(&prompt, 4);
    let features = fixture.features(&prompt, &FeatureTap::LastHidden);
    let draft = draft_single(&mut drafter, &features, 2, &tokens, 0, 8).unwrap();
    assert_eq!(draft, Draft::empty());
    assert_eq!(drafter.cached_rows(2), Some(context - 1));
}

#[test]
fn greedy_speculative_decoding_with_trees_reproduces_greedy_decoding() {
    let fixture = Fixture::new(4);
    let greedy = SamplingConfig::greedy();
    let prompt = [1, 40, 41, 97, 12, 200, 33, 40, 41];
    let mut no_drafts = ReplayProposer::new(3, Vec::new());
    let plain = speculative_decode(
        &fixture,
        &mut no_drafts,
        &FeatureTap::None,
        &prompt,
        24,
        &greedy,
    );
    let n = prompt.len() + 24;
    for draft_vocab in HEADS {
        for config in [shape(3, 2, 5), shape(4, 3, 10), shape(2, 4, 1)] {
            let head = load_head(&fixture, draft_vocab);
            let tap = head.feature_tap();
            let mut drafter = proposer(&fixture, head, EagleProposerConfig::tree(config));
            let decoded = speculative_decode(&fixture, &mut drafter, &tap, &prompt, 24, &greedy);
            assert_eq!(decoded.tokens[..n], plain.tokens[..n], "{tap:?} {config:?}");
            let steps = decoded.tokens.len() - prompt.len();
            assert!(
                decoded.drafted >= config.num_nodes * steps.div_ceil(config.depth + 1),
                "every step drafts num_nodes tokens"
            );
            assert!(decoded.accepted <= decoded.drafted);
            assert_eq!(drafter.cached_rows(0), Some(decoded.tokens.len() - 1));
        }
    }
}

#[test]
fn impossible_tree_settings_are_rejected_naming_the_field() {
    let fixture = Fixture::new(4);
    let name = |result: Result<EagleProposer<B>, EagleError>| match result {
        Err(EagleError::Settings(err)) => err.name,
        other => panic!("expected a settings error, got {other:?}"),
    };
    let build = |head, config| EagleProposer::new(head, &fixture.target, config, 2);
    assert_eq!(
        name(build(
            eagle1(&fixture),
            EagleProposerConfig::tree(shape(0, 2, 4))
        )),
        "tree.depth"
    );
    assert_eq!(
        name(build(
            eagle1(&fixture),
            EagleProposerConfig::tree(shape(2, 0, 4))
        )),
        "tree.top_k"
    );
    assert_eq!(
        name(build(
            eagle1(&fixture),
            EagleProposerConfig {
                num_speculative_tokens: 4,
                ..EagleProposerConfig::tree(shape(2, 2, 0))
            }
        )),
        "tree.num_nodes"
    );
    let sampled = EagleProposerConfig {
        sampling: DraftSampling::Sampled {
            temperature: 1.0,
            seed: 3,
        },
        ..EagleProposerConfig::tree(shape(2, 2, 4))
    };
    assert_eq!(name(build(eagle1(&fixture), sampled)), "sampling");
    let mismatched = EagleProposerConfig {
        num_speculative_tokens: 5,
        ..EagleProposerConfig::tree(shape(2, 2, 4))
    };
    let err = build(eagle1(&fixture), mismatched).unwrap_err();
    assert!(err.to_string().contains("num_speculative_tokens"), "{err}");
    // Children come from the draft vocabulary, so top_k cannot exceed it.
    assert_eq!(
        name(build(
            eagle3(&fixture, 100),
            EagleProposerConfig::tree(shape(2, 101, 4))
        )),
        "tree.top_k"
    );
    assert!(build(
        eagle3(&fixture, 100),
        EagleProposerConfig::tree(shape(2, 100, 4))
    )
    .is_ok());
}
