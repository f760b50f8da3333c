//! Helpers of the speculative-decoding tests: random EAGLE heads for a target directory,
//! engine configurations with speculation, and batched or one-at-a-time runs.

use std::path::Path;

use aquila_engine::{
    Device, DraftLength, EngineConfig, Llm, Prompt, RequestOutput, SamplingParams,
    SpeculativeConfig, WeightFormat,
};
use aquila_model_loader::config::LlamaConfig;
use aquila_model_loader::fixtures::eagle::{
    write_tiny_eagle1, write_tiny_eagle3, TinyEagle1Options, TinyEagle3Options,
};
use aquila_model_loader::fixtures::llama::{write_tiny_llama, TinyLlamaOptions};
use aquila_spec_decode::proposer::ReplayProposer;
use tempfile::TempDir;

/// The target config in `model_dir`.
pub fn target_config(model_dir: &Path) -> LlamaConfig {
    LlamaConfig::from_file(&model_dir.join("config.json")).expect("target config")
}

/// An EAGLE-1 head of random weights shaped for the target in `model_dir`.
pub fn eagle1_head(model_dir: &Path) -> TempDir {
    let dir = tempfile::tempdir().expect("temporary directory");
    write_tiny_eagle1(
        dir.path(),
        &target_config(model_dir),
        &TinyEagle1Options::default(),
    )
    .expect("EAGLE-1 head");
    dir
}

/// An EAGLE-3 head of random weights for the two-layer tiny target, tapping layers 0 and 1.
pub fn eagle3_head(model_dir: &Path) -> TempDir {
    eagle3_head_of(model_dir, 1)
}

/// [`eagle3_head`] with `num_layers` decoder layers (the midlayer and standard layers after
/// it).
pub fn eagle3_head_of(model_dir: &Path, num_layers: usize) -> TempDir {
    let dir = tempfile::tempdir().expect("temporary directory");
    let options = TinyEagle3Options {
        aux_layer_ids: vec![0, 1],
        num_layers,
        ..TinyEagle3Options::default()
    };
    write_tiny_eagle3(dir.path(), &target_config(model_dir), &options).expect("EAGLE-3 head");
    dir
}

/// A tiny model of the tiny target's shape and vocabulary with other random weights (seed 1):
/// a draft model that disagrees with the target now and then.
pub fn draft_model() -> TempDir {
    let dir = tempfile::tempdir().expect("temporary directory");
    let options = TinyLlamaOptions {
        seed: 1,
        ..TinyLlamaOptions::default()
    };
    write_tiny_llama(dir.path(), &options).expect("tiny draft model");
    dir
}

/// Runs [`crate::common::PROMPTS`] with [`crate::common::mixed`] sampling, `max_tokens` each,
/// on the plain engine and with `speculative`: every output is full length, and the greedy ones
/// equal the plain engine's.
pub fn assert_greedy_exact_beside_sampled(
    model: &Path,
    speculative: SpeculativeConfig,
    max_tokens: usize,
) {
    let mut plain = Llm::new(crate::common::config(model)).unwrap();
    let prompts = prompt_ids(&plain, &crate::common::PROMPTS);
    let params: Vec<SamplingParams> = crate::common::mixed(max_tokens);
    let baseline = run(&mut plain, &prompts, &params);
    let mut engine_config = crate::common::config(model);
    engine_config.speculative = Some(speculative);
    let mut llm = Llm::new(engine_config).unwrap();
    let outputs = run(&mut llm, &prompts, &params);
    for ((out, base), params) in outputs.iter().zip(&baseline).zip(&params) {
        assert_eq!(out.token_ids.len(), max_tokens);
        if params.temperature == 0.0 {
            assert_eq!(out.token_ids, base.token_ids);
        }
    }
}

/// `config` with speculative decoding set.
pub fn with_speculative(mut config: EngineConfig, speculative: SpeculativeConfig) -> EngineConfig {
    config.speculative = Some(speculative);
    config
}

/// [`crate::common::PROMPTS`] as token ids and their plain greedy continuations of `max_tokens`
/// tokens on `model` (the scripts a replaying drafter follows).
pub fn greedy_baseline(model: &Path, max_tokens: usize) -> (Vec<Prompt>, Vec<RequestOutput>) {
    let mut plain = Llm::new(crate::common::config(model)).expect("plain engine");
    let prompts = prompt_ids(&plain, &crate::common::PROMPTS);
    let params = vec![crate::common::greedy(max_tokens); prompts.len()];
    let outputs = run(&mut plain, &prompts, &params);
    (prompts, outputs)
}

