//! Randomly initialized EAGLE heads exported to Hugging Face head directories load back into
//! the same heads: same outputs and logits (exactly in f32, closely in f16), same vocabulary
//! map, and configs that parse back to the same values. Loaded heads export their checkpoint.
#![cfg(feature = "burn")]

use crate::eagle_fixtures;

use std::path::Path;

use aquila_model_loader::checkpoint::{Checkpoint, ExportedValues, FloatType};
use aquila_model_loader::config::{EagleConfig, LlamaConfig};
use aquila_model_loader::fixtures::eagle::TinyEagle1Options;
use aquila_model_loader::model::{ForwardBatch, SequenceInput};
use aquila_spec_decode::eagle::{
    eagle1_config_json, eagle3_config_json, write_head_dir, DraftVocabMap, Eagle1Head, Eagle3Head,
    EagleError, EagleHead,
};
use burn::tensor::Tensor;
use eagle_fixtures::{
    device, eagle3_options, edit_checkpoint, edit_config, max_abs_diff, values, Fixture, B,
};

/// The draft decoder of a head for the tiny target: `layers` layers shaped like it.
fn draft_layer(fixture: &Fixture, layers: usize) -> LlamaConfig {
    LlamaConfig {
        num_hidden_layers: layers,
        tie_word_embeddings: false,
        ..fixture.target.config().clone()
    }
}

fn parse(json: &serde_json::Value) -> EagleConfig {
    EagleConfig::from_json_str(&json.to_string(), Path::new("head/config.json")).unwrap()
}

fn eagle1_head(fixture: &Fixture, fc_bias: bool) -> Eagle1Head<B> {
    let EagleConfig::Eagle1(config) = parse(&eagle1_config_json(&draft_layer(fixture, 2), fc_bias))
    else {
        panic!("expected an EAGLE-1 config");
    };
    Eagle1Head::init(&config, fixture.target.config(), fc_bias, &device()).unwrap()
}

/// Every third target token, 100 of them.
fn draft_vocab() -> DraftVocabMap {
    let ids: Vec<u32> = (0..100).map(|i| 3 * i + 1).collect();
    DraftVocabMap::from_target_ids(&ids, 320).unwrap()
}

fn eagle3_head(fixture: &Fixture, aux: Option<&[usize]>, norm_first: bool) -> Eagle3Head<B> {
    eagle3_head_of(fixture, 1, aux, norm_first)
}

/// A new EAGLE-3 head of `layers` decoder layers (the midlayer and `layers - 1` after it).
fn eagle3_head_of(
    fixture: &Fixture,
    layers: usize,
    aux: Option<&[usize]>,
    norm_first: bool,
) -> Eagle3Head<B> {
    let json = eagle3_config_json(&draft_layer(fixture, layers), 100, 64, aux, norm_first);
    let EagleConfig::Eagle3(config) = parse(&json) else {
        panic!("expected an EAGLE-3 config");
    };
    Eagle3Head::init(&config, fixture.target.config(), draft_vocab(), &device()).unwrap()
}

/// Outputs and logits of one draft forward over two sequences, from target features.
fn draft_forward(fixture: &Fixture, head: &EagleHead<B>) -> (Vec<f32>, Vec<f32>) {
    let prompts: [&[u32]; 2] = [&[1, 40, 41, 42, 43], &[1, 50, 51]];
    let features: Vec<Tensor<B, 2>> = prompts
        .iter()
        .map(|tokens| fixture.features(tokens, &head.feature_tap()))
        .collect();
    // Row t pairs the feature at t with token t + 1.
    let batch = ForwardBatch::new(
        prompts
            .iter()
            .enumerate()
            .map(|(slot, tokens)| SequenceInput::new(slot, tokens[1..].to_vec(), 0))
            .collect(),
    );
    let hidden: Vec<Tensor<B, 2>> = features
        .into_iter()
        .map(|f| {
            let rows = f.dims()[0] - 1;
            f.narrow(0, 0, rows)
        })
        .collect();
    let hidden = head.project(Tensor::cat(hidden, 0));
    let mut cache = head.new_kv_cache(2);
    let outputs = head
        .forward(&fixture.target, &batch, hidden, &mut cache)
        .unwrap();
    let logits = head.logits(&fixture.target, outputs.clone());
    (values(outputs), values(logits))
}

