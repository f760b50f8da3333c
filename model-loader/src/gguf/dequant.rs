//! Exact dequantization of GGML blocks to f32 (F32, F16, BF16, Q8_0, Q4_0, Q4_1).
//!
//! Each value is computed in f32 exactly as the reference formulas read: Q8_0 `d * q`,
//! Q4_0 `d * (q - 8)`, Q4_1 `d * q + m` (a product then a sum, not fused), with `d` and `m`
//! widened from f16. Block `j`'s low nibbles are values `0..16` and its high nibbles values
//! `16..32`.

use super::{GgmlType, GgufError};
use half::{bf16, f16};
use rayon::prelude::*;

/// Blocks handed to one rayon task.
const BLOCKS_PER_TASK: usize = 1024;

/// Dequantizes `bytes` of type `ggml_type` into `out` (one f32 per element), in parallel.
/// `tensor` names the tensor in errors.
pub fn dequantize(
    tensor: &str,
    ggml_type: GgmlType,
    bytes: &[u8],
    out: &mut [f32],
) -> Result<(), GgufError> {
    let block_fn: fn(&[u8], &mut [f32]) = match ggml_type {
        GgmlType::F32 => block_f32,
        GgmlType::F16 => block_f16,
        GgmlType::BF16 => block_bf16,
        GgmlType::Q8_0 => block_q8_0,
        GgmlType::Q4_0 => block_q4_0,
        GgmlType::Q4_1 => block_q4_1,
        other => {
            return Err(GgufError::UnsupportedTensorType {
                tensor: tensor.into(),
                type_name: other.name(),
            })
        }
    };
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
                block_fn(block, values);
            }
        });
    Ok(())
}

/// Reads the f16 at `bytes[at..at + 2]` as f32.
fn f16_at(bytes: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([bytes[at], bytes[at + 1]]).to_f32()
}

/// One little-endian f32.
fn block_f32(bytes: &[u8], out: &mut [f32]) {
    out[0] = f32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
}

/// One little-endian IEEE half.
fn block_f16(bytes: &[u8], out: &mut [f32]) {
    out[0] = f16_at(bytes, 0);
}

/// One little-endian bfloat16.
fn block_bf16(bytes: &[u8], out: &mut [f32]) {
    out[0] = bf16::from_le_bytes([bytes[0], bytes[1]]).to_f32();
}

/// Q8_0: f16 scale `d`, 32 signed bytes `q`; value `d * q`.
fn block_q8_0(bytes: &[u8], out: &mut [f32]) {
    let d = f16_at(bytes, 0);
    for (value, &q) in out.iter_mut().zip(&bytes[2..34]) {
        *value = d * f32::from(q as i8);
    }
}

/// Q4_0: f16 scale `d`, 16 bytes of nibbles `q`; value `d * (q - 8)`.
fn block_q4_0(bytes: &[u8], out: &mut [f32]) {
    let d = f16_at(bytes, 0);
    let (low, high) = out.split_at_mut(16);
    for (j, &packed) in bytes[2..18].iter().enumerate() {
        low[j] = d * f32::from(i16::from(packed & 0x0F) - 8);
        high[j] = d * f32::from(i16::from(packed >> 4) - 8);
    }
}

/// Q4_1: f16 scale `d`, f16 minimum `m`, 16 bytes of nibbles `q`; value `d * q + m`.
fn block_q4_1(bytes: &[u8], out: &mut [f32]) {
    let d = f16_at(bytes, 0);
    let m = f16_at(bytes, 2);
    let (low, high) = out.split_at_mut(16);
    for (j, &packed) in bytes[4..20].iter().enumerate() {
        low[j] = d * f32::from(packed & 0x0F) + m;
        high[j] = d * f32::from(packed >> 4) + m;
    }
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
    fn f32_f16_bf16_are_widened_exactly() {
        let f32_bytes: Vec<u8> = [1.5f32, -0.25]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        assert_eq!(run(GgmlType::F32, &f32_bytes, 2), [1.5, -0.25]);
        // 0x3C00 = 1.0, 0xC000 = -2.0, 0x0001 = smallest subnormal 2^-24.
        let f16_bytes = [0x00, 0x3C, 0x00, 0xC0, 0x01, 0x00];
        assert_eq!(
            run(GgmlType::F16, &f16_bytes, 3),
            [1.0, -2.0, 2f32.powi(-24)]
        );
        // bf16 0x3FC0 = 1.5, 0xC120 = -10.0.
        let bf16_bytes = [0xC0, 0x3F, 0x20, 0xC1];
        assert_eq!(run(GgmlType::BF16, &bf16_bytes, 2), [1.5, -10.0]);
    }

    #[test]
    fn q8_0_scales_signed_bytes() {
        // d = 0.5 (f16 0x3800); q = 0, 1, -1, 127, -128, then 2 for the rest.
        let mut block = vec![0x00, 0x38];
        let qs: Vec<i8> = [0, 1, -1, 127, -128]
            .into_iter()
            .chain(std::iter::repeat_n(2, 27))
            .collect();
        block.extend(qs.iter().map(|&q| q as u8));
        let out = run(GgmlType::Q8_0, &block, 32);
        assert_eq!(&out[..5], &[0.0, 0.5, -0.5, 63.5, -64.0]);
        assert!(out[5..].iter().all(|&v| v == 1.0));
    }

    #[test]
    fn q4_0_puts_low_nibbles_first_and_offsets_by_eight() {
        // d = 2.0 (f16 0x4000); byte j = (high nibble 15 - j % 16) << 4 | (low nibble j).
        let mut block = vec![0x00, 0x40];
        block.extend((0u8..16).map(|j| ((15 - j) << 4) | j));
        let out = run(GgmlType::Q4_0, &block, 32);
        for j in 0..16 {
            assert_eq!(out[j], 2.0 * (j as f32 - 8.0), "low {j}");
            assert_eq!(out[16 + j], 2.0 * (7.0 - j as f32), "high {j}");
        }
    }

    #[test]
    fn q4_1_multiplies_then_adds_the_minimum() {
        // d = 0.1 (f16 0x2E66 = 0.0999755859375), m = -1.0 (f16 0xBC00).
        let mut block = vec![0x66, 0x2E, 0x00, 0xBC];
        block.extend((0u8..16).map(|j| (j << 4) | (15 - j)));
        let out = run(GgmlType::Q4_1, &block, 32);
        let d = 1638.0f32 / 16384.0; // f16 0x2E66 exactly
        for j in 0..16 {
            assert_eq!(out[j], d * (15 - j) as f32 + -1.0, "low {j}");
            assert_eq!(out[16 + j], d * j as f32 + -1.0, "high {j}");
        }
        assert_eq!(out[0], 8186.0 / 16384.0); // d * 15 - 1, exact in f32.
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
    fn size_mismatch_and_unsupported_types_are_errors() {
        let mut out = vec![0.0; 32];
        let err = dequantize("w", GgmlType::Q8_0, &[0; 33], &mut out).unwrap_err();
        assert!(err.to_string().contains("\"w\""), "{err}");
        let err = dequantize("w", GgmlType::Q4K, &[0; 144], &mut vec![0.0; 256]).unwrap_err();
        assert!(matches!(
            err,
            GgufError::UnsupportedTensorType {
                type_name: "Q4_K",
                ..
            }
        ));
    }
}
