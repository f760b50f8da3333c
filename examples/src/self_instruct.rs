//! Training prompts that the target writes itself: the chat template up to the start of a user
//! turn, sampled, gives the kind of request the model was tuned to answer (the "pre-query
//! template" of Magpie, Xu et al. 2024). Unlike the built-in templates, it yields as many
//! distinct prompts as one asks for, in the wording of real chat data.
//!
//! Each draw has a seed of its own, so a resumed run draws what the interrupted one would have;
//! the accepted prompts are kept on disk after every round of draws.

use std::collections::HashSet;
use std::path::Path;

use anyhow::{bail, Context, Result};
use aquila_engine::{
    ChatMessage, EngineConfig, FinishReason, Llm, Prompt, SamplingParams, WeightFormat,
};
use aquila_model_loader::tokenizer::Tokenizer;
use serde::{Deserialize, Serialize};

use crate::distill::answer_seed;
use crate::prompts::touches_evaluation_set_topic;
use crate::train_prompts::{touches_held_out_topic, PromptCategory, TrainingPrompt};

/// Which self-instructed prompts a run uses: requests `first..count` of the set that `draw`
/// makes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SelfInstructSettings {
    /// Prompts drawn: the set's first `count` requests.
    pub count: usize,
    /// Requests before this one are left out (a warm-started head was trained on them), so the
    /// run answers requests `first..count`.
    #[serde(default)]
    pub first: usize,
    /// How the set is drawn.
    #[serde(flatten)]
    pub draw: DrawSettings,
}

/// What makes a drawn set, stored beside it so that a resumed or extended draw cannot mix sets.
/// It holds no count: every round's draws are kept, so a longer set starts with every request
/// of a shorter one drawn with the same settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DrawSettings {
    /// Seed of the draws.
    pub seed: u64,
    /// Softmax temperature of the draws.
    pub temperature: f32,
    /// Nucleus threshold of the draws.
    pub top_p: f32,
    /// Most tokens of a draw; a draw that does not end its turn within them is dropped.
    pub max_tokens: usize,
    /// The weights the draws are made with.
    pub weights: WeightFormat,
}

/// Whether `text` touches a topic of the evaluation prompts: the built-in ones or those of a
/// set under `examples/prompts/`.
pub fn touches_evaluation_topic(text: &str) -> bool {
    touches_held_out_topic(text) || touches_evaluation_set_topic(text)
}

/// The stored state of a set: the rounds drawn so far and the prompts they gave.
#[derive(Debug, Default, Serialize, Deserialize)]
struct DrawnPrompts {
    rounds: usize,
    prompts: Vec<String>,
}

impl DrawnPrompts {
    /// Takes in one round's draws: every acceptable one not yet in the set, in order, so that
    /// the set never depends on how many prompts were asked for.
    fn absorb<'a>(&mut self, draws: impl IntoIterator<Item = (&'a str, FinishReason)>) {
        let mut seen: HashSet<String> = self.prompts.iter().map(|p| dedup_key(p)).collect();
        for (text, finish) in draws {
            if let Some(text) = accept_query(text, finish) {
                if seen.insert(dedup_key(&text)) {
                    self.prompts.push(text);
                }
            }
        }
        self.rounds += 1;
    }
}

/// The manifest file of a prompt set's directory.
const MANIFEST: &str = "self-instruct.json";
/// The prompts drawn so far.
const PROMPTS_FILE: &str = "prompts.json";
/// Most words of an accepted prompt.
const MAX_WORDS: usize = 80;
/// Fewest words of an accepted prompt.
const MIN_WORDS: usize = 3;
/// Most tokens of a drawn request: chat requests are seldom longer, and a draw that runs past
/// this has usually left the user's turn.
pub const MAX_REQUEST_TOKENS: usize = 96;
/// Most draws per prompt asked for before a set is given up: a model that rarely writes an
/// acceptable request is not one to draw from.
const MAX_DRAWS_PER_PROMPT: usize = 16;