/// Writes `head` to `name` in `dtype` and loads it back.
fn round_trip(
    fixture: &Fixture,
    head: &EagleHead<B>,
    name: &str,
    dtype: FloatType,
) -> EagleHead<B> {
    let dir = fixture.root.path().join(name);
    write_head_dir(&dir, &head.config_json(), &head.export(), dtype).unwrap();
    EagleHead::load(&dir, fixture.target.config(), &device()).unwrap()
}

fn assert_same_forward(fixture: &Fixture, a: &EagleHead<B>, b: &EagleHead<B>, tolerance: f32) {
    let (outputs_a, logits_a) = draft_forward(fixture, a);
    let (outputs_b, logits_b) = draft_forward(fixture, b);
    let scale = 1.0 + logits_a.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    assert!(max_abs_diff(&outputs_a, &outputs_b) <= tolerance * scale);
    assert!(max_abs_diff(&logits_a, &logits_b) <= tolerance * scale);
}

fn names(head: &EagleHead<B>) -> Vec<String> {
    head.export().into_iter().map(|t| t.name).collect()
}

#[test]
fn initialized_eagle1_heads_round_trip() {
    let fixture = Fixture::new(2);
    for fc_bias in [true, false] {
        let head = EagleHead::Eagle1(Box::new(eagle1_head(&fixture, fc_bias)));
        let loaded = round_trip(
            &fixture,
            &head,
            &format!("eagle1-{fc_bias}"),
            FloatType::F32,
        );
        let EagleHead::Eagle1(inner) = &loaded else {
            panic!("expected an EAGLE-1 head");
        };
        assert_eq!(inner.has_fc_bias(), fc_bias);
        assert_eq!(inner.num_layers(), 2);
        assert_eq!(loaded.config(), head.config());
        assert_eq!(loaded.export(), head.export());
        let (outputs, logits) = draft_forward(&fixture, &head);
        let (loaded_outputs, loaded_logits) = draft_forward(&fixture, &loaded);
        assert_eq!(outputs.len(), 6 * 64);
        assert!(max_abs_diff(&outputs, &loaded_outputs) <= 1e-6);
        assert!(max_abs_diff(&logits, &loaded_logits) <= 1e-6);
    }
    let head = EagleHead::Eagle1(Box::new(eagle1_head(&fixture, true)));
    let expected: Vec<String> = ["fc.weight", "fc.bias"]
        .into_iter()
        .map(String::from)
        .chain((0..2).flat_map(|i| {
            let input_norm = (i > 0).then(|| format!("layers.{i}.input_layernorm.weight"));
            input_norm.into_iter().chain(
                [
                    "self_attn.q_proj.weight",
                    "self_attn.k_proj.weight",
                    "self_attn.v_proj.weight",
                    "self_attn.o_proj.weight",
                    "post_attention_layernorm.weight",
                    "mlp.gate_proj.weight",
                    "mlp.up_proj.weight",
                    "mlp.down_proj.weight",
                ]
                .map(|name| format!("layers.{i}.{name}")),
            )
        }))
        .collect();
    assert_eq!(names(&head), expected);
}

#[test]
fn initialized_eagle3_heads_round_trip() {
    let fixture = Fixture::new(4);
    for (aux, norm_first) in [(Some(&[0usize, 1, 3][..]), false), (None, true)] {
        let head = EagleHead::Eagle3(Box::new(eagle3_head(&fixture, aux, norm_first)));
        let name = format!("eagle3-{}", aux.is_some());
        let loaded = round_trip(&fixture, &head, &name, FloatType::F32);
        assert_eq!(loaded.vocab_map(), head.vocab_map());
        assert_eq!(loaded.vocab_map(), &draft_vocab());
        assert_eq!(loaded.feature_tap(), head.feature_tap());
        assert_eq!(loaded.export(), head.export());
        let (outputs, logits) = draft_forward(&fixture, &head);
        let (loaded_outputs, loaded_logits) = draft_forward(&fixture, &loaded);
        assert_eq!(logits.len(), 6 * 100);
        assert!(max_abs_diff(&outputs, &loaded_outputs) <= 1e-6);
        assert!(max_abs_diff(&logits, &loaded_logits) <= 1e-6);

        let config = EagleConfig::from_file(&fixture.root.path().join(name).join("config.json"));
        let EagleConfig::Eagle3(config) = config.unwrap() else {
            panic!("expected an EAGLE-3 config");
        };
        assert_eq!(config.aux_layer_ids.as_deref(), aux);
        assert_eq!(config.use_aux_hidden_state, aux.is_some());
        assert_eq!(config.norm_before_residual, norm_first);
        assert_eq!(config.draft_vocab_size, 100);
    }
    let head = EagleHead::Eagle3(Box::new(eagle3_head(&fixture, Some(&[0, 1, 3]), false)));
    let export = head.export();
    let shape = |name: &str| {
        export
            .iter()
            .find(|t| t.name == name)
            .unwrap()
            .shape
            .clone()
    };
    assert_eq!(shape("fc.weight"), [64, 3 * 64]);
    assert_eq!(shape("midlayer.self_attn.q_proj.weight"), [64, 2 * 64]);
    assert_eq!(shape("lm_head.weight"), [100, 64]);
    let d2t = export.iter().find(|t| t.name == "d2t").unwrap();
    assert_eq!(d2t.values, ExportedValues::I64(draft_vocab().d2t()));
    assert!(!names(&head).contains(&"embed_tokens.weight".to_string()));
}

