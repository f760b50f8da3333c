//! `train-eagle --validate-on FILE`: a prompts file's set is the engine's greedy answers to its
//! prompts, recorded once, recorded again when the file changes, and a bad file is an error
//! naming it; `--evaluate-only` needs a head to score, and two sets need two names.

use aquila_engine::{EngineConfig, Llm, SamplingParams};
use aquila_examples::distill::GenerationSizes;
use aquila_examples::prompts::read_prompts_file;
use aquila_examples::validation_sets::{
    set_name, validation_dir, validation_set, ValidationSettings,
};
use aquila_model_loader::model::FeatureTap;
use aquila_spec_decode::train::DistillData;

use crate::tiny::tiny_model;

const SIZES: GenerationSizes = GenerationSizes {
    max_num_seqs: 4,
    record_batch_tokens: 64,
};

/// Every recorded sequence as (tokens, prompt length), in recording order.
fn recorded(data: &DistillData) -> Vec<(Vec<u32>, usize)> {
    data.gather(&data.sequences()).sequences
}

#[test]
fn a_set_is_the_greedy_answers_to_its_prompts_recorded_once_per_file_content() {
    let model = tiny_model();
    let work = tempfile::tempdir().unwrap();
    let file = work.path().join("unseen-chat.jsonl");
    std::fs::write(
        &file,
        "{\"messages\": [{\"role\": \"user\", \"content\": \"Why is the sea salty?\"}]}\n\
         {\"prompt\": \"Once upon a time\"}\n",
    )
    .unwrap();
    assert_eq!(set_name(&file), "unseen-chat");
    let dir = validation_dir(work.path(), &file);
    let tap = FeatureTap::LastHidden;
    let settings = ValidationSettings {
        tap: &tap,
        max_tokens: 5,
        top_k: 2,
    };
    let set = validation_set(model.path(), &file, &dir, settings, SIZES).unwrap();

    let mut llm = Llm::new(EngineConfig::new(model.path())).unwrap();
    let greedy = |llm: &mut Llm| -> Vec<(Vec<u32>, usize)> {
        let prompts = read_prompts_file(&file).unwrap();
        let outputs = llm.generate(prompts, &SamplingParams::greedy(5)).unwrap();
        outputs
            .iter()
            .map(|o| {
                let tokens = [o.prompt_token_ids.as_slice(), &o.token_ids].concat();
                (tokens, o.prompt_token_ids.len())
            })
            .collect()
    };
    assert_eq!(recorded(&set), greedy(&mut llm));
    assert_eq!(set.top_k(), 2);

    // Recorded once: a damaged shard stays as it is while the file and settings are the same
    // (read back as an error naming it), and a changed file records the set again.
    let shard = dir.join("shard-00000.safetensors");
    std::fs::write(&shard, b"not a shard").unwrap();
    let err = validation_set(model.path(), &file, &dir, settings, SIZES).unwrap_err();
    assert!(format!("{err:#}").contains("shard-00000"), "{err:#}");
    std::fs::write(&file, "{\"prompt\": \"The capital of France is\"}\n").unwrap();
    let again = validation_set(model.path(), &file, &dir, settings, SIZES).unwrap();
    assert_eq!(recorded(&again), greedy(&mut llm));
    assert_eq!(again.sequences().len(), 1);

    // Other settings record it again too.
    let longer = ValidationSettings {
        max_tokens: 7,
        ..settings
    };
    let longer_set = validation_set(model.path(), &file, &dir, longer, SIZES).unwrap();
    assert!(longer_set.num_tokens() >= again.num_tokens());
}

#[test]
fn a_missing_or_empty_prompts_file_is_an_error_naming_it() {
    let model = tiny_model();
    let work = tempfile::tempdir().unwrap();
    let tap = FeatureTap::LastHidden;
    let settings = ValidationSettings {
        tap: &tap,
        max_tokens: 4,
        top_k: 0,
    };
    let missing = work.path().join("missing.jsonl");
    let dir = validation_dir(work.path(), &missing);
    let err = validation_set(model.path(), &missing, &dir, settings, SIZES).unwrap_err();
    assert!(format!("{err:#}").contains("missing.jsonl"), "{err:#}");
    let empty = work.path().join("empty.jsonl");
    std::fs::write(&empty, "\n").unwrap();
    let dir = validation_dir(work.path(), &empty);
    let err = validation_set(model.path(), &empty, &dir, settings, SIZES).unwrap_err();
    assert!(format!("{err:#}").contains("no prompt"), "{err:#}");
    assert!(!dir.join("shard-00000.safetensors").exists());
}

#[test]
fn an_evaluation_without_a_head_or_two_sets_of_one_name_are_refused_before_any_work() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_train-eagle"))
        .args(["--evaluate-only", "--target", "/nonexistent"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("name it with --init-head"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_train-eagle"))
        .args(["--target", "/nonexistent", "--validate-on", "a/chat.jsonl"])
        .args(["--validate-on", "b/chat.jsonl"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("two --validate-on files are named chat"),
        "{stderr}"
    );
}
