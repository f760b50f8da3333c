//! CPU f32 kernels on plain slices for the Llama forward pass; the model reaches them through
//! [`crate::backend::KernelBackend`] when it runs on burn's `Flex` backend.
//!
//! Each kernel works on row-major `&[f32]` / `&mut [f32]` buffers and has two implementations:
//! an AVX-512 path (`std::arch::x86_64` intrinsics, masked loads and stores for the tails) and
//! a portable scalar fallback. The path is chosen at run time with [`has_avx512`]; the x86 code
//! is compiled only on `x86_64`, so the crate builds everywhere. Large inputs are split over the
//! rayon thread pool. CPUs with AVX2 and FMA but no AVX-512 ([`has_avx2`]: AMD Zen 1 to 3,
//! most Intel client CPUs) get 8-lane paths for the kernels that dominate a forward pass: the
//! projections of decoding and verification (f32, bfloat16 and Q8_0 weights), attention and
//! SwiGLU.
//!
//! - [`gemm`]: products of many rows with `[out, in]` weights (prefill), through `gemm`.
//! - [`gemv`]: products of a few rows with `[out, in]` weights, streaming each weight once.
//! - [`exp`]: vectorized `exp` for 16 lanes (and its scalar twin), used by the other kernels.
//! - [`activation`]: SwiGLU's `silu(gate) * up`, in place ([`silu_mul`]).
//! - [`norm`]: RMSNorm over the rows of a `[rows, dim]` matrix ([`rms_norm`]).
//! - [`rope`]: rotary position embedding, Hugging Face "rotate half" layout ([`apply_rope`]).
//! - [`attention`]: grouped-query scaled-dot-product attention with an online softmax
//!   ([`grouped_query_attention`]).
//!
//! ```
//! use aquila_model_loader::kernels::{rms_norm, silu_mul};
//!
//! let mut gate = vec![1.0_f32, -2.0, 0.5];
//! silu_mul(&mut gate, &[2.0, 1.0, 4.0]);
//! assert!((gate[0] - 2.0 / (1.0 + (-1.0_f32).exp())).abs() < 1e-6);
//!
//! let x = [3.0_f32, 4.0];
//! let mut out = [0.0_f32; 2];
//! rms_norm(&x, &[1.0, 1.0], 0.0, &mut out);
//! assert!((out[0] - 3.0 / 12.5_f32.sqrt()).abs() < 1e-6);
//! ```

// The SIMD functions are `unsafe fn`s: keep every unsafe operation in them explicit.
#![deny(unsafe_op_in_unsafe_fn)]

/// Calls the `unsafe` tile kernel `$kernel::<W, H>($args)` for the runtime tile `$width`
/// (1..=4) and `$height` (1..=8): one monomorphized kernel per pair. The caller states why the
/// call is sound (the CPU features checked, the rows the slices hold).
macro_rules! dispatch_tile {
    ($width:expr, $height:expr, $($kernel:ident)::+ ($($arg:expr),*)) => {
        dispatch_tile!(@w $width, $height, [$($kernel)::+] ($($arg),*), [1, 2, 3, 4], [1, 2, 3, 4, 5, 6, 7, 8])
    };
    (@w $width:expr, $height:expr, $kernel:tt $args:tt, [$($w:literal),*], $hs:tt) => {
        match $width {
            $($w => dispatch_tile!(@h $height, $kernel $args, $w, $hs),)*
            _ => unreachable!("tile width is 1..=4"),
        }
    };
    (@h $height:expr, $kernel:tt $args:tt, $w:literal, [$($h:literal),*]) => {
        match $height {
            $($h => dispatch_tile!(@call $kernel $args, $w, $h),)*
            _ => unreachable!("tile height is 1..=8"),
        }
    };
    (@call [$($kernel:ident)::+] ($($arg:expr),*), $w:literal, $h:literal) => {
        unsafe { $($kernel)::+::<$w, $h>($($arg),*) }
    };
}

pub mod activation;
mod aligned;
pub mod attention;
#[cfg(target_arch = "x86_64")]
mod avx2;
mod bf16;
pub mod exp;
pub mod gemm;
pub mod gemv;
#[cfg(test)]
mod group_kernel_tests;
pub mod norm;
mod q4_1;
mod q8_0;
pub mod rope;

pub use activation::silu_mul;
pub use attention::{grouped_query_attention, AttentionShape, Visibility};
pub use exp::exp_scalar;
pub use norm::rms_norm;
pub use q8_0::InputPrecision;
pub use rope::apply_rope;

use std::sync::OnceLock;

/// Element count above which the element-wise and row-wise kernels split work over rayon.
pub(crate) const PARALLEL_MIN_ELEMENTS: usize = 1 << 16;

