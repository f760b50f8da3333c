//! Training EAGLE heads on the tiny fixture target: recorded data, falling loss for EAGLE-1 and
//! EAGLE-3 (with training-time test), determinism for a fixed seed, resuming from a
//! checkpoint, and export that the loader reads back.
#![cfg(feature = "train")]

use std::path::Path;

use aquila_model_loader::checkpoint::FloatType;
use aquila_model_loader::config::{Eagle1Config, Eagle3Config, LlamaConfig};
use aquila_model_loader::fixtures::llama::{write_tiny_llama, TinyLlamaOptions};
use aquila_model_loader::model::{FeatureTap, LlamaModel};
use aquila_spec_decode::eagle::{write_head_dir, DraftVocabMap, Eagle1Head, Eagle3Head, EagleHead};
use aquila_spec_decode::train::{
    record_shard, train, DistillData, DistillSequence, SilentObserver, TrainConfig, TrainError,
    TrainHistory,
};
use burn::backend::{Autodiff, Flex};
use burn::module::{AutodiffModule, Module};
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
    let config = Eagle1Config {
        layer: one_layer(&setup.config),
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
    let run = |head: Eagle1Head<Ad>| {
        train(
            head,
            &setup.target,
            &data,
            &config,
            None,
            &mut SilentObserver,
        )
        .unwrap()
    };
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
fn eagle3_loss_falls_with_training_time_test() {
    let setup = setup();
    let tap = FeatureTap::AuxLayers(vec![0, 1, 3]);
    let data = data(&setup, &tap);
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

    // A checkpoint of other settings is refused, not silently mixed in.
    let other = TrainConfig {
        learning_rate: 1e-4,
        ..config
    };
    let err = train(
        head,
        &setup.target,
        &data,
        &other,
        Some(dir.path()),
        &mut SilentObserver,
    )
    .unwrap_err();
    assert!(matches!(err, TrainError::Checkpoint(_)), "{err}");
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
