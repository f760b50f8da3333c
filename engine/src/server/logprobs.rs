//! A request's log-probabilities in the two OpenAI formats: the legacy completions one and the
//! chat one.

use aquila_model_loader::tokenizer::Tokenizer;

use super::protocol::chat::{ChatLogprobs, ChatTokenLogprob, ChatTopLogprob};
use super::protocol::completions::CompletionLogprobs;
use crate::output::RequestOutput;

/// The text of one token (special tokens spelled out).
fn token_text(tokenizer: &Tokenizer, token_id: u32) -> String {
    tokenizer.decode(&[token_id], false).unwrap_or_default()
}

/// `logprobs` of a completion choice, when the request asked for them.
pub fn completion_logprobs(
    output: &RequestOutput,
    tokenizer: &Tokenizer,
) -> Option<CompletionLogprobs> {
    let positions = output.logprobs.as_ref()?;
    let mut logprobs = CompletionLogprobs::default();
    let mut offset = 0;
    for position in positions {
        let token = token_text(tokenizer, position.sampled.token_id);
        logprobs.text_offset.push(offset);
        offset += token.len();
        logprobs.tokens.push(token);
        logprobs.token_logprobs.push(position.sampled.logprob);
        logprobs.top_logprobs.push(
            position
                .top
                .iter()
                .map(|top| (token_text(tokenizer, top.token_id), top.logprob))
                .collect(),
        );
    }
    Some(logprobs)
}

/// `logprobs` of a chat choice, when the request asked for them.
pub fn chat_logprobs(output: &RequestOutput, tokenizer: &Tokenizer) -> Option<ChatLogprobs> {
    let positions = output.logprobs.as_ref()?;
    let content = positions
        .iter()
        .map(|position| {
            let token = token_text(tokenizer, position.sampled.token_id);
            ChatTokenLogprob {
                bytes: token.as_bytes().to_vec(),
                token,
                logprob: position.sampled.logprob,
                top_logprobs: position
                    .top
                    .iter()
                    .map(|top| {
                        let token = token_text(tokenizer, top.token_id);
                        ChatTopLogprob {
                            bytes: token.as_bytes().to_vec(),
                            token,
                            logprob: top.logprob,
                        }
                    })
                    .collect(),
            }
        })
        .collect();
    Some(ChatLogprobs { content })
}