#[test]
fn half_precision_exports_load_close_to_the_original() {
    let fixture = Fixture::new(4);
    let heads = [
        EagleHead::Eagle1(Box::new(eagle1_head(&fixture, true))),
        EagleHead::Eagle3(Box::new(eagle3_head(&fixture, Some(&[0, 2, 3]), false))),
    ];
    for (i, head) in heads.iter().enumerate() {
        for dtype in [FloatType::F16, FloatType::BF16] {
            let name = format!("half-{i}-{dtype:?}");
            let loaded = round_trip(&fixture, head, &name, dtype);
            let dir = fixture.root.path().join(&name);
            let checkpoint = Checkpoint::open(&dir).unwrap();
            assert_eq!(checkpoint.info("fc.weight").unwrap().dtype, dtype.dtype());
            let config: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap())
                    .unwrap();
            assert_eq!(config["torch_dtype"], dtype.torch_dtype());
            // Relative to the largest logit: f16 keeps 11 significant bits, bf16 8.
            let tolerance = if dtype == FloatType::F16 { 2e-3 } else { 1e-2 };
            assert_same_forward(&fixture, head, &loaded, tolerance);
        }
    }
}

#[test]
fn loaded_fixture_heads_export_their_checkpoints() {
    let fixture = Fixture::new(4);
    let heads = [
        fixture.eagle1("eagle1", &TinyEagle1Options::default()),
        fixture.eagle3("eagle3", &eagle3_options(4, 100)),
    ];
    for dir in heads {
        // Loading fuses projections into one layer; export splits them again.
        let head = fixture.load(&dir).unwrap();
        let checkpoint = Checkpoint::open(&dir).unwrap();
        let exported = head.export();
        let mut stored: Vec<&str> = checkpoint.names().collect();
        let mut names: Vec<&str> = exported.iter().map(|t| t.name.as_str()).collect();
        stored.sort_unstable();
        names.sort_unstable();
        assert_eq!(names, stored);
        for tensor in &exported {
            assert_eq!(checkpoint.info(&tensor.name).unwrap().shape, tensor.shape);
            let same = match &tensor.values {
                ExportedValues::F32(v) => *v == checkpoint.read_f32(&tensor.name).unwrap(),
                ExportedValues::I64(v) => *v == checkpoint.read_i64(&tensor.name).unwrap(),
                ExportedValues::Bool(v) => *v == checkpoint.read_bool(&tensor.name).unwrap(),
            };
            assert!(same, "{} differs from the checkpoint", tensor.name);
        }
        // And its config parses to the same head config.
        let written = parse(&head.config_json());
        let original = EagleConfig::from_file(&dir.join("config.json")).unwrap();
        assert_eq!(written.layer(), original.layer());
    }
}

