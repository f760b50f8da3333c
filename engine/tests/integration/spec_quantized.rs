//! Lossless speculative decoding with packed weights: SmolLM2-135M-Instruct with Q8_0, bfloat16
//! and Q4_1 projection weights on the CPU kernels, and an EAGLE-1 head of random weights;
//! greedy speculative output equals greedy plain output with the same weights, batched and one
//! request at a time. The `f32` model drafting for itself in Q4_1 (the weights its GGUF held)
//! gives the same outputs with nearly every draft accepted.
//!
//! Needs `models/smollm2-135m-instruct` (`cargo xtask import-model`); fails without it unless
//! `AQUILA_SKIP_REAL_MODEL=1`.

use aquila_engine::{Device, DraftLength, SpeculativeConfig, WeightFormat};

use crate::common::real_model_dir;
use crate::common::spec::{assert_smollm2_lossless, assert_smollm2_lossless_with};

#[test]
fn q8_0_speculative_output_equals_plain_output() {
    let Some(model) = real_model_dir() else {
        return;
    };
    assert_smollm2_lossless(&model, Device::Cpu, WeightFormat::Q8_0, &[1, 3], 16);
}

#[test]
fn bf16_speculative_output_equals_plain_output() {
    let Some(model) = real_model_dir() else {
        return;
    };
    assert_smollm2_lossless(&model, Device::Cpu, WeightFormat::Bf16, &[3], 12);
}

#[test]
fn q4_1_speculative_output_equals_plain_output() {
    let Some(model) = real_model_dir() else {
        return;
    };
    assert_smollm2_lossless(&model, Device::Cpu, WeightFormat::Q4_1, &[3], 12);
}

#[test]
fn the_f32_model_drafting_for_itself_in_q4_1_is_nearly_always_accepted() {
    let Some(model) = real_model_dir() else {
        return;
    };
    // The draft model's default format on the CPU is Q4_1.
    let counts =
        assert_smollm2_lossless_with(&model, Device::Cpu, WeightFormat::F32, &[4], 24, |k| {
            SpeculativeConfig {
                draft_length: DraftLength::Fixed,
                ..SpeculativeConfig::draft_model(&model, k)
            }
        });
    let (drafted, accepted) = counts[0];
    assert!(
        accepted as f64 >= 0.9 * drafted as f64,
        "{accepted} of {drafted} drafts accepted"
    );
}
