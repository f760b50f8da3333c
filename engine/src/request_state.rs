//! The engine's per-request generation state: sampling pipeline and random stream, stop
//! conditions, output text (incrementally detokenized, streamed with a stop-string holdback),
//! log-probabilities, timing and speculative-decoding counts.

use aquila_spec_decode::sampling::{RequestRng, SamplingConfig};

use crate::output::{FinishReason, PositionLogprobs, RequestOutput, StopReason};
use crate::request::Request;
use crate::sampling_params::SamplingParams;
use crate::stop::StopConditions;
use crate::timing::RequestTiming;
use aquila_model_loader::tokenizer::{Decode, StreamDecoder};

/// Speculative-decoding counts of one request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SpecCounts {
    /// Verifications with at least one draft token.
    pub drafts: usize,
    /// Draft tokens proposed.
    pub draft_tokens: usize,
    /// Draft tokens accepted and emitted.
    pub accepted_tokens: usize,
}

/// What appending a step's emitted tokens did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Appended {
    /// Leading emitted tokens kept (all, unless a stop condition matched earlier).
    pub num_kept: usize,
    /// Why the request finished, if it did.
    pub finish_reason: Option<FinishReason>,
}

/// Generation state of one request.
#[derive(Debug)]
pub(crate) struct RequestState {
    /// The prompt text, if the prompt was text or chat.
    pub prompt: Option<String>,
    /// The request's parameters.
    pub params: SamplingParams,
    /// The sampling pipeline derived from the parameters.
    pub sampling: SamplingConfig,
    /// The request's own random stream.
    pub rng: RequestRng,
    /// When the request stops.
    pub stop: StopConditions,
    /// Lifecycle timestamps.
    pub timing: RequestTiming,
    /// Speculative-decoding counts.
    pub spec: SpecCounts,
    /// The `q` rows (`vocab_size` each) of the request's pending draft tokens when the drafter
    /// sampled them; `None` for deterministic drafts (verified with a one-hot `q`).
    pub draft_probs: Option<Vec<f32>>,
    detokenizer: StreamDecoder,
    text: String,
    streamed_bytes: usize,
    logprobs: Option<Vec<PositionLogprobs>>,
}

impl RequestState {
    /// The state of a request about to be queued.
    pub fn new(
        prompt: Option<String>,
        prompt_token_ids: &[u32],
        params: SamplingParams,
        seed: u64,
        stop: StopConditions,
        timing: RequestTiming,
    ) -> Self {
        Self {
            prompt,
            sampling: sampling_config(&params),
            rng: RequestRng::new(seed),
            stop,
            timing,
            spec: SpecCounts::default(),
            draft_probs: None,
            detokenizer: StreamDecoder::with_context(prompt_token_ids, params.skip_special_tokens),
            text: String::new(),
            streamed_bytes: 0,
            logprobs: params.logprobs.map(|_| Vec::new()),
            params,
        }
    }

