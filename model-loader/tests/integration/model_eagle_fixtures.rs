//! The EAGLE draft-head fixtures load with the public building blocks, exactly (no missing or
//! leftover tensors), and the blocks run on them: an EAGLE-1 layer without input norm over
//! `fc([embedding, feature])`, and an EAGLE-3 midlayer whose attention reads `2H`-wide rows.

use crate::model_support;

use aquila_model_loader::checkpoint::{Checkpoint, CheckpointError};
use aquila_model_loader::config::EagleConfig;
use aquila_model_loader::fixtures::eagle::{
    write_tiny_eagle1, write_tiny_eagle3, TinyEagle1Options, TinyEagle3Options,
};
use aquila_model_loader::fixtures::llama::TinyLlamaOptions;
use aquila_model_loader::fixtures::FixtureError;
use aquila_model_loader::model::{
    load_rms_norm, Attention, AttentionContext, AttentionSpec, DecoderLayer, DecoderLayerSpec,
    ForwardBatch, KvCache, Mlp, MlpSpec, Rope, SequenceInput, WeightLoader,
};
use burn::tensor::Tensor;
use model_support::{tiny_model, B};

#[test]
fn eagle1_head_loads_and_runs() {
    let (_target_dir, target) = tiny_model(&TinyLlamaOptions::default());
    let (hidden, vocab) = (target.config().hidden_size, target.config().vocab_size);
    let device = target.device();
    for options in [
        TinyEagle1Options::default(),
        TinyEagle1Options {
            fc_bias: false,
            bias_key: Some(false),
            embed_tokens: true,
            seed: 5,
        },
    ] {
        let dir = tempfile::tempdir().unwrap();
        write_tiny_eagle1(dir.path(), target.config(), &options).unwrap();
        let EagleConfig::Eagle1(config) =
            EagleConfig::from_file(&dir.path().join("config.json")).unwrap()
        else {
            panic!("expected an EAGLE-1 config");
        };
        let checkpoint = Checkpoint::open(dir.path()).unwrap();
        let fc_bias = config
            .resolve_fc_bias(checkpoint.contains("fc.bias"))
            .unwrap();
        assert_eq!(fc_bias, options.fc_bias);

        let mut loader = WeightLoader::<B>::new(&checkpoint, &device);
        let fc = loader.linear("fc", 2 * hidden, hidden, fc_bias).unwrap();
        let spec = DecoderLayerSpec::from_config(&config.layer).without_input_norm();
        let layer = DecoderLayer::load(&mut loader, "layers.0", &spec).unwrap();
        let embed = loader.take_optional("embed_tokens.weight", [vocab, hidden]);
        assert_eq!(embed.is_some(), options.embed_tokens);
        loader.finish().unwrap();

        // One draft step over three rows: fc([embedding, feature]) through the layer.
        let tokens = vec![4, 5, 6];
        let features = Tensor::<B, 2>::ones([3, hidden], &device);
        let input = fc.forward(Tensor::cat(vec![target.embed(&tokens), features], 1));
        let batch = ForwardBatch::new(vec![SequenceInput::new(0, tokens, 0)]);
        let mut cache = KvCache::new(1, 1);
        let rope = Rope::new(&config.layer.rope, config.layer.head_dim);
        let heads = (
            config.layer.num_attention_heads,
            config.layer.num_key_value_heads,
        );
        let context = AttentionContext::new(&batch, &cache, &rope, heads.0, heads.1, &device);
        let out = layer.forward(input, &context, &mut cache, 0);
        assert_eq!(out.dims(), [3, hidden]);
        cache.advance(0, 3);
        assert_eq!(cache.len(0), 3);
    }
}

#[test]
fn eagle1_layer_has_no_input_norm_and_mismatched_bias_is_an_error() {
    let (_target_dir, target) = tiny_model(&TinyLlamaOptions::default());
    let dir = tempfile::tempdir().unwrap();
    let options = TinyEagle1Options {
        fc_bias: false,
        bias_key: Some(true),
        ..Default::default()
    };
    write_tiny_eagle1(dir.path(), target.config(), &options).unwrap();
    let EagleConfig::Eagle1(config) =
        EagleConfig::from_file(&dir.path().join("config.json")).unwrap()
    else {
        panic!("expected an EAGLE-1 config");
    };
    let checkpoint = Checkpoint::open(dir.path()).unwrap();
    assert!(config
        .resolve_fc_bias(checkpoint.contains("fc.bias"))
        .is_err());

    let mut loader = WeightLoader::<B>::new(&checkpoint, &target.device());
    let with_norm = DecoderLayerSpec::from_config(&config.layer);
    assert!(DecoderLayer::load(&mut loader, "layers.0", &with_norm).is_none());
    let err = loader.finish().unwrap_err();
    let CheckpointError::Mismatch { report, .. } = err else {
        panic!("expected a mismatch")
    };
    assert_eq!(report.missing, vec!["layers.0.input_layernorm.weight"]);
    assert_eq!(report.unexpected, vec!["fc.weight"]);
}

