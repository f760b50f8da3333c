//! Documents to chat samples: conversations as they are, documentation sections as an answer
//! to a question about their title or as the continuation of their first half; exact
//! duplicates dropped; held-out documents chosen by a hash of their id, so a held-out
//! document never lends a sample to training.

use std::collections::HashSet;

use aquila_model_loader::tokenizer::ChatMessage;
use sha2::{Digest, Sha256};

use super::rst::Section;

/// What a source document holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Content {
    /// Documentation: titled sections of prose and code.
    Sections(Vec<Section>),
    /// Dialogue: conversations of alternating turns, user first.
    Conversations(Vec<Vec<String>>),
}

/// One document of a source (a file of a package).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Document {
    /// The source's name (`python-docs`, `chatterbot`).
    pub source: String,
    /// Unique within the source (the file's path): the unit of the train/held-out split.
    pub id: String,
    /// The text.
    pub content: Content,
}

/// A training conversation: the last message is the assistant turn the head learns from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatSample {
    /// The source's name.
    pub source: String,
    /// The document's id.
    pub document: String,
    /// User and assistant turns, alternating, ending with the assistant.
    pub messages: Vec<ChatMessage>,
}

/// Questions a user asks about a documentation section (`{}` is its title).
const QUESTIONS: &[&str] = &[
    "Explain {}.",
    "What is {} in Python?",
    "Can you tell me about {}?",
    "Write a short explanation of {} for a Python programmer.",
    "How does {} work?",
    "Give me an overview of {}.",
    "I'm learning Python. What should I know about {}?",
    "Describe {} with an example.",
];

/// Most characters of one documentation answer; longer sections are cut at paragraphs.
pub const MAX_CHUNK_CHARS: usize = 1600;

/// The chat samples of `documents`, in order, exact duplicates (same turns after whitespace
/// and case folding) dropped.
pub fn chat_samples(documents: &[Document]) -> Vec<ChatSample> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for document in documents {
        for messages in document_messages(document) {
            if seen.insert(fingerprint(&messages)) {
                out.push(ChatSample {
                    source: document.source.clone(),
                    document: document.id.clone(),
                    messages,
                });
            }
        }
    }
    out
}

/// Splits samples into training and held-out ones: a document is held out when the hash of
/// `source/id` is divisible by `every` (0 holds out nothing).
pub fn split_by_document(
    samples: Vec<ChatSample>,
    every: u64,
) -> (Vec<ChatSample>, Vec<ChatSample>) {
    samples
        .into_iter()
        .partition(|s| !is_held_out(&s.source, &s.document, every))
}

/// Whether document `id` of `source` is held out (see [`split_by_document`]).
pub fn is_held_out(source: &str, id: &str, every: u64) -> bool {
    if every == 0 {
        return false;
    }
    let digest = Sha256::digest(format!("{source}/{id}").as_bytes());
    let value = u64::from_le_bytes(digest[..8].try_into().expect("8 bytes"));
    value % every == 0
}

/// The conversations a document yields.
fn document_messages(document: &Document) -> Vec<Vec<ChatMessage>> {
    match &document.content {
        Content::Conversations(conversations) => conversations
            .iter()
            .filter_map(|turns| {
                let even = turns.len() - turns.len() % 2;
                (even >= 2).then(|| alternate(&turns[..even]))
            })
            .collect(),
        Content::Sections(sections) => sections
            .iter()
            .enumerate()
            .flat_map(|(index, section)| {
                chunks(&section.body, MAX_CHUNK_CHARS)
                    .into_iter()
                    .enumerate()
                    .map(move |(part, chunk)| {
                        let pick = stable_index(&document.id, index, part);
                        section_messages(&section.title, &chunk, pick)
                    })
            })
            .collect(),
    }
}

/// User and assistant messages alternating over `turns`.
fn alternate(turns: &[String]) -> Vec<ChatMessage> {
    turns
        .iter()
        .enumerate()
        .map(|(i, t)| {
            if i % 2 == 0 {
                ChatMessage::user(t.trim())
            } else {
                ChatMessage::assistant(t.trim())
            }
        })
        .collect()
}

/// A question about `title` answered by `chunk`, or (one pick in four, when the chunk has
/// two paragraphs or more) a request to continue its first half.
fn section_messages(title: &str, chunk: &str, pick: usize) -> Vec<ChatMessage> {
    let paragraphs = split_paragraphs(chunk);
    if pick % 4 == 3 && paragraphs.len() >= 2 {
        let half = paragraphs.len() / 2;
        let first = paragraphs[..half].join("\n\n");
        let rest = paragraphs[half..].join("\n\n");
        return vec![
            ChatMessage::user(format!(
                "Here is the beginning of a text about {title}. Continue it.\n\n{first}"
            )),
            ChatMessage::assistant(rest),
        ];
    }
    let question = QUESTIONS[pick % QUESTIONS.len()].replace("{}", title);
    vec![
        ChatMessage::user(question),
        ChatMessage::assistant(chunk.trim_start().to_string()),
    ]
}