/// Whether the CPU supports AVX-512F (checked once, then cached); always `false` off x86-64.
/// AMX is never used: some machines report it while its instructions fault.
pub fn has_avx512() -> bool {
    static HAS_AVX512: OnceLock<bool> = OnceLock::new();
    *HAS_AVX512.get_or_init(detect_avx512)
}

/// Whether the CPU supports AVX2, FMA and F16C (checked once, then cached); always `false` off
/// x86-64. The 8-lane kernels are taken only where AVX-512 is not.
pub fn has_avx2() -> bool {
    static HAS_AVX2: OnceLock<bool> = OnceLock::new();
    *HAS_AVX2.get_or_init(detect_avx2)
}

#[cfg(target_arch = "x86_64")]
fn detect_avx2() -> bool {
    is_x86_feature_detected!("avx2")
        && is_x86_feature_detected!("fma")
        && is_x86_feature_detected!("f16c")
}

#[cfg(not(target_arch = "x86_64"))]
fn detect_avx2() -> bool {
    false
}

#[cfg(target_arch = "x86_64")]
fn detect_avx512() -> bool {
    is_x86_feature_detected!("avx512f")
}

#[cfg(not(target_arch = "x86_64"))]
fn detect_avx512() -> bool {
    false
}

/// Lane mask selecting the first `min(remaining, 16)` lanes of a 16-lane vector.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn tail_mask(remaining: usize) -> u16 {
    if remaining >= 16 {
        u16::MAX
    } else {
        ((1u32 << remaining) - 1) as u16
    }
}

/// Deterministic inputs and tolerant comparisons shared by the kernel tests.
#[cfg(test)]
pub(crate) mod test_util {
    /// Small deterministic generator (64-bit LCG, high bits) for test inputs.
    pub struct Lcg(u64);

    impl Lcg {
        pub fn new(seed: u64) -> Self {
            Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(1))
        }

        /// Uniform in `[0, 1)`.
        pub fn next_unit(&mut self) -> f32 {
            self.0 = self
                .0
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (self.0 >> 40) as f32 / (1u64 << 24) as f32
        }

        /// Uniform in `[lo, hi)`.
        pub fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
            lo + (hi - lo) * self.next_unit()
        }

        /// `len` values uniform in `[lo, hi)`.
        pub fn vec(&mut self, len: usize, lo: f32, hi: f32) -> Vec<f32> {
            (0..len).map(|_| self.uniform(lo, hi)).collect()
        }
    }

    /// `n` deterministic values in `[-1, 1]`.
    pub fn sine_values(n: usize, salt: f32) -> Vec<f32> {
        (0..n).map(|i| (i as f32 * 0.618 + salt).sin()).collect()
    }

    /// Weights (`[out, d_in]`) and biases of one projection per width in `outs`.
    pub struct Projections {
        weights: Vec<Vec<f32>>,
        biases: Vec<Vec<f32>>,
    }

    impl Projections {
        pub fn new(d_in: usize, outs: &[usize]) -> Self {
            Self {
                weights: outs
                    .iter()
                    .enumerate()
                    .map(|(i, &n)| sine_values(n * d_in, i as f32))
                    .collect(),
                biases: outs.iter().map(|&n| sine_values(n, 9.0)).collect(),
            }
        }

        /// The projections, projection `i` with its bias when `has_bias(i)`.
        pub fn refs(
            &self,
            has_bias: impl Fn(usize) -> bool,
        ) -> Vec<super::gemv::ProjectionRef<'_>> {
            self.weights
                .iter()
                .zip(&self.biases)
                .enumerate()
                .map(|(i, (weight, bias))| super::gemv::ProjectionRef {
                    weight: super::gemv::WeightRef::F32(weight),
                    bias: has_bias(i).then_some(bias.as_slice()),
                })
                .collect()
        }
    }

    /// Asserts `|actual - expected| <= tol * max(1, |expected|)` element-wise.
    pub fn assert_close(actual: &[f32], expected: &[f64], tol: f64, what: &str) {
        assert_eq!(actual.len(), expected.len(), "{what}: length");
        for (i, (&a, &e)) in actual.iter().zip(expected).enumerate() {
            let err = (a as f64 - e).abs();
            assert!(
                err <= tol * e.abs().max(1.0),
                "{what}: element {i}: got {a}, expected {e} (error {err:e})"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn avx512_detection_is_stable() {
        assert_eq!(has_avx512(), has_avx512());
        #[cfg(target_arch = "x86_64")]
        assert_eq!(has_avx512(), is_x86_feature_detected!("avx512f"));
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn tail_masks() {
        assert_eq!(tail_mask(0), 0);
        assert_eq!(tail_mask(1), 1);
        assert_eq!(tail_mask(15), 0x7FFF);
        assert_eq!(tail_mask(16), 0xFFFF);
        assert_eq!(tail_mask(1000), 0xFFFF);
    }
}
