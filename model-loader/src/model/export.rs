//! Reading parameters back out as [`ExportedTensor`]s in Hugging Face layout (linear weights
//! `[out, in]`, the blocks of a layer joined): the inverse of [`super::WeightLoader`].
//! Values come through `into_data().convert::<f32>()`, so export works on any backend
//! (including `Autodiff` ones, through `Param::val`).

use super::linear::LinearBlock;
use crate::checkpoint::ExportedTensor;
use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

/// The values of `tensor` as `f32`, row-major.
pub(crate) fn tensor_values<B: Backend, const D: usize>(tensor: Tensor<B, D>) -> Vec<f32> {
    let data = tensor.into_data().convert::<f32>();
    // Copies through bytes, which works whatever the alignment of the backend's buffer.
    bytemuck::pod_collect_to_vec::<u8, f32>(data.as_bytes())
}

/// A tensor as it is stored in the module (no transposition) under `name`: for parameters
/// whose layout is already Hugging Face's, such as embedding tables (`[vocab, hidden]`).
pub fn export_tensor<B: Backend, const D: usize>(
    name: &str,
    tensor: Tensor<B, D>,
) -> ExportedTensor {
    let shape = tensor.dims().to_vec();
    ExportedTensor::f32(name, shape, tensor_values(tensor))
}

/// The blocks of one linear layer (`[out_i, in]` weights) as one Hugging Face projection:
/// `{prefix}.weight` `[out, in]` and, when any block has a bias, `{prefix}.bias` `[out]` (a
/// block without one contributes zeros, which is what it adds).
pub(crate) fn export_linear<B: Backend>(
    blocks: &[LinearBlock<B>],
    prefix: &str,
) -> Vec<ExportedTensor> {
    let d_in = blocks.first().map_or(0, |b| b.dims().0);
    let mut weight = Vec::new();
    let mut bias = Vec::new();
    let mut has_bias = false;
    for block in blocks {
        let (rows, width) = block.dims();
        debug_assert_eq!(rows, d_in, "the blocks of a layer share their input");
        match (&block.weight, block.packed()) {
            (Some(w), _) => weight.extend(tensor_values(w.val())),
            (None, Some(packed)) => weight.extend(packed.dequantize()),
            (None, None) => unreachable!("a block holds its weight in one form"),
        }
        match &block.bias {
            Some(b) => {
                has_bias = true;
                bias.extend(tensor_values(b.val()));
            }
            None => bias.resize(bias.len() + width, 0.0),
        }
    }
    let d_out = bias.len();
    let mut out = vec![ExportedTensor::f32(
        format!("{prefix}.weight"),
        vec![d_out, d_in],
        weight,
    )];
    if has_bias {
        out.push(ExportedTensor::f32(
            format!("{prefix}.bias"),
            vec![d_out],
            bias,
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use crate::checkpoint::{Checkpoint, ExportedTensor};
    use crate::fixtures::eagle::{write_tiny_eagle1, TinyEagle1Options};
    use crate::fixtures::llama::{write_tiny_llama, TinyLlamaOptions};
    use crate::model::{
        export_rms_norm, load_rms_norm, BlockWeights, DecoderLayer, DecoderLayerSpec, SplitLinear,
        WeightLoader,
    };
    use burn::backend::Flex;

    type B = Flex;

    /// Every exported tensor is in the checkpoint with the same shape and values, and every
    /// checkpoint tensor under `prefix` was exported.
    fn assert_reproduces(checkpoint: &Checkpoint, prefix: &str, exported: &[ExportedTensor]) {
        for tensor in exported {
            let info = checkpoint
                .info(&tensor.name)
                .expect("exported name is stored");
            assert_eq!(info.shape, tensor.shape, "{}", tensor.name);
            let stored = checkpoint.read_f32(&tensor.name).unwrap();
            assert_eq!(tensor.as_f32(), Some(stored.as_slice()), "{}", tensor.name);
        }
        let mut stored: Vec<&str> = checkpoint
            .names()
            .filter(|n| n.starts_with(prefix))
            .collect();
        let mut names: Vec<&str> = exported.iter().map(|t| t.name.as_str()).collect();
        stored.sort_unstable();
        names.sort_unstable();
        assert_eq!(names, stored);
    }

    #[test]
    fn loaded_layers_export_the_checkpoint_tensors() {
        let dir = tempfile::tempdir().unwrap();
        let options = TinyLlamaOptions {
            attention_bias: true,
            ..TinyLlamaOptions::default()
        };
        write_tiny_llama(dir.path(), &options).unwrap();
        let checkpoint = Checkpoint::open(dir.path()).unwrap();
        let spec = DecoderLayerSpec::from_config(&options.config());
        {
            let mut loader = WeightLoader::<B>::new(&checkpoint, &Default::default());
            let layer = DecoderLayer::load(&mut loader, "model.layers.1", &spec).unwrap();
            assert!(layer.has_input_norm());
            assert_reproduces(
                &checkpoint,
                "model.layers.1.",
                &layer.export("model.layers.1"),
            );
            let norm = load_rms_norm(&mut loader, "model.norm.weight", 64, 1e-5).unwrap();
            let norm = export_rms_norm(&norm, "model.norm.weight");
            assert_reproduces(&checkpoint, "model.norm", &[norm]);
        }
    }

    #[test]
    fn eagle1_fc_and_layer_without_input_norm_export_exactly() {
        let target = TinyLlamaOptions::default().config();
        let dir = tempfile::tempdir().unwrap();
        write_tiny_eagle1(dir.path(), &target, &TinyEagle1Options::default()).unwrap();
        let checkpoint = Checkpoint::open(dir.path()).unwrap();
        let mut loader = WeightLoader::<B>::new(&checkpoint, &Default::default());
        let fc = loader.linear("fc", 128, 64, true).unwrap();
        assert_eq!(fc.num_blocks(), 1);
        assert_reproduces(&checkpoint, "fc.", &fc.export_projection("fc"));
        let spec = DecoderLayerSpec::from_config(&target).without_input_norm();
        let layer = DecoderLayer::load(&mut loader, "layers.0", &spec).unwrap();
        assert!(!layer.has_input_norm());
        assert_reproduces(&checkpoint, "layers.0.", &layer.export("layers.0"));
    }

    #[test]
    fn blocks_without_bias_export_zero_bias() {
        let weight: Vec<f32> = (0..4 * 3).map(|v| v as f32).collect(); // [out 4, in 3]
        let blocks = vec![
            BlockWeights {
                weight: weight[..6].to_vec(),
                bias: Some(vec![1.0, 2.0]),
                out: 2,
            },
            BlockWeights {
                weight: weight[6..].to_vec(),
                bias: None,
                out: 2,
            },
        ];
        let layer = SplitLinear::<B>::from_blocks(blocks, 3, &Default::default());
        let out = layer.export_projection("p");
        assert_eq!(out[0].name, "p.weight");
        assert_eq!(out[0].shape, vec![4, 3]);
        assert_eq!(out[0].as_f32().unwrap(), weight);
        assert_eq!(out[1].as_f32().unwrap(), [1.0, 2.0, 0.0, 0.0]);

        let parts = layer.export_projections(&["a", "b"]);
        let names: Vec<&str> = parts.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["a.weight", "a.bias", "b.weight"]);
        assert_eq!(parts[2].shape, vec![2, 3]);
    }

    #[test]
    #[should_panic(expected = "1 prefixes")]
    fn a_prefix_per_block_is_required() {
        let layer = SplitLinear::<B>::init(3, &[2, 2], false, &Default::default());
        layer.export_projections(&["only"]);
    }
}