#[test]
fn init_rejects_heads_that_do_not_fit() {
    let fixture = Fixture::new(4);
    let target = fixture.target.config();
    // An explicit `bias` must agree with the asked fc bias.
    let EagleConfig::Eagle1(config) = parse(&eagle1_config_json(&draft_layer(&fixture, 1), true))
    else {
        panic!("expected an EAGLE-1 config");
    };
    let err = Eagle1Head::<B>::init(&config, target, false, &device()).unwrap_err();
    assert!(matches!(err, EagleError::Config(_)), "{err}");
    let mut wide = config.clone();
    wide.layer.hidden_size = 96;
    let err = Eagle1Head::<B>::init(&wide, target, true, &device()).unwrap_err();
    assert!(
        matches!(
            err,
            EagleError::Incompatible {
                field: "hidden_size",
                ..
            }
        ),
        "{err}"
    );

    let json = eagle3_config_json(&draft_layer(&fixture, 1), 100, 64, Some(&[0, 1, 3]), false);
    let EagleConfig::Eagle3(config) = parse(&json) else {
        panic!("expected an EAGLE-3 config");
    };
    let small = DraftVocabMap::from_target_ids(&[1, 2, 3], 320).unwrap();
    let err = Eagle3Head::<B>::init(&config, target, small, &device()).unwrap_err();
    assert!(err.to_string().contains("3 draft tokens"), "{err}");
    let other_vocab = DraftVocabMap::from_target_ids(&(0..100).collect::<Vec<_>>(), 400).unwrap();
    let err = Eagle3Head::<B>::init(&config, target, other_vocab, &device()).unwrap_err();
    assert!(err.to_string().contains("vocabulary of 400"), "{err}");
    let json = eagle3_config_json(&draft_layer(&fixture, 1), 320, 64, Some(&[0, 1, 3]), false);
    let EagleConfig::Eagle3(full) = parse(&json) else {
        panic!("expected an EAGLE-3 config");
    };
    let mut shuffled: Vec<i64> = vec![0; 320];
    (shuffled[0], shuffled[1]) = (1, -1);
    let permutation = DraftVocabMap::from_offsets(&shuffled, None, 320).unwrap();
    let err = Eagle3Head::<B>::init(&full, target, permutation, &device()).unwrap_err();
    assert!(err.to_string().contains("must be the identity"), "{err}");
    let head = Eagle3Head::<B>::init(&full, target, DraftVocabMap::identity(320), &device());
    assert!(head.unwrap().vocab_map().is_identity());
    let err = Eagle3Head::<B>::init(&config, &draft_layer(&fixture, 2), draft_vocab(), &device())
        .unwrap_err();
    assert!(
        matches!(err, EagleError::AuxLayerOutOfRange { layer: 3, .. }),
        "{err}"
    );
}

/// Heads under training live on an autodiff backend; their export reads the parameter values.
#[cfg(feature = "train")]
#[test]
fn autodiff_heads_export_their_values() {
    type A = burn::backend::Autodiff<B>;
    let fixture = Fixture::new(4);
    let json = eagle3_config_json(&draft_layer(&fixture, 1), 100, 64, Some(&[0, 1, 3]), false);
    let EagleConfig::Eagle3(config) = parse(&json) else {
        panic!("expected an EAGLE-3 config");
    };
    let head =
        Eagle3Head::<A>::init(&config, fixture.target.config(), draft_vocab(), &device()).unwrap();
    let dir = fixture.root.path().join("autodiff");
    write_head_dir(&dir, &head.config_json(), &head.export(), FloatType::F32).unwrap();
    let loaded = EagleHead::<B>::load(&dir, fixture.target.config(), &device()).unwrap();
    assert_eq!(loaded.export(), head.export());
}

