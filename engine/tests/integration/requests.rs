//! The request API: prompts, validation errors, stop conditions, abort, streaming and
//! log-probabilities.

use crate::common;

use std::collections::HashMap;

use aquila_engine::{
    ChatMessage, DType, Device, EngineConfig, EngineError, FinishReason, Llm, Prompt, PromptError,
    RequestDelta, SamplingParams, SamplingParamsError, StopReason,
};
use common::{config, greedy, llm, llm_with, tiny_model, PROMPTS};

#[test]
fn text_chat_and_token_prompts_are_tokenized_like_the_tokenizer_does() {
    let model = tiny_model();
    let mut llm = llm(model.path());
    let messages = vec![ChatMessage::system("be brief"), ChatMessage::user("hello")];
    let outputs = llm
        .generate(
            vec![
                Prompt::Text(PROMPTS[0].into()),
                Prompt::Chat(messages.clone()),
                Prompt::TokenIds(vec![5, 6, 7]),
            ],
            &greedy(2),
        )
        .unwrap();
    let tokenizer = llm.tokenizer();
    assert_eq!(
        outputs[0].prompt_token_ids,
        tokenizer.encode(PROMPTS[0], true).unwrap()
    );
    let rendered = tokenizer.apply_chat_template(&messages, true).unwrap();
    assert_eq!(outputs[1].prompt.as_deref(), Some(rendered.as_str()));
    assert_eq!(
        outputs[1].prompt_token_ids,
        tokenizer.encode_chat(&messages, true).unwrap()
    );
    assert_eq!(outputs[2].prompt, None);
    assert_eq!(outputs[2].prompt_token_ids, vec![5, 6, 7]);
}

#[test]
fn invalid_requests_are_rejected_without_disturbing_the_others() {
    let model = tiny_model();
    let mut llm = llm_with(model.path(), |c| c.max_model_len = Some(32));
    let reference = llm.generate(PROMPTS[0], &greedy(8)).unwrap().remove(0);
    let id = llm.add_request(PROMPTS[0], greedy(8)).unwrap();
    llm.step().unwrap();

    let bad_params = SamplingParams {
        top_p: 0.0,
        ..SamplingParams::default()
    };
    let err = llm.add_request(PROMPTS[1], bad_params).unwrap_err();
    assert!(matches!(
        err,
        EngineError::InvalidSamplingParams(SamplingParamsError::TopP(_))
    ));
    assert!(err.to_string().contains("top_p"), "{err}");

    let err = llm
        .add_request(Prompt::TokenIds(vec![]), greedy(4))
        .unwrap_err();
    assert!(
        matches!(err, EngineError::InvalidPrompt(PromptError::Empty)),
        "{err}"
    );

    let err = llm
        .add_request(Prompt::TokenIds(vec![3; 32]), greedy(4))
        .unwrap_err();
    assert!(matches!(
        err,
        EngineError::InvalidPrompt(PromptError::TooLong { len: 32, .. })
    ));
    assert!(err.to_string().contains("max_model_len is 32"), "{err}");

    let vocab = llm.vocab_size() as u32;
    let err = llm
        .add_request(Prompt::TokenIds(vec![3, vocab]), greedy(4))
        .unwrap_err();
    assert!(
        matches!(
            err,
            EngineError::InvalidPrompt(PromptError::TokenOutOfVocab { position: 1, .. })
        ),
        "{err}"
    );

    let bad_stop = SamplingParams {
        stop_token_ids: vec![vocab + 5],
        ..greedy(4)
    };
    assert!(llm.add_request(PROMPTS[1], bad_stop).is_err());

    let mut finished = Vec::new();
    while llm.has_unfinished_requests() {
        finished.extend(llm.step().unwrap().finished);
    }
    assert_eq!(finished.len(), 1);
    assert_eq!(finished[0].request_id, id);
    assert_eq!(finished[0].token_ids, reference.token_ids);
}

