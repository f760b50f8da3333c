//! Batching: several sequences (prefill chunks and decode rows mixed, different cache lengths)
//! in one forward give the same logits as running them one at a time, and custom attention
//! masks among new rows behave like running each branch on its own.

use crate::model_support;

use aquila_model_loader::fixtures::llama::TinyLlamaOptions;
use aquila_model_loader::model::{FeatureTap, SequenceInput};
use model_support::{assert_rows_close, full_logits, run, tiny_model, FLOAT_NOISE};

#[test]
fn batched_forward_equals_per_sequence_forwards() {
    let (_dir, model) = tiny_model(&TinyLlamaOptions {
        num_layers: 3,
        tied: false,
        ..Default::default()
    });
    let histories: [&[u32]; 3] = [&[1, 2, 3, 4, 5, 6], &[7], &[]];
    let new_tokens: [&[u32]; 3] = [&[100], &[8, 9, 10, 11], &[20, 21, 22]];

    // Batched: fill the histories, then one forward with a decode row and two chunks.
    let mut batched = model.new_kv_cache(3);
    for (slot, history) in histories.iter().enumerate().filter(|(_, h)| !h.is_empty()) {
        run(
            &model,
            &mut batched,
            vec![SequenceInput::new(slot, history.to_vec(), 0)],
            &FeatureTap::None,
        );
    }
    let sequences: Vec<SequenceInput> = (0..3)
        .map(|slot| {
            SequenceInput::new(slot, new_tokens[slot].to_vec(), histories[slot].len())
                .with_all_logits()
        })
        .rev() // Batch order differs from slot order.
        .collect();
    let (logits, features) = run(&model, &mut batched, sequences, &FeatureTap::LastHidden);
    assert_eq!(features.len(), 8);

    // One at a time, from scratch.
    let mut expected = Vec::new();
    for slot in (0..3).rev() {
        let mut all = histories[slot].to_vec();
        all.extend(new_tokens[slot]);
        expected.extend(full_logits(&model, &all)[histories[slot].len()..].to_vec());
    }
    assert_rows_close(&logits, &expected, FLOAT_NOISE, "batched vs alone");
    for slot in 0..3 {
        assert_eq!(
            batched.len(slot),
            histories[slot].len() + new_tokens[slot].len()
        );
    }
}

#[test]
fn logits_rows_select_and_order_rows() {
    let (_dir, model) = tiny_model(&TinyLlamaOptions::default());
    let tokens = vec![3, 1, 4, 1, 5, 9];
    let full = full_logits(&model, &tokens);
    let mut cache = model.new_kv_cache(1);
    let sequence = SequenceInput::new(0, tokens, 0).with_logits_rows(vec![4, 0, 4]);
    let (logits, _) = run(&model, &mut cache, vec![sequence], &FeatureTap::None);
    assert_rows_close(
        &logits,
        &[full[4].clone(), full[0].clone(), full[4].clone()],
        FLOAT_NOISE,
        "selected rows",
    );

    let mut cache = model.new_kv_cache(1);
    let none = SequenceInput::new(0, vec![3, 1], 0).with_logits_rows(vec![]);
    let (logits, _) = run(&model, &mut cache, vec![none], &FeatureTap::None);
    assert!(logits.is_empty());
    assert_eq!(cache.len(0), 2);
}

