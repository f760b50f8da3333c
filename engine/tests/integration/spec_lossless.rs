//! Lossless speculative decoding on the tiny model: with EAGLE-1 and EAGLE-3 heads of random
//! weights (EAGLE-3 of one and two layers; chains and EAGLE-2 trees, with and without the prompt
//! lookup assisting them), with a draft model of other random weights and with n-gram lookup, greedy speculative output equals greedy plain
//! output token for token, one request at a time and batched, for k = 1..=5, also under tight token
//! and KV budgets (drafts cut or dropped, preemptions) and in batches mixing sampled requests.

use crate::common;

use aquila_engine::{
    DraftLength, DraftTreeConfig, KvCacheBudget, Llm, NgramDrafter, SpeculativeConfig,
    SpeculativeMethod,
};
use common::spec::{
    assert_greedy_exact_beside_sampled, draft_model, eagle1_head, eagle3_head, eagle3_head_of,
    prompt_ids, run, run_single,
};
use common::{config, greedy, tiny_model, PROMPTS};

const MAX_TOKENS: usize = 24;

/// Checks every k in 1..=5 of `make(k)` with a fixed draft length, and k = 3 with the adaptive
/// one, against the plain greedy baseline, batched and (for two prompts) one request at a time.
fn assert_lossless(model: &std::path::Path, make: impl Fn(usize) -> SpeculativeConfig) {
    let mut plain = Llm::new(config(model)).expect("plain engine");
    let prompts = prompt_ids(&plain, &PROMPTS);
    let params = vec![greedy(MAX_TOKENS); prompts.len()];
    let baseline: Vec<Vec<u32>> = run(&mut plain, &prompts, &params)
        .into_iter()
        .map(|o| o.token_ids)
        .collect();
    let fixed = (1..=5).map(|k| (k, DraftLength::Fixed));
    for (k, draft_length) in fixed.chain([(3, DraftLength::default())]) {
        let mut engine_config = config(model);
        engine_config.speculative = Some(SpeculativeConfig {
            draft_length,
            ..make(k)
        });
        let mut llm = Llm::new(engine_config).expect("speculative engine");
        let outputs = run(&mut llm, &prompts, &params);
        let drafted: usize = outputs.iter().map(|o| o.metrics.num_draft_tokens).sum();
        assert!(
            drafted > 0,
            "k = {k} ({draft_length:?}): no draft token was verified"
        );
        let batched: Vec<Vec<u32>> = outputs.into_iter().map(|o| o.token_ids).collect();
        assert_eq!(batched, baseline, "batched, k = {k} ({draft_length:?})");
        let single = run_single(&mut llm, &prompts[..2], &greedy(MAX_TOKENS));
        assert_eq!(
            single,
            baseline[..2],
            "one at a time, k = {k} ({draft_length:?})"
        );
    }
}

#[test]
fn eagle1_random_head_is_lossless() {
    let model = tiny_model();
    let head = eagle1_head(model.path());
    assert_lossless(model.path(), |k| SpeculativeConfig::eagle(head.path(), k));
}

#[test]
fn eagle3_random_head_is_lossless() {
    let model = tiny_model();
    let head = eagle3_head(model.path());
    assert_lossless(model.path(), |k| SpeculativeConfig::eagle3(head.path(), k));
}

#[test]
fn eagle3_random_head_of_two_layers_is_lossless() {
    let model = tiny_model();
    let head = eagle3_head_of(model.path(), 2);
    assert_lossless(model.path(), |k| SpeculativeConfig::eagle3(head.path(), k));
}

#[test]
fn eagle_chains_without_the_lookup_assist_are_lossless() {
    let model = tiny_model();
    let head = eagle3_head(model.path());
    assert_lossless(model.path(), |k| {
        SpeculativeConfig::eagle3(head.path(), k).with_lookup_assist(None)
    });
}

/// `config` drafting EAGLE-2 trees of the default shape instead of chains.
fn with_trees(mut config: SpeculativeConfig) -> SpeculativeConfig {
    if let SpeculativeMethod::Eagle(drafter) | SpeculativeMethod::Eagle3(drafter) =
        &mut config.method
    {
        drafter.tree = Some(DraftTreeConfig::default());
    }
    config
}

