//! Cost of EAGLE drafting next to the target's own steps, on the CPU backend (f32).
//!
//! Loads the target from `AQUILA_BENCH_MODEL` (default: the workspace's
//! `models/smollm2-135m-instruct`, falling back to a generated tiny model), writes a randomly
//! initialized EAGLE-1 and EAGLE-3 head shaped for it, then runs steady-state speculative
//! steps with k = 3 where every draft counts as accepted (so each step commits k + 1 rows):
//! a target verify forward over the root and the drafts, then one proposer call (take in the
//! k + 1 committed rows, draft k tokens). A plain one-token decode step is timed too.
//!
//! Prints milliseconds per call (median), the draft/verify ratio, and the break-even mean
//! acceptance length `(verify + draft) / decode`: the tokens per step speculation must emit to
//! beat plain decoding.
//!
//! Run: `cargo bench -p aquila-spec-decode --bench eagle_draft`.

use std::path::{Path, PathBuf};
use std::time::Instant;

use aquila_model_loader::fixtures::eagle::{
    write_tiny_eagle1, write_tiny_eagle3, TinyEagle1Options, TinyEagle3Options,
};
use aquila_model_loader::fixtures::llama::{write_tiny_llama, TinyLlamaOptions};
use aquila_model_loader::model::{FeatureTap, ForwardBatch, KvCache, LlamaModel, SequenceInput};
use aquila_spec_decode::eagle::EagleHead;
use aquila_spec_decode::proposer::{
    EagleProposer, EagleProposerConfig, ProposeBatch, ProposeRequest, Proposer,
};
use burn::backend::Flex;
use burn::tensor::Tensor;

type B = Flex;

const K: usize = 3;
const PROMPT_LEN: usize = 64;
const WARMUP_STEPS: usize = 2;
const TIMED_STEPS: usize = 12;

/// One batch of requests decoding together.
struct Requests {
    tokens: Vec<Vec<u32>>,
    /// First position each request commits in the next proposer call.
    first_new: Vec<usize>,
    /// Feature rows of each request in the last target forward.
    rows: Vec<Vec<usize>>,
}

impl Requests {
    fn propose_batch<'a>(
        &'a self,
        requests: &'a mut Vec<ProposeRequest<'a>>,
    ) -> &'a [ProposeRequest<'a>] {
        requests.clear();
        for (i, tokens) in self.tokens.iter().enumerate() {
            requests.push(ProposeRequest {
                request_id: i as u64,
                tokens,
                first_new_position: self.first_new[i],
                feature_rows: &self.rows[i],
                max_draft_tokens: K,
                stop: None,
                temperature: 0.0,
                seed: 0,
                drafting_suspended: false,
            });
        }
        requests
    }
}

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

fn argmax_rows(logits: Tensor<B, 2>) -> Vec<u32> {
    logits
        .argmax(1)
        .into_data()
        .iter::<i64>()
        .map(|t| t as u32)
        .collect()
}

/// Milliseconds per plain decode step (one row per request) after the prompts.
fn decode_step_ms(target: &LlamaModel<B>, batch: usize) -> f64 {
    let vocab = target.config().vocab_size;
    let mut cache = target.new_kv_cache(batch);
    let prompts: Vec<Vec<u32>> = (0..batch).map(|i| prompt(vocab, i)).collect();
    let prefill = ForwardBatch::new(
        (0..batch)
            .map(|i| SequenceInput::new(i, prompts[i].clone(), 0))
            .collect(),
    );
    let mut next = argmax_rows(
        target
            .forward(&prefill, &mut cache, &FeatureTap::None)
            .unwrap()
            .logits,
    );
    let mut samples = Vec::new();
    for step in 0..WARMUP_STEPS + TIMED_STEPS {
        let rows = (0..batch)
            .map(|i| SequenceInput::new(i, vec![next[i]], PROMPT_LEN + step))
            .collect();
        let start = Instant::now();
        next = argmax_rows(
            target
                .forward(&ForwardBatch::new(rows), &mut cache, &FeatureTap::None)
                .unwrap()
                .logits,
        );
        if step >= WARMUP_STEPS {
            samples.push(start.elapsed().as_secs_f64() * 1e3);
        }
    }
    median(samples)
}

fn prompt(vocab: usize, salt: usize) -> Vec<u32> {
    (0..PROMPT_LEN)
        .map(|i| ((i * 7919 + salt * 104_729 + 13) % vocab) as u32)
        .collect()
}

