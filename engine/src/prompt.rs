//! Prompts as users give them: text, token ids or chat conversations, one or many.

use aquila_model_loader::tokenizer::ChatMessage;
use serde::{Deserialize, Serialize};

/// One prompt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Prompt {
    /// Text, tokenized with the model's tokenizer (special tokens are added as the tokenizer
    /// configures, like vLLM).
    Text(String),
    /// Token ids, used as they are.
    TokenIds(Vec<u32>),
    /// A conversation, rendered with the tokenizer's chat template and an assistant generation
    /// prompt, then tokenized without adding special tokens.
    Chat(Vec<ChatMessage>),
}

impl From<&str> for Prompt {
    fn from(text: &str) -> Self {
        Prompt::Text(text.to_string())
    }
}

impl From<String> for Prompt {
    fn from(text: String) -> Self {
        Prompt::Text(text)
    }
}

impl From<Vec<u32>> for Prompt {
    fn from(token_ids: Vec<u32>) -> Self {
        Prompt::TokenIds(token_ids)
    }
}

impl From<Vec<ChatMessage>> for Prompt {
    fn from(messages: Vec<ChatMessage>) -> Self {
        Prompt::Chat(messages)
    }
}

/// A batch of prompts, built from one prompt or a list of them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Prompts(pub Vec<Prompt>);

impl Prompts {
    /// Number of prompts.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the batch has no prompt.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<Prompt> for Prompts {
    fn from(prompt: Prompt) -> Self {
        Prompts(vec![prompt])
    }
}

impl From<&str> for Prompts {
    fn from(text: &str) -> Self {
        Prompt::from(text).into()
    }
}

impl From<String> for Prompts {
    fn from(text: String) -> Self {
        Prompt::from(text).into()
    }
}

impl<P: Into<Prompt>> From<Vec<P>> for Prompts {
    fn from(prompts: Vec<P>) -> Self {
        Prompts(prompts.into_iter().map(Into::into).collect())
    }
}

impl<P: Into<Prompt> + Clone> From<&[P]> for Prompts {
    fn from(prompts: &[P]) -> Self {
        Prompts(prompts.iter().cloned().map(Into::into).collect())
    }
}

impl<P: Into<Prompt>, const N: usize> From<[P; N]> for Prompts {
    fn from(prompts: [P; N]) -> Self {
        Prompts(prompts.into_iter().map(Into::into).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions_cover_single_and_batched_prompts() {
        assert_eq!(
            Prompts::from("hi"),
            Prompts(vec![Prompt::Text("hi".into())])
        );
        assert_eq!(Prompts::from(vec!["a", "b"]).len(), 2);
        assert_eq!(Prompts::from(["a", "b", "c"]).len(), 3);
        let ids: Prompts = vec![vec![1u32, 2], vec![3]].into();
        assert_eq!(ids.0[1], Prompt::TokenIds(vec![3]));
        let chat: Prompts = Prompt::from(vec![ChatMessage::user("hello")]).into();
        assert!(matches!(&chat.0[0], Prompt::Chat(messages) if messages.len() == 1));
        let slice: &[&str] = &["x"];
        assert!(!Prompts::from(slice).is_empty());
    }
}