/// The text of a chat template before a user message's content: the system turn the template
/// adds by itself (if any) and the user turn's header. The template is rendered around a marker
/// message and cut at it, so that any template works.
pub fn query_prefix(tokenizer: &Tokenizer) -> Result<String> {
    const MARKER: &str = "\u{1}QUERY\u{1}";
    let rendered = tokenizer.apply_chat_template(&[ChatMessage::new("user", MARKER)], false)?;
    match rendered.find(MARKER) {
        Some(at) if at > 0 => Ok(rendered[..at].to_string()),
        _ => bail!("the chat template does not put a user message's content after a header"),
    }
}

/// A drawn request as a training prompt, or `None` when it is not one: unfinished, too short or
/// long, not plain English text, naming special tokens or links, or touching a topic of the
/// evaluation prompts.
pub fn accept_query(text: &str, finish: FinishReason) -> Option<String> {
    let text = text.trim();
    if finish != FinishReason::Stop || text.contains("<|") || text.contains("http") {
        return None;
    }
    let words = text.split_whitespace().count();
    if !(MIN_WORDS..=MAX_WORDS).contains(&words) {
        return None;
    }
    let non_ascii = text.chars().filter(|c| !c.is_ascii()).count();
    let letters = text.chars().filter(|c| c.is_ascii_alphabetic()).count();
    if non_ascii * 50 > text.len() || letters * 2 < text.len() || touches_evaluation_topic(text) {
        return None;
    }
    Some(text.to_string())
}

/// The key two prompts share when they differ only in case, spacing or punctuation.
fn dedup_key(text: &str) -> String {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|word| !word.is_empty())
        .map(str::to_lowercase)
        .collect::<Vec<_>>()
        .join(" ")
}

/// The self-instructed prompts `settings.first..settings.count` for the target in `model_dir`,
/// drawn now where `dir` does not hold them all yet (`max_num_seqs` draws at a time), distinct
/// and in the order drawn.
pub fn self_instructed_prompts(
    model_dir: &Path,
    dir: &Path,
    settings: &SelfInstructSettings,
    max_num_seqs: usize,
) -> Result<Vec<TrainingPrompt>> {
    if settings.first >= settings.count || max_num_seqs == 0 || settings.draw.max_tokens == 0 {
        bail!(
            "self-instructed prompts need a count above the first one used ({} is not above {}), \
             a positive batch and token limit",
            settings.count,
            settings.first
        );
    }
    crate::manifest::check_or_write(dir, MANIFEST, &settings.draw)?;
    let path = dir.join(PROMPTS_FILE);
    let mut drawn: DrawnPrompts = match std::fs::read_to_string(&path) {
        Ok(text) => {
            serde_json::from_str(&text).with_context(|| format!("reading {}", path.display()))?
        }
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => DrawnPrompts::default(),
        Err(err) => return Err(err).with_context(|| format!("reading {}", path.display())),
    };
    if drawn.prompts.len() < settings.count {
        draw_prompts(model_dir, &path, settings, max_num_seqs, &mut drawn)?;
    }
    Ok(drawn.prompts[settings.first..settings.count]
        .iter()
        .map(|text| TrainingPrompt {
            category: PromptCategory::SelfInstructed,
            text: text.clone(),
        })
        .collect())
}

