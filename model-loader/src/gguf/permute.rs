//! Undoing llama.cpp's row permutation of attention query and key projections.
//!
//! llama.cpp's converter reorders the rows of each head of `q_proj`/`k_proj` for its rotary
//! embedding layout: a head's rows are seen as two halves `[first | second]` of `head_dim / 2`
//! rows each and stored interleaved, `first[0], second[0], first[1], second[1], ...`. Hugging
//! Face rotates halves, so the importer moves GGUF row `h * head_dim + 2 * i + j` back to
//! row `h * head_dim + j * head_dim / 2 + i`.

use super::GgufError;

/// Returns `data` (`rows` rows of `row_len` values, `n_heads` heads of rows) with each head's
/// interleaved rows put back into two contiguous halves.
pub fn unpermute_qk_rows(
    tensor: &str,
    data: &[f32],
    row_len: usize,
    n_heads: usize,
) -> Result<Vec<f32>, GgufError> {
    let rows = data.len().checked_div(row_len).unwrap_or(0);
    if n_heads == 0 || row_len == 0 || rows * row_len != data.len() || !rows.is_multiple_of(n_heads)
    {
        return Err(GgufError::tensor(
            tensor,
            format!(
                "{} values in rows of {row_len} cannot be split into {n_heads} heads",
                data.len()
            ),
        ));
    }
    let head_dim = rows / n_heads;
    if !head_dim.is_multiple_of(2) {
        return Err(GgufError::tensor(
            tensor,
            format!("head dimension {head_dim} is odd; rotary halves need an even one"),
        ));
    }
    let half = head_dim / 2;
    let mut out = vec![0.0f32; data.len()];
    for (gguf_row, src) in data.chunks_exact(row_len).enumerate() {
        let (head, within) = (gguf_row / head_dim, gguf_row % head_dim);
        let hf_row = head * head_dim + (within % 2) * half + within / 2;
        out[hf_row * row_len..(hf_row + 1) * row_len].copy_from_slice(src);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// llama.cpp's forward permutation, written independently: Hugging Face row
    /// `h * hd + j * hd/2 + i` goes to GGUF row `h * hd + 2 * i + j`.
    fn permute(hf: &[f32], row_len: usize, n_heads: usize) -> Vec<f32> {
        let rows = hf.len() / row_len;
        let hd = rows / n_heads;
        let mut out = vec![0.0; hf.len()];
        for h in 0..n_heads {
            for j in 0..2 {
                for i in 0..hd / 2 {
                    let from = h * hd + j * hd / 2 + i;
                    let to = h * hd + 2 * i + j;
                    out[to * row_len..(to + 1) * row_len]
                        .copy_from_slice(&hf[from * row_len..(from + 1) * row_len]);
                }
            }
        }
        out
    }

    #[test]
    fn known_case_two_heads_of_four_rows() {
        // Rows hold their GGUF index. Head 0 stores HF rows 0,2,1,3; head 1 stores 4,6,5,7.
        let gguf: Vec<f32> = (0..8).map(|r| r as f32).collect();
        let hf = unpermute_qk_rows("q", &gguf, 1, 2).unwrap();
        assert_eq!(hf, [0.0, 2.0, 1.0, 3.0, 4.0, 6.0, 5.0, 7.0]);
    }

    #[test]
    fn inverts_the_forward_permutation_with_wide_rows() {
        let (row_len, n_heads, head_dim) = (3, 3, 8);
        let hf: Vec<f32> = (0..row_len * n_heads * head_dim)
            .map(|v| v as f32)
            .collect();
        let gguf = permute(&hf, row_len, n_heads);
        assert_ne!(gguf, hf);
        assert_eq!(unpermute_qk_rows("k", &gguf, row_len, n_heads).unwrap(), hf);
    }

    #[test]
    fn inconsistent_geometry_is_an_error() {
        assert!(unpermute_qk_rows("q", &[0.0; 12], 2, 4).is_err()); // 6 rows, 4 heads
        assert!(unpermute_qk_rows("q", &[0.0; 6], 1, 2).is_err()); // head_dim 3 is odd
        assert!(unpermute_qk_rows("q", &[0.0; 6], 1, 0).is_err());
    }
}
