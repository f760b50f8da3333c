//! The eagle example's report is computed from the metrics snapshot alone; these tests check its
//! numbers against the per-request counts the engine returns with each output.

use aquila_engine::{EngineConfig, Llm};
use aquila_examples::report::SpecDecodeReport;
use std::time::Instant;

use crate::tiny::{fixed_ngram, greedy_to_the_limit, prompts, tiny_model};

#[test]
fn report_numbers_equal_the_sums_of_per_request_counts() {
    let model = tiny_model();
    for k in [1, 3] {
        let mut config = EngineConfig::new(model.path());
        config.speculative = Some(fixed_ngram(k));
        let mut llm = Llm::new(config).expect("engine");
        let prompts = prompts(&["abab abab abab", "hello hello", "1212121212"]);
        let params = greedy_to_the_limit(24);
        // A first call, so the report must use the delta of the second one only.
        llm.generate(prompts.clone(), &params).expect("warm-up");
        let before = llm.get_metrics();
        let start = Instant::now();
        let outputs = llm.generate(prompts, &params).expect("generation");
        let delta = llm.get_metrics().delta(&before).expect("delta");
        let report =
            SpecDecodeReport::from_snapshot(&delta, llm.metrics_namespace(), start.elapsed());

        let sum = |f: fn(&aquila_engine::RequestOutput) -> usize| -> u64 {
            outputs.iter().map(f).sum::<usize>() as u64
        };
        let drafts = sum(|o| o.metrics.num_drafts);
        let draft_tokens = sum(|o| o.metrics.num_draft_tokens);
        let accepted = sum(|o| o.metrics.num_accepted_tokens);
        assert!(drafts > 0, "k = {k}: the n-gram drafter proposed nothing");
        assert_eq!(report.summary.drafts, drafts, "k = {k}");
        assert_eq!(report.summary.draft_tokens, draft_tokens, "k = {k}");
        assert_eq!(report.summary.accepted_tokens, accepted, "k = {k}");
        assert_eq!(
            report.generation_tokens,
            sum(|o| o.token_ids.len()),
            "k = {k}"
        );
        assert_eq!(
            report.prompt_tokens,
            sum(|o| o.prompt_token_ids.len()),
            "k = {k}"
        );
        let expected_length = 1.0 + accepted as f64 / drafts as f64;
        assert!(
            (report.summary.mean_acceptance_length() - expected_length).abs() < 1e-12,
            "k = {k}"
        );
        let per_position = report.summary.per_position_acceptance_rates();
        assert_eq!(per_position.len(), k, "k = {k}");
        // Acceptance at position i counts the drafts that accepted at least i + 1 tokens among
        // those long enough to reach i, so rate times reach sums to the accepted tokens.
        let reached = &report.summary.drafts_per_position;
        assert_eq!(reached.first(), Some(&drafts), "k = {k}");
        let accepted_sum: f64 = per_position
            .iter()
            .zip(reached)
            .map(|(rate, &reached)| rate * reached as f64)
            .sum();
        assert!((accepted_sum - accepted as f64).abs() < 1e-9, "k = {k}");
    }
}
