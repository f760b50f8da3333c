//! Training EAGLE heads on the tiny fixture target: recorded data, falling loss for EAGLE-1 and
//! EAGLE-3 (with training-time test), determinism for a fixed seed, resuming from a
//! checkpoint, and export that the loader reads back.
#![cfg(feature = "train")]

use std::path::Path;

use aquila_model_loader::checkpoint::{ExportedValues, FloatType};
use aquila_model_loader::config::{Eagle1Config, Eagle3Config, LlamaConfig};
use aquila_model_loader::fixtures::llama::{write_tiny_llama, TinyLlamaOptions};
use aquila_model_loader::model::{rms_norm, FeatureTap, LlamaModel};
use aquila_spec_decode::eagle::{write_head_dir, DraftVocabMap, Eagle1Head, Eagle3Head, EagleHead};
use aquila_spec_decode::train::{
    record_shard, train, validate, DistillData, DistillSequence, DraftHeadModule, SilentObserver,
    TrainConfig, TrainError, TrainHistory,
};
use burn::backend::{Autodiff, Flex};
use burn::module::{AutodiffModule, Module};
use burn::tensor::{Distribution, Int, Tensor, TensorData};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

type Ad = Autodiff<Flex>;

struct Setup {
    _dir: tempfile::TempDir,
    config: LlamaConfig,
    target: LlamaModel<Ad>,
    inner: LlamaModel<Flex>,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let options = TinyLlamaOptions {
        num_layers: 4,
        ..TinyLlamaOptions::default()
    };
    write_tiny_llama(dir.path(), &options).unwrap();
    let device = Default::default();
    let inner = LlamaModel::<Flex>::load(dir.path(), &device).unwrap();
    let target = LlamaModel::<Ad>::load(dir.path(), &device)
        .unwrap()
        .no_grad();
    Setup {
        config: inner.config().clone(),
        _dir: dir,
        target,
        inner,
    }
}

/// Sequences whose responses are the target's own greedy continuations (self-distillation).
fn sequences(setup: &Setup, count: usize) -> Vec<DistillSequence> {
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    (0..count)
        .map(|_| {
            let prompt: Vec<u32> = (0..4).map(|_| rng.random_range(3..300)).collect();
            let mut tokens = prompt.clone();
            for _ in 0..12 {
                let shard = record_shard(
                    &setup.inner,
                    &FeatureTap::LastHidden,
                    &[DistillSequence {
                        tokens: tokens.clone(),
                        prompt_len: 4,
                    }],
                    64,
                    0,
                )
                .unwrap();
                tokens.push(*shard.argmax.last().unwrap());
            }
            DistillSequence {
                tokens,
                prompt_len: prompt.len(),
            }
        })
        .collect()
}

fn data(setup: &Setup, tap: &FeatureTap) -> DistillData {
    let shard = record_shard(&setup.inner, tap, &sequences(setup, 12), 64, 0).unwrap();
    DistillData::new(vec![shard]).unwrap()
}

fn identity_map(setup: &Setup) -> Vec<Option<u32>> {
    (0..setup.config.vocab_size as u32).map(Some).collect()
}

fn one_layer(config: &LlamaConfig) -> LlamaConfig {
    LlamaConfig {
        num_hidden_layers: 1,
        ..config.clone()
    }
}

fn eagle1_head(setup: &Setup) -> Eagle1Head<Ad> {
    eagle1_head_of(setup, one_layer(&setup.config))
}

/// A new EAGLE-1 head whose decoder layer is `layer`.
fn eagle1_head_of(setup: &Setup, layer: LlamaConfig) -> Eagle1Head<Ad> {
    let config = Eagle1Config {
        layer,
        fc_bias: Some(true),
        origin: Path::new("test").to_path_buf(),
    };
    Eagle1Head::init(&config, &setup.config, true, &Default::default()).unwrap()
}

fn small(mut config: TrainConfig) -> TrainConfig {
    config.epochs = 12;
    config.batch_tokens = 64;
    config.learning_rate = 3e-3;
    config.val_every = 6;
    config.eval_every = 1000;
    config.checkpoint_every = 4;
    config
}

/// Trains `head` without checkpoints or progress output.
fn train_quietly<H>(
    setup: &Setup,
    head: H,
    data: &DistillData,
    config: &TrainConfig,
) -> (H, TrainHistory)
where
    H: AutodiffModule<Ad> + DraftHeadModule<Ad>,
    H::InnerModule: DraftHeadModule<Flex>,
{
    train(head, &setup.target, data, config, None, &mut SilentObserver).unwrap()
}

fn losses(history: &TrainHistory) -> Vec<f32> {
    history.train.iter().map(|p| p.loss).collect()
}

