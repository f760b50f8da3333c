//! Recording corpus samples: each chat sample tokenized as the engine would see it (the prompt
//! through the chat template with the generation prompt, then the assistant text and the end
//! token), then one target forward per batch records features and greedy labels into
//! resumable shards.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{bail, Context, Result};
use aquila_model_loader::model::{FeatureTap, LlamaModel};
use aquila_model_loader::tokenizer::Tokenizer;
use aquila_spec_decode::train::{
    read_shards, record_shard, shard_path, tap_name, DistillSequence, FeatureShard,
};
use burn::backend::Flex;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::format::{chat_samples, split_by_document, ChatSample};
use super::sources::source_named;

/// How a corpus data set is made; stored beside its shards so a resumed run cannot mix
/// settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CorpusSettings {
    /// Source names (see [`super::SOURCES`]).
    pub sources: Vec<String>,
    /// Most recorded tokens (prompt and response) of training samples.
    pub max_tokens: usize,
    /// One document in this many is held out (never recorded for training).
    pub holdout_every: u64,
    /// Most response tokens per sample (longer answers are cut).
    pub max_response_tokens: usize,
    /// Tokens per shard (a shard closes once it holds at least this many).
    pub shard_tokens: usize,
    /// Seed of the sample order.
    pub seed: u64,
    /// The tapped features.
    pub tap: String,
    /// The target's most likely next tokens kept per position (0: the greedy one only).
    pub top_k: usize,
}

/// What one source gave.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceStats {
    /// Documents read.
    pub documents: usize,
    /// Distinct training samples available.
    pub samples: usize,
    /// Samples recorded.
    pub recorded_samples: usize,
    /// Tokens recorded (prompt and response).
    pub recorded_tokens: usize,
    /// Response tokens recorded (the positions that carry a loss).
    pub response_tokens: usize,
    /// Samples of held-out documents (not recorded).
    pub held_out_samples: usize,
}

/// The manifest and statistics files of a corpus data directory.
const MANIFEST: &str = "corpus.json";
const STATS: &str = "corpus-stats.json";

/// The token sequence of `sample`: the prompt turns through the chat template with the
/// generation prompt, then the assistant's text (at most `max_response_tokens`) and, when it
/// was not cut, the end-of-sequence token. `None` when the template renders nothing usable.
pub fn tokenize_sample(
    tokenizer: &Tokenizer,
    sample: &ChatSample,
    max_response_tokens: usize,
) -> Result<Option<DistillSequence>> {
    let Some((answer, prompt)) = sample.messages.split_last() else {
        return Ok(None);
    };
    let mut tokens = tokenizer.encode_chat(prompt, true)?;
    let prompt_len = tokens.len();
    let mut response = tokenizer.encode(&answer.content, false)?;
    if response.is_empty() || prompt_len == 0 {
        return Ok(None);
    }
    if response.len() >= max_response_tokens {
        response.truncate(max_response_tokens);
    } else if let Some(eos) = tokenizer.special_tokens().eos_id() {
        response.push(eos);
    }
    tokens.extend(response);
    Ok(Some(DistillSequence { tokens, prompt_len }))
}

