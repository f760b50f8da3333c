//! `train-eagle --head-layers N --head-intermediate-size M`: a new head of either method gets
//! that many decoder layers with MLPs of that width, exports them and loads back with the
//! engine's loader; the options are refused where they cannot apply.

use aquila_examples::training::{build_head, HeadMethod, NewHeadSettings, OutputInit};
use aquila_model_loader::checkpoint::FloatType;
use aquila_model_loader::config::LlamaConfig;
use aquila_model_loader::model::LlamaModel;
use aquila_spec_decode::eagle::EagleHead;
use aquila_spec_decode::train::{record_shard, DistillData, DistillSequence};
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

#[test]
fn a_new_head_takes_the_depth_and_mlp_width_it_is_given_and_the_engine_loads_it() {
    let model = tiny_model();
    let device = Default::default();
    let target = LlamaModel::<Train>::load(model.path(), &device).unwrap();
    let config: LlamaConfig = target.config().clone();
    let recorder = LlamaModel::<Flex>::load(model.path(), &device).unwrap();
    let sequence = DistillSequence {
        tokens: (3..40).collect(),
        prompt_len: 8,
    };
    for method in [HeadMethod::Eagle, HeadMethod::Eagle3] {
        let tap = method.feature_tap(&config);
        let shard = record_shard(&recorder, &tap, std::slice::from_ref(&sequence), 64, 0).unwrap();
        let data = DistillData::new(vec![shard]).unwrap();
        for (layers, width) in [(1, None), (2, Some(3 * config.intermediate_size))] {
            let settings = NewHeadSettings {
                draft_vocab: 64,
                layers,
                intermediate_size: width,
                output: OutputInit::Random,
            };
            let head = build_head::<Train>(
                method,
                &target,
                &data,
                &data.sequences(),
                &settings,
                &device,
            )
            .unwrap();
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
        (
            &["--head-layers", "2", "--init-head", "some/head"][..],
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