#[test]
fn an_eagle3_head_of_two_layers_runs_the_second_as_a_decoder_layer() {
    let fixture = Fixture::new(4);
    let aux = Some(&[0usize, 1, 3][..]);
    let head = EagleHead::Eagle3(Box::new(eagle3_head_of(&fixture, 2, aux, false)));
    assert_eq!(head.num_layers(), 2);
    let export = head.export();
    let shape = |name: &str| {
        export
            .iter()
            .find(|t| t.name == name)
            .map(|t| t.shape.clone())
    };
    assert_eq!(
        shape("midlayer.self_attn.q_proj.weight"),
        Some(vec![64, 2 * 64])
    );
    assert_eq!(
        shape("layers.1.self_attn.q_proj.weight"),
        Some(vec![64, 64])
    );
    assert_eq!(shape("layers.1.input_layernorm.weight"), Some(vec![64]));
    assert!(!names(&head)
        .iter()
        .any(|name| name.starts_with("layers.0.")));

    let loaded = round_trip(&fixture, &head, "eagle3-two-layers", FloatType::F32);
    assert_eq!(loaded.num_layers(), 2);
    assert_eq!(loaded.config().num_hidden_layers, 2);
    assert_eq!(loaded.export(), head.export());
    assert_same_forward(&fixture, &head, &loaded, 1e-6);

    // The second layer is a residual block: with its output projections zeroed it adds
    // nothing, and the head drafts exactly as the one-layer head of the same midlayer.
    let root = fixture.root.path();
    let zeroed = root.join("eagle3-two-layers");
    edit_checkpoint(&zeroed, |tensors| {
        for tensor in tensors.iter_mut() {
            if tensor.name == "layers.1.self_attn.o_proj.weight"
                || tensor.name == "layers.1.mlp.down_proj.weight"
            {
                tensor.bytes.fill(0);
            }
        }
    });
    let one_layer = root.join("eagle3-midlayer-only");
    write_head_dir(&one_layer, &head.config_json(), &export, FloatType::F32).unwrap();
    edit_checkpoint(&one_layer, |tensors| {
        tensors.retain(|t| !t.name.starts_with("layers.1."))
    });
    edit_config(&one_layer, |config| config["num_hidden_layers"] = 1.into());
    let load = |dir: &Path| EagleHead::<B>::load(dir, fixture.target.config(), &device());
    let (zeroed, one_layer_head) = (load(&zeroed).unwrap(), load(&one_layer).unwrap());
    assert_eq!(one_layer_head.num_layers(), 1);
    assert_same_forward(&fixture, &zeroed, &one_layer_head, 1e-6);
    let (outputs, _) = draft_forward(&fixture, &head);
    let (one_layer_outputs, _) = draft_forward(&fixture, &one_layer_head);
    assert!(max_abs_diff(&outputs, &one_layer_outputs) > 1e-3);

    // A config of two layers over a checkpoint without the second is refused, naming it.
    edit_config(&one_layer, |config| config["num_hidden_layers"] = 2.into());
    let error = load(&one_layer).unwrap_err().to_string();
    assert!(error.contains("layers.1."), "{error}");
}

#[test]
fn a_deepened_head_drafts_as_before_and_exports_its_new_layers() {
    let fixture = Fixture::new(4);
    let aux = Some(&[0usize, 1, 3][..]);
    let (eagle1, eagle3) = (
        eagle1_head(&fixture, true),
        eagle3_head(&fixture, aux, false),
    );
    let pairs = [
        (
            EagleHead::Eagle1(Box::new(eagle1.clone())),
            EagleHead::Eagle1(Box::new(eagle1.with_added_layers(2, &device()))),
        ),
        (
            EagleHead::Eagle3(Box::new(eagle3.clone())),
            EagleHead::Eagle3(Box::new(eagle3.with_added_layers(2, &device()))),
        ),
    ];
    for (index, (head, deepened)) in pairs.iter().enumerate() {
        let before = head.num_layers();
        assert_eq!(deepened.num_layers(), before + 2);
        assert_eq!(deepened.config().num_hidden_layers, before + 2);
        // The added layers are residual blocks whose output projections start at zero.
        assert_same_forward(&fixture, head, deepened, 0.0);

        // The last added layer (EAGLE-1 counts from layers.0, EAGLE-3 from the midlayer) is
        // exported with zero output projections over random inputs and unit norms.
        let prefix = format!("layers.{}.", before + 1);
        let added: Vec<_> = deepened
            .export()
            .into_iter()
            .filter(|t| t.name.starts_with(&prefix))
            .collect();
        assert_eq!(added.len(), 9, "{prefix}: norms, q/k/v/o, gate/up/down");
        for tensor in added {
            let ExportedValues::F32(values) = &tensor.values else {
                panic!("{} is not a float tensor", tensor.name);
            };
            let output = tensor.name.ends_with(".o_proj.weight")
                || tensor.name.ends_with(".down_proj.weight");
            assert_eq!(values.iter().all(|&v| v == 0.0), output, "{}", tensor.name);
        }
        let loaded = round_trip(
            &fixture,
            deepened,
            &format!("deepened-{index}"),
            FloatType::F32,
        );
        assert_eq!(loaded.num_layers(), before + 2);
        assert_same_forward(&fixture, deepened, &loaded, 1e-6);
    }
}