/// Mean of the first and last three losses.
fn ends(losses: &[f32]) -> (f32, f32) {
    let mean = |s: &[f32]| s.iter().sum::<f32>() / s.len() as f32;
    (mean(&losses[..3]), mean(&losses[losses.len() - 3..]))
}

#[test]
fn eagle1_loss_falls_and_training_is_deterministic() {
    let setup = setup();
    let data = data(&setup, &FeatureTap::LastHidden);
    let config = small(TrainConfig::eagle1());
    let head = eagle1_head(&setup);
    let run = |head: Eagle1Head<Ad>| train_quietly(&setup, head, &data, &config);
    let (trained, first) = run(head.clone());
    let (_, second) = run(head);
    let (start, end) = ends(&losses(&first));
    assert!(end < 0.6 * start, "loss {start} -> {end}");
    for (a, b) in losses(&first).iter().zip(losses(&second)) {
        assert!((a - b).abs() <= 1e-4 * a.abs().max(1.0), "{a} vs {b}");
    }
    let eval = first.evals.last().expect("a final validation");
    assert_eq!(eval.accuracy.len(), config.eval_chain);
    assert!(eval.acceptance_length >= 1.0 && eval.acceptance_length <= 4.0);

    // The export loads back through the engine's loader and drafts like the trained head.
    let dir = tempfile::tempdir().unwrap();
    write_head_dir(
        dir.path(),
        &trained.config_json(),
        &trained.export(),
        FloatType::F32,
    )
    .unwrap();
    let loaded = EagleHead::<Flex>::load(dir.path(), &setup.config, &Default::default()).unwrap();
    assert!(matches!(loaded, EagleHead::Eagle1(_)));
    let evaluate = |head: &Eagle1Head<Flex>| {
        aquila_spec_decode::train::evaluate(
            head,
            &setup.inner,
            &data,
            &data.sequences(),
            &config,
            &identity_map(&setup),
        )
        .unwrap()
    };
    let EagleHead::Eagle1(reloaded) = loaded else {
        unreachable!()
    };
    let (original, again) = (evaluate(&trained.valid()), evaluate(reloaded.as_ref()));
    assert_eq!(original.accuracy, again.accuracy);
}

#[test]
fn eagle1_loss_falls_with_training_time_test() {
    let setup = setup();
    let data = data(&setup, &FeatureTap::LastHidden);
    let config = TrainConfig {
        unroll: 3,
        ..small(TrainConfig::eagle1())
    };
    let (_, history) = train_quietly(&setup, eagle1_head(&setup), &data, &config);
    let (start, end) = ends(&losses(&history));
    assert!(end < 0.6 * start, "loss {start} -> {end}");
    assert_eq!(
        history.train[0].accuracy.len(),
        3,
        "three unrolled steps measured"
    );
    // Trained on its own earlier outputs, the head's third chain step improves too.
    let third: Vec<f32> = history.train.iter().map(|p| p.accuracy[2] as f32).collect();
    let (before, after) = ends(&third);
    assert!(
        after > before + 0.1,
        "third step accuracy {before} -> {after}"
    );
}

#[test]
fn validation_sets_are_scored_at_every_validation_and_never_train() {
    let setup = setup();
    let data = data(&setup, &FeatureTap::LastHidden);
    let unseen_sequences = &sequences(&setup, 16)[12..];
    let unseen = record_shard(
        &setup.inner,
        &FeatureTap::LastHidden,
        unseen_sequences,
        64,
        0,
    );
    let unseen = DistillData::new(vec![unseen.unwrap()]).unwrap();
    let with_set = data
        .clone()
        .with_validation_set("unseen", unseen.clone())
        .unwrap();
    let config = TrainConfig {
        epochs: 4,
        eval_every: 8,
        ..small(TrainConfig::eagle1())
    };
    let head = eagle1_head(&setup);
    let (_, plain) = train_quietly(&setup, head.clone(), &data, &config);
    let (trained, scored) = train_quietly(&setup, head, &with_set, &config);
    assert_eq!(losses(&plain), losses(&scored), "the set never trains");
    assert!(scored.evals.len() >= 2);
    for (plain, scored) in plain.evals.iter().zip(&scored.evals) {
        assert_eq!(plain.accuracy, scored.accuracy);
        assert!(plain.sets.is_empty());
        assert_eq!(scored.sets.len(), 1);
        assert_eq!(scored.sets[0].name, "unseen");
    }
    // The last scores are those of the trained head on the set, which `validate` gives again.
    let last = &scored.evals.last().unwrap().sets[0];
    let on_set = aquila_spec_decode::train::evaluate(
        &trained.valid(),
        &setup.inner,
        &unseen,
        &unseen.sequences(),
        &config,
        &identity_map(&setup),
    )
    .unwrap();
    assert_eq!(last.accuracy, on_set.accuracy);
    assert_eq!(last.acceptance_length, on_set.acceptance_length);
    let again = validate(&trained.valid(), &setup.inner, &with_set, &config).unwrap();
    assert_eq!(&again.sets[0], last);
    let first = &scored.evals[0].sets[0];
    assert_ne!(first.loss, last.loss, "the scores follow the training");
}

