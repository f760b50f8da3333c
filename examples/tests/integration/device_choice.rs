//! `--device`: a task runs on the backend chosen (the CPU kernels and the generic path agree
//! on a tiny model), and asking the eagle example for a device this build or machine lacks
//! fails before any work with a message naming the fix.

use aquila_engine::{DType, Device, WeightFormat};
use aquila_examples::device::{gpu_count, BackendTask, DeviceChoice};
use aquila_model_loader::backend::KernelBackend;
use aquila_model_loader::fixtures::llama::{write_tiny_llama, TinyLlamaOptions};
use aquila_model_loader::model::{FeatureTap, ForwardBatch, LlamaModel, SequenceInput};
use burn::module::Module;
use std::path::Path;
use std::process::Command;

/// The logits of every row of one prompt.
struct Logits<'a>(&'a Path);

impl BackendTask for Logits<'_> {
    type Output = Vec<f32>;

    fn run<B: KernelBackend>(self, device: &B::Device) -> Vec<f32> {
        let model = LlamaModel::<B>::load(self.0, device).unwrap().no_grad();
        let mut cache = model.new_kv_cache(1);
        let batch = ForwardBatch::new(vec![
            SequenceInput::new(0, vec![1, 40, 41, 42, 43], 0).with_all_logits()
        ]);
        let out = model
            .forward(&batch, &mut cache, &FeatureTap::None)
            .unwrap();
        out.logits.into_data().to_vec().unwrap()
    }
}

#[test]
fn tasks_run_on_the_chosen_cpu_path() {
    let dir = tempfile::tempdir().unwrap();
    write_tiny_llama(dir.path(), &TinyLlamaOptions::default()).unwrap();
    let on = |device| {
        let choice = DeviceChoice {
            device,
            dtype: DType::F32,
            weights: WeightFormat::F32,
        };
        choice.run(Logits(dir.path())).unwrap()
    };
    let (kernels, generic) = (on(Device::Cpu), on(Device::CpuGeneric));
    assert_eq!(
        kernels.len(),
        5 * TinyLlamaOptions::default().config().vocab_size
    );
    for (a, b) in kernels.iter().zip(&generic) {
        assert!((a - b).abs() < 1e-4, "{a} vs {b}");
    }
}

#[test]
fn the_eagle_example_refuses_a_missing_gpu_and_names_the_fix() {
    if cfg!(feature = "cuda") && gpu_count() > 0 {
        return;
    }
    let out = Command::new(env!("CARGO_BIN_EXE_eagle"))
        .args(["--device", "cuda", "--model", "/nonexistent"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let fix = if cfg!(feature = "cuda") {
        "--device cpu"
    } else {
        "AQUILA_CUDA=1 cargo xtask"
    };
    assert!(stderr.contains(fix), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}
