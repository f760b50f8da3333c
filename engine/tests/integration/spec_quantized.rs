//! Lossless speculative decoding with packed weights: SmolLM2-135M-Instruct with Q8_0 and with
//! bfloat16 projection and lm_head weights on the CPU kernels, and an EAGLE-1 head of random
//! weights; greedy speculative output equals greedy plain output with the same weights,
//! batched and one request at a time.
//!
//! Needs `models/smollm2-135m-instruct` (`cargo xtask import-model`); fails without it unless
//! `AQUILA_SKIP_REAL_MODEL=1`.

use aquila_engine::{Device, WeightFormat};

use crate::common::real_model_dir;
use crate::common::spec::assert_smollm2_lossless;

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