/// The EAGLE-3 tap of the tiny target.
fn eagle3_tap() -> FeatureTap {
    FeatureTap::AuxLayers(vec![0, 1, 3])
}

/// A new EAGLE-3 head whose draft vocabulary is the tokens `data` responds with, and that
/// vocabulary's target ids.
fn eagle3_head(setup: &Setup, data: &DistillData) -> (Eagle3Head<Ad>, Vec<u32>) {
    let vocab = setup.config.vocab_size;
    let counts = data.response_token_counts(&data.sequences(), vocab);
    let kept: Vec<u32> = (0..vocab as u32)
        .filter(|&t| counts[t as usize] > 0)
        .collect();
    assert!(kept.len() < vocab);
    let config = Eagle3Config {
        layer: one_layer(&setup.config),
        draft_vocab_size: kept.len(),
        target_hidden_size: Some(setup.config.hidden_size),
        aux_layer_ids: Some(vec![0, 1, 3]),
        use_aux_hidden_state: true,
        norm_before_residual: false,
    };
    let map = DraftVocabMap::from_target_ids(&kept, vocab).unwrap();
    let head = Eagle3Head::<Ad>::init(&config, &setup.config, map, &Default::default()).unwrap();
    (head, kept)
}

/// The values of the exported tensor `name`.
fn exported(head: &Eagle3Head<Ad>, name: &str) -> Vec<f32> {
    let tensor = head
        .export()
        .into_iter()
        .find(|t| t.name == name)
        .unwrap_or_else(|| panic!("{name} exported"));
    match tensor.values {
        ExportedValues::F32(values) => values,
        other => panic!("{name} holds {other:?}"),
    }
}

#[test]
fn eagle3_loss_falls_with_training_time_test() {
    let setup = setup();
    let tap = eagle3_tap();
    let data = data(&setup, &tap);
    let (head, _) = eagle3_head(&setup, &data);
    let train_config = TrainConfig {
        unroll: 2,
        ..small(TrainConfig::eagle3())
    };
    let (trained, history) = train(
        head,
        &setup.target,
        &data,
        &train_config,
        None,
        &mut SilentObserver,
    )
    .unwrap();
    let (start, end) = ends(&losses(&history));
    assert!(end < 0.6 * start, "loss {start} -> {end}");
    assert_eq!(
        history.train[0].accuracy.len(),
        2,
        "two unrolled steps measured"
    );

    let dir = tempfile::tempdir().unwrap();
    write_head_dir(
        dir.path(),
        &trained.config_json(),
        &trained.export(),
        FloatType::F16,
    )
    .unwrap();
    let loaded = EagleHead::<Flex>::load(dir.path(), &setup.config, &Default::default()).unwrap();
    assert_eq!(loaded.vocab_map(), trained.vocab_map());
    assert_eq!(loaded.feature_tap(), tap);

    // Loaded on the training backend, the export trains further (a warm start): it starts
    // near where the first run ended, far below a new head's start, and its weights move.
    let EagleHead::Eagle3(warm) =
        EagleHead::<Ad>::load(dir.path(), &setup.config, &Default::default()).unwrap()
    else {
        panic!("an EAGLE-3 export loads as an EAGLE-3 head")
    };
    let before = exported(&warm, "fc.weight");
    let again = TrainConfig {
        epochs: 2,
        ..train_config
    };
    let (further, resumed) = train(
        *warm,
        &setup.target,
        &data,
        &again,
        None,
        &mut SilentObserver,
    )
    .unwrap();
    let warm_start = resumed.train[0].loss;
    assert!(
        warm_start < 0.6 * start && warm_start < 1.5 * end,
        "a new head starts at {start} and ends at {end}; the warm start begins at {warm_start}"
    );
    assert_ne!(exported(&further, "fc.weight"), before);
}

