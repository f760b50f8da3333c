//! Stop conditions of a request: EOS (unless `ignore_eos`), stop token ids, stop strings that may
//! span token boundaries, `max_tokens` and `max_model_len`.
//!
//! Checks run once per generated token, in order, so a step that emits several tokens (accepted
//! drafts plus the bonus token) stops at the first token that ends the request. The stop-token
//! and stop-string checks are skipped until `min_tokens` tokens exist. A matched stop string and
//! anything after it are cut from the text, like vLLM.

use crate::output::{FinishReason, StopReason};
use crate::sampling_params::SamplingParams;

/// How a request ended: the reason and, when a stop condition matched, which one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Finish {
    /// The reason (the metrics label and [`crate::RequestOutput::finish_reason`]).
    pub reason: FinishReason,
    /// The stop condition that matched (`reason` is `Stop`).
    pub stop_reason: Option<StopReason>,
}

impl Finish {
    /// `max_tokens` or `max_model_len` was reached.
    pub const LENGTH: Finish = Finish {
        reason: FinishReason::Length,
        stop_reason: None,
    };
    /// The request was aborted.
    pub const ABORT: Finish = Finish {
        reason: FinishReason::Abort,
        stop_reason: None,
    };

    /// The stop condition `stop_reason` matched.
    pub fn stop(stop_reason: StopReason) -> Self {
        Self {
            reason: FinishReason::Stop,
            stop_reason: Some(stop_reason),
        }
    }
}

/// One request's stop conditions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct StopConditions {
    /// Tokens that end generation as EOS (empty with `ignore_eos`).
    eos_token_ids: Vec<u32>,
    /// The request's stop token ids.
    stop_token_ids: Vec<u32>,
    /// The request's stop strings.
    stop_strings: Vec<String>,
    /// Generated tokens before any stop condition but the length limits may apply.
    min_tokens: usize,
    /// Most generated tokens.
    max_tokens: usize,
    /// Longest sequence (prompt plus output).
    max_model_len: usize,
}

impl StopConditions {
    /// The stop conditions of a request with `params` on a model whose EOS tokens are
    /// `eos_token_ids`.
    pub fn new(params: &SamplingParams, eos_token_ids: &[u32], max_model_len: usize) -> Self {
        Self {
            eos_token_ids: if params.ignore_eos {
                Vec::new()
            } else {
                eos_token_ids.to_vec()
            },
            stop_token_ids: params.stop_token_ids.clone(),
            stop_strings: params.stop.clone(),
            min_tokens: params.min_tokens,
            max_tokens: params.max_tokens,
            max_model_len,
        }
    }

    /// Checks a request after one token was appended.
    ///
    /// `num_output_tokens` and `num_tokens` count the generated tokens and the whole sequence,
    /// the new token included; `text` is the generated text including the new token's text,
    /// which starts at byte `new_text_start`. A matched stop string is cut from `text`.
    pub fn check(
        &self,
        token: u32,
        num_output_tokens: usize,
        num_tokens: usize,
        text: &mut String,
        new_text_start: usize,
    ) -> Option<Finish> {
        if num_output_tokens >= self.min_tokens {
            if self.eos_token_ids.contains(&token) {
                return Some(Finish::stop(StopReason::Eos(token)));
            }
            if self.stop_token_ids.contains(&token) {
                return Some(Finish::stop(StopReason::TokenId(token)));
            }
            if let Some((start, stop)) = self.find_stop_string(text, new_text_start) {
                let stop = stop.to_string();
                text.truncate(start);
                return Some(Finish::stop(StopReason::String(stop)));
            }
        }
        if num_output_tokens >= self.max_tokens || num_tokens >= self.max_model_len {
            return Some(Finish::LENGTH);
        }
        None
    }

    /// Tokens that may not be sampled yet (EOS and stop token ids before `min_tokens` tokens
    /// were generated); empty once `num_output_tokens` reaches `min_tokens`.
    pub fn suppressed_tokens(&self, num_output_tokens: usize) -> Vec<u32> {
        if num_output_tokens >= self.min_tokens {
            return Vec::new();
        }
        let mut tokens = self.eos_token_ids.clone();
        tokens.extend(&self.stop_token_ids);
        tokens
    }

    /// Bytes at the end of the text that streaming must hold back because they may be the start
    /// of a stop string (the longest stop string's length minus one).
    pub fn holdback_bytes(&self) -> usize {
        self.stop_strings
            .iter()
            .map(|stop| stop.len().saturating_sub(1))
            .max()
            .unwrap_or(0)
    }