/// An engine on `model` drafting with `replay`, which proposes at most `k` tokens and is built
/// from the whole sequences (prompt and output) of `outputs`, at `draft_length`.
pub fn replaying_engine(
    model: &Path,
    outputs: &[RequestOutput],
    k: usize,
    draft_length: DraftLength,
    replay: impl FnOnce(ReplayProposer) -> ReplayProposer,
) -> Llm {
    let scripts = outputs
        .iter()
        .map(|o| [o.prompt_token_ids.clone(), o.token_ids.clone()].concat())
        .collect();
    let speculative = SpeculativeConfig {
        draft_length,
        ..SpeculativeConfig::custom(k)
    };
    let config = with_speculative(crate::common::config(model), speculative);
    let proposer = replay(ReplayProposer::new(k, scripts));
    Llm::with_proposer(config, Box::new(proposer)).expect("replaying engine")
}

/// Runs `prompts` (batched) through `llm` with one parameter set each.
pub fn run(llm: &mut Llm, prompts: &[Prompt], params: &[SamplingParams]) -> Vec<RequestOutput> {
    llm.generate_with_params(prompts.to_vec(), params)
        .expect("generation")
}

/// Runs each prompt alone (one request at a time).
pub fn run_single(llm: &mut Llm, prompts: &[Prompt], params: &SamplingParams) -> Vec<Vec<u32>> {
    prompts
        .iter()
        .map(|prompt| {
            llm.generate(vec![prompt.clone()], params)
                .expect("generation")[0]
                .token_ids
                .clone()
        })
        .collect()
}

/// The prompts as token ids (so every engine sees identical inputs).
pub fn prompt_ids(llm: &Llm, texts: &[&str]) -> Vec<Prompt> {
    texts
        .iter()
        .map(|text| Prompt::TokenIds(llm.tokenizer().encode(text, true).expect("tokenizable")))
        .collect()
}

/// Two short prompts for the lossless checks on the real model.
const SMOLLM2_PROMPTS: [&str; 2] = [
    "The capital of France is",
    "Write a short poem about the sea:",
];

/// Checks on the real SmolLM2 model in `model`, run on `device`, that greedy output with an
/// EAGLE-1 head of random weights drafting `k` tokens, for every `k` of `ks`, equals greedy
/// plain output, batched and one request at a time, and that drafts were verified.
pub fn assert_smollm2_lossless(
    model: &Path,
    device: Device,
    weights: WeightFormat,
    ks: &[usize],
    max_tokens: usize,
) {
    let head = eagle1_head(model);
    assert_smollm2_lossless_with(model, device, weights, ks, max_tokens, |k| {
        SpeculativeConfig::eagle(head.path(), k)
    });
}

/// [`assert_smollm2_lossless`] with the speculative settings `speculative(k)`; returns, per
/// `k`, the draft tokens verified and accepted in the batched run.
pub fn assert_smollm2_lossless_with(
    model: &Path,
    device: Device,
    weights: WeightFormat,
    ks: &[usize],
    max_tokens: usize,
    speculative: impl Fn(usize) -> SpeculativeConfig,
) -> Vec<(usize, usize)> {
    let config = || {
        let mut config = EngineConfig::new(model);
        config.device = device;
        config.weights = weights;
        config.max_num_seqs = 2;
        config.max_num_batched_tokens = 256;
        config.max_model_len = Some(256);
        config
    };
    let greedy = super::greedy(max_tokens);
    let mut plain = Llm::new(config()).expect("SmolLM2 engine");
    let prompts = prompt_ids(&plain, &SMOLLM2_PROMPTS);
    let params = vec![greedy.clone(); prompts.len()];
    let baseline: Vec<Vec<u32>> = run(&mut plain, &prompts, &params)
        .into_iter()
        .map(|o| o.token_ids)
        .collect();
    drop(plain);
    let mut counts = Vec::new();
    for &k in ks {
        let mut engine_config = config();
        engine_config.speculative = Some(speculative(k));
        let mut llm = Llm::new(engine_config).expect("speculative SmolLM2 engine");
        let outputs = run(&mut llm, &prompts, &params);
        let drafted: usize = outputs.iter().map(|o| o.metrics.num_draft_tokens).sum();
        let accepted: usize = outputs.iter().map(|o| o.metrics.num_accepted_tokens).sum();
        counts.push((drafted, accepted));
        assert!(
            drafted > 0,
            "{device:?}, {weights}, k = {k}: no draft token was verified"
        );
        let batched: Vec<Vec<u32>> = outputs.into_iter().map(|o| o.token_ids).collect();
        assert_eq!(batched, baseline, "{device:?}, {weights}, batched, k = {k}");
        assert_eq!(
            run_single(&mut llm, &prompts, &greedy),
            baseline,
            "{device:?}, {weights}, one at a time, k = {k}"
        );
    }
    counts
}
