//! `train-eagle --follow-ups`: each training prompt's greedy answer is continued by a second
//! user turn, and the target's answer to it is recorded; held-out prompts get none, and the
//! data cannot be made without the greedy answers they continue.

use std::path::Path;

use aquila_engine::WeightFormat;
use aquila_examples::distill::{
    build_distill_data, Answers, DistillDirs, DistillSettings, GenerationSizes, PromptSet,
};
use aquila_examples::train_prompts::generate_training_prompts;
use aquila_model_loader::model::FeatureTap;
use aquila_model_loader::tokenizer::Tokenizer;
use aquila_spec_decode::train::{tap_name, FeatureShard};

use crate::tiny::tiny_model;

/// Every sequence of `shards` as (tokens, prompt length), in order.
fn sequences(shards: &[FeatureShard]) -> Vec<(Vec<u32>, usize)> {
    shards
        .iter()
        .flat_map(|shard| {
            (0..shard.num_sequences()).map(|index| {
                (
                    shard.tokens[shard.span(index)].to_vec(),
                    shard.prompt_lens[index],
                )
            })
        })
        .collect()
}

#[test]
fn follow_ups_continue_the_greedy_answers_of_the_training_prompts() {
    let model = tiny_model();
    let work = tempfile::tempdir().unwrap();
    let tap = FeatureTap::LastHidden;
    let greedy = DistillSettings {
        prompt_set: PromptSet::BuiltIn,
        num_prompts: 6,
        prompt_seed: 0,
        max_tokens: 6,
        shard_size: 3,
        tap: tap_name(&tap),
        top_k: 0,
        response_weights: WeightFormat::F32,
        answers: Answers::Greedy,
    };
    let sizes = GenerationSizes {
        max_num_seqs: 4,
        record_batch_tokens: 256,
    };
    let prompts = generate_training_prompts(6, 0).unwrap();
    let dir = |name: &str| work.path().join(name);
    let build = |responses: &Path, data: &Path, first_turns, settings: &DistillSettings| {
        let dirs = DistillDirs {
            responses,
            data,
            first_turns,
        };
        build_distill_data(model.path(), dirs, &tap, &prompts, settings, sizes)
    };
    let greedy_responses = dir("responses");
    // As train-eagle does, every kind of answers is given the greedy answers' directory; only
    // follow-ups read it, so the greedy answers themselves are made from nothing.
    let first_turns = sequences(
        &build(
            &greedy_responses,
            &dir("data"),
            Some(&greedy_responses),
            &greedy,
        )
        .unwrap(),
    );
    assert_eq!(first_turns.len(), 6);
    let tokenizer = Tokenizer::from_dir(model.path()).unwrap();
    for (tokens, prompt_len) in &first_turns {
        let prompt = tokenizer.decode(&tokens[..*prompt_len], false).unwrap();
        assert_eq!(prompt.matches("<|im_start|>user").count(), 1, "{prompt:?}");
    }

    let follow_up = DistillSettings {
        answers: Answers::FollowUp { skip_every: 3 },
        ..greedy.clone()
    };
    let missing = build(&dir("responses-f"), &dir("data-f"), None, &follow_up).unwrap_err();
    assert!(
        missing.to_string().contains("need the greedy answers"),
        "{missing}"
    );
    let follow_ups = sequences(
        &build(
            &dir("responses-f"),
            &dir("data-f"),
            Some(&greedy_responses),
            &follow_up,
        )
        .unwrap(),
    );

    // Prompts 0 and 3 are held out (every third from the first); the others get one each.
    assert_eq!(follow_ups.len(), 4);
    let continued = first_turns
        .iter()
        .enumerate()
        .filter(|(index, _)| index % 3 != 0);
    for ((first, first_prompt_len), (tokens, prompt_len)) in
        continued.map(|(_, turn)| turn).zip(&follow_ups)
    {
        // The conversation opens with the first prompt, holds its answer, and is answered.
        assert_eq!(tokens[..*first_prompt_len], first[..*first_prompt_len]);
        assert!(*prompt_len > first.len() && tokens.len() > *prompt_len);
        let answer = tokenizer.decode(&first[*first_prompt_len..], true).unwrap();
        let conversation = tokenizer.decode(&tokens[..*prompt_len], false).unwrap();
        assert!(conversation.contains(answer.trim()), "{conversation:?}");
        assert_eq!(
            conversation.matches("<|im_start|>user").count(),
            2,
            "{conversation:?}"
        );
    }
}
