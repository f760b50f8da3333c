//! The generic burn path (what CUDA runs; `Device::CpuGeneric` on the CPU) is lossless too:
//! SmolLM2-135M-Instruct with an EAGLE-1 head of random weights, greedy speculative output
//! equal to greedy plain output, both through burn's generic operations, batched and one
//! request at a time; and the tiny model drafting for itself from the target's copied keys and
//! values has every draft accepted there (the generic attention's contiguous caches beside
//! the copies' padded ones).
//!
//! Needs `models/smollm2-135m-instruct` (`cargo xtask import-model`); fails without it unless
//! `AQUILA_SKIP_REAL_MODEL=1`.

use aquila_engine::{
    Device, DraftLength, DraftModelDrafter, Llm, SpeculativeConfig, SpeculativeMethod, WeightFormat,
};

use crate::common::spec::assert_smollm2_lossless;
use crate::common::{config, greedy, real_model_dir, tiny_model, PROMPTS};

#[test]
fn generic_path_speculative_output_equals_plain_output() {
    let Some(model) = real_model_dir() else {
        return;
    };
    assert_smollm2_lossless(&model, Device::CpuGeneric, WeightFormat::F32, &[3], 12);
}

#[test]
fn the_target_drafting_from_its_copied_keys_and_values_is_exact_on_the_generic_path() {
    let model = tiny_model();
    let generic = |speculative: Option<SpeculativeConfig>| {
        let mut engine_config = config(model.path());
        engine_config.device = Device::CpuGeneric;
        engine_config.speculative = speculative;
        let mut llm = Llm::new(engine_config).unwrap();
        llm.generate(PROMPTS, &greedy(20)).unwrap()
    };
    let expected = generic(None);
    let drafter = DraftModelDrafter {
        weights: Some(WeightFormat::F32),
        ..DraftModelDrafter::new(model.path())
    };
    let outputs = generic(Some(SpeculativeConfig {
        draft_length: DraftLength::Fixed,
        ..SpeculativeConfig::new(SpeculativeMethod::DraftModel(drafter), 3)
    }));
    for (output, expected) in outputs.iter().zip(&expected) {
        assert_eq!(output.token_ids, expected.token_ids);
        let metrics = &output.metrics;
        assert!(metrics.num_draft_tokens > 0);
        assert_eq!(metrics.num_accepted_tokens, metrics.num_draft_tokens);
    }
}
