//! Validation sets from prompts files (`train-eagle --validate-on FILE`): the target's greedy
//! answers to prompts a head never trains on (the unseen chat sets), recorded once like the
//! training data and scored at every validation beside the held-out split, so that a run's
//! curve shows acceptance on unseen prompts, not only on near twins of its training prompts.
//!
//! The answers are the engine's greedy outputs with the target's `f32` weights, exactly the
//! baseline the eagle example verifies drafts against for the same prompts and `max_tokens`.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use aquila_engine::{EngineConfig, Llm, Prompt, SamplingParams};
use aquila_model_loader::model::{FeatureTap, LlamaModel};
use aquila_spec_decode::train::{
    read_shards, record_shard, shard_path, tap_name, DistillData, FeatureShard,
};
use burn::backend::Flex;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::distill::{distill_sequence, GenerationSizes};
use crate::prompts::parse_prompts_jsonl;

/// How a validation set was recorded; a set recorded otherwise (another file content, answer
/// length or tap) is recorded again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct ValidationManifest {
    /// SHA-256 of the prompts file's bytes.
    prompts_sha256: String,
    /// Most answer tokens per prompt.
    max_tokens: usize,
    /// The tapped features.
    tap: String,
    /// The target's most likely next tokens kept per position.
    top_k: usize,
}

/// The manifest file of a validation set's directory.
const MANIFEST: &str = "validation.json";

/// What [`validation_set`] records.
#[derive(Debug, Clone, Copy)]
pub struct ValidationSettings<'a> {
    /// The features the head learns from.
    pub tap: &'a FeatureTap,
    /// Most answer tokens per prompt (the eagle example's `--max-tokens`).
    pub max_tokens: usize,
    /// The target's most likely next tokens kept per position.
    pub top_k: usize,
}

/// The name a prompts file's set is reported under: its file name without `.jsonl`.
pub fn set_name(prompts_file: &Path) -> String {
    prompts_file
        .file_stem()
        .map(|stem| stem.to_string_lossy().into_owned())
        .unwrap_or_else(|| prompts_file.display().to_string())
}

/// The recorded answers of the target in `model_dir` to the prompts of `prompts_file`, kept
/// in `data_dir` (recorded there now when missing or made from another file content or with
/// other settings).
pub fn validation_set(
    model_dir: &Path,
    prompts_file: &Path,
    data_dir: &Path,
    settings: ValidationSettings<'_>,
    sizes: GenerationSizes,
) -> Result<DistillData> {
    if settings.max_tokens == 0 {
        bail!("validation answers need at least one token (--validate-max-tokens)");
    }
    let text = std::fs::read_to_string(prompts_file)
        .with_context(|| format!("reading the validation prompts {}", prompts_file.display()))?;
    let prompts = parse_prompts_jsonl(&text, &prompts_file.display().to_string())?;
    let manifest = ValidationManifest {
        prompts_sha256: format!("{:x}", Sha256::digest(text.as_bytes())),
        max_tokens: settings.max_tokens,
        tap: tap_name(settings.tap),
        top_k: settings.top_k,
    };
    let shard_file = shard_path(data_dir, 0);
    if stored_manifest(data_dir)? != Some(manifest.clone()) || !shard_file.exists() {
        let name = set_name(prompts_file);
        let shard = record(model_dir, &name, prompts, &manifest, settings.tap, sizes)?;
        std::fs::create_dir_all(data_dir)
            .with_context(|| format!("creating {}", data_dir.display()))?;
        shard.write(&shard_file)?;
        std::fs::write(
            data_dir.join(MANIFEST),
            serde_json::to_string_pretty(&manifest)?,
        )
        .with_context(|| format!("writing {}", data_dir.join(MANIFEST).display()))?;
    }
    let shards = read_shards(data_dir)?;
    DistillData::new(shards)
        .with_context(|| format!("the validation set in {}", data_dir.display()))
}

/// The manifest in `data_dir`, if one is there and readable.
fn stored_manifest(data_dir: &Path) -> Result<Option<ValidationManifest>> {
    let path = data_dir.join(MANIFEST);
    if !path.exists() {
        return Ok(None);
    }
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    Ok(serde_json::from_str(&text).ok())
}

/// Answers `prompts` (the set `name`) greedily and records the answers' features.
fn record(
    model_dir: &Path,
    name: &str,
    prompts: Vec<Prompt>,
    manifest: &ValidationManifest,
    tap: &FeatureTap,
    sizes: GenerationSizes,
) -> Result<FeatureShard> {
    let bar = crate::progress::bar(
        prompts.len() as u64,
        "validation set [{bar:30}] {pos}/{len} prompts {elapsed_precise} {msg}",
    );
    bar.set_message(format!("{name}: answering"));
    let mut llm = Llm::new(EngineConfig {
        max_num_seqs: sizes.max_num_seqs,
        ..EngineConfig::new(model_dir)
    })?;
    let count = prompts.len();
    let outputs = llm.generate(prompts, &SamplingParams::greedy(manifest.max_tokens))?;
    drop(llm);
    bar.set_message(format!("{name}: recording features"));
    let sequences: Vec<_> = outputs.iter().map(distill_sequence).collect();
    let target = LlamaModel::<Flex>::load(model_dir, &Default::default())
        .with_context(|| format!("loading {}", model_dir.display()))?;
    let shard = record_shard(
        &target,
        tap,
        &sequences,
        sizes.record_batch_tokens,
        manifest.top_k,
    )?;
    bar.set_position(count as u64);
    bar.finish_with_message("recorded");
    Ok(shard)
}

/// Where the set of `prompts_file` is kept under a method's work directory.
pub fn validation_dir(method_dir: &Path, prompts_file: &Path) -> PathBuf {
    method_dir.join(format!("validate-{}", set_name(prompts_file)))
}
