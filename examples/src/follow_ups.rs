//! Second user turns for self-distilled conversations: after the target has answered a
//! training prompt, a follow-up of the prompt's category ("Can you give me an example?", "Can
//! you add comments to the code?") asks for more, and the target's answer to it is a turn that
//! continues a conversation, as chat users' later turns do.
//!
//! The follow-ups are data (`examples/data/follow-ups.json`, built into the binary), generic
//! enough to fit any prompt of their category; which one a prompt gets is a function of the
//! run's seed and the prompt's index, so a resumed run asks what the interrupted one asked.

use std::sync::OnceLock;

use aquila_engine::ChatMessage;
use serde::Deserialize;

use crate::train_prompts::{PromptCategory, TrainingPrompt};

/// The follow-ups of every category.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FollowUps {
    question: Vec<String>,
    instruction: Vec<String>,
    story: Vec<String>,
    code: Vec<String>,
    math: Vec<String>,
}

impl FollowUps {
    /// The follow-ups that fit a prompt of `category`.
    fn of(&self, category: PromptCategory) -> &[String] {
        match category {
            PromptCategory::Question => &self.question,
            // The target's own requests are mostly requests for help with a task.
            PromptCategory::Instruction | PromptCategory::SelfInstructed => &self.instruction,
            PromptCategory::Story => &self.story,
            PromptCategory::Code => &self.code,
            PromptCategory::Math => &self.math,
        }
    }
}

/// The built-in follow-ups, parsed once.
fn follow_ups() -> &'static FollowUps {
    static DATA: OnceLock<FollowUps> = OnceLock::new();
    DATA.get_or_init(|| {
        serde_json::from_str(include_str!("../data/follow-ups.json"))
            .expect("examples/data/follow-ups.json is valid (checked by a unit test)")
    })
}

/// The follow-up that the `choice`-th draw gives a prompt of `category` (any `u64`, such as a
/// seeded hash of the prompt's index).
pub fn follow_up(category: PromptCategory, choice: u64) -> &'static str {
    let fitting = follow_ups().of(category);
    &fitting[(choice % fitting.len() as u64) as usize]
}

/// The conversation whose next assistant turn answers `follow_up`: the `prompt`, the target's
/// `first_answer` to it, then the follow-up.
pub fn follow_up_conversation(
    prompt: &TrainingPrompt,
    first_answer: &str,
    follow_up: &str,
) -> Vec<ChatMessage> {
    vec![
        ChatMessage::new("user", prompt.text.as_str()),
        ChatMessage::new("assistant", first_answer.trim()),
        ChatMessage::new("user", follow_up),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train_prompts::touches_held_out_topic;
    use std::collections::HashSet;

    #[test]
    fn every_category_has_several_distinct_follow_ups_clear_of_evaluation_topics() {
        for category in PromptCategory::ALL {
            let fitting = follow_ups().of(category);
            let distinct: HashSet<_> = fitting.iter().collect();
            assert!(distinct.len() >= 5, "{category:?}: {fitting:?}");
            assert_eq!(distinct.len(), fitting.len(), "{category:?} repeats one");
            for text in fitting {
                assert!(!touches_held_out_topic(text), "{text:?}");
                assert!(text.ends_with(['?', '.', '!']), "{text:?}");
            }
        }
    }

    #[test]
    fn draws_cover_the_category_and_repeat_for_the_same_choice() {
        let drawn: HashSet<_> = (0..200)
            .map(|choice| follow_up(PromptCategory::Code, choice))
            .collect();
        assert_eq!(drawn.len(), follow_ups().code.len());
        assert!(drawn.contains("Can you add comments to the code?"));
        assert_eq!(
            follow_up(PromptCategory::Story, 12_345),
            follow_up(PromptCategory::Story, 12_345)
        );
    }

    #[test]
    fn the_conversation_is_prompt_answer_then_follow_up() {
        let prompt = TrainingPrompt {
            category: PromptCategory::Question,
            text: "Why do cats purr?".into(),
        };
        let messages = follow_up_conversation(&prompt, " Cats purr to...\n", "Why is that?");
        let turns: Vec<_> = messages
            .iter()
            .map(|m| (m.role.as_str(), m.content.as_str()))
            .collect();
        assert_eq!(
            turns,
            [
                ("user", "Why do cats purr?"),
                ("assistant", "Cats purr to..."),
                ("user", "Why is that?"),
            ]
        );
    }
}