#[test]
fn eagle3_head_loads_and_runs() {
    let (_target_dir, target) = tiny_model(&TinyLlamaOptions {
        num_layers: 4,
        ..Default::default()
    });
    let (hidden, vocab) = (target.config().hidden_size, target.config().vocab_size);
    let device = target.device();
    let dir = tempfile::tempdir().unwrap();
    let options = TinyEagle3Options::default();
    write_tiny_eagle3(dir.path(), target.config(), &options).unwrap();
    let EagleConfig::Eagle3(config) =
        EagleConfig::from_file(&dir.path().join("config.json")).unwrap()
    else {
        panic!("expected an EAGLE-3 config");
    };
    assert_eq!(
        config.aux_layers_for(target.config()),
        options.aux_layer_ids
    );
    assert_eq!(config.fc_input_size(), 3 * hidden);
    assert_eq!(config.draft_vocab_size, options.draft_vocab_size);

    let checkpoint = Checkpoint::open(dir.path()).unwrap();
    let mut loader = WeightLoader::<B>::new(&checkpoint, &device);
    let eps = config.layer.rms_norm_eps;
    let fc = loader
        .linear("fc", config.fc_input_size(), hidden, false)
        .unwrap();
    let attention_spec = AttentionSpec::from_config(&config.layer).with_input_size(2 * hidden);
    let attention = Attention::load(&mut loader, "midlayer.self_attn", &attention_spec).unwrap();
    let mlp = Mlp::load(
        &mut loader,
        "midlayer.mlp",
        &MlpSpec::from_config(&config.layer),
    )
    .unwrap();
    let hidden_norm =
        load_rms_norm(&mut loader, "midlayer.hidden_norm.weight", hidden, eps).unwrap();
    let input_norm =
        load_rms_norm(&mut loader, "midlayer.input_layernorm.weight", hidden, eps).unwrap();
    let post_norm = load_rms_norm(
        &mut loader,
        "midlayer.post_attention_layernorm.weight",
        hidden,
        eps,
    )
    .unwrap();
    let norm = load_rms_norm(&mut loader, "norm.weight", hidden, eps).unwrap();
    let lm_head = loader
        .linear("lm_head", hidden, config.draft_vocab_size, false)
        .unwrap();
    let d2t = loader
        .reader()
        .i64("d2t", &[config.draft_vocab_size])
        .unwrap();
    let t2d = loader.reader().bool("t2d", &[vocab]).unwrap();
    loader.finish().unwrap();

    // d2t holds offsets to increasing target ids, exactly the ones t2d marks.
    let targets: Vec<usize> = d2t
        .iter()
        .enumerate()
        .map(|(i, d)| (i as i64 + d) as usize)
        .collect();
    assert!(targets.windows(2).all(|w| w[0] < w[1]) && targets.iter().all(|&t| t < vocab));
    assert_eq!(t2d.iter().filter(|&&b| b).count(), config.draft_vocab_size);
    assert!(targets.iter().all(|&t| t2d[t]));

    // One midlayer step over two rows fed by target aux features.
    let tokens = vec![7, 8];
    let batch = ForwardBatch::new(vec![SequenceInput::new(0, tokens.clone(), 0)]);
    let mut target_cache = target.new_kv_cache(1);
    let tap = aquila_model_loader::model::FeatureTap::AuxLayers(options.aux_layer_ids.clone());
    let features = target
        .forward(&batch, &mut target_cache, &tap)
        .unwrap()
        .features
        .unwrap();
    assert_eq!(features.dims(), [2, 3 * hidden]);
    let h = fc.forward(features);
    let attention_input = Tensor::cat(
        vec![
            input_norm.forward(target.embed(&tokens)),
            hidden_norm.forward(h.clone()),
        ],
        1,
    );
    let mut cache = KvCache::new(1, 1);
    let rope = Rope::new(&config.layer.rope, config.layer.head_dim);
    let heads = (
        config.layer.num_attention_heads,
        config.layer.num_key_value_heads,
    );
    let context = AttentionContext::new(&batch, &cache, &rope, heads.0, heads.1, &device);
    let h = h + attention.forward(attention_input, &context, &mut cache, 0);
    let h = h.clone() + mlp.forward(post_norm.forward(h));
    let logits = lm_head.forward(norm.forward(h));
    assert_eq!(logits.dims(), [2, config.draft_vocab_size]);
}

#[test]
fn eagle3_fixture_options_are_checked() {
    let (_target_dir, target) = tiny_model(&TinyLlamaOptions::default());
    let dir = tempfile::tempdir().unwrap();
    for options in [
        TinyEagle3Options::default(), // Layer 2 does not exist in a 2-layer target.
        TinyEagle3Options {
            aux_layer_ids: vec![1, 0],
            ..Default::default()
        },
        TinyEagle3Options {
            draft_vocab_size: 0,
            aux_layer_ids: vec![0, 1],
            ..Default::default()
        },
    ] {
        let err = write_tiny_eagle3(dir.path(), target.config(), &options).unwrap_err();
        assert!(matches!(err, FixtureError::InvalidOptions(_)), "{err:?}");
    }
}