#[test]
fn tree_mask_equals_running_each_branch() {
    let (_dir, model) = tiny_model(&TinyLlamaOptions {
        num_layers: 2,
        seed: 3,
        ..Default::default()
    });
    let prompt = vec![1, 30, 31, 32];
    // Rows: r, a (child of r), b (child of r), a1 (child of a), b1 (child of b).
    let tokens = vec![50, 51, 52, 53, 54];
    let paths: [&[usize]; 5] = [&[0], &[0, 1], &[0, 2], &[0, 1, 3], &[0, 2, 4]];
    let mask: Vec<Vec<bool>> = paths
        .iter()
        .map(|path| (0..5).map(|col| path.contains(&col)).collect())
        .collect();
    let mut cache = model.new_kv_cache(1);
    run(
        &model,
        &mut cache,
        vec![SequenceInput::new(0, prompt.clone(), 0)],
        &FeatureTap::None,
    );
    let tree = SequenceInput {
        slot: 0,
        tokens: tokens.clone(),
        positions: paths.iter().map(|p| prompt.len() + p.len() - 1).collect(),
        logits_rows: (0..5).collect(),
        mask: Some(mask),
        history_mask: None,
    };
    let (logits, _) = run(&model, &mut cache, vec![tree], &FeatureTap::None);
    for (row, path) in paths.iter().enumerate() {
        let mut sequence = prompt.clone();
        sequence.extend(path.iter().map(|&node| tokens[node]));
        let chain = full_logits(&model, &sequence);
        assert_rows_close(
            &logits[row..=row],
            &chain[chain.len() - 1..],
            FLOAT_NOISE,
            &format!("tree row {row}"),
        );
    }
}

#[test]
fn explicit_causal_mask_equals_default() {
    let (_dir, model) = tiny_model(&TinyLlamaOptions::default());
    let tokens = vec![9, 8, 7, 6];
    let causal: Vec<Vec<bool>> = (0..4).map(|r| (0..4).map(|c| c <= r).collect()).collect();
    let mut cache = model.new_kv_cache(1);
    let sequence = SequenceInput::new(0, tokens.clone(), 0)
        .with_all_logits()
        .with_mask(causal);
    let (logits, _) = run(&model, &mut cache, vec![sequence], &FeatureTap::None);
    assert_rows_close(
        &logits,
        &full_logits(&model, &tokens),
        FLOAT_NOISE,
        "explicit causal mask",
    );
}

#[test]
fn history_mask_hides_cached_rows_like_an_in_batch_mask() {
    let (_dir, model) = tiny_model(&TinyLlamaOptions::default());
    let tokens = vec![5u32, 6, 7, 8];
    // One pass: row 3 does not see row 1.
    let mut mask: Vec<Vec<bool>> = (0..4).map(|r| (0..4).map(|c| c <= r).collect()).collect();
    mask[3][1] = false;
    let mut one_pass = model.new_kv_cache(1);
    let all = SequenceInput::new(0, tokens.clone(), 0)
        .with_all_logits()
        .with_mask(mask);
    let (expected, _) = run(&model, &mut one_pass, vec![all], &FeatureTap::None);

    // Two passes: rows 0..3 cached, then row 3 with a history mask hiding cached row 1.
    let mut cache = model.new_kv_cache(1);
    run(
        &model,
        &mut cache,
        vec![SequenceInput::new(0, tokens[..3].to_vec(), 0)],
        &FeatureTap::None,
    );
    let last =
        SequenceInput::new(0, vec![tokens[3]], 3).with_history_mask(vec![vec![true, false, true]]);
    let (logits, _) = run(&model, &mut cache, vec![last.clone()], &FeatureTap::None);
    assert_rows_close(&logits, &expected[3..], FLOAT_NOISE, "history mask");

    // An all-visible history mask changes nothing; a mask of the wrong width is an error.
    cache.truncate(0, 3);
    let visible = SequenceInput::new(0, vec![tokens[3]], 3).with_history_mask(vec![vec![true; 3]]);
    let (logits, _) = run(&model, &mut cache, vec![visible], &FeatureTap::None);
    assert_rows_close(
        &logits,
        &full_logits(&model, &tokens)[3..],
        FLOAT_NOISE,
        "all visible",
    );
    cache.truncate(0, 2);
    let mut cache_copy = cache;
    let err = model
        .forward(
            &aquila_model_loader::model::ForwardBatch::new(vec![last]),
            &mut cache_copy,
            &FeatureTap::None,
        )
        .unwrap_err();
    assert!(err.to_string().contains("history mask"), "{err}");
    assert_eq!(cache_copy.len(0), 2, "a rejected batch changes nothing");
}
