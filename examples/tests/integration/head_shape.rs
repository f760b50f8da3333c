//! `train-eagle --head-layers N --head-intermediate-size M`: a new head of either method gets
//! that many decoder layers with MLPs of that width, exports them and loads back with the
//! engine's loader; a saved head is deepened by `--head-layers` and trains its new layers; the
//! options are refused where they cannot apply.

use aquila_examples::training::{
    build_head, load_head, DraftHead, HeadMethod, NewHeadSettings, OutputInit,
};
use aquila_model_loader::checkpoint::{Checkpoint, FloatType};
use aquila_model_loader::config::LlamaConfig;
use aquila_model_loader::model::LlamaModel;
use aquila_spec_decode::eagle::EagleHead;
use aquila_spec_decode::train::{
    record_shard, DistillData, DistillSequence, SilentObserver, TrainConfig,
};
use burn::backend::{Autodiff, Flex};

use crate::tiny::tiny_model;

type Train = Autodiff<Flex>;

/// The `num_hidden_layers` and `intermediate_size` written in the exported head's
/// `config.json`.
fn exported_shape(dir: &std::path::Path) -> (u64, u64) {
    let text = std::fs::read_to_string(dir.join("config.json")).unwrap();
    let config: serde_json::Value = serde_json::from_str(&text).unwrap();
    let field = |name: &str| config[name].as_u64().unwrap();
    (field("num_hidden_layers"), field("intermediate_size"))
}

/// The tiny model's directory and the model loaded from it for training.
fn tiny_target() -> (tempfile::TempDir, LlamaModel<Train>) {
    let model = tiny_model();
    let target = LlamaModel::<Train>::load(model.path(), &Default::default()).unwrap();
    (model, target)
}

/// The recorded features and labels of one sequence of the tiny model, for heads of `method`.
fn one_sequence_data(model: &std::path::Path, method: HeadMethod) -> DistillData {
    let recorder = LlamaModel::<Flex>::load(model, &Default::default()).unwrap();
    let sequence = DistillSequence {
        tokens: (3..40).collect(),
        prompt_len: 8,
    };
    let tap = method.feature_tap(recorder.config());
    let shard = record_shard(&recorder, &tap, std::slice::from_ref(&sequence), 64, 0).unwrap();
    DistillData::new(vec![shard]).unwrap()
}

/// A new head of `method` with `layers` decoder layers over `data`.
fn new_head(
    method: HeadMethod,
    target: &LlamaModel<Train>,
    data: &DistillData,
    layers: usize,
    intermediate_size: Option<usize>,
) -> DraftHead<Train> {
    let settings = NewHeadSettings {
        draft_vocab: 64,
        layers,
        intermediate_size,
        output: OutputInit::Random,
    };
    let device = Default::default();
    build_head::<Train>(method, target, data, &data.sequences(), &settings, &device).unwrap()
}

#[test]
fn a_new_head_takes_the_depth_and_mlp_width_it_is_given_and_the_engine_loads_it() {
    let (model, target) = tiny_target();
    let device = Default::default();
    let config: LlamaConfig = target.config().clone();
    for method in [HeadMethod::Eagle, HeadMethod::Eagle3] {
        let data = one_sequence_data(model.path(), method);
        for (layers, width) in [(1, None), (2, Some(3 * config.intermediate_size))] {
            let head = new_head(method, &target, &data, layers, width);
            let dir = tempfile::tempdir().unwrap();
            head.export(dir.path(), FloatType::F32).unwrap();
            let wanted = width.unwrap_or(config.intermediate_size);
            let shape = (layers as u64, wanted as u64);
            assert_eq!(exported_shape(dir.path()), shape, "{method:?}");
            let loaded = EagleHead::<Flex>::load(dir.path(), &config, &device).unwrap();
            loaded.check_target(&config).unwrap();
            assert_eq!(loaded.num_layers(), layers);
        }
    }
}

#[test]
fn a_zero_shape_or_a_shape_for_a_saved_head_is_refused_before_any_work() {
    for (args, option) in [
        (
            &["--head-intermediate-size", "0"][..],
            "--head-intermediate-size",
        ),
        (&["--head-layers", "0"][..], "--head-layers"),
        (
            &["--head-intermediate-size", "64", "--init-head", "some/head"][..],
            "--init-head",
        ),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_train-eagle"))
            .args(["--target", "/nonexistent"])
            .args(args)
            .output()
            .unwrap();
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(option), "{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

#[test]
fn a_saved_head_is_deepened_and_training_reaches_its_new_layer() {
    let (model, target) = tiny_target();
    let device = Default::default();
    let config: LlamaConfig = target.config().clone();
    for method in [HeadMethod::Eagle, HeadMethod::Eagle3] {
        let data = one_sequence_data(model.path(), method);
        let saved = tempfile::tempdir().unwrap();
        new_head(method, &target, &data, 1, None)
            .export(saved.path(), FloatType::F32)
            .unwrap();
        let load = || load_head::<Train>(method, saved.path(), &config, &device).unwrap();

        let error = new_head(method, &target, &data, 2, None)
            .deepened_to(1, &device)
            .unwrap_err()
            .to_string();
        assert!(error.contains("has 2 decoder layers"), "{error}");
        assert_eq!(load().deepened_to(1, &device).unwrap().num_layers(), 1);

        let deepened = load().deepened_to(2, &device).unwrap();
        assert_eq!(deepened.num_layers(), 2);
        let config = TrainConfig {
            epochs: 2,
            batch_tokens: 64,
            val_every: 0,
            ..method.default_config()
        };
        let (trained, _) = deepened
            .train(&target, &data, &config, None, &mut SilentObserver)
            .unwrap();
        let out = tempfile::tempdir().unwrap();
        trained.export(out.path(), FloatType::F32).unwrap();
        assert_eq!(exported_shape(out.path()).0, 2);
        let checkpoint = Checkpoint::open(out.path()).unwrap();
        let o_proj = checkpoint
            .read_f32("layers.1.self_attn.o_proj.weight")
            .unwrap();
        assert!(o_proj.iter().any(|&v| v != 0.0), "{method:?}: untrained");
    }
}