/// Draws rounds of `max_num_seqs` requests until `drawn` holds `settings.count` prompts,
/// storing it at `path` after every round.
fn draw_prompts(
    model_dir: &Path,
    path: &Path,
    settings: &SelfInstructSettings,
    max_num_seqs: usize,
    drawn: &mut DrawnPrompts,
) -> Result<()> {
    let mut llm = Llm::new(EngineConfig {
        max_num_seqs,
        weights: settings.draw.weights,
        ..EngineConfig::new(model_dir)
    })?;
    let prefix = query_prefix(llm.tokenizer())?;
    let prefix_ids = llm.tokenizer().encode(&prefix, false)?;
    let bar = crate::progress::bar(
        settings.count as u64,
        "self-instruct [{bar:30}] {pos}/{len} prompts {elapsed_precise} (eta {eta}) {msg}",
    );
    bar.set_position(drawn.prompts.len() as u64);
    while drawn.prompts.len() < settings.count {
        let round = drawn.rounds;
        let params: Vec<SamplingParams> = (0..max_num_seqs)
            .map(|draw| SamplingParams {
                temperature: settings.draw.temperature,
                top_p: settings.draw.top_p,
                max_tokens: settings.draw.max_tokens,
                seed: Some(answer_seed(settings.draw.seed, round, draw)),
                ..SamplingParams::default()
            })
            .collect();
        let prompts = vec![Prompt::TokenIds(prefix_ids.clone()); max_num_seqs];
        let outputs = llm.generate_with_params(prompts, &params)?;
        drawn.absorb(
            outputs
                .iter()
                .map(|output| (output.text.as_str(), output.finish_reason)),
        );
        let partial = path.with_extension("partial");
        std::fs::write(&partial, serde_json::to_string(&drawn)?)
            .with_context(|| format!("writing {}", partial.display()))?;
        std::fs::rename(&partial, path).with_context(|| format!("writing {}", path.display()))?;
        bar.set_position(drawn.prompts.len() as u64);
        let draws = drawn.rounds * max_num_seqs;
        bar.set_message(format!("{} draws kept of {draws}", drawn.prompts.len()));
        if drawn.prompts.len() < settings.count && draws >= settings.count * MAX_DRAWS_PER_PROMPT {
            bail!(
                "{draws} draws gave {} distinct acceptable requests of the {} asked for: the \
                 model does not write chat requests after its template's user header",
                drawn.prompts.len(),
                settings.count
            );
        }
    }
    bar.finish();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finished_plain_requests_are_accepted_trimmed() {
        assert_eq!(
            accept_query(
                "  Can you help me plan a vegetable garden?\n",
                FinishReason::Stop
            )
            .as_deref(),
            Some("Can you help me plan a vegetable garden?")
        );
    }

    #[test]
    fn unfinished_short_long_foreign_or_special_draws_are_dropped() {
        let long = "word ".repeat(MAX_WORDS + 1);
        for (text, finish) in [
            ("Can you help me plan a garden?", FinishReason::Length),
            ("Hello there", FinishReason::Stop),
            (long.as_str(), FinishReason::Stop),
            (
                "¿Puedes ayudarme con mi jardín más pequeño, señor?",
                FinishReason::Stop,
            ),
            (
                "Explain <|im_start|> tokens to me please",
                FinishReason::Stop,
            ),
            (
                "Summarize https://example.org for me please",
                FinishReason::Stop,
            ),
            ("1 2 3 4 5 6 7 8 9 10 11 12 + 13 = ?", FinishReason::Stop),
        ] {
            assert_eq!(accept_query(text, finish), None, "{text:?}");
        }
    }

    /// The user turns of an evaluation set under `examples/prompts/`.
    fn user_turns(jsonl: &str) -> Vec<String> {
        let mut texts = Vec::new();
        for line in jsonl.lines() {
            let value: serde_json::Value = serde_json::from_str(line).unwrap();
            let messages = value["messages"].as_array().unwrap();
            texts.extend(
                messages
                    .iter()
                    .filter(|m| m["role"] == "user")
                    .map(|m| m["content"].as_str().unwrap().to_string()),
            );
        }
        texts
    }

    #[test]
    fn every_evaluation_prompt_touches_an_evaluation_topic() {
        let mut texts: Vec<String> = crate::prompts::BUILTIN_CHAT_PROMPTS
            .iter()
            .map(|text| text.to_string())
            .collect();
        for (set, jsonl, least) in [
            (
                "eval-chat.jsonl",
                include_str!("../prompts/eval-chat.jsonl"),
                32,
            ),
            (
                "eval-chat-2.jsonl",
                include_str!("../prompts/eval-chat-2.jsonl"),
                42,
            ),
        ] {
            let turns = user_turns(jsonl);
            assert!(turns.len() >= least, "{set}: {} user turns", turns.len());
            let topics = crate::prompts::evaluation_set_topics(set).unwrap();
            for text in &turns {
                let lower = text.to_lowercase();
                assert!(
                    topics.iter().any(|t| lower.contains(t.as_str())),
                    "{set}: {text:?}"
                );
            }
            texts.extend(turns);
        }
        for text in texts {
            assert!(touches_evaluation_topic(&text), "{text:?}");
            assert_eq!(accept_query(&text, FinishReason::Stop), None, "{text:?}");
        }
    }

    #[test]
    fn requests_on_other_topics_are_kept() {
        for text in [
            "How do I make a budget for my first apartment?",
            "Write a Python class for a bank account.",
            "What are the main causes of inflation?",
        ] {
            assert!(!touches_evaluation_topic(text), "{text:?}");
        }
    }

    #[test]
    fn a_round_keeps_every_new_acceptable_draw_in_order() {
        let mut drawn = DrawnPrompts {
            rounds: 2,
            prompts: vec!["What are the main causes of inflation?".to_string()],
        };
        drawn.absorb([
            ("what are the main causes of INFLATION", FinishReason::Stop),
            (
                "Write a Python class for a bank account.",
                FinishReason::Stop,
            ),
            ("Can you help me plan", FinishReason::Length),
            (
                "How do I make a budget for my first apartment?",
                FinishReason::Stop,
            ),
            (
                "Write a Python class for a bank account!",
                FinishReason::Stop,
            ),
        ]);
        assert_eq!(drawn.rounds, 3);
        assert_eq!(
            drawn.prompts,
            [
                "What are the main causes of inflation?",
                "Write a Python class for a bank account.",
                "How do I make a budget for my first apartment?"
            ]
        );
    }

    fn draw_settings(seed: u64) -> DrawSettings {
        DrawSettings {
            seed,
            temperature: 1.0,
            top_p: 0.95,
            max_tokens: MAX_REQUEST_TOKENS,
            weights: WeightFormat::Q8_0,
        }
    }

    #[test]
    fn a_longer_set_extends_a_shorter_one_drawn_alike() {
        let dir = tempfile::tempdir().unwrap();
        let short = SelfInstructSettings {
            count: 3072,
            first: 0,
            draw: draw_settings(0),
        };
        let longer = SelfInstructSettings {
            count: 6144,
            first: 3072,
            ..short.clone()
        };
        crate::manifest::check_or_write(dir.path(), MANIFEST, &short.draw).unwrap();
        crate::manifest::check_or_write(dir.path(), MANIFEST, &longer.draw).unwrap();
        let reseeded = draw_settings(1);
        let err = crate::manifest::check_or_write(dir.path(), MANIFEST, &reseeded).unwrap_err();
        assert!(err.to_string().contains("other settings"), "{err}");
    }

    #[test]
    fn settings_stored_flat_and_without_a_first_request_still_read() {
        // A data set's manifest stores the draw settings beside the count, and manifests written
        // before `first` existed lack it; a drawn set's manifest once held the count too.
        let stored = r#"{"count": 3072, "seed": 0, "temperature": 1.0, "top_p": 0.95,
            "max_tokens": 96, "weights": "q8_0"}"#;
        let settings: SelfInstructSettings = serde_json::from_str(stored).unwrap();
        assert_eq!((settings.count, settings.first), (3072, 0));
        assert_eq!(settings.draw, draw_settings(0));
        let draw: DrawSettings = serde_json::from_str(stored).unwrap();
        assert_eq!(draw, draw_settings(0));
        let written = serde_json::to_value(&settings).unwrap();
        assert_eq!(written["seed"], 0, "{written}");
        assert_eq!(written["first"], 0, "{written}");
    }

    #[test]
    fn prompts_differing_in_case_or_punctuation_share_a_key() {
        assert_eq!(
            dedup_key("How do I bake bread?"),
            dedup_key("how do i  bake BREAD")
        );
        assert_ne!(
            dedup_key("How do I bake bread?"),
            dedup_key("How do I bake cake?")
        );
    }
}
