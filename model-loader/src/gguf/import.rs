//! Importing a Llama-family GGUF file into a float32 Hugging Face model directory.

use super::hparams::LlamaHyperParams;
use super::layout::{plan_tensors, TensorPlan};
use super::progress::ImportProgress;
use super::reader::{row_major_shape, GgufFile};
use super::safetensors_out::SafetensorsWriter;
use super::vocab::rebuild_tokenizer;
use super::{dequant, permute, GgufError};
use crate::tokenizer::spec::write_json;
use rayon::prelude::*;
use std::path::Path;
use std::time::{Duration, Instant};

/// Most f32 output bytes dequantized before they are written (bounds the import's memory).
const BATCH_BYTES: u64 = 256 << 20;

/// Name of the weights file written.
pub const MODEL_SAFETENSORS: &str = "model.safetensors";

/// What an import produced.
#[derive(Debug, Clone)]
pub struct ImportReport {
    /// The model's hyperparameters (as written to `config.json`).
    pub hparams: LlamaHyperParams,
    /// Number of tensors written.
    pub tensors: usize,
    /// Number of parameters written.
    pub parameters: u64,
    /// Size of `model.safetensors` in bytes.
    pub safetensors_bytes: u64,
    /// Wall time of the import.
    pub elapsed: Duration,
}

/// Imports the Llama or Qwen2 GGUF file `gguf` into `out_dir`: `config.json`,
/// `generation_config.json`, `model.safetensors` (float32, Hugging Face names; no
/// `lm_head.weight` when embeddings are tied), `tokenizer.json` and `tokenizer_config.json`. Everything is validated before any
/// file is written; existing files of those names are replaced.
pub fn import(
    gguf: &Path,
    out_dir: &Path,
    progress: &dyn ImportProgress,
) -> Result<ImportReport, GgufError> {
    let started = Instant::now();
    let file = GgufFile::open(gguf)?;
    let in_file = |e: GgufError| GgufError::File {
        path: gguf.to_path_buf(),
        error: Box::new(e),
    };
    let header = file.header();
    let hparams = LlamaHyperParams::from_header(header).map_err(in_file)?;
    let plans = plan_tensors(header, &hparams).map_err(in_file)?;
    let tokenizer =
        rebuild_tokenizer(header, Some(hparams.max_position_embeddings as u64)).map_err(in_file)?;
    for plan in &plans {
        let info = header
            .tensor(&plan.gguf_name)
            .ok_or_else(|| GgufError::MissingTensor(plan.gguf_name.clone()))?;
        if !info.ggml_type.is_dequantizable() {
            return Err(in_file(GgufError::UnsupportedTensorType {
                tensor: info.name.clone(),
                type_name: info.ggml_type.name(),
            }));
        }
    }

    progress.start(plans.len());
    std::fs::create_dir_all(out_dir).map_err(|e| GgufError::io(out_dir, e))?;
    let safetensors_path = out_dir.join(MODEL_SAFETENSORS);
    let parameters = write_weights(&file, &plans, &safetensors_path, progress).map_err(in_file)?;

    progress.stage("writing config and tokenizer");
    write_json(&out_dir.join("config.json"), &hparams.to_config_json())?;
    write_json(
        &out_dir.join("generation_config.json"),
        &hparams.to_generation_config_json(),
    )?;
    tokenizer.tokenizer.write(&out_dir.join("tokenizer.json"))?;
    tokenizer
        .config
        .write(&out_dir.join("tokenizer_config.json"))?;
    let safetensors_bytes = std::fs::metadata(&safetensors_path)
        .map_err(|e| GgufError::io(&safetensors_path, e))?
        .len();
    progress.stage("done");
    Ok(ImportReport {
        hparams,
        tensors: plans.len(),
        parameters,
        safetensors_bytes,
        elapsed: started.elapsed(),
    })
}

/// Dequantizes one tensor and, for query/key projections, un-permutes its rows.
fn hf_values(file: &GgufFile, plan: &TensorPlan) -> Result<Vec<f32>, GgufError> {
    let info = file
        .header()
        .tensor(&plan.gguf_name)
        .ok_or_else(|| GgufError::MissingTensor(plan.gguf_name.clone()))?;
    let mut values = vec![0.0f32; info.element_count() as usize];
    dequant::dequantize(
        &info.name,
        info.ggml_type,
        file.tensor_bytes(info)?,
        &mut values,
    )?;
    if let Some(heads) = plan.unpermute_heads {
        values = permute::unpermute_qk_rows(&info.name, &values, info.dims[0] as usize, heads)?;
    }
    Ok(values)
}

/// Dequantizes every planned tensor into `path`, a batch of tensors at a time (in parallel
/// within a batch); returns the number of values written.
fn write_weights(
    file: &GgufFile,
    plans: &[TensorPlan],
    path: &Path,
    progress: &dyn ImportProgress,
) -> Result<u64, GgufError> {
    let shapes: Vec<(String, Vec<usize>)> = plans
        .iter()
        .map(|plan| (plan.hf_name.clone(), row_major_shape(&plan.dims)))
        .collect();
    let mut writer = SafetensorsWriter::create(path, &shapes)?;
    let mut parameters = 0u64;
    for batch in batches(plans) {
        let tensors = batch
            .par_iter()
            .map(|plan| {
                let values = hf_values(file, plan)?;
                progress.tensor_done(&plan.hf_name);
                Ok(values)
            })
            .collect::<Result<Vec<_>, GgufError>>()?;
        for (plan, values) in batch.iter().zip(tensors) {
            writer.write_tensor(&plan.hf_name, &values)?;
            parameters += values.len() as u64;
        }
    }
    writer.finish()?;
    Ok(parameters)
}

/// Splits `plans` into consecutive batches of at most [`BATCH_BYTES`] of f32 output (a
/// larger tensor forms a batch of its own).
fn batches(plans: &[TensorPlan]) -> Vec<&[TensorPlan]> {
    let mut batches = Vec::new();
    let (mut start, mut bytes) = (0, 0u64);
    for (i, plan) in plans.iter().enumerate() {
        let size = plan.dims.iter().product::<u64>() * 4;
        if i > start && bytes + size > BATCH_BYTES {
            batches.push(&plans[start..i]);
            (start, bytes) = (i, 0);
        }
        bytes += size;
    }
    if start < plans.len() {
        batches.push(&plans[start..]);
    }
    batches
}