#[test]
fn an_invalid_prompt_in_a_batch_names_its_index_and_runs_nothing() {
    let model = tiny_model();
    let mut llm = llm(model.path());
    let prompts = vec![
        Prompt::Text(PROMPTS[0].into()),
        Prompt::TokenIds(vec![]),
        Prompt::Text(PROMPTS[1].into()),
    ];
    let err = llm.generate(prompts, &greedy(4)).unwrap_err();
    assert!(
        matches!(&err, EngineError::InvalidBatchItem { index: 1, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("request 1 of the batch"), "{err}");
    assert!(!llm.has_unfinished_requests());
    let err = llm
        .generate_with_params(PROMPTS, &[greedy(1), greedy(2)])
        .unwrap_err();
    assert!(matches!(
        err,
        EngineError::ParamsCountMismatch {
            prompts: 5,
            params: 2
        }
    ));
}

#[test]
fn engine_configs_that_cannot_work_are_errors() {
    let model = tiny_model();
    let mut half = config(model.path());
    half.dtype = DType::F16;
    assert!(matches!(
        Llm::new(half).unwrap_err(),
        EngineError::Config { field: "dtype", .. }
    ));

    let mut too_long = config(model.path());
    too_long.max_model_len = Some(1 << 30);
    let err = Llm::new(too_long).unwrap_err();
    assert!(err.to_string().contains("max_model_len"), "{err}");

    let missing = EngineConfig::new(model.path().join("missing"));
    let err = Llm::new(missing).unwrap_err();
    assert!(matches!(err, EngineError::Load { .. }), "{err}");
    assert!(err.to_string().contains("missing"), "{err}");

    if !cfg!(feature = "cuda") {
        let mut cuda = config(model.path());
        cuda.device = Device::Cuda(0);
        cuda.dtype = DType::BF16;
        let err = Llm::new(cuda).unwrap_err();
        assert!(
            matches!(err, EngineError::DeviceUnavailable { .. }),
            "{err}"
        );
    }
}

/// The greedy output of `prompt` on `llm`.
fn greedy_output(llm: &mut Llm, prompt: &str, max_tokens: usize) -> aquila_engine::RequestOutput {
    llm.generate(prompt, &greedy(max_tokens)).unwrap().remove(0)
}

#[test]
fn stop_strings_match_across_token_boundaries_and_are_cut_from_the_text() {
    let model = tiny_model();
    let mut llm = llm(model.path());
    let sampled = SamplingParams {
        temperature: 1.0,
        seed: Some(3),
        ..greedy(24)
    };
    let reference = llm.generate(PROMPTS[2], &sampled).unwrap().remove(0);
    let (tokens, text) = (&reference.token_ids, &reference.text);
    let decoded_len = |n: usize| -> Option<usize> {
        let prefix = llm.tokenizer().decode(&tokens[..n], true).unwrap();
        (text.starts_with(&prefix) && !prefix.contains('\u{FFFD}')).then_some(prefix.len())
    };
    // A two-character stop string: the last character of token `i`, the first of token `i + 1`,
    // first occurring exactly there.
    let (last_token, start, stop) = (0..tokens.len() - 1)
        .find_map(|i| {
            let left_end = decoded_len(i + 1)?;
            let right_end = decoded_len(i + 2)?;
            let last = text[..left_end].chars().next_back()?;
            let next = text[left_end..right_end].chars().next()?;
            let stop = format!("{last}{next}");
            let start = left_end - last.len_utf8();
            (text.find(&stop) == Some(start)).then_some((i + 1, start, stop))
        })
        .expect("some token boundary carries a fresh two-character string");
    let params = SamplingParams {
        stop: vec![stop.clone()],
        ..sampled
    };
    let output = llm.generate(PROMPTS[2], &params).unwrap().remove(0);
    assert_eq!(output.finish_reason, FinishReason::Stop);
    assert_eq!(output.stop_reason, Some(StopReason::String(stop)));
    assert_eq!(output.text, text[..start]);
    assert_eq!(output.token_ids, tokens[..=last_token]);
}

#[test]
fn stop_token_ids_end_generation_and_min_tokens_suppresses_them() {
    let model = tiny_model();
    let mut llm = llm(model.path());
    let tokens = greedy_output(&mut llm, PROMPTS[0], 12).token_ids;
    let stop_token = tokens[3];
    let first = tokens.iter().position(|&t| t == stop_token).unwrap();
    let params = SamplingParams {
        stop_token_ids: vec![stop_token],
        ..greedy(12)
    };
    let output = llm.generate(PROMPTS[0], &params).unwrap().remove(0);
    assert_eq!(output.finish_reason, FinishReason::Stop);
    assert_eq!(output.stop_reason, Some(StopReason::TokenId(stop_token)));
    assert_eq!(output.token_ids, tokens[..=first]);

    // With the first greedy token as a stop token and min_tokens 1, it cannot be emitted first.
    let params = SamplingParams {
        stop_token_ids: vec![tokens[0]],
        min_tokens: 1,
        ..greedy(4)
    };
    let output = llm.generate(PROMPTS[0], &params).unwrap().remove(0);
    assert_ne!(output.token_ids[0], tokens[0]);
}

#[test]
fn abort_ends_one_request_and_the_others_continue() {
    let model = tiny_model();
    let mut llm = llm(model.path());
    let reference = llm.generate(PROMPTS[1], &greedy(6)).unwrap().remove(0);
    let keep = llm.add_request(PROMPTS[1], greedy(6)).unwrap();
    let drop = llm.add_request(PROMPTS[3], greedy(6)).unwrap();
    llm.step().unwrap();
    llm.step().unwrap();
    let aborted = llm.abort(drop).unwrap();
    assert_eq!(aborted.request_id, drop);
    assert_eq!(aborted.finish_reason, FinishReason::Abort);
    assert_eq!(aborted.token_ids.len(), 2);
    assert!(matches!(llm.abort(drop), Err(EngineError::UnknownRequest(id)) if id == drop));
    let mut finished = Vec::new();
    while llm.has_unfinished_requests() {
        finished.extend(llm.step().unwrap().finished);
    }
    assert_eq!(finished.len(), 1);
    assert_eq!(finished[0].request_id, keep);
    assert_eq!(finished[0].token_ids, reference.token_ids);

    let waiting = llm.add_request(PROMPTS[0], greedy(3)).unwrap();
    let aborted = llm.abort(waiting).unwrap();
    assert!(
        aborted.token_ids.is_empty(),
        "aborted before it was scheduled"
    );
    assert!(!llm.has_unfinished_requests());
}

#[test]
fn streamed_deltas_concatenate_to_the_final_outputs() {
    let model = tiny_model();
    let mut llm = llm(model.path());
    let params = SamplingParams {
        stop: vec!["the r".into(), "zzz".into()],
        ..greedy(20)
    };
    let mut streamed: HashMap<u64, (String, Vec<u32>, usize)> = HashMap::new();
    let outputs = llm
        .generate_stream(PROMPTS, &params, |delta: &RequestDelta| {
            let entry = streamed.entry(delta.request_id).or_default();
            assert_eq!(entry.2, 0, "no delta after the finishing one");
            entry.0.push_str(&delta.new_text);
            entry.1.extend(&delta.new_token_ids);
            entry.2 += usize::from(delta.finished);
        })
        .unwrap();
    assert_eq!(streamed.len(), outputs.len());
    for output in &outputs {
        let (text, tokens, finishes) = &streamed[&output.request_id];
        assert_eq!(text, &output.text);
        assert_eq!(tokens, &output.token_ids);
        assert_eq!(*finishes, 1);
    }
}

#[test]
fn logprobs_describe_the_raw_distribution_of_each_generated_token() {
    let model = tiny_model();
    let mut llm = llm(model.path());
    let params = SamplingParams {
        logprobs: Some(3),
        ..greedy(5)
    };
    let output = llm.generate(PROMPTS[0], &params).unwrap().remove(0);
    let logprobs = output.logprobs.expect("logprobs were requested");
    assert_eq!(logprobs.len(), output.token_ids.len());
    for (position, &token) in logprobs.iter().zip(&output.token_ids) {
        assert_eq!(position.sampled.token_id, token);
        assert_eq!(position.top.len(), 3);
        assert_eq!(
            position.top[0].token_id, token,
            "greedy picks the most likely token"
        );
        assert!((position.top[0].logprob - position.sampled.logprob).abs() < 1e-6);
        assert!(position
            .top
            .windows(2)
            .all(|w| w[0].logprob >= w[1].logprob));
        assert!(position.sampled.logprob <= 0.0);
    }
    let without = llm.generate(PROMPTS[0], &greedy(5)).unwrap().remove(0);
    assert!(without.logprobs.is_none());
}

#[test]
fn generate_keeps_the_results_of_requests_added_before_it_for_step() {
    let model = tiny_model();
    let mut llm = llm(model.path());
    let early = llm.add_request(PROMPTS[0], greedy(3)).unwrap();
    let outputs = llm.generate(PROMPTS[1], &greedy(6)).unwrap();
    assert_eq!(outputs.len(), 1);
    assert_ne!(outputs[0].request_id, early);
    assert!(
        llm.has_unfinished_requests(),
        "the early request's result waits for step"
    );
    let step = llm.step().unwrap();
    assert_eq!(step.finished.len(), 1);
    assert_eq!(step.finished[0].request_id, early);
    assert_eq!(step.finished[0].token_ids.len(), 3);
    let streamed: usize = step.deltas.iter().map(|d| d.new_token_ids.len()).sum();
    assert_eq!(streamed, 3, "its deltas are kept too");
    assert!(!llm.has_unfinished_requests());
}
