//! A request's output as it is assembled: generated text (incrementally detokenized and
//! streamed with a stop-string holdback), stop checks on every emitted token, and
//! log-probabilities.

use aquila_model_loader::tokenizer::{Decode, StreamDecoder};

use crate::output::{PositionLogprobs, StopReason};
use crate::stop::{Finish, StopConditions};

/// What appending a step's emitted tokens did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Appended {
    /// Leading emitted tokens kept (all, unless a stop condition matched earlier).
    pub num_kept: usize,
    /// How the request finished, if it did.
    pub finish: Option<Finish>,
}

/// The sequence lengths a step's tokens are appended after.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SequenceLen {
    /// Generated tokens so far.
    pub num_output_tokens: usize,
    /// Prompt plus generated tokens so far.
    pub num_tokens: usize,
}

/// The text, stop conditions and log-probabilities of one request's output.
#[derive(Debug)]
pub(crate) struct OutputAssembler {
    /// The prompt text, if the prompt was text or chat.
    prompt: Option<String>,
    /// When the request stops.
    stop: StopConditions,
    detokenizer: StreamDecoder,
    text: String,
    streamed_bytes: usize,
    logprobs: Option<Vec<PositionLogprobs>>,
}

/// The assembled output of a finished request.
#[derive(Debug)]
pub(crate) struct AssembledOutput {
    /// The prompt text, if the prompt was text or chat.
    pub prompt: Option<String>,
    /// The generated text, without a matched stop string.
    pub text: String,
    /// Per generated token, when asked for.
    pub logprobs: Option<Vec<PositionLogprobs>>,
}

impl OutputAssembler {
    /// The assembler of a request about to be queued; `num_logprobs` is `Some` when the
    /// request asked for log-probabilities.
    pub fn new(
        prompt: Option<String>,
        prompt_token_ids: &[u32],
        skip_special_tokens: bool,
        num_logprobs: Option<usize>,
        stop: StopConditions,
    ) -> Self {
        Self {
            prompt,
            stop,
            detokenizer: StreamDecoder::with_context(prompt_token_ids, skip_special_tokens),
            text: String::new(),
            streamed_bytes: 0,
            logprobs: num_logprobs.map(|_| Vec::new()),
        }
    }

    /// Tokens that may not be sampled yet (`min_tokens`): see
    /// [`StopConditions::suppressed_tokens`].
    pub fn suppressed_tokens(&self, num_output_tokens: usize) -> Vec<u32> {
        self.stop.suppressed_tokens(num_output_tokens)
    }

    /// Appends the tokens a step emitted after a sequence of length `before`, one at a time
    /// with stop checks, until all are in or a stop condition ends the request.
    pub fn append<D: Decode>(
        &mut self,
        decoder: &D,
        before: SequenceLen,
        tokens: &[u32],
        logprobs: Option<Vec<PositionLogprobs>>,
    ) -> Result<Appended, D::Error> {
        let mut finish = None;
        let mut num_kept = 0;
        for &token in tokens {
            let new_text = self.detokenizer.push(decoder, token)?.unwrap_or_default();
            let new_text_start = self.text.len();
            self.text.push_str(&new_text);
            num_kept += 1;
            finish = self.stop.check(
                token,
                before.num_output_tokens + num_kept,
                before.num_tokens + num_kept,
                &mut self.text,
                new_text_start,
            );
            if finish.is_some() {
                break;
            }
        }
        if let (Some(all), Some(new)) = (self.logprobs.as_mut(), logprobs) {
            all.extend(new.into_iter().take(num_kept));
        }
        let matched_stop_string = matches!(
            finish,
            Some(Finish {
                stop_reason: Some(StopReason::String(_)),
                ..
            })
        );
        if finish.is_some() && !matched_stop_string {
            self.flush_text(decoder)?;
        }
        Ok(Appended { num_kept, finish })
    }

    /// Appends the text the detokenizer still holds back (the request ends).
    pub fn flush_text<D: Decode>(&mut self, decoder: &D) -> Result<(), D::Error> {
        if let Some(rest) = self.detokenizer.flush(decoder)? {
            self.text.push_str(&rest);
        }
        Ok(())
    }

