//! Rotary position embedding in the Hugging Face "rotate half" layout: pair `i` of a head is
//! made of elements `i` and `i + head_dim / 2`.
//!
//! The rotation goes through [`KernelBackend::rope`]: on the CPU backend in `f32` it runs in
//! place ([`crate::kernels::rope`]). Elsewhere it is computed as
//! `x * cos + rotate_half(x) * sin` with `rotate_half(x) = x R` for a fixed signed permutation
//! matrix `R` (exact: one non-zero per column), and `cos`/`sin` laid out at the full
//! `[rows, heads, head_dim]` shape, so every step is a contiguous tensor operation.

use crate::backend::KernelBackend;
use crate::config::RopeConfig;
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};
use std::sync::OnceLock;

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

    /// Rotation tables for rows at `positions`, for tensors with any of `head_counts` heads.
    pub fn tables<B: Backend>(
        &self,
        positions: &[usize],
        head_counts: &[usize],
        device: &B::Device,
    ) -> RopeTables<B> {
        let capacity = positions.len() * self.inverse_frequencies.len();
        let (mut cos, mut sin) = (Vec::with_capacity(capacity), Vec::with_capacity(capacity));
        for &position in positions {
            for &frequency in &self.inverse_frequencies {
                let angle = position as f64 * frequency;
                cos.push(angle.cos() as f32);
                sin.push(angle.sin() as f32);
            }
        }
        let mut heads: Vec<usize> = head_counts.to_vec();
        heads.sort_unstable();
        heads.dedup();
        RopeTables {
            half: self.inverse_frequencies.len(),
            cos,
            sin,
            heads,
            device: device.clone(),
            generic: OnceLock::new(),
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

/// Rotation tables of one forward pass: `cos` and `sin` of every row's angles, applied by the
/// CPU kernel on the `Flex` backend and as full-shape tensors elsewhere.
#[derive(Debug, Clone)]
pub struct RopeTables<B: Backend> {
    /// Pairs per head (`head_dim / 2`).
    half: usize,
    /// `[rows, half]`.
    cos: Vec<f32>,
    /// `[rows, half]`.
    sin: Vec<f32>,
    /// Head counts the tables serve.
    heads: Vec<usize>,
    device: B::Device,
    /// The tensors of burn's generic path, built on first use.
    generic: OnceLock<GenericTables<B>>,
}

/// `x R` for the "rotate half" matrix `R`, and for each head count `cos` and `sin` at the full
/// `[rows, heads, head_dim]` shape, so every step is a contiguous tensor operation.
#[derive(Debug, Clone)]
struct GenericTables<B: Backend> {
    rotate_half: Tensor<B, 2>,
    by_heads: Vec<(usize, Tensor<B, 3>, Tensor<B, 3>)>,
}

impl<B: KernelBackend> RopeTables<B> {
    /// Rotates `x` of shape `[rows, heads, head_dim]`, row `r` by its position's angles.
    ///
    /// # Panics
    /// If the tables were not prepared for `heads` heads.
    pub fn apply(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        let heads = x.dims()[1];
        assert!(
            self.heads.contains(&heads),
            "RoPE tables were not prepared for {heads} heads"
        );
        B::rope(self, x)
    }
}

impl<B: Backend> RopeTables<B> {
    /// `cos` of every row's angles, `[rows, head_dim / 2]`.
    pub fn cos(&self) -> &[f32] {
        &self.cos
    }

    /// `sin` of every row's angles, `[rows, head_dim / 2]`.
    pub fn sin(&self) -> &[f32] {
        &self.sin
    }

    /// [`RopeTables::apply`] in burn's operations, with the full-shape tables built on first
    /// use.
    pub(crate) fn apply_generic(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        let [rows, heads, head_dim] = x.dims();
        let tables = self.generic.get_or_init(|| self.generic_tables());
        let (_, cos, sin) = tables
            .by_heads
            .iter()
            .find(|(h, _, _)| *h == heads)
            .expect("apply checked the head count");
        let rotated = x
            .clone()
            .reshape([rows * heads, head_dim])
            .matmul(tables.rotate_half.clone())
            .reshape([rows, heads, head_dim]);
        x * cos.clone() + rotated * sin.clone()
    }

    fn generic_tables(&self) -> GenericTables<B> {
        let half = self.half;
        let head_dim = 2 * half;
        let rows = self.cos.len() / half.max(1);
        let expanded = |heads: usize, table: &[f32]| -> Tensor<B, 3> {
            let mut values = Vec::with_capacity(rows * heads * head_dim);
            for row in table.chunks_exact(half.max(1)).take(rows) {
                for _ in 0..heads {
                    // Both elements of a pair rotate by the same angle.
                    values.extend_from_slice(row);
                    values.extend_from_slice(row);
                }
            }
            Tensor::from_data(
                TensorData::new(values, [rows, heads, head_dim]),
                &self.device,
            )
        };
        GenericTables {
            rotate_half: rotate_half_matrix(head_dim, &self.device),
            by_heads: self
                .heads
                .iter()
                .map(|&h| (h, expanded(h, &self.cos), expanded(h, &self.sin)))
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::{Autodiff, Flex};

    type B = Flex;

    #[test]
    fn rotates_pairs_by_position_times_frequency() {
        // The CPU kernel and burn's generic operations.
        check_rotation::<Flex>();
        check_rotation::<Autodiff<Flex>>();
    }

    fn check_rotation<B: KernelBackend>() {
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
        let out: Vec<f32> = tables
            .apply(x)
            .into_data()
            .convert::<f32>()
            .to_vec()
            .unwrap();
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