#[test]
fn a_stopped_run_resumes_to_the_same_result() {
    let setup = setup();
    let data = data(&setup, &FeatureTap::LastHidden);
    let config = TrainConfig {
        epochs: 3,
        ..small(TrainConfig::eagle1())
    };
    let head = eagle1_head(&setup);
    let (_, whole) = train(
        head.clone(),
        &setup.target,
        &data,
        &config,
        None,
        &mut SilentObserver,
    )
    .unwrap();

    let dir = tempfile::tempdir().unwrap();
    let stopped = TrainConfig {
        stop_after: Some(5),
        ..config.clone()
    };
    let (_, partial) = train(
        head.clone(),
        &setup.target,
        &data,
        &stopped,
        Some(dir.path()),
        &mut SilentObserver,
    )
    .unwrap();
    assert_eq!(partial.train.len(), 5);
    let (_, resumed) = train(
        head.clone(),
        &setup.target,
        &data,
        &config,
        Some(dir.path()),
        &mut SilentObserver,
    )
    .unwrap();
    assert_eq!(resumed.train.len(), whole.train.len());
    for (a, b) in losses(&whole).iter().zip(losses(&resumed)) {
        assert!((a - b).abs() <= 1e-4 * a.abs().max(1.0), "{a} vs {b}");
    }

    // A checkpoint of other settings, or of a head of another shape (a wider MLP) under the
    // same settings, is refused, not silently mixed in.
    let refused = |head: Eagle1Head<Ad>, config: &TrainConfig| {
        let resumed = train(
            head,
            &setup.target,
            &data,
            config,
            Some(dir.path()),
            &mut SilentObserver,
        );
        let err = resumed.unwrap_err();
        assert!(matches!(err, TrainError::Checkpoint(_)), "{err}");
    };
    let other = TrainConfig {
        learning_rate: 1e-4,
        ..config.clone()
    };
    refused(head, &other);
    let wider = LlamaConfig {
        intermediate_size: 2 * setup.config.intermediate_size,
        ..one_layer(&setup.config)
    };
    refused(eagle1_head_of(&setup, wider), &config);
}

#[test]
fn impossible_settings_are_errors() {
    let setup = setup();
    let data = data(&setup, &FeatureTap::LastHidden);
    for config in [
        TrainConfig {
            epochs: 0,
            ..TrainConfig::eagle1()
        },
        TrainConfig {
            learning_rate: f64::NAN,
            ..TrainConfig::eagle1()
        },
        TrainConfig {
            unroll: 0,
            ..TrainConfig::eagle1()
        },
    ] {
        let err = train(
            eagle1_head(&setup),
            &setup.target,
            &data,
            &config,
            None,
            &mut SilentObserver,
        )
        .unwrap_err();
        assert!(matches!(err, TrainError::Config(_)), "{err}");
    }
}

#[test]
fn a_head_started_from_the_target_output_predicts_with_it_and_can_keep_it_fixed() {
    let setup = setup();
    let data = data(&setup, &eagle3_tap());
    let (head, kept) = eagle3_head(&setup, &data);
    let frozen = head.clone().with_output_from(&setup.target, false);

    // Its logits are the target's, over the draft vocabulary, for any head output.
    let device = Default::default();
    let hidden = setup.config.hidden_size;
    let outputs = Tensor::<Ad, 2>::random([5, hidden], Distribution::Normal(0.0, 2.0), &device);
    let target_logits = setup
        .target
        .lm_head(rms_norm(setup.target.final_norm(), outputs.clone()));
    let ids: Vec<i64> = kept.iter().map(|&t| i64::from(t)).collect();
    let ids = Tensor::<Ad, 1, Int>::from_data(TensorData::new(ids, [kept.len()]), &device);
    let expected: Vec<f32> = target_logits.select(1, ids).into_data().to_vec().unwrap();
    let got: Vec<f32> = frozen
        .logits(&setup.target, outputs)
        .into_data()
        .to_vec()
        .unwrap();
    let worst = expected
        .iter()
        .zip(&got)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    assert!(worst < 1e-4, "logits differ by {worst}");

    // Training moves the rest of the head, and the lm_head only when it is trainable.
    let config = TrainConfig {
        epochs: 2,
        unroll: 2,
        ..small(TrainConfig::eagle3())
    };
    let run = |head: Eagle3Head<Ad>| train_quietly(&setup, head, &data, &config).0;
    let trainable = head.with_output_from(&setup.target, true);
    let start_lm_head = exported(&frozen, "lm_head.weight");
    let start_fc = exported(&frozen, "fc.weight");
    assert_eq!(start_lm_head, exported(&trainable, "lm_head.weight"));
    let frozen = run(frozen);
    assert_eq!(exported(&frozen, "lm_head.weight"), start_lm_head);
    assert_ne!(exported(&frozen, "fc.weight"), start_fc);
    let trainable = run(trainable);
    assert_ne!(exported(&trainable, "lm_head.weight"), start_lm_head);
}