    /// The earliest stop string match that ends inside the new text, as (byte start, string).
    ///
    /// The search starts up to `holdback_bytes` before `new_text_start`, so matches spanning
    /// the boundary between earlier tokens and the new one are found.
    fn find_stop_string(&self, text: &str, new_text_start: usize) -> Option<(usize, &str)> {
        let mut from = new_text_start.saturating_sub(self.holdback_bytes());
        while !text.is_char_boundary(from) {
            from -= 1;
        }
        self.stop_strings
            .iter()
            .filter_map(|stop| {
                text[from..]
                    .find(stop.as_str())
                    .map(|at| (from + at, stop.as_str()))
            })
            .min_by_key(|&(start, _)| start)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EOS: u32 = 2;

    fn conditions(params: SamplingParams) -> StopConditions {
        StopConditions::new(&params, &[EOS], 100)
    }

    /// Feeds `pieces` as the text of successive tokens 10, 11, ...; returns the finish reason,
    /// the index of the token that finished and the final text.
    fn run(stop: &StopConditions, pieces: &[&str]) -> (Option<Finish>, usize, String) {
        let mut text = String::new();
        for (i, piece) in pieces.iter().enumerate() {
            let start = text.len();
            text.push_str(piece);
            if let Some(reason) = stop.check(10 + i as u32, i + 1, i + 1, &mut text, start) {
                return (Some(reason), i, text);
            }
        }
        (None, pieces.len(), text)
    }

    #[test]
    fn eos_stops_unless_ignored() {
        let stop = conditions(SamplingParams::default());
        let mut text = String::new();
        assert_eq!(
            stop.check(EOS, 1, 5, &mut text, 0),
            Some(Finish::stop(StopReason::Eos(EOS)))
        );
        let ignore = conditions(SamplingParams {
            ignore_eos: true,
            ..SamplingParams::default()
        });
        assert_eq!(ignore.check(EOS, 1, 5, &mut text, 0), None);
    }

    #[test]
    fn stop_token_ids_and_length_limits() {
        let stop = conditions(SamplingParams {
            stop_token_ids: vec![7],
            max_tokens: 3,
            ..SamplingParams::default()
        });
        let mut text = String::new();
        assert_eq!(
            stop.check(7, 1, 5, &mut text, 0),
            Some(Finish::stop(StopReason::TokenId(7)))
        );
        assert_eq!(stop.check(8, 2, 6, &mut text, 0), None);
        assert_eq!(stop.check(8, 3, 7, &mut text, 0), Some(Finish::LENGTH));
        assert_eq!(stop.check(8, 1, 100, &mut text, 0), Some(Finish::LENGTH));
    }

    #[test]
    fn stop_string_spanning_tokens_is_cut_from_the_text() {
        let stop = conditions(SamplingParams {
            stop: vec!["STOP".into()],
            ..SamplingParams::default()
        });
        let (reason, at, text) = run(&stop, &["Hello ", "wor", "ld S", "TO", "P and more"]);
        assert_eq!(
            reason,
            Some(Finish::stop(StopReason::String("STOP".into())))
        );
        assert_eq!(at, 4);
        assert_eq!(text, "Hello world ");
    }

    #[test]
    fn earliest_of_several_stop_strings_wins() {
        let stop = conditions(SamplingParams {
            stop: vec!["cd".into(), "bc".into()],
            ..SamplingParams::default()
        });
        let (reason, _, text) = run(&stop, &["a", "bcd"]);
        assert_eq!(reason, Some(Finish::stop(StopReason::String("bc".into()))));
        assert_eq!(text, "a");
    }

    #[test]
    fn stop_strings_next_to_multibyte_characters() {
        let stop = conditions(SamplingParams {
            stop: vec!["é!".into()],
            ..SamplingParams::default()
        });
        let (reason, _, text) = run(&stop, &["ééé", "é", "!"]);
        assert!(matches!(
            reason,
            Some(Finish {
                stop_reason: Some(StopReason::String(_)),
                ..
            })
        ));
        assert_eq!(text, "éééé".strip_suffix('é').unwrap());
        assert_eq!(stop.holdback_bytes(), 2);
    }

    #[test]
    fn min_tokens_defers_stops_and_suppresses_stop_tokens() {
        let stop = conditions(SamplingParams {
            min_tokens: 2,
            stop_token_ids: vec![9],
            stop: vec!["x".into()],
            ..SamplingParams::default()
        });
        assert_eq!(stop.suppressed_tokens(0), vec![EOS, 9]);
        assert!(stop.suppressed_tokens(2).is_empty());
        let mut text = "x".to_string();
        assert_eq!(stop.check(EOS, 1, 5, &mut text, 0), None);
        assert_eq!(text, "x");
        assert!(stop.check(EOS, 2, 6, &mut text, 0).is_some());
    }
}