/// Median milliseconds of (target verify forward, proposer call) per speculative step.
fn speculative_step_ms(target: &LlamaModel<B>, head: EagleHead<B>, batch: usize) -> (f64, f64) {
    let tap = head.feature_tap();
    let vocab = target.config().vocab_size;
    let mut proposer =
        EagleProposer::new(head, target, EagleProposerConfig::greedy(K), batch).unwrap();
    let mut cache: KvCache<B> = target.new_kv_cache(batch);
    let mut state = Requests {
        tokens: (0..batch).map(|i| prompt(vocab, i)).collect(),
        first_new: vec![0; batch],
        rows: Vec::new(),
    };
    let prefill = ForwardBatch::new(
        (0..batch)
            .map(|i| SequenceInput::new(i, state.tokens[i].clone(), 0))
            .collect(),
    );
    let out = target.forward(&prefill, &mut cache, &tap).unwrap();
    for (i, root) in argmax_rows(out.logits).into_iter().enumerate() {
        state.tokens[i].push(root);
        state
            .rows
            .push((i * PROMPT_LEN..(i + 1) * PROMPT_LEN).collect());
    }
    let mut features = out.features.unwrap();
    let (mut verify, mut draft) = (Vec::new(), Vec::new());
    for step in 0..WARMUP_STEPS + TIMED_STEPS {
        let start = Instant::now();
        let mut requests = Vec::new();
        let drafts = proposer
            .draft(&ProposeBatch {
                features: Some(&features),
                requests: state.propose_batch(&mut requests),
                target_kv: None,
            })
            .unwrap();
        let draft_ms = start.elapsed().as_secs_f64() * 1e3;
        let chains: Vec<Vec<u32>> = drafts
            .iter()
            .map(|d| d.as_chain().unwrap().tokens.clone())
            .collect();

        let start = Instant::now();
        let rows = (0..batch)
            .map(|i| {
                let root_position = state.tokens[i].len() - 1;
                let mut tokens = vec![state.tokens[i][root_position]];
                tokens.extend(&chains[i]);
                SequenceInput::new(i, tokens, root_position).with_logits_rows(vec![chains[i].len()])
            })
            .collect();
        let out = target
            .forward(&ForwardBatch::new(rows), &mut cache, &tap)
            .unwrap();
        let bonus = argmax_rows(out.logits);
        let verify_ms = start.elapsed().as_secs_f64() * 1e3;
        // Every draft counts as accepted: the root and the drafts are committed, the argmax
        // after the last draft is the next root.
        let mut row = 0;
        for i in 0..batch {
            let committed = chains[i].len() + 1;
            state.first_new[i] = state.tokens[i].len() - 1;
            state.rows[i] = (row..row + committed).collect();
            row += committed;
            state.tokens[i].extend(&chains[i]);
            state.tokens[i].push(bonus[i]);
        }
        features = out.features.unwrap();
        if step >= WARMUP_STEPS {
            verify.push(verify_ms);
            draft.push(draft_ms);
        }
    }
    (median(verify), median(draft))
}

fn model_dir(scratch: &Path) -> (PathBuf, &'static str) {
    let configured = std::env::var_os("AQUILA_BENCH_MODEL").map(PathBuf::from);
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/smollm2-135m-instruct");
    match configured.or_else(|| workspace.join("config.json").is_file().then_some(workspace)) {
        Some(dir) => (dir, "model"),
        None => {
            let dir = scratch.join("tiny");
            write_tiny_llama(&dir, &TinyLlamaOptions::default()).expect("tiny target");
            (
                dir,
                "generated tiny model (set AQUILA_BENCH_MODEL for a real one)",
            )
        }
    }
}

fn main() {
    let scratch = tempfile::tempdir().expect("temporary directory");
    let device = Default::default();
    let (dir, what) = model_dir(scratch.path());
    let target = LlamaModel::<B>::load(&dir, &device).expect("target loads");
    let config = target.config().clone();
    println!(
        "target: {what} {} ({} layers, hidden {}, vocab {}), f32 CPU, {} threads, k = {K}, prompt {PROMPT_LEN}",
        dir.display(),
        config.num_hidden_layers,
        config.hidden_size,
        config.vocab_size,
        rayon::current_num_threads()
    );
    let layers = config.num_hidden_layers;
    let eagle1_dir = scratch.path().join("eagle1");
    write_tiny_eagle1(&eagle1_dir, &config, &TinyEagle1Options::default()).expect("EAGLE-1 head");
    let eagle3_dir = scratch.path().join("eagle3");
    let aux: Vec<usize> = if layers >= 4 {
        config.default_eagle3_aux_layers()
    } else {
        (0..layers).collect()
    };
    let eagle3 = TinyEagle3Options {
        draft_vocab_size: config.vocab_size / 3,
        aux_layer_ids: aux,
        seed: 3,
        ..TinyEagle3Options::default()
    };
    write_tiny_eagle3(&eagle3_dir, &config, &eagle3).expect("EAGLE-3 head");

    println!(
        "{:<8} {:>5} {:>10} {:>10} {:>10} {:>12} {:>11}",
        "head", "batch", "decode ms", "verify ms", "draft ms", "draft/verify", "break-even"
    );
    for batch in [1, 8] {
        let decode = decode_step_ms(&target, batch);
        for (name, head_dir) in [("EAGLE-1", &eagle1_dir), ("EAGLE-3", &eagle3_dir)] {
            let head = EagleHead::load(head_dir, &config, &device).expect("head loads");
            let (verify, draft) = speculative_step_ms(&target, head, batch);
            println!(
                "{name:<8} {batch:>5} {decode:>10.2} {verify:>10.2} {draft:>10.2} {:>12.3} {:>11.2}",
                draft / verify,
                (verify + draft) / decode
            );
        }
    }
}
