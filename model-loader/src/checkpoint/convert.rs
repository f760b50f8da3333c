//! Conversion of raw little-endian tensor bytes to `f32`, `i64` and `bool`, and a transposing
//! copy for matrices stored as `[out, in]` that the model wants as `[in, out]`.

use half::{bf16, f16};
use rayon::prelude::*;
use safetensors::Dtype;

/// Elements per parallel work item when converting large tensors.
const CHUNK: usize = 1 << 16;

/// Converts floating-point bytes (`F32`, `F16`, `BF16`, `F64`) to `f32`; `None` for other
/// dtypes.
pub(crate) fn to_f32(dtype: Dtype, bytes: &[u8]) -> Option<Vec<f32>> {
    match dtype {
        Dtype::F32 => Some(convert(bytes, |b: [u8; 4]| f32::from_le_bytes(b))),
        Dtype::F16 => Some(convert(bytes, |b: [u8; 2]| f16::from_le_bytes(b).to_f32())),
        Dtype::BF16 => Some(convert(bytes, |b: [u8; 2]| bf16::from_le_bytes(b).to_f32())),
        Dtype::F64 => Some(convert(bytes, |b: [u8; 8]| f64::from_le_bytes(b) as f32)),
        _ => None,
    }
}

/// Converts integer bytes (`I64`, `I32`) to `i64`; `None` for other dtypes.
pub(crate) fn to_i64(dtype: Dtype, bytes: &[u8]) -> Option<Vec<i64>> {
    match dtype {
        Dtype::I64 => Some(convert(bytes, i64::from_le_bytes)),
        Dtype::I32 => Some(convert(bytes, |b: [u8; 4]| {
            i64::from(i32::from_le_bytes(b))
        })),
        _ => None,
    }
}

/// Converts `BOOL` (or `U8`) bytes to `bool`; `Err(byte)` names a byte other than 0 or 1,
/// `Ok(None)` a wrong dtype.
pub(crate) fn to_bool(dtype: Dtype, bytes: &[u8]) -> Result<Option<Vec<bool>>, u8> {
    if !matches!(dtype, Dtype::BOOL | Dtype::U8) {
        return Ok(None);
    }
    bytes
        .iter()
        .map(|&b| match b {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(other),
        })
        .collect::<Result<Vec<bool>, u8>>()
        .map(Some)
}

/// Decodes fixed-size little-endian elements, in parallel for large tensors.
fn convert<const N: usize, T: Send>(bytes: &[u8], decode: impl Fn([u8; N]) -> T + Sync) -> Vec<T> {
    let one = |chunk: &[u8]| -> T {
        let mut raw = [0u8; N];
        raw.copy_from_slice(chunk);
        decode(raw)
    };
    if bytes.len() < CHUNK * N {
        bytes.chunks_exact(N).map(one).collect()
    } else {
        bytes
            .par_chunks_exact(N)
            .with_min_len(CHUNK)
            .map(one)
            .collect()
    }
}

/// Transposes a row-major `[rows, cols]` matrix into row-major `[cols, rows]`.
pub(crate) fn transpose(data: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    debug_assert_eq!(data.len(), rows * cols);
    const TILE: usize = 32;
    let mut out = vec![0.0f32; data.len()];
    if out.is_empty() {
        return out;
    }
    // Each band of TILE output rows (TILE source columns) is written by one task; walking the
    // source rows in order keeps the band's TILE destination cache lines hot.
    out.par_chunks_mut(TILE * rows)
        .enumerate()
        .for_each(|(band, dst)| {
            let c0 = band * TILE;
            let band_cols = dst.len() / rows;
            for r in 0..rows {
                let src = &data[r * cols + c0..r * cols + c0 + band_cols];
                for (dc, &v) in src.iter().enumerate() {
                    dst[dc * rows + r] = v;
                }
            }
        });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converts_half_precision() {
        let values = [1.5f32, -2.25, 0.0, 65504.0];
        let f16_bytes: Vec<u8> = values
            .iter()
            .flat_map(|&v| f16::from_f32(v).to_le_bytes())
            .collect();
        let bf16_bytes: Vec<u8> = values
            .iter()
            .flat_map(|&v| bf16::from_f32(v).to_le_bytes())
            .collect();
        assert_eq!(to_f32(Dtype::F16, &f16_bytes).unwrap(), values);
        let bf = to_f32(Dtype::BF16, &bf16_bytes).unwrap();
        assert_eq!(&bf[..3], &values[..3]);
        assert_eq!(bf[3], 65536.0); // bf16 rounds 65504 to 2^16
        assert!(to_f32(Dtype::I32, &[0; 4]).is_none());
    }

    #[test]
    fn converts_large_f32_in_parallel_in_order() {
        let values: Vec<f32> = (0..(3 * CHUNK + 5)).map(|i| i as f32).collect();
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(to_f32(Dtype::F32, &bytes).unwrap(), values);
    }

    #[test]
    fn converts_integers_and_booleans() {
        let bytes: Vec<u8> = [-3i64, 7].iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(to_i64(Dtype::I64, &bytes).unwrap(), vec![-3, 7]);
        assert_eq!(
            to_bool(Dtype::BOOL, &[0, 1, 1]).unwrap().unwrap(),
            vec![false, true, true]
        );
        assert_eq!(to_bool(Dtype::BOOL, &[0, 2]), Err(2));
        assert_eq!(to_bool(Dtype::F32, &[0; 4]), Ok(None));
    }

    #[test]
    fn transposes_odd_shapes() {
        for (rows, cols) in [(1, 1), (3, 5), (33, 70), (64, 31)] {
            let data: Vec<f32> = (0..rows * cols).map(|i| i as f32).collect();
            let t = transpose(&data, rows, cols);
            for r in 0..rows {
                for c in 0..cols {
                    assert_eq!(t[c * rows + r], data[r * cols + c]);
                }
            }
        }
    }
}
