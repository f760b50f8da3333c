//! Rotary position embedding in the Hugging Face "rotate half" layout: pair `i` of a head is
//! made of elements `i` and `i + head_dim / 2`.
//!
//! A rotation is computed as `x * cos + rotate_half(x) * sin` with `rotate_half(x) = x R` for a
//! fixed signed permutation matrix `R` (exact: one non-zero per column), and `cos`/`sin` laid
//! out at the full `[rows, heads, head_dim]` shape, so every step is a contiguous tensor
//! operation (the CPU backend walks strided or head-broadcast operands element by element).

use crate::config::RopeConfig;
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};

/// RoPE of one model: the inverse frequencies of its head width.
#[derive(Debug, Clone, PartialEq)]
pub struct Rope {
    inverse_frequencies: Vec<f64>,
}

impl Rope {
    /// RoPE for heads `head_dim` wide (even) under `config`'s base and scaling.
    pub fn new(config: &RopeConfig, head_dim: usize) -> Self {
        Self {
            inverse_frequencies: config.inverse_frequencies(head_dim),
        }
    }

    /// The `head_dim / 2` inverse frequencies.
    pub fn inverse_frequencies(&self) -> &[f64] {
        &self.inverse_frequencies
    }

    /// Rotation tables for rows at `positions`, for tensors with each of `head_counts` heads.
    pub fn tables<B: Backend>(
        &self,
        positions: &[usize],
        head_counts: &[usize],
        device: &B::Device,
    ) -> RopeTables<B> {
        let half = self.inverse_frequencies.len();
        let head_dim = 2 * half;
        let angles: Vec<(f32, f32)> = positions
            .iter()
            .flat_map(|&position| {
                self.inverse_frequencies.iter().map(move |&frequency| {
                    let angle = position as f64 * frequency;
                    (angle.cos() as f32, angle.sin() as f32)
                })
            })
            .collect();
        let expanded = |heads: usize, pick: fn(&(f32, f32)) -> f32| -> Tensor<B, 3> {
            let mut values = Vec::with_capacity(positions.len() * heads * head_dim);
            for row in angles.chunks_exact(half.max(1)).take(positions.len()) {
                for _ in 0..heads {
                    // Both elements of a pair rotate by the same angle.
                    values.extend(row.iter().map(pick));
                    values.extend(row.iter().map(pick));
                }
            }
            Tensor::from_data(
                TensorData::new(values, [positions.len(), heads, head_dim]),
                device,
            )
        };
        let mut heads: Vec<usize> = head_counts.to_vec();
        heads.sort_unstable();
        heads.dedup();
        RopeTables {
            rotate_half: rotate_half_matrix(head_dim, device),
            by_heads: heads
                .into_iter()
                .map(|h| (h, expanded(h, |a| a.0), expanded(h, |a| a.1)))
                .collect(),
        }
    }
}

/// `R` with `x R = [-x[half..], x[..half]]` for a row vector `x`.
fn rotate_half_matrix<B: Backend>(head_dim: usize, device: &B::Device) -> Tensor<B, 2> {
    let half = head_dim / 2;
    let mut r = vec![0.0f32; head_dim * head_dim];
    for j in 0..half {
        r[(j + half) * head_dim + j] = -1.0;
        r[j * head_dim + j + half] = 1.0;
    }
    Tensor::from_data(TensorData::new(r, [head_dim, head_dim]), device)
}

/// Rotation tables of one forward pass: for each prepared head count, `cos` and `sin` at
/// `[rows, heads, head_dim]`.
#[derive(Debug, Clone)]
pub struct RopeTables<B: Backend> {
    rotate_half: Tensor<B, 2>,
    by_heads: Vec<(usize, Tensor<B, 3>, Tensor<B, 3>)>,
}

impl<B: Backend> RopeTables<B> {
    /// Rotates `x` of shape `[rows, heads, head_dim]`, row `r` by its position's angles.
    ///
    /// # Panics
    /// If the tables were not prepared for `heads` heads.
    pub fn apply(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        let [rows, heads, head_dim] = x.dims();
        let (_, cos, sin) = self
            .by_heads
            .iter()
            .find(|(h, _, _)| *h == heads)
            .unwrap_or_else(|| panic!("RoPE tables were not prepared for {heads} heads"));
        let rotated = x
            .clone()
            .reshape([rows * heads, head_dim])
            .matmul(self.rotate_half.clone())
            .reshape([rows, heads, head_dim]);
        x * cos.clone() + rotated * sin.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::Flex;

    type B = Flex;

    #[test]
    fn rotates_pairs_by_position_times_frequency() {
        let config = RopeConfig {
            theta: 100.0,
            scaling: None,
        };
        let rope = Rope::new(&config, 4); // Frequencies 1 and 0.1.
        let positions = [0, 3];
        let tables = rope.tables::<B>(&positions, &[1, 2], &Default::default());
        // Two heads; head h of row r holds [1, 2, 3, 4] * (h + 1).
        let x: Vec<f32> = (0..2)
            .flat_map(|_| (1..=2).flat_map(|h| [1.0, 2.0, 3.0, 4.0].map(|v| v * h as f32)))
            .collect();
        let x =
            Tensor::<B, 3>::from_data(TensorData::new(x.clone(), [2, 2, 4]), &Default::default());
        let out: Vec<f32> = tables.apply(x).into_data().to_vec().unwrap();
        for (r, &p) in positions.iter().enumerate() {
            for h in 0..2 {
                let scale = (h + 1) as f32;
                let got = &out[(r * 2 + h) * 4..(r * 2 + h + 1) * 4];
                for (i, freq) in [1.0f64, 0.1].iter().enumerate() {
                    let (c, s) = (
                        (p as f64 * freq).cos() as f32,
                        (p as f64 * freq).sin() as f32,
                    );
                    let (a, b) = ((i + 1) as f32 * scale, (i + 3) as f32 * scale);
                    assert!((got[i] - (a * c - b * s)).abs() < 1e-5);
                    assert!((got[i + 2] - (b * c + a * s)).abs() < 1e-5);
                }
            }
        }
    }

    #[test]
    #[should_panic(expected = "not prepared for 3 heads")]
    fn unprepared_head_count_panics() {
        let rope = Rope::new(&RopeConfig::default(), 4);
        let tables = rope.tables::<B>(&[0], &[1], &Default::default());
        tables.apply(Tensor::zeros([1, 3, 4], &Default::default()));
    }
}
