//! Self-distillation data for training a draft head: training prompts (built-in or written by
//! the target itself) answered by the target with the engine (greedy, several sampled answers
//! per prompt, or an answer to a follow-up turn after the greedy one; batched), then replayed
//! through the target once to record its features, in resumable safetensors shards.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use aquila_engine::{
    ChatMessage, EngineConfig, Llm, Prompt, RequestOutput, SamplingParams, WeightFormat,
};
use aquila_model_loader::model::{FeatureTap, LlamaModel};
use aquila_spec_decode::train::{
    read_shards, record_shard, shard_path, tap_name, DistillSequence, FeatureShard,
};
use burn::backend::Flex;
use serde::{Deserialize, Serialize};

use crate::follow_ups::{follow_up, follow_up_conversation};
use crate::self_instruct::SelfInstructSettings;
use crate::train_prompts::{is_held_out, TrainingPrompt};

/// Where a data set's prompts come from.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PromptSet {
    /// The built-in generator's ([`crate::train_prompts`]), seeded by the settings'
    /// `prompt_seed`.
    #[default]
    BuiltIn,
    /// Requests the target wrote itself ([`crate::self_instruct`]), drawn with these settings.
    SelfInstructed(SelfInstructSettings),
}

/// Which answers of the target a data set records.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Answers {
    /// One greedy answer per prompt.
    #[default]
    Greedy,
    /// `per_prompt` answers per prompt sampled at `temperature` (each with a seed of its own),
    /// for every prompt except each `skip_every`-th (counted from the first, as the greedy
    /// data's validation split holds them out), so that no held-out prompt is trained on.
    Sampled {
        /// Answers per prompt.
        per_prompt: usize,
        /// Number of the first answer: answers `first..first + per_prompt` are drawn, so that a
        /// run warm-starting a head trained on answers `0..first` samples new ones.
        #[serde(default)]
        first: usize,
        /// Softmax temperature of the sampling.
        temperature: f32,
        /// Prompts whose index is a multiple of this are skipped (0 skips none).
        skip_every: usize,
    },
    /// One greedy answer per prompt to a second user turn ([`crate::follow_ups`]) after the
    /// prompt and the target's greedy answer to it, for every prompt except each
    /// `skip_every`-th (as [`Answers::Sampled`]). The conversation up to the second answer is
    /// the sequence's prompt, so a head learns from the second answer only.
    FollowUp {
        /// Prompts whose index is a multiple of this are skipped (0 skips none).
        skip_every: usize,
    },
}

impl Answers {
    /// The sampling parameters of each answer to the prompt at `index` (none for a skipped
    /// prompt).
    fn params(&self, index: usize, seed: u64, max_tokens: usize) -> Vec<SamplingParams> {
        match *self {
            Answers::Greedy => vec![SamplingParams::greedy(max_tokens)],
            Answers::Sampled { skip_every, .. } | Answers::FollowUp { skip_every }
                if is_held_out(index, skip_every) =>
            {
                Vec::new()
            }
            Answers::FollowUp { .. } => vec![SamplingParams::greedy(max_tokens)],
            Answers::Sampled {
                per_prompt,
                first,
                temperature,
                ..
            } => (first..first + per_prompt)
                .map(|sample| SamplingParams {
                    temperature,
                    max_tokens,
                    seed: Some(answer_seed(seed, index, sample)),
                    ..SamplingParams::default()
                })
                .collect(),
        }
    }
}

/// The seed of sampled answer `sample` to the prompt at `index` (and of draw `sample` of round
/// `index` of [`crate::self_instruct`]): the same in every run and build with the same `seed`,
/// so that a resumed run samples as the interrupted one did.
pub(crate) fn answer_seed(seed: u64, index: usize, sample: usize) -> u64 {
    [index as u64, sample as u64]
        .into_iter()
        .fold(mix(seed), |state, part| mix(state ^ part))
}

/// The SplitMix64 finalizer: a bijection of `u64` that spreads every input bit over the
/// output.
fn mix(value: u64) -> u64 {
    let mut z = value.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// How the data set is made; stored beside the shards so a resumed run cannot mix settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DistillSettings {
    /// Where the prompts come from.
    #[serde(default)]
    pub prompt_set: PromptSet,
    /// Number of training prompts.
    pub num_prompts: usize,
    /// Seed of the prompt generator and of sampled answers.
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
    /// The answers recorded.
    #[serde(default)]
    pub answers: Answers,
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

/// Where a data set's responses and features are kept.
#[derive(Debug, Clone, Copy)]
pub struct DistillDirs<'a> {
    /// The target's responses (shared by every tap, so an EAGLE-3 data set reuses the
    /// responses an EAGLE-1 run generated).
    pub responses: &'a Path,
    /// The feature shards.
    pub data: &'a Path,
    /// The greedy responses (of the same prompts and shard size) that [`Answers::FollowUp`]
    /// continues; unused by the other answers.
    pub first_turns: Option<&'a Path>,
}

