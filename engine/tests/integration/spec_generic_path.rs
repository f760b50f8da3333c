//! The generic burn path (what CUDA runs; `Device::CpuGeneric` on the CPU) is lossless too:
//! SmolLM2-135M-Instruct with an EAGLE-1 head of random weights, greedy speculative output
//! equal to greedy plain output, both through burn's generic operations, batched and one
//! request at a time.
//!
//! Needs `models/smollm2-135m-instruct` (`cargo xtask import-model`); fails without it unless
//! `AQUILA_SKIP_REAL_MODEL=1`.

use aquila_engine::{Device, WeightFormat};

use crate::common::real_model_dir;
use crate::common::spec::assert_smollm2_lossless;

#[test]
fn generic_path_speculative_output_equals_plain_output() {
    let Some(model) = real_model_dir() else {
        return;
    };
    assert_smollm2_lossless(&model, Device::CpuGeneric, WeightFormat::F32, &[3], 12);
}