    /// Text that became final since the last call: everything when `finished`, otherwise all
    /// but the tail that may still turn out to start a stop string.
    pub fn take_new_text(&mut self, finished: bool) -> String {
        let mut end = if finished {
            self.text.len()
        } else {
            self.text.len().saturating_sub(self.stop.holdback_bytes())
        };
        while !self.text.is_char_boundary(end) {
            end -= 1;
        }
        if end <= self.streamed_bytes {
            return String::new();
        }
        let new_text = self.text[self.streamed_bytes..end].to_string();
        self.streamed_bytes = end;
        new_text
    }

    /// The finished output.
    pub fn finish(self) -> AssembledOutput {
        AssembledOutput {
            prompt: self.prompt,
            text: self.text,
            logprobs: self.logprobs,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::TokenLogprob;
    use crate::sampling_params::SamplingParams;

    /// Token `t` decodes to the character `'a' + t`; token 25 is "\n".
    struct Letters;

    impl Decode for Letters {
        type Error = String;
        fn decode(&self, ids: &[u32], _skip: bool) -> Result<String, String> {
            Ok(ids
                .iter()
                .map(|&t| {
                    if t == 25 {
                        '\n'
                    } else {
                        char::from(b'a' + t as u8)
                    }
                })
                .collect())
        }
    }

    fn assembler(params: &SamplingParams) -> OutputAssembler {
        let stop = StopConditions::new(params, &[24], 100);
        OutputAssembler::new(None, &[0], true, params.logprobs, stop)
    }

    /// The lengths of a one-token prompt followed by `outputs` generated tokens.
    fn after(outputs: usize) -> SequenceLen {
        SequenceLen {
            num_output_tokens: outputs,
            num_tokens: 1 + outputs,
        }
    }

    #[test]
    fn a_stop_inside_a_multi_token_step_keeps_the_tokens_up_to_it() {
        let mut output = assembler(&SamplingParams {
            stop: vec!["cd".into()],
            ..SamplingParams::default()
        });
        let appended = output.append(&Letters, after(0), &[1, 2], None).unwrap();
        assert_eq!(
            appended,
            Appended {
                num_kept: 2,
                finish: None
            }
        );
        assert_eq!(
            output.take_new_text(false),
            "b",
            "\"c\" may start the stop string"
        );
        let appended = output.append(&Letters, after(2), &[3, 4, 5], None).unwrap();
        assert_eq!(appended.num_kept, 1);
        assert_eq!(
            appended.finish,
            Some(Finish::stop(StopReason::String("cd".into())))
        );
        assert_eq!(output.take_new_text(true), "");
        assert_eq!(output.finish().text, "b");
    }

    #[test]
    fn streamed_text_concatenates_to_the_final_text() {
        let mut output = assembler(&SamplingParams {
            stop: vec!["zz".into()],
            max_tokens: 6,
            ..SamplingParams::default()
        });
        let mut streamed = String::new();
        for (generated, token) in [7u32, 4, 11, 11, 14, 25].into_iter().enumerate() {
            let appended = output
                .append(&Letters, after(generated), &[token], None)
                .unwrap();
            let finished = appended.finish.is_some();
            streamed.push_str(&output.take_new_text(finished));
            if finished {
                assert_eq!(appended.finish, Some(Finish::LENGTH));
            }
        }
        let text = output.finish().text;
        assert_eq!(text, "hello\n");
        assert_eq!(streamed, text);
    }

    #[test]
    fn eos_ends_the_step_and_logprobs_are_truncated_with_the_tokens() {
        let mut output = assembler(&SamplingParams {
            logprobs: Some(0),
            ..SamplingParams::default()
        });
        let logprob = |token_id| PositionLogprobs {
            sampled: TokenLogprob {
                token_id,
                logprob: -1.0,
            },
            top: vec![],
        };
        let appended = output
            .append(
                &Letters,
                after(0),
                &[24, 3],
                Some(vec![logprob(24), logprob(3)]),
            )
            .unwrap();
        assert_eq!(appended.num_kept, 1);
        assert_eq!(appended.finish, Some(Finish::stop(StopReason::Eos(24))));
        assert_eq!(output.finish().logprobs.unwrap().len(), 1);
    }
}
