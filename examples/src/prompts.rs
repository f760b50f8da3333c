//! Prompt files (JSON Lines) and the built-in chat prompts of the examples.

use aquila_engine::Prompt;
use aquila_model_loader::tokenizer::ChatMessage;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// One line of a prompts file: exactly one of the three forms.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PromptLine {
    prompt: Option<String>,
    prompt_token_ids: Option<Vec<u32>>,
    messages: Option<Vec<ChatMessage>>,
}

/// An error reading a prompts file, naming the file and the line.
#[derive(Debug, thiserror::Error)]
pub enum PromptsFileError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A line is not a JSON object of one of the accepted forms.
    #[error("{path}:{line}: {message}")]
    Line {
        /// The file.
        path: String,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// The file holds no prompt.
    #[error("{path}: no prompt in the file")]
    Empty {
        /// The file.
        path: String,
    },
}

/// Parses JSON Lines text where each non-blank line is `{"prompt": "..."}`,
/// `{"prompt_token_ids": [...]}` or `{"messages": [{"role": ..., "content": ...}, ...]}`.
///
/// `origin` names the source in errors.
pub fn parse_prompts_jsonl(text: &str, origin: &str) -> Result<Vec<Prompt>, PromptsFileError> {
    let mut prompts = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let trimmed = raw.trim();
        if trimmed.is_empty() {
            continue;
        }
        let line_error = |message: String| PromptsFileError::Line {
            path: origin.to_string(),
            line: index + 1,
            message,
        };
        let parsed: PromptLine =
            serde_json::from_str(trimmed).map_err(|e| line_error(e.to_string()))?;
        let prompt = match (parsed.prompt, parsed.prompt_token_ids, parsed.messages) {
            (Some(text), None, None) => Prompt::Text(text),
            (None, Some(ids), None) => Prompt::TokenIds(ids),
            (None, None, Some(messages)) => Prompt::Chat(messages),
            _ => {
                return Err(line_error(
                    "expected exactly one of \"prompt\", \"prompt_token_ids\" or \"messages\""
                        .to_string(),
                ))
            }
        };
        prompts.push(prompt);
    }
    if prompts.is_empty() {
        return Err(PromptsFileError::Empty {
            path: origin.to_string(),
        });
    }
    Ok(prompts)
}

/// One conversation as a line of a prompts file (`{"messages": [...]}`), without the newline.
pub fn chat_prompt_line(messages: &[ChatMessage]) -> String {
    serde_json::json!({ "messages": messages }).to_string()
}

/// Reads a prompts file (see [`parse_prompts_jsonl`]).
pub fn read_prompts_file(path: &Path) -> Result<Vec<Prompt>, PromptsFileError> {
    let origin = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| PromptsFileError::Io {
        path: origin.clone(),
        source,
    })?;
    parse_prompts_jsonl(&text, &origin)
}

/// The prompts of every file of `paths`, file after file (see [`read_prompts_file`]): sets
/// pooled into one run.
pub fn read_prompts_files(paths: &[PathBuf]) -> Result<Vec<Prompt>, PromptsFileError> {
    let mut prompts = Vec::new();
    for path in paths {
        prompts.extend(read_prompts_file(path)?);
    }
    Ok(prompts)
}

/// The built-in chat prompts of the eagle example: everyday questions, instructions, a story,
/// code and arithmetic, none of them used to train a draft head.
pub const BUILTIN_CHAT_PROMPTS: &[&str] = &[
    "What are three tips for staying focused while studying?",
    "Explain what a hash map is to a beginner programmer.",
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "Write a Python function that returns the n-th Fibonacci number.",
    "What is 17 multiplied by 23? Show your steps.",
    "Give me a recipe for a simple tomato soup.",
    "Why is the sky blue? Answer in two sentences.",
    "List the planets of the solar system in order from the Sun.",
    "Summarize the benefits of regular exercise.",
    "Translate 'good morning, how are you?' into French and Spanish.",
    "Describe the water cycle step by step.",
    "Write a haiku about autumn leaves.",
];

/// The first `count` built-in prompts as single-turn chat conversations (cycling through the set
/// when `count` exceeds it).
pub fn builtin_chat_prompts(count: usize) -> Vec<Prompt> {
    BUILTIN_CHAT_PROMPTS
        .iter()
        .cycle()
        .take(count)
        .map(|text| Prompt::Chat(vec![ChatMessage::new("user", *text)]))
        .collect()
}

/// The topics of the evaluation sets under `examples/prompts/` (`evaluation-topics.json`), by
/// file name: training prompts touching one are kept out of training, so that no evaluation
/// prompt has a near twin among them.
#[derive(Deserialize)]
struct EvaluationTopics {
    evaluation_topics: BTreeMap<String, Vec<String>>,
}

