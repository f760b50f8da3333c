//! Self-distillation data for training a draft head: the built-in training prompts answered by
//! the target with the engine (greedy, batched), then replayed through the target once to
//! record its features, in resumable safetensors shards.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use aquila_engine::{ChatMessage, EngineConfig, Llm, Prompt, SamplingParams, WeightFormat};
use aquila_model_loader::model::{FeatureTap, LlamaModel};
use aquila_spec_decode::train::{
    read_shards, record_shard, shard_path, tap_name, DistillSequence, FeatureShard,
};
use burn::backend::Flex;
use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};

use crate::train_prompts::{generate_training_prompts, TrainingPrompt};

/// How the data set is made; stored beside the shards so a resumed run cannot mix settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DistillSettings {
    /// Number of built-in training prompts.
    pub num_prompts: usize,
    /// Seed of the prompt generator.
    pub prompt_seed: u64,
    /// Most response tokens per prompt.
    pub max_tokens: usize,
    /// Prompts per shard.
    pub shard_size: usize,
    /// The tapped features (`last_hidden`, `aux:...`).
    pub tap: String,
    /// The target's most likely next tokens kept per position (0: the greedy one only).
    #[serde(default)]
    pub top_k: usize,
    /// The weights the responses are generated with (the features always come from the
    /// target's own `f32` weights): Q8_0 generates them faster, in the target's words with
    /// a few tokens in a hundred chosen differently.
    #[serde(default)]
    pub response_weights: WeightFormat,
}

/// Engine sizes used while generating responses.
#[derive(Debug, Clone, Copy)]
pub struct GenerationSizes {
    /// Requests decoded together.
    pub max_num_seqs: usize,
    /// Most rows of one recording forward.
    pub record_batch_tokens: usize,
}

/// The manifest file of a data directory.
const MANIFEST: &str = "distill.json";

/// Builds (or completes) the feature shards in `data_dir` for the target in `model_dir` and
/// loads them (at least one sequence). The target's responses are kept in `responses_dir` (shared by every tap, so an
/// EAGLE-3 data set reuses the responses an EAGLE-1 run generated); shards and responses
/// already on disk are kept, so an interrupted run resumes.
pub fn build_distill_data(
    model_dir: &Path,
    responses_dir: &Path,
    data_dir: &Path,
    tap: &FeatureTap,
    settings: &DistillSettings,
    sizes: GenerationSizes,
) -> Result<Vec<FeatureShard>> {
    if settings.shard_size == 0 || settings.num_prompts == 0 {
        bail!("--prompts and the shard size must be positive");
    }
    if settings.tap != tap_name(tap) {
        bail!(
            "settings name tap {} but {} is recorded",
            settings.tap,
            tap_name(tap)
        );
    }
    check_manifest(data_dir, settings)?;
    let response_settings = DistillSettings {
        tap: String::new(),
        top_k: 0,
        ..settings.clone()
    };
    check_manifest(responses_dir, &response_settings)?;
    let prompts = generate_training_prompts(settings.num_prompts, settings.prompt_seed)?;
    let chunks: Vec<_> = prompts.chunks(settings.shard_size).collect();
    let missing: Vec<usize> = (0..chunks.len())
        .filter(|&i| !shard_path(data_dir, i).exists())
        .collect();
    if !missing.is_empty() {
        let bar = ProgressBar::new(settings.num_prompts as u64).with_style(
            ProgressStyle::with_template(
                "distill [{bar:30}] {pos}/{len} prompts {elapsed_precise} (eta {eta}) {msg}",
            )?
            .progress_chars("=> "),
        );
        bar.set_position(((chunks.len() - missing.len()) * settings.shard_size) as u64);
        let mut llm: Option<Llm> = None;
        let target = LlamaModel::<Flex>::load(model_dir, &Default::default())
            .with_context(|| format!("loading {}", model_dir.display()))?;
        for index in missing {
            let chunk = chunks[index];
            let responses = responses_path(responses_dir, index);
            let sequences = match read_responses(&responses)? {
                Some(sequences) => sequences,
                None => {
                    bar.set_message(format!("shard {index}: generating"));
                    if llm.is_none() {
                        llm = Some(Llm::new(EngineConfig {
                            max_num_seqs: sizes.max_num_seqs,
                            weights: settings.response_weights,
                            ..EngineConfig::new(model_dir)
                        })?);
                    }
                    let llm = llm.as_mut().expect("the engine was just created");
                    let sequences = generate_responses(llm, chunk, settings.max_tokens)?;
                    write_responses(&responses, &sequences)?;
                    sequences
                }
            };
            bar.set_message(format!("shard {index}: recording features"));
            let shard = record_shard(
                &target,
                tap,
                &sequences,
                sizes.record_batch_tokens,
                settings.top_k,
            )?;
            shard.write(&shard_path(data_dir, index))?;
            bar.inc(chunk.len() as u64);
        }
        bar.finish_with_message("done");
    }
    let shards = read_shards(data_dir)?;
    if shards.len() != chunks.len() {
        bail!(
            "{} holds {} shards, expected {}; remove the directory to rebuild it",
            data_dir.display(),
            shards.len(),
            chunks.len()
        );
    }
    if shards.iter().all(|s| s.num_sequences() == 0) {
        bail!("{} holds no recorded sequence", data_dir.display());
    }
    Ok(shards)
}

