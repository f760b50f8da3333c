//! Shared setup of the EAGLE tests: a tiny target model, EAGLE heads written in the reference
//! checkpoint layouts, target features, and checkpoint edits for the error cases.
#![allow(dead_code)] // Each test binary uses a different part.

use std::path::{Path, PathBuf};

use aquila_model_loader::checkpoint::{Checkpoint, Dtype, SINGLE_FILE_NAME};
use aquila_model_loader::fixtures::eagle::{
    write_tiny_eagle1, write_tiny_eagle3, TinyEagle1Options, TinyEagle3Options,
};
use aquila_model_loader::fixtures::llama::{write_tiny_llama, TinyLlamaOptions};
use aquila_model_loader::fixtures::tensors::{write_json, write_safetensors, NamedTensor};
use aquila_model_loader::model::{FeatureTap, ForwardBatch, LlamaModel, SequenceInput};
use aquila_spec_decode::eagle::{EagleError, EagleHead};
use burn::tensor::Tensor;
use tempfile::TempDir;

/// The CPU backend the tests run on (f32, deterministic).
pub type B = burn::backend::Flex;

/// A tiny target model and a scratch directory for heads.
pub struct Fixture {
    /// Holds the target and every head written.
    pub root: TempDir,
    /// The target model.
    pub target: LlamaModel<B>,
}

impl Fixture {
    /// A tiny `num_layers`-layer target (hidden 64, vocabulary 320, context 512).
    pub fn new(num_layers: usize) -> Self {
        let root = tempfile::tempdir().expect("temporary directory");
        let target_dir = root.path().join("target");
        let options = TinyLlamaOptions {
            num_layers,
            ..TinyLlamaOptions::default()
        };
        write_tiny_llama(&target_dir, &options).expect("tiny target");
        let target = LlamaModel::load(&target_dir, &device()).expect("tiny target loads");
        Self { root, target }
    }

    /// Writes an EAGLE-1 head into a new directory `name`.
    pub fn eagle1(&self, name: &str, options: &TinyEagle1Options) -> PathBuf {
        let dir = self.root.path().join(name);
        write_tiny_eagle1(&dir, self.target.config(), options).expect("EAGLE-1 head");
        dir
    }

    /// Writes an EAGLE-3 head into a new directory `name`.
    pub fn eagle3(&self, name: &str, options: &TinyEagle3Options) -> PathBuf {
        let dir = self.root.path().join(name);
        write_tiny_eagle3(&dir, self.target.config(), options).expect("EAGLE-3 head");
        dir
    }

    /// Loads the head in `dir` for the target.
    pub fn load(&self, dir: &Path) -> Result<EagleHead<B>, EagleError> {
        EagleHead::load(dir, self.target.config(), &device())
    }

    /// Target features `[tokens, width]` of a fresh sequence `tokens` at positions `0..`.
    pub fn features(&self, tokens: &[u32], tap: &FeatureTap) -> Tensor<B, 2> {
        let mut cache = self.target.new_kv_cache(1);
        let batch = ForwardBatch::new(vec![SequenceInput::new(0, tokens.to_vec(), 0)]);
        self.target
            .forward(&batch, &mut cache, tap)
            .expect("target forward")
            .features
            .expect("features were tapped")
    }
}

/// The CPU device.
pub fn device() -> burn::tensor::Device<B> {
    Default::default()
}

/// EAGLE-3 options for a target of `num_layers` layers: auxiliary layers 0, 1 and the last,
/// and a draft vocabulary of `draft_vocab_size`.
pub fn eagle3_options(num_layers: usize, draft_vocab_size: usize) -> TinyEagle3Options {
    TinyEagle3Options {
        draft_vocab_size,
        aux_layer_ids: vec![0, 1, num_layers - 1],
        seed: 5,
        ..TinyEagle3Options::default()
    }
}

/// Rewrites `dir/config.json` through `edit`.
pub fn edit_config(dir: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let path = dir.join("config.json");
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("config"))
            .expect("config JSON");
    edit(&mut config);
    write_json(&path, &config).expect("config written");
}

/// Rewrites `dir/model.safetensors` through `edit` on its tensors.
pub fn edit_checkpoint(dir: &Path, edit: impl FnOnce(&mut Vec<NamedTensor>)) {
    let path = dir.join(SINGLE_FILE_NAME);
    let mut tensors = {
        let checkpoint = Checkpoint::open_file(&path).expect("checkpoint");
        let names: Vec<String> = checkpoint.names().map(str::to_string).collect();
        names
            .iter()
            .map(|name| {
                let info = checkpoint.info(name).expect("listed tensor");
                match info.dtype {
                    Dtype::I64 => NamedTensor::i64(
                        name,
                        &info.shape,
                        &checkpoint.read_i64(name).expect("i64"),
                    ),
                    Dtype::BOOL => NamedTensor::bool(
                        name,
                        &info.shape,
                        &checkpoint.read_bool(name).expect("bool"),
                    ),
                    _ => NamedTensor::f32(
                        name,
                        &info.shape,
                        &checkpoint.read_f32(name).expect("f32"),
                    ),
                }
            })
            .collect::<Vec<_>>()
    };
    edit(&mut tensors);
    write_safetensors(&path, &tensors).expect("checkpoint written");
}

/// Removes tensor `name` from a tensor list (it must be there).
pub fn remove(tensors: &mut Vec<NamedTensor>, name: &str) -> NamedTensor {
    let index = tensors
        .iter()
        .position(|t| t.name == name)
        .unwrap_or_else(|| panic!("no tensor {name}"));
    tensors.remove(index)
}

/// The values of a float tensor.
pub fn values<const D: usize>(tensor: Tensor<B, D>) -> Vec<f32> {
    tensor.into_data().iter::<f32>().collect()
}

/// Largest absolute difference of two equally long slices.
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "compared slices differ in length");
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}