fn evaluation_topics() -> &'static BTreeMap<String, Vec<String>> {
    static TOPICS: OnceLock<EvaluationTopics> = OnceLock::new();
    &TOPICS
        .get_or_init(|| {
            serde_json::from_str(include_str!("../prompts/evaluation-topics.json"))
                .expect("examples/prompts/evaluation-topics.json is valid (checked by a unit test)")
        })
        .evaluation_topics
}

/// The topics of one evaluation set (`eval-chat.jsonl`, `eval-chat-2.jsonl`), lowercase;
/// `None` for a set that has none recorded.
pub fn evaluation_set_topics(set: &str) -> Option<&'static [String]> {
    evaluation_topics().get(set).map(Vec::as_slice)
}

/// Whether `text` touches a topic of an evaluation set under `examples/prompts/`.
pub fn touches_evaluation_set_topic(text: &str) -> bool {
    let lower = text.to_lowercase();
    evaluation_topics()
        .values()
        .flatten()
        .any(|topic| lower.contains(topic.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_conversation_reads_back_as_the_same_chat() {
        let messages = vec![
            ChatMessage::new("user", "Say \"hi\"\nthen stop."),
            ChatMessage::new("assistant", "hi"),
            ChatMessage::new("user", "Again?"),
        ];
        let text = [
            chat_prompt_line(&messages),
            chat_prompt_line(&messages[..1]),
        ]
        .join("\n");
        let prompts = parse_prompts_jsonl(&text, "written").unwrap();
        assert_eq!(prompts.len(), 2);
        assert!(matches!(&prompts[0], Prompt::Chat(read) if read == &messages));
        assert!(matches!(&prompts[1], Prompt::Chat(read) if read == &messages[..1]));
    }

    #[test]
    fn parses_the_three_line_forms_and_skips_blank_lines() {
        let text = concat!(
            "{\"prompt\": \"Hello\"}\n",
            "\n",
            "{\"prompt_token_ids\": [1, 2, 3]}\n",
            "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}\n",
        );
        let prompts = parse_prompts_jsonl(text, "mem").unwrap();
        assert_eq!(prompts.len(), 3);
        assert_eq!(prompts[0], Prompt::Text("Hello".into()));
        assert_eq!(prompts[1], Prompt::TokenIds(vec![1, 2, 3]));
        assert_eq!(
            prompts[2],
            Prompt::Chat(vec![ChatMessage::new("user", "Hi")])
        );
    }

    #[test]
    fn errors_name_the_line() {
        let err = parse_prompts_jsonl("{\"prompt\": \"a\"}\n{\"oops\": 1}\n", "p.jsonl")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("p.jsonl:2:"), "{err}");
        let both = parse_prompts_jsonl("{\"prompt\": \"a\", \"prompt_token_ids\": [1]}", "p")
            .unwrap_err()
            .to_string();
        assert!(both.contains("exactly one"), "{both}");
        assert!(matches!(
            parse_prompts_jsonl("\n\n", "p"),
            Err(PromptsFileError::Empty { .. })
        ));
    }

    #[test]
    fn pooled_files_keep_their_order_and_errors_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let (first, second) = (dir.path().join("a.jsonl"), dir.path().join("b.jsonl"));
        std::fs::write(&first, "{\"prompt\": \"a1\"}\n{\"prompt\": \"a2\"}\n").unwrap();
        std::fs::write(&second, "{\"prompt\": \"b1\"}\n").unwrap();
        let pooled = read_prompts_files(&[second.clone(), first.clone()]).unwrap();
        let texts = ["b1", "a1", "a2"].map(|t| Prompt::Text(t.into()));
        assert_eq!(pooled, texts);
        let missing = dir.path().join("missing.jsonl");
        let err = read_prompts_files(&[first, missing.clone()])
            .unwrap_err()
            .to_string();
        assert!(err.contains(&missing.display().to_string()), "{err}");
    }

    #[test]
    fn builtin_prompts_cycle() {
        let prompts = builtin_chat_prompts(BUILTIN_CHAT_PROMPTS.len() + 2);
        assert_eq!(prompts.len(), BUILTIN_CHAT_PROMPTS.len() + 2);
        assert_eq!(prompts[0], prompts[BUILTIN_CHAT_PROMPTS.len()]);
    }

    #[test]
    fn evaluation_topics_are_lowercase_and_name_existing_sets() {
        assert_eq!(evaluation_set_topics("no-such-set.jsonl"), None);
        let prompts = Path::new(env!("CARGO_MANIFEST_DIR")).join("prompts");
        assert_eq!(evaluation_topics().len(), 2);
        for (set, topics) in evaluation_topics() {
            assert!(
                prompts.join(set).is_file(),
                "{set} is not under examples/prompts"
            );
            assert!(!topics.is_empty(), "{set}");
            for topic in topics {
                assert_eq!(topic, &topic.to_lowercase(), "{set}");
            }
        }
        assert!(touches_evaluation_set_topic("Why do onions make me cry?"));
        assert!(!touches_evaluation_set_topic("How do I make a budget?"));
    }
}