#[test]
fn eagle_trees_with_and_without_the_lookup_assist_are_lossless() {
    let model = tiny_model();
    let head = eagle3_head(model.path());
    for lookup in [Some(NgramDrafter::assisting()), None] {
        assert_lossless(model.path(), |k| {
            with_trees(SpeculativeConfig::eagle3(head.path(), k).with_lookup_assist(lookup))
        });
    }
}

#[test]
fn the_lookup_assist_helps_a_random_heads_chains_and_trees_where_the_text_repeats() {
    let model = tiny_model();
    let head = eagle1_head(model.path());
    let accepted = |lookup: Option<NgramDrafter>, trees: bool| {
        let chains = SpeculativeConfig::eagle(head.path(), 3).with_lookup_assist(lookup);
        let mut engine_config = config(model.path());
        engine_config.speculative = Some(SpeculativeConfig {
            draft_length: DraftLength::Fixed,
            ..if trees { with_trees(chains) } else { chains }
        });
        let mut llm = Llm::new(engine_config).unwrap();
        let outputs = llm.generate(PROMPTS, &greedy(MAX_TOKENS)).unwrap();
        outputs
            .iter()
            .map(|o| o.metrics.num_accepted_tokens)
            .sum::<usize>()
    };
    // The tiny model's greedy text repeats itself, which a lookup continues and a head of
    // random weights does not.
    for trees in [false, true] {
        let alone = accepted(None, trees);
        let assisted = accepted(Some(NgramDrafter::assisting()), trees);
        assert!(
            assisted > 2 * alone.max(1),
            "trees {trees}: accepted tokens {assisted} assisted, {alone} from the head alone"
        );
    }
}

#[test]
fn a_draft_model_is_lossless() {
    let model = tiny_model();
    let draft = draft_model();
    assert_lossless(model.path(), |k| {
        SpeculativeConfig::draft_model(draft.path(), k)
    });
}

#[test]
fn ngram_drafting_is_lossless_and_accepts_drafts() {
    let model = tiny_model();
    assert_lossless(model.path(), SpeculativeConfig::ngram);
    // The tiny model's greedy text repeats itself, so prompt lookup must hit.
    let mut engine_config = config(model.path());
    engine_config.speculative = Some(SpeculativeConfig::ngram(3));
    let mut llm = Llm::new(engine_config).unwrap();
    let outputs = llm.generate(PROMPTS, &greedy(MAX_TOKENS)).unwrap();
    let accepted: usize = outputs.iter().map(|o| o.metrics.num_accepted_tokens).sum();
    assert!(accepted > 0, "n-gram drafts were never accepted");
}

#[test]
fn tight_token_and_kv_budgets_cut_drafts_without_changing_output() {
    let model = tiny_model();
    let head = eagle1_head(model.path());
    let mut plain = Llm::new(config(model.path())).unwrap();
    let prompts = prompt_ids(&plain, &PROMPTS);
    let params = vec![greedy(MAX_TOKENS); prompts.len()];
    let baseline: Vec<Vec<u32>> = run(&mut plain, &prompts, &params)
        .into_iter()
        .map(|o| o.token_ids)
        .collect();
    let longest = prompts
        .iter()
        .map(|p| match p {
            aquila_engine::Prompt::TokenIds(ids) => ids.len(),
            _ => unreachable!("token id prompts"),
        })
        .max()
        .unwrap();
    let mut engine_config = config(model.path());
    engine_config.speculative = Some(SpeculativeConfig::eagle(head.path(), 4));
    engine_config.max_num_batched_tokens = 6;
    engine_config.kv_cache_budget = KvCacheBudget::Tokens(longest + MAX_TOKENS + 8);
    let mut llm = Llm::new(engine_config).unwrap();
    let outputs = run(&mut llm, &prompts, &params);
    let ids: Vec<Vec<u32>> = outputs.iter().map(|o| o.token_ids.clone()).collect();
    assert_eq!(ids, baseline);
    let preemptions: usize = outputs.iter().map(|o| o.metrics.num_preemptions).sum();
    assert!(preemptions > 0, "the KV budget should force preemptions");
}

#[test]
fn mixed_sampling_batches_keep_greedy_requests_exact() {
    let model = tiny_model();
    let head = eagle1_head(model.path());
    let speculative = SpeculativeConfig::eagle(head.path(), 3);
    assert_greedy_exact_beside_sampled(model.path(), speculative, MAX_TOKENS);
}