/// The target's greedy responses to `prompts` (single-turn chats), with their prompts.
fn generate_responses(
    llm: &mut Llm,
    prompts: &[TrainingPrompt],
    max_tokens: usize,
) -> Result<Vec<DistillSequence>> {
    let batch: Vec<Prompt> = prompts
        .iter()
        .map(|p| Prompt::Chat(vec![ChatMessage::new("user", p.text.as_str())]))
        .collect();
    let outputs = llm.generate(batch, &SamplingParams::greedy(max_tokens))?;
    Ok(outputs
        .iter()
        .map(|out| DistillSequence {
            tokens: [out.prompt_token_ids.as_slice(), &out.token_ids].concat(),
            prompt_len: out.prompt_token_ids.len(),
        })
        .collect())
}

/// One stored response: prompt and response tokens, and the prompt length.
#[derive(Serialize, Deserialize)]
struct StoredSequence {
    prompt_len: usize,
    tokens: Vec<u32>,
}

/// Path of the responses of shard `index`.
fn responses_path(dir: &Path, index: usize) -> PathBuf {
    dir.join(format!("responses-{index:05}.json"))
}

/// The responses stored at `path`, if any.
fn read_responses(path: &Path) -> Result<Option<Vec<DistillSequence>>> {
    if !path.exists() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(path)?;
    let stored: Vec<StoredSequence> =
        serde_json::from_str(&text).with_context(|| format!("reading {}", path.display()))?;
    Ok(Some(
        stored
            .into_iter()
            .map(|s| DistillSequence {
                tokens: s.tokens,
                prompt_len: s.prompt_len,
            })
            .collect(),
    ))
}

/// Stores responses at `path` (through a temporary file).
fn write_responses(path: &Path, sequences: &[DistillSequence]) -> Result<()> {
    let stored: Vec<StoredSequence> = sequences
        .iter()
        .map(|s| StoredSequence {
            prompt_len: s.prompt_len,
            tokens: s.tokens.clone(),
        })
        .collect();
    let partial = path.with_extension("partial");
    std::fs::write(&partial, serde_json::to_string(&stored)?)
        .with_context(|| format!("writing {}", partial.display()))?;
    std::fs::rename(&partial, path).with_context(|| format!("writing {}", path.display()))
}

/// Writes the manifest of a new data directory, or checks an existing one's.
fn check_manifest(data_dir: &Path, settings: &DistillSettings) -> Result<()> {
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("creating {}", data_dir.display()))?;
    let path: PathBuf = data_dir.join(MANIFEST);
    if path.exists() {
        let text = std::fs::read_to_string(&path)?;
        let existing: DistillSettings =
            serde_json::from_str(&text).with_context(|| format!("reading {}", path.display()))?;
        if &existing != settings {
            bail!(
                "{} was made with other settings ({existing:?}); use another --work-dir or \
                 remove it",
                data_dir.display()
            );
        }
        return Ok(());
    }
    std::fs::write(&path, serde_json::to_string_pretty(settings)?)
        .with_context(|| format!("writing {}", path.display()))
}
