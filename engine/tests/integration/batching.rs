//! Continuous batching, chunked prefill and preemption never change greedy outputs.

use crate::common;

use aquila_engine::{FinishReason, KvCacheBudget, Prompt, SamplingParams};
use aquila_metrics::{Family, Namespace};
use common::{greedy, llm, llm_with, mixed, tiny_model, token_ids, PROMPTS};

#[test]
fn a_batch_generates_what_each_prompt_generates_alone() {
    let model = tiny_model();
    let mut llm = llm(model.path());
    let params = mixed(12);
    let alone: Vec<Vec<u32>> = PROMPTS
        .iter()
        .zip(&params)
        .map(|(prompt, params)| llm.generate(*prompt, params).unwrap().remove(0).token_ids)
        .collect();
    let batched = llm.generate_with_params(PROMPTS, &params).unwrap();
    assert_eq!(token_ids(&batched), alone);
    for (output, prompt) in batched.iter().zip(PROMPTS) {
        assert_eq!(output.prompt.as_deref(), Some(prompt));
        assert_eq!(output.token_ids.len(), 12);
        assert_eq!(output.finish_reason, FinishReason::Length);
        assert_eq!(
            output.text,
            llm.tokenizer().decode(&output.token_ids, true).unwrap()
        );
    }
}

#[test]
fn chunked_prefill_equals_unchunked_prefill() {
    let model = tiny_model();
    let params = mixed(10);
    let unchunked = llm(model.path())
        .generate_with_params(PROMPTS, &params)
        .unwrap();
    // Three tokens per step: every prompt but "hello" is prefilled over several steps while
    // other requests decode.
    let mut chunked_llm = llm_with(model.path(), |c| c.max_num_batched_tokens = 3);
    let before = chunked_llm.get_metrics();
    let chunked = chunked_llm.generate_with_params(PROMPTS, &params).unwrap();
    assert_eq!(token_ids(&chunked), token_ids(&unchunked));
    let iteration_tokens = chunked_llm
        .get_metrics()
        .delta(&before)
        .unwrap()
        .histogram_total(&Family::IterationTokens.name(Namespace::Aquila))
        .unwrap()
        .unwrap();
    let longest_prompt = chunked
        .iter()
        .map(|o| o.prompt_token_ids.len())
        .max()
        .unwrap();
    assert!(
        iteration_tokens.count as usize > longest_prompt / 3 + 10,
        "{} steps cannot have chunked a {longest_prompt}-token prompt",
        iteration_tokens.count
    );
}

#[test]
fn preemption_under_a_tiny_kv_budget_keeps_every_output_intact() {
    let model = tiny_model();
    let params = mixed(24);
    let unconstrained = llm(model.path())
        .generate_with_params(PROMPTS, &params)
        .unwrap();
    let longest = unconstrained
        .iter()
        .map(|o| o.prompt_token_ids.len() + o.token_ids.len())
        .max()
        .unwrap();
    // Room for the longest request plus a little: the others must be preempted and recomputed.
    let mut tight = llm_with(model.path(), |c| {
        c.kv_cache_budget = KvCacheBudget::Tokens(longest + 8);
        c.max_model_len = Some(longest + 8);
    });
    let constrained = tight.generate_with_params(PROMPTS, &params).unwrap();
    assert_eq!(token_ids(&constrained), token_ids(&unconstrained));
    let preemptions: usize = constrained.iter().map(|o| o.metrics.num_preemptions).sum();
    assert!(preemptions > 0, "the budget was meant to force preemptions");
    let counted = tight
        .get_metrics()
        .counter_total(&Family::NumPreemptions.name(Namespace::Aquila))
        .unwrap();
    assert_eq!(counted as usize, preemptions);
    for output in &constrained {
        assert_eq!(output.metrics.num_generation_tokens, 24);
    }
}

#[test]
fn fewer_slots_than_requests_queue_the_rest() {
    let model = tiny_model();
    let params = mixed(6);
    let wide = llm(model.path())
        .generate_with_params(PROMPTS, &params)
        .unwrap();
    let mut narrow = llm_with(model.path(), |c| c.max_num_seqs = 2);
    for (prompt, params) in PROMPTS.iter().zip(&params) {
        narrow.add_request(*prompt, params.clone()).unwrap();
    }
    let mut finished = Vec::new();
    while narrow.has_unfinished_requests() {
        let step = narrow.step().unwrap();
        assert!(step.deltas.len() <= 2, "at most two requests run at once");
        finished.extend(step.finished);
    }
    finished.sort_by_key(|o| o.request_id);
    assert_eq!(token_ids(&finished), token_ids(&wide));
}

#[test]
fn max_model_len_ends_generation_with_length() {
    let model = tiny_model();
    let mut llm = llm_with(model.path(), |c| c.max_model_len = Some(16));
    let prompt = Prompt::TokenIds((3..13).collect());
    let output = llm.generate(prompt, &greedy(100)).unwrap().remove(0);
    assert_eq!(output.finish_reason, FinishReason::Length);
    assert_eq!(output.prompt_token_ids.len() + output.token_ids.len(), 16);
}

#[test]
fn requests_added_one_by_one_run_in_continuous_batches() {
    let model = tiny_model();
    let mut llm = llm(model.path());
    let params = mixed(8);
    let reference = llm.generate_with_params(PROMPTS, &params).unwrap();
    // Requests arrive while others are already decoding.
    let mut ids = Vec::new();
    let mut finished = Vec::new();
    for (prompt, params) in PROMPTS.iter().zip(&params) {
        ids.push(llm.add_request(*prompt, params.clone()).unwrap());
        finished.extend(llm.step().unwrap().finished);
    }
    while llm.has_unfinished_requests() {
        finished.extend(llm.step().unwrap().finished);
    }
    finished.sort_by_key(|o| o.request_id);
    assert_eq!(
        finished.iter().map(|o| o.request_id).collect::<Vec<_>>(),
        ids
    );
    assert_eq!(token_ids(&finished), token_ids(&reference));
    let sampled = SamplingParams::default();
    assert!(
        llm.generate("the cat", &sampled).is_ok(),
        "the engine stays usable"
    );
}