    /// Appends the tokens a step emitted, one at a time with stop checks, until all are in or
    /// a stop condition ends the request. `request` is the sequence before the tokens.
    pub fn append<D: Decode>(
        &mut self,
        decoder: &D,
        request: &Request,
        tokens: &[u32],
        logprobs: Option<Vec<PositionLogprobs>>,
    ) -> Result<Appended, D::Error> {
        let mut finish_reason = None;
        let mut num_kept = 0;
        for &token in tokens {
            let new_text = self.detokenizer.push(decoder, token)?.unwrap_or_default();
            let new_text_start = self.text.len();
            self.text.push_str(&new_text);
            num_kept += 1;
            finish_reason = self.stop.check(
                token,
                request.output_token_ids().len() + num_kept,
                request.num_tokens() + num_kept,
                &mut self.text,
                new_text_start,
            );
            if finish_reason.is_some() {
                break;
            }
        }
        if let (Some(all), Some(new)) = (self.logprobs.as_mut(), logprobs) {
            all.extend(new.into_iter().take(num_kept));
        }
        let matched_stop_string = matches!(
            finish_reason,
            Some(FinishReason::Stop(StopReason::String(_)))
        );
        if finish_reason.is_some() && !matched_stop_string {
            self.flush_text(decoder)?;
        }
        Ok(Appended {
            num_kept,
            finish_reason,
        })
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

    /// The final output of the finished `request`.
    pub fn into_output(self, request: &Request, finish_reason: FinishReason) -> RequestOutput {
        let output_token_ids = request.output_token_ids().to_vec();
        let mut metrics = self
            .timing
            .request_metrics(request.num_prompt_tokens, output_token_ids.len());
        metrics.num_preemptions = request.num_preemptions;
        metrics.num_drafts = self.spec.drafts;
        metrics.num_draft_tokens = self.spec.draft_tokens;
        metrics.num_accepted_tokens = self.spec.accepted_tokens;
        RequestOutput {
            request_id: request.id,
            prompt: self.prompt,
            prompt_token_ids: request.token_ids[..request.num_prompt_tokens].to_vec(),
            text: self.text,
            token_ids: output_token_ids,
            finish_reason,
            logprobs: self.logprobs,
            metrics,
        }
    }
}

/// The spec-decode sampling pipeline of `params` (validated).
fn sampling_config(params: &SamplingParams) -> SamplingConfig {
    SamplingConfig {
        temperature: params.temperature,
        top_k: params.top_k.unwrap_or(0),
        top_p: params.top_p,
        min_p: params.min_p,
        presence_penalty: params.presence_penalty,
        frequency_penalty: params.frequency_penalty,
        repetition_penalty: params.repetition_penalty,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

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

    fn state(params: SamplingParams) -> RequestState {
        let stop = StopConditions::new(&params, &[24], 100);
        RequestState::new(
            None,
            &[0],
            params,
            1,
            stop,
            RequestTiming::new(Instant::now()),
        )
    }

    #[test]
    fn params_become_the_sampling_pipeline() {
        let params = SamplingParams {
            temperature: 0.5,
            top_k: Some(7),
            top_p: 0.9,
            min_p: 0.1,
            repetition_penalty: 1.2,
            ..SamplingParams::default()
        };
        let config = sampling_config(&params);
        assert_eq!(config.top_k, 7);
        assert_eq!(config.top_p, 0.9);
        assert_eq!(config.repetition_penalty, 1.2);
        config.validate().unwrap();
        assert_eq!(sampling_config(&SamplingParams::default()).top_k, 0);
    }

    #[test]
    fn a_stop_inside_a_multi_token_step_keeps_the_tokens_up_to_it() {
        let mut state = state(SamplingParams {
            stop: vec!["cd".into()],
            ..SamplingParams::default()
        });
        let mut request = Request::new(0, vec![0]);
        let appended = state.append(&Letters, &request, &[1, 2], None).unwrap();
        assert_eq!(
            appended,
            Appended {
                num_kept: 2,
                finish_reason: None
            }
        );
        assert_eq!(
            state.take_new_text(false),
            "b",
            "\"c\" may start the stop string"
        );
        request.token_ids.extend([1, 2]);
        let appended = state.append(&Letters, &request, &[3, 4, 5], None).unwrap();
        assert_eq!(appended.num_kept, 1);
        assert_eq!(
            appended.finish_reason,
            Some(FinishReason::Stop(StopReason::String("cd".into())))
        );
        assert_eq!(state.take_new_text(true), "");
        request.token_ids.push(3);
        let output = state.into_output(&request, appended.finish_reason.unwrap());
        assert_eq!(output.text, "b");
        assert_eq!(output.token_ids, vec![1, 2, 3]);
        assert_eq!(output.prompt_token_ids, vec![0]);
    }

    #[test]
    fn streamed_text_concatenates_to_the_final_text() {
        let mut state = state(SamplingParams {
            stop: vec!["zz".into()],
            max_tokens: 6,
            ..SamplingParams::default()
        });
        let mut request = Request::new(0, vec![0]);
        let mut streamed = String::new();
        for token in [7u32, 4, 11, 11, 14, 25] {
            let appended = state.append(&Letters, &request, &[token], None).unwrap();
            request.token_ids.push(token);
            let finished = appended.finish_reason.is_some();
            streamed.push_str(&state.take_new_text(finished));
            if finished {
                assert_eq!(appended.finish_reason, Some(FinishReason::Length));
            }
        }
        let output = state.into_output(&request, FinishReason::Length);
        assert_eq!(output.text, "hello\n");
        assert_eq!(streamed, output.text);
    }

    #[test]
    fn eos_is_kept_in_the_token_ids_and_logprobs_are_truncated_with_the_tokens() {
        let mut state = state(SamplingParams {
            logprobs: Some(0),
            ..SamplingParams::default()
        });
        let request = Request::new(0, vec![0]);
        let logprob = |token_id| PositionLogprobs {
            sampled: crate::output::TokenLogprob {
                token_id,
                logprob: -1.0,
            },
            top: vec![],
        };
        let appended = state
            .append(
                &Letters,
                &request,
                &[24, 3],
                Some(vec![logprob(24), logprob(3)]),
            )
            .unwrap();
        assert_eq!(appended.num_kept, 1);
        assert_eq!(
            appended.finish_reason,
            Some(FinishReason::Stop(StopReason::Eos(24)))
        );
        assert_eq!(state.logprobs.as_ref().unwrap().len(), 1);
    }
}