/// Builds (or completes) the corpus shards in `data_dir` for the target in `model_dir`, with
/// packages fetched into `download_dir`, and loads them with per-source statistics.
pub fn build_corpus_data(
    model_dir: &Path,
    download_dir: &Path,
    data_dir: &Path,
    tap: &FeatureTap,
    settings: &CorpusSettings,
    record_batch_tokens: usize,
) -> Result<(Vec<FeatureShard>, BTreeMap<String, SourceStats>)> {
    if settings.max_tokens == 0 || settings.shard_tokens == 0 || settings.sources.is_empty() {
        bail!("the corpus needs sources and positive token budgets");
    }
    crate::manifest::check_or_write(data_dir, MANIFEST, settings)?;
    let tokenizer = Tokenizer::from_dir(model_dir)
        .with_context(|| format!("loading the tokenizer of {}", model_dir.display()))?;
    let mut stats: BTreeMap<String, SourceStats> = BTreeMap::new();
    let mut documents = Vec::new();
    for name in &settings.sources {
        let source = source_named(name)?;
        let docs = source.documents(download_dir)?;
        stats.entry(name.clone()).or_default().documents = docs.len();
        documents.extend(docs);
    }
    let (mut train, held_out) = split_by_document(chat_samples(&documents), settings.holdout_every);
    for sample in &held_out {
        stats
            .entry(sample.source.clone())
            .or_default()
            .held_out_samples += 1;
    }
    for sample in &train {
        stats.entry(sample.source.clone()).or_default().samples += 1;
    }
    train.shuffle(&mut ChaCha8Rng::seed_from_u64(settings.seed));

    let shards = plan_shards(&tokenizer, &train, settings, &mut stats)?;
    let missing: Vec<usize> = (0..shards.len())
        .filter(|&i| !shard_path(data_dir, i).exists())
        .collect();
    if !missing.is_empty() {
        let total: usize = shards.iter().flatten().map(|s| s.tokens.len()).sum();
        let bar = crate::progress::bar(
            total as u64,
            "corpus [{bar:30}] {pos}/{len} tokens {elapsed_precise} (eta {eta}) {per_sec}",
        );
        let done: usize = (0..shards.len())
            .filter(|i| !missing.contains(i))
            .map(|i| shards[i].iter().map(|s| s.tokens.len()).sum::<usize>())
            .sum();
        bar.set_position(done as u64);
        let target = LlamaModel::<Flex>::load(model_dir, &Default::default())
            .with_context(|| format!("loading {}", model_dir.display()))?;
        for index in missing {
            let shard = record_shard(
                &target,
                tap,
                &shards[index],
                record_batch_tokens,
                settings.top_k,
            )?;
            shard.write(&shard_path(data_dir, index))?;
            bar.inc(shard.num_tokens() as u64);
        }
        bar.finish();
    }
    std::fs::write(data_dir.join(STATS), serde_json::to_string_pretty(&stats)?)?;
    let recorded = read_shards(data_dir)?;
    if recorded.len() != shards.len() || recorded.iter().any(|s| s.tap != tap_name(tap)) {
        bail!(
            "{} holds {} shards, expected {}; remove the directory to rebuild it",
            data_dir.display(),
            recorded.len(),
            shards.len()
        );
    }
    Ok((recorded, stats))
}

/// Tokenizes samples in order until the token budget is spent and groups them into shards.
fn plan_shards(
    tokenizer: &Tokenizer,
    samples: &[ChatSample],
    settings: &CorpusSettings,
    stats: &mut BTreeMap<String, SourceStats>,
) -> Result<Vec<Vec<DistillSequence>>> {
    let mut shards: Vec<Vec<DistillSequence>> = vec![Vec::new()];
    let (mut total, mut in_shard) = (0, 0);
    for sample in samples {
        if total >= settings.max_tokens {
            break;
        }
        let Some(sequence) = tokenize_sample(tokenizer, sample, settings.max_response_tokens)?
        else {
            continue;
        };
        let entry = stats.entry(sample.source.clone()).or_default();
        entry.recorded_samples += 1;
        entry.recorded_tokens += sequence.tokens.len();
        entry.response_tokens += sequence.tokens.len() - sequence.prompt_len;
        total += sequence.tokens.len();
        in_shard += sequence.tokens.len();
        shards
            .last_mut()
            .expect("one shard at least")
            .push(sequence);
        if in_shard >= settings.shard_tokens {
            shards.push(Vec::new());
            in_shard = 0;
        }
    }
    shards.retain(|s| !s.is_empty());
    if shards.is_empty() {
        bail!("the corpus sources gave no sample");
    }
    Ok(shards)
}

#[cfg(test)]
mod tests {
    use super::*;
    use aquila_model_loader::fixtures::tokenizer::write_tiny_tokenizer;
    use aquila_model_loader::tokenizer::ChatMessage;

    #[test]
    fn tokenizes_like_a_generation_prompt_then_the_answer() {
        let dir = tempfile::tempdir().unwrap();
        write_tiny_tokenizer(dir.path()).unwrap();
        let tokenizer = Tokenizer::from_dir(dir.path()).unwrap();
        let sample = ChatSample {
            source: "s".into(),
            document: "d".into(),
            messages: vec![ChatMessage::user("hi"), ChatMessage::assistant("hello")],
        };
        let sequence = tokenize_sample(&tokenizer, &sample, 64).unwrap().unwrap();
        let prompt = tokenizer.encode_chat(&sample.messages[..1], true).unwrap();
        assert_eq!(sequence.prompt_len, prompt.len());
        assert_eq!(&sequence.tokens[..prompt.len()], prompt.as_slice());
        let answer = tokenizer.encode("hello", false).unwrap();
        let eos = tokenizer.special_tokens().eos_id().unwrap();
        assert_eq!(
            sequence.tokens[prompt.len()..],
            [answer.as_slice(), &[eos]].concat()
        );
        let cut = tokenize_sample(&tokenizer, &sample, 1).unwrap().unwrap();
        assert_eq!(cut.tokens.len(), prompt.len() + 1);
    }
}
