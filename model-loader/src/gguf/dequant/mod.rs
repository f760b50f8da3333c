//! Exact dequantization of GGML blocks to f32: every type llama.cpp's Python package `gguf`
//! (gguf-py) can dequantize, bit for bit as it does.
//!
//! Each family lives in its own file: plain floats (`float.rs`), the 32-value formats Q4_0 to
//! Q8_0 (`legacy.rs`), the K-quants (`k_quants.rs`), the non-linear 4-bit IQ4 types
//! (`iq4.rs`), the grid-based IQ1/IQ2/IQ3 types (`iq_grid.rs`), the ternary TQ types
//! (`ternary.rs`) and the FP4 types (`fp4.rs`). Every value is computed in f32 in the order gguf-py's numpy formulas
//! evaluate it (a product then a sum, never fused; f16 scales widened first), which is what
//! makes the results identical. `model-loader/scripts/gguf_dequant_reference.py` and the
//! `gguf_dequant_reference` integration test check that on random blocks of every type.

mod bits;
mod float;
mod fp4;
mod grids;
mod iq4;
mod iq_grid;
mod k_quants;
mod legacy;
mod ternary;

use super::{GgmlType, GgufError};
use rayon::prelude::*;

/// Blocks handed to one rayon task.
const BLOCKS_PER_TASK: usize = 1024;

/// Turns the bytes of one block into its values (`out` holds exactly one block's values).
pub(crate) type BlockDecoder = fn(block: &[u8], out: &mut [f32]);

/// The decoder of `ggml_type`'s blocks, or `None` for types without one (Q8_1, Q8_K and Q1_0,
/// which gguf-py cannot dequantize either, and the integer types).
pub(crate) fn block_decoder(ggml_type: GgmlType) -> Option<BlockDecoder> {
    use GgmlType as T;
    Some(match ggml_type {
        T::F32 => float::f32_value,
        T::F16 => float::f16_value,
        T::BF16 => float::bf16_value,
        T::Q4_0 => legacy::q4_0,
        T::Q4_1 => legacy::q4_1,
        T::Q5_0 => legacy::q5_0,
        T::Q5_1 => legacy::q5_1,
        T::Q8_0 => legacy::q8_0,
        T::Q2K => k_quants::q2_k,
        T::Q3K => k_quants::q3_k,
        T::Q4K => k_quants::q4_k,
        T::Q5K => k_quants::q5_k,
        T::Q6K => k_quants::q6_k,
        T::Iq4Nl => iq4::iq4_nl,
        T::Iq4Xs => iq4::iq4_xs,
        T::Iq2Xxs => iq_grid::iq2_xxs,
        T::Iq2Xs => iq_grid::iq2_xs,
        T::Iq2S => iq_grid::iq2_s,
        T::Iq3Xxs => iq_grid::iq3_xxs,
        T::Iq3S => iq_grid::iq3_s,
        T::Iq1S => iq_grid::iq1_s,
        T::Iq1M => iq_grid::iq1_m,
        T::Tq1_0 => ternary::tq1_0,
        T::Tq2_0 => ternary::tq2_0,
        T::Mxfp4 => fp4::mxfp4,
        T::Nvfp4 => fp4::nvfp4,
        T::Q8_1 | T::Q8K | T::Q1_0 | T::I8 | T::I16 | T::I32 | T::I64 | T::F64 => return None,
    })
}

/// The names of every type [`dequantize`] accepts, comma-separated, for error messages.
pub(crate) fn supported_names() -> String {
    GgmlType::ALL
        .into_iter()
        .filter(|t| t.is_dequantizable())
        .map(GgmlType::name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Dequantizes `bytes` of type `ggml_type` into `out` (one f32 per element), in parallel.
/// `tensor` names the tensor in errors.
pub fn dequantize(
    tensor: &str,
    ggml_type: GgmlType,
    bytes: &[u8],
    out: &mut [f32],
) -> Result<(), GgufError> {
    let decode = block_decoder(ggml_type).ok_or_else(|| GgufError::UnsupportedTensorType {
        tensor: tensor.into(),
        type_name: ggml_type.name(),
    })?;
    let block_len = ggml_type.block_len() as usize;
    let block_bytes = ggml_type.block_bytes() as usize;
    if !out.len().is_multiple_of(block_len) || bytes.len() != out.len() / block_len * block_bytes {
        return Err(GgufError::tensor(
            tensor,
            format!(
                "{} bytes of {} cannot hold {} values",
                bytes.len(),
                ggml_type.name(),
                out.len()
            ),
        ));
    }
    // Plain element types have one-element "blocks"; give tasks the same amount of data.
    let per_task = if block_len == 1 {
        BLOCKS_PER_TASK * 32
    } else {
        BLOCKS_PER_TASK
    };
    bytes
        .par_chunks(block_bytes * per_task)
        .zip(out.par_chunks_mut(block_len * per_task))
        .for_each(|(src, dst)| {
            for (block, values) in src
                .chunks_exact(block_bytes)
                .zip(dst.chunks_exact_mut(block_len))
            {
                decode(block, values);
            }
        });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(ggml_type: GgmlType, bytes: &[u8], len: usize) -> Vec<f32> {
        let mut out = vec![f32::NAN; len];
        dequantize("t", ggml_type, bytes, &mut out).unwrap();
        out
    }

    #[test]
    fn many_blocks_across_tasks_stay_in_order() {
        // 3000 Q8_0 blocks (more than one task); block b has scale 1 and every q = b % 100.
        let blocks = 3000;
        let mut bytes = Vec::with_capacity(blocks * 34);
        for b in 0..blocks {
            bytes.extend([0x00, 0x3C]);
            bytes.extend(std::iter::repeat_n((b % 100) as u8, 32));
        }
        let out = run(GgmlType::Q8_0, &bytes, blocks * 32);
        for b in [0, 1023, 1024, 2999] {
            assert!(out[b * 32..(b + 1) * 32]
                .iter()
                .all(|&v| v == (b % 100) as f32));
        }
    }

    #[test]
    fn every_decoder_fills_its_whole_block() {
        // Zero bytes decode to finite values (zeros, or the IQ1 deltas times a zero scale) in
        // every slot: a decoder that skipped a slot would leave its NaN.
        for ggml_type in GgmlType::ALL.into_iter().filter(|t| t.is_dequantizable()) {
            let bytes = vec![0u8; 2 * ggml_type.block_bytes() as usize];
            let out = run(ggml_type, &bytes, 2 * ggml_type.block_len() as usize);
            assert!(out.iter().all(|v| v.is_finite()), "{}", ggml_type.name());
        }
    }

    #[test]
    fn size_mismatch_and_unsupported_types_are_errors() {
        let mut out = vec![0.0; 32];
        let err = dequantize("w", GgmlType::Q8_0, &[0; 33], &mut out).unwrap_err();
        assert!(err.to_string().contains("\"w\""), "{err}");
        let err = dequantize("w", GgmlType::Q8K, &[0; 292], &mut vec![0.0; 256]).unwrap_err();
        assert!(matches!(
            err,
            GgufError::UnsupportedTensorType {
                type_name: "Q8_K",
                ..
            }
        ));
        assert!(err.to_string().contains("Q8_K"), "{err}");
        assert!(err.to_string().contains("IQ4_XS"), "{err}");
    }
}