/// Paragraphs of `text` (blank-line separated), a fenced code block kept whole.
fn split_paragraphs(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut in_code = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
        }
        if line.trim().is_empty() && !in_code {
            if !current.is_empty() {
                out.push(std::mem::take(&mut current));
            }
            continue;
        }
        if !current.is_empty() {
            current.push('\n');
        }
        current.push_str(line);
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

/// Consecutive paragraphs of `text` grouped into chunks of at most `max_chars` (a longer
/// paragraph forms a chunk alone).
pub fn chunks(text: &str, max_chars: usize) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut current = String::new();
    for paragraph in split_paragraphs(text) {
        if !current.is_empty() && current.len() + paragraph.len() + 2 > max_chars {
            out.push(std::mem::take(&mut current));
        }
        if !current.is_empty() {
            current.push_str("\n\n");
        }
        current.push_str(&paragraph);
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

/// A number fixed by a chunk's place, to vary question styles reproducibly.
fn stable_index(document: &str, section: usize, part: usize) -> usize {
    let digest = Sha256::digest(format!("{document}#{section}#{part}").as_bytes());
    u32::from_le_bytes(digest[..4].try_into().expect("4 bytes")) as usize
}

/// The identity of a conversation for deduplication: its turns, case and whitespace folded.
fn fingerprint(messages: &[ChatMessage]) -> [u8; 32] {
    let mut hasher = Sha256::new();
    for message in messages {
        let folded: Vec<String> = message
            .content
            .split_whitespace()
            .map(str::to_lowercase)
            .collect();
        hasher.update(message.role.as_bytes());
        hasher.update([0]);
        hasher.update(folded.join(" ").as_bytes());
        hasher.update([0]);
    }
    hasher.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dialog(id: &str, conversations: &[&[&str]]) -> Document {
        Document {
            source: "chat".into(),
            id: id.into(),
            content: Content::Conversations(
                conversations
                    .iter()
                    .map(|c| c.iter().map(|t| t.to_string()).collect())
                    .collect(),
            ),
        }
    }

    #[test]
    fn formats_conversations_and_drops_duplicates() {
        let docs = [
            dialog(
                "a",
                &[&["Hi", "Hello!"], &["Q", "A", "Q2"], &["hi ", "hello!"]],
            ),
            dialog("b", &[&["Hi", "Hello!"], &["lonely"]]),
        ];
        let samples = chat_samples(&docs);
        assert_eq!(samples.len(), 2, "{samples:?}");
        assert_eq!(samples[0].messages[0], ChatMessage::user("Hi"));
        assert_eq!(samples[0].messages[1], ChatMessage::assistant("Hello!"));
        // An odd turn at the end has no answer and is dropped.
        assert_eq!(samples[1].messages.len(), 2);
        assert_eq!(samples[1].messages[1].content, "A");
    }

    #[test]
    fn sections_become_questions_or_continuations() {
        let body = "First paragraph.\n\n```python\nx = 1\n\ny = 2\n```\n\nLast one.";
        let question = section_messages("lists", body, 0);
        assert_eq!(question[0], ChatMessage::user("Explain lists."));
        assert_eq!(question[1].content, body);
        let continuation = section_messages("lists", body, 3);
        assert!(continuation[0]
            .content
            .ends_with("Continue it.\n\nFirst paragraph."));
        // The code block is one paragraph: its blank line does not split it.
        assert_eq!(
            continuation[1].content,
            "```python\nx = 1\n\ny = 2\n```\n\nLast one."
        );
        assert_eq!(
            chunks(body, 20),
            vec![
                "First paragraph.",
                "```python\nx = 1\n\ny = 2\n```",
                "Last one."
            ]
        );
    }

    #[test]
    fn held_out_documents_never_reach_training() {
        let docs: Vec<Document> = (0..40)
            .map(|i| {
                dialog(
                    &format!("doc{i}"),
                    &[&["q", &format!("a{i}")], &["q2", &format!("b{i}")]],
                )
            })
            .collect();
        let (train, held) = split_by_document(chat_samples(&docs), 4);
        assert!(!held.is_empty() && !train.is_empty());
        let held_docs: HashSet<&str> = held.iter().map(|s| s.document.as_str()).collect();
        assert!(train
            .iter()
            .all(|s| !held_docs.contains(s.document.as_str())));
        assert!(held.iter().all(|s| is_held_out("chat", &s.document, 4)));
        assert_eq!(split_by_document(chat_samples(&docs), 0).1.len(), 0);
    }
}
