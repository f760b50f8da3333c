//! KV-cache correctness: incremental forwards over the cache equal one full forward, and
//! truncation, tree commits (gather) and resets leave the cache as if only the kept tokens had
//! ever been run.

use crate::model_support;

use aquila_model_loader::fixtures::llama::TinyLlamaOptions;
use aquila_model_loader::model::{FeatureTap, SequenceInput, KV_ROW_GRANULE};
use model_support::{assert_rows_close, full_logits, run, tiny_model, FLOAT_NOISE};

const TOKENS: [u32; 12] = [1, 40, 7, 300, 12, 5, 99, 2, 150, 151, 152, 8];

#[test]
fn prefill_then_decode_equals_one_full_forward() {
    let (_dir, model) = tiny_model(&TinyLlamaOptions {
        num_layers: 3,
        ..Default::default()
    });
    let full = full_logits(&model, &TOKENS);
    let mut cache = model.new_kv_cache(2);
    let (prefill, _) = run(
        &model,
        &mut cache,
        vec![SequenceInput::new(1, TOKENS[..5].to_vec(), 0)],
        &FeatureTap::None,
    );
    assert_eq!(cache.len(1), 5);
    assert_eq!(cache.len(0), 0);
    let mut incremental = prefill;
    for (i, &token) in TOKENS.iter().enumerate().skip(5) {
        let (step, _) = run(
            &model,
            &mut cache,
            vec![SequenceInput::new(1, vec![token], i)],
            &FeatureTap::None,
        );
        incremental.extend(step);
    }
    assert_eq!(cache.len(1), TOKENS.len());
    assert_rows_close(&incremental, &full[4..], FLOAT_NOISE, "prefill + decode");
}

#[test]
fn chunked_prefill_equals_one_full_forward() {
    let (_dir, model) = tiny_model(&TinyLlamaOptions::default());
    let full = full_logits(&model, &TOKENS);
    let mut cache = model.new_kv_cache(1);
    let mut chunked = Vec::new();
    for (start, chunk) in [(0, &TOKENS[..4]), (4, &TOKENS[4..9]), (9, &TOKENS[9..])] {
        let sequence = SequenceInput::new(0, chunk.to_vec(), start).with_all_logits();
        chunked.extend(run(&model, &mut cache, vec![sequence], &FeatureTap::None).0);
    }
    assert_rows_close(&chunked, &full, FLOAT_NOISE, "chunked prefill");
}

#[test]
fn truncate_rolls_back_rejected_tokens() {
    let (_dir, model) = tiny_model(&TinyLlamaOptions::default());
    let mut cache = model.new_kv_cache(1);
    run(
        &model,
        &mut cache,
        vec![SequenceInput::new(0, TOKENS[..6].to_vec(), 0)],
        &FeatureTap::None,
    );
    // Three speculative tokens, of which only the first is kept.
    run(
        &model,
        &mut cache,
        vec![SequenceInput::new(0, vec![200, 201, 202], 6)],
        &FeatureTap::None,
    );
    assert_eq!(cache.len(0), 9);
    cache.truncate(0, 7);
    assert_eq!(cache.len(0), 7);
    cache.truncate(0, 50); // Past the end: no change.
    assert_eq!(cache.len(0), 7);
    let (after, _) = run(
        &model,
        &mut cache,
        vec![SequenceInput::new(0, vec![9, 10], 7).with_all_logits()],
        &FeatureTap::None,
    );
    let mut kept = TOKENS[..6].to_vec();
    kept.extend([200, 9, 10]);
    assert_rows_close(
        &after,
        &full_logits(&model, &kept)[7..],
        FLOAT_NOISE,
        "after truncate",
    );
}

#[test]
fn gather_commits_an_accepted_tree_path() {
    let (_dir, model) = tiny_model(&TinyLlamaOptions {
        num_layers: 3,
        ..Default::default()
    });
    let mut cache = model.new_kv_cache(1);
    let prompt = TOKENS[..5].to_vec();
    run(
        &model,
        &mut cache,
        vec![SequenceInput::new(0, prompt.clone(), 0)],
        &FeatureTap::None,
    );
    // Tree: root r (row 0), children a (1) and b (2) of r, child c (3) of b.
    let tree = vec![60, 61, 62, 63];
    let parents = [None, Some(0), Some(0), Some(2)];
    let depth = [0, 1, 1, 2];
    let ancestors = |mut node: usize| {
        let mut path = vec![node];
        while let Some(p) = parents[node] {
            path.push(p);
            node = p;
        }
        path
    };
    let mask: Vec<Vec<bool>> = (0..4)
        .map(|row| (0..4).map(|col| ancestors(row).contains(&col)).collect())
        .collect();
    let verify = SequenceInput {
        slot: 0,
        tokens: tree.clone(),
        positions: depth.iter().map(|d| 5 + d).collect(),
        logits_rows: vec![0, 1, 2, 3],
        mask: Some(mask),
        history_mask: None,
    };
    run(&model, &mut cache, vec![verify], &FeatureTap::None);
    assert_eq!(cache.len(0), 9);
    // Accept root, b, c: keep tree rows 0, 2, 3 after the prompt.
    cache.gather(0, 5, &[0, 2, 3]);
    assert_eq!(cache.len(0), 8);
    let (next, _) = run(
        &model,
        &mut cache,
        vec![SequenceInput::new(0, vec![70, 71], 8).with_all_logits()],
        &FeatureTap::None,
    );
    let mut committed = prompt;
    committed.extend([60, 62, 63, 70, 71]);
    assert_rows_close(
        &next,
        &full_logits(&model, &committed)[8..],
        FLOAT_NOISE,
        "after gather",
    );

    // An identity gather is a truncation.
    cache.gather(0, 8, &[0]);
    assert_eq!(cache.len(0), 9);
}

#[test]
fn reset_frees_a_slot_and_memory_is_accounted() {
    let (_dir, model) = tiny_model(&TinyLlamaOptions::default());
    let config = model.config().clone();
    let mut cache = model.new_kv_cache(3);
    assert_eq!((cache.num_slots(), cache.memory_bytes()), (3, 0));
    assert!(cache.is_empty());
    run(
        &model,
        &mut cache,
        vec![SequenceInput::new(2, TOKENS.to_vec(), 0)],
        &FeatureTap::None,
    );
    // The CPU kernels append in place into buffers of whole granules of rows.
    let per_token = 2 * config.num_hidden_layers * config.kv_width() * 4;
    let per_slot = KV_ROW_GRANULE * per_token;
    assert_eq!(cache.memory_bytes(), per_slot);
    run(
        &model,
        &mut cache,
        vec![SequenceInput::new(0, vec![5], 0)],
        &FeatureTap::None,
    );
    assert_eq!(cache.memory_bytes(), 2 * per_slot);
    cache.reset(2);
    assert_eq!((cache.len(2), cache.memory_bytes()), (0, per_slot));
    cache.truncate(0, 0);
    assert_eq!(cache.memory_bytes(), 0);
    assert!(cache.is_empty());
    // A reset slot behaves like a fresh one.
    let (again, _) = run(
        &model,
        &mut cache,
        vec![SequenceInput::new(2, TOKENS.to_vec(), 0).with_all_logits()],
        &FeatureTap::None,
    );
    assert_rows_close(
        &again,
        &full_logits(&model, &TOKENS),
        FLOAT_NOISE,
        "after reset",
    );
}