/// Builds (or completes) the feature shards in `dirs.data` for the target in `model_dir` and
/// loads them (at least one sequence): the answers to `prompts`, the set `settings.prompt_set`
/// names. Shards and responses already on disk are kept, so an interrupted run resumes.
pub fn build_distill_data(
    model_dir: &Path,
    dirs: DistillDirs<'_>,
    tap: &FeatureTap,
    prompts: &[TrainingPrompt],
    settings: &DistillSettings,
    sizes: GenerationSizes,
) -> Result<Vec<FeatureShard>> {
    if settings.shard_size == 0 || settings.num_prompts == 0 {
        bail!("--prompts and the shard size must be positive");
    }
    if prompts.len() != settings.num_prompts {
        bail!(
            "{} prompts given for a data set of {}",
            prompts.len(),
            settings.num_prompts
        );
    }
    if let Answers::FollowUp { skip_every } = settings.answers {
        if skip_every == 1 || dirs.first_turns.is_none() {
            bail!(
                "follow-up answers need the greedy answers they follow and must not skip every \
                 prompt (skipping every {skip_every})"
            );
        }
    }
    let DistillDirs {
        responses: responses_dir,
        data: data_dir,
        first_turns,
    } = dirs;
    // Only follow-ups continue the greedy answers; every other kind answers the prompt alone.
    let first_turns = first_turns.filter(|_| matches!(settings.answers, Answers::FollowUp { .. }));
    if let Answers::Sampled {
        per_prompt,
        temperature,
        skip_every,
        ..
    } = settings.answers
    {
        if per_prompt == 0 || skip_every == 1 || !(temperature > 0.0 && temperature.is_finite()) {
            bail!(
                "sampled answers need a positive count and temperature, and must not skip \
                 every prompt (got {per_prompt} answers at temperature {temperature}, \
                 skipping every {skip_every})"
            );
        }
    }
    if settings.tap != tap_name(tap) {
        bail!(
            "settings name tap {} but {} is recorded",
            settings.tap,
            tap_name(tap)
        );
    }
    crate::manifest::check_or_write(data_dir, MANIFEST, settings)?;
    let response_settings = DistillSettings {
        tap: String::new(),
        top_k: 0,
        ..settings.clone()
    };
    crate::manifest::check_or_write(responses_dir, MANIFEST, &response_settings)?;
    let chunks: Vec<_> = prompts.chunks(settings.shard_size).collect();
    let missing: Vec<usize> = (0..chunks.len())
        .filter(|&i| !shard_path(data_dir, i).exists())
        .collect();
    if !missing.is_empty() {
        let bar = crate::progress::bar(
            settings.num_prompts as u64,
            "distill [{bar:30}] {pos}/{len} prompts {elapsed_precise} (eta {eta}) {msg}",
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
                    let first = index * settings.shard_size;
                    let earlier = match first_turns {
                        Some(dir) => Some(read_first_turns(dir, index, chunk.len())?),
                        None => None,
                    };
                    let sequences =
                        generate_responses(llm, chunk, first, earlier.as_deref(), settings)?;
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

/// The greedy responses of shard `index` in `dir`, one per prompt of a shard of `prompts`.
fn read_first_turns(dir: &Path, index: usize, prompts: usize) -> Result<Vec<DistillSequence>> {
    let path = responses_path(dir, index);
    let turns = read_responses(&path)?.with_context(|| {
        format!(
            "{} is missing: follow-ups continue the greedy answers",
            path.display()
        )
    })?;
    if turns.len() != prompts {
        bail!(
            "{} holds {} answers for {prompts} prompts: not one greedy answer per prompt",
            path.display(),
            turns.len()
        );
    }
    Ok(turns)
}

/// The target's answers to `prompts` (the first is the prompt at index `first`) as
/// `settings.answers` asks for them, with their prompts, in prompt order: single-turn chats,
/// or with `first_turns` (a greedy answer per prompt) the follow-up conversations after them.
fn generate_responses(
    llm: &mut Llm,
    prompts: &[TrainingPrompt],
    first: usize,
    first_turns: Option<&[DistillSequence]>,
    settings: &DistillSettings,
) -> Result<Vec<DistillSequence>> {
    let mut batch = Vec::new();
    let mut params = Vec::new();
    for (offset, prompt) in prompts.iter().enumerate() {
        let index = first + offset;
        let answers = settings
            .answers
            .params(index, settings.prompt_seed, settings.max_tokens);
        if answers.is_empty() {
            continue;
        }
        let conversation = match first_turns {
            Some(turns) => {
                let turn = &turns[offset];
                let answer = llm
                    .tokenizer()
                    .decode(&turn.tokens[turn.prompt_len..], true)?;
                // The draw that seeds sampled answer 0 to this prompt chooses its follow-up.
                let choice = answer_seed(settings.prompt_seed, index, 0);
                follow_up_conversation(prompt, &answer, follow_up(prompt.category, choice))
            }
            None => vec![ChatMessage::new("user", prompt.text.as_str())],
        };
        for answer in answers {
            batch.push(Prompt::Chat(conversation.clone()));
            params.push(answer);
        }
    }
    if batch.is_empty() {
        return Ok(Vec::new());
    }
    let outputs = llm.generate_with_params(batch, &params)?;
    Ok(outputs.iter().map(distill_sequence).collect())
}

/// A request's prompt and answer as one recorded sequence.
pub(crate) fn distill_sequence(output: &RequestOutput) -> DistillSequence {
    DistillSequence {
        tokens: [output.prompt_token_ids.as_slice(), &output.token_ids].concat(),
        prompt_len: output.prompt_token_ids.len(),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLED: Answers = Answers::Sampled {
        per_prompt: 3,
        first: 0,
        temperature: 0.8,
        skip_every: 20,
    };

    #[test]
    fn greedy_answers_are_one_per_prompt() {
        for index in [0, 1, 20] {
            assert_eq!(
                Answers::Greedy.params(index, 0, 64),
                vec![SamplingParams::greedy(64)]
            );
        }
    }

    #[test]
    fn sampled_answers_skip_the_prompts_whose_greedy_answers_are_held_out() {
        // The greedy data holds out every 20th sequence from the first, one per prompt.
        for index in [0, 20, 40, 2680] {
            assert!(SAMPLED.params(index, 0, 64).is_empty(), "prompt {index}");
        }
        for index in [1, 19, 21, 2681] {
            let params = SAMPLED.params(index, 0, 64);
            assert_eq!(params.len(), 3, "prompt {index}");
            assert!(params
                .iter()
                .all(|p| p.temperature == 0.8 && p.max_tokens == 64));
        }
    }

    #[test]
    fn follow_ups_are_one_greedy_answer_per_training_prompt() {
        let follow_ups = Answers::FollowUp { skip_every: 20 };
        for index in [0, 20, 2680] {
            assert!(follow_ups.params(index, 0, 64).is_empty(), "prompt {index}");
        }
        for index in [1, 21, 2681] {
            assert_eq!(
                follow_ups.params(index, 0, 64),
                vec![SamplingParams::greedy(64)]
            );
        }
    }

    #[test]
    fn every_sampled_answer_has_a_seed_of_its_own() {
        let mut seeds = std::collections::HashSet::new();
        for index in 1..200 {
            for params in SAMPLED.params(index, 0, 64) {
                assert!(seeds.insert(params.seed.expect("sampled answers are seeded")));
            }
        }
        // The same prompt, sample and run seed give the same seed (a resumed run repeats it);
        // another run seed gives others.
        assert_eq!(SAMPLED.params(5, 0, 64), SAMPLED.params(5, 0, 64));
        assert_ne!(SAMPLED.params(5, 0, 64), SAMPLED.params(5, 1, 64));
    }

    #[test]
    fn later_answers_continue_where_earlier_runs_stopped() {
        let later = Answers::Sampled {
            per_prompt: 2,
            first: 1,
            temperature: 0.8,
            skip_every: 20,
        };
        let earlier = SAMPLED.params(7, 0, 64);
        assert_eq!(later.params(7, 0, 64), earlier[1..].to_vec());
        assert!(later.params(20, 0, 64).is_empty());
    }

    #[test]
    fn settings_written_before_sampled_answers_existed_read_as_greedy() {
        let text = r#"{"num_prompts": 64, "prompt_seed": 0, "max_tokens": 128,
            "shard_size": 64, "tap": "", "top_k": 0, "response_weights": "f32"}"#;
        let settings: DistillSettings = serde_json::from_str(text).unwrap();
        assert_eq!(settings.answers, Answers::Greedy);
    }

    #[test]
    fn sampled_settings_written_before_the_first_answer_existed_start_at_zero() {
        let text = r#"{"sampled": {"per_prompt": 1, "temperature": 0.8, "skip_every": 20}}"#;
        let answers: Answers = serde_json::from_str(text).unwrap();
        assert_eq!(
            answers.params(3, 0, 64),
            SAMPLED.params(3, 0, 64)[..1].to_vec()
        );
    }
}
