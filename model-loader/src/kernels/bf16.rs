//! Products of a few rows with bfloat16 weights ([`Bf16Matrix`]), for [`super::gemv`]: each
//! weight is widened to `f32` as it is loaded (a bfloat16 is the upper half of an `f32`), so
//! the arithmetic is the `f32` kernel's on half the bytes.

use crate::quant::Bf16Matrix;

/// `dots[r][c]` = input row `row0 + r` of `x` (`[rows, d_in]`) · weight row `col0 + c` of
/// `w`, for `height` input rows and `width` weight rows (at most 8 and 4).
pub(super) fn dot_tile(
    w: &Bf16Matrix,
    col0: usize,
    width: usize,
    x: &[f32],
    row0: usize,
    height: usize,
    dots: &mut super::gemv::Dots,
) {
    let d_in = w.cols();
    assert!(height <= 8 && width <= 4 && col0 + width <= w.rows());
    assert!((row0 + height) * d_in <= x.len());
    #[cfg(target_arch = "x86_64")]
    if has_avx512bw() {
        // SAFETY: AVX-512 F/BW/VL are available (checked above); the asserts above bound
        // every row the kernel reads.
        dispatch_tile!(width, height, avx512::dot_tile(w, col0, x, row0, dots));
        return;
    }
    for (r, dots) in dots.iter_mut().enumerate().take(height) {
        let xr = &x[(row0 + r) * d_in..(row0 + r + 1) * d_in];
        for (c, dot) in dots.iter_mut().enumerate().take(width) {
            *dot = w
                .row(col0 + c)
                .iter()
                .zip(xr)
                .map(|(w, x)| w.to_f32() * x)
                .sum();
        }
    }
}

/// Whether the CPU has AVX-512 F, BW and VL (checked once).
#[cfg(target_arch = "x86_64")]
pub(super) fn has_avx512bw() -> bool {
    use std::sync::OnceLock;
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| {
        super::has_avx512()
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512vl")
    })
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use crate::quant::Bf16Matrix;
    use std::arch::x86_64::*;

    /// How far ahead (in weight rows) the kernel prefetches, into L2 (see
    /// [`crate::kernels::gemv`]'s kernel for why L2).
    const PREFETCH_ROWS: usize = 8;

    /// 16 bfloat16 values at `p` (the first `mask` lanes) widened to `f32`.
    ///
    /// # Safety
    /// AVX-512 F/BW/VL; the masked lanes must be readable.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    unsafe fn widen(p: *const u16, mask: __mmask16) -> __m512 {
        // SAFETY: the caller guarantees the masked lanes are readable.
        let half = unsafe { _mm256_maskz_loadu_epi16(mask, p.cast()) };
        _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(half)))
    }

    /// `dots[r][c]` for `H` input rows from `row0` and `W` weight rows from `col0`.
    ///
    /// # Safety
    /// AVX-512 F, BW and VL must be available; `col0 + W` weight rows and `row0 + H` input
    /// rows must exist.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    pub(super) unsafe fn dot_tile<const W: usize, const H: usize>(
        w: &Bf16Matrix,
        col0: usize,
        x: &[f32],
        row0: usize,
        dots: &mut crate::kernels::gemv::Dots,
    ) {
        let d_in = w.cols();
        assert!(col0 + W <= w.rows() && (row0 + H) * d_in <= x.len());
        let wp: [*const u16; W] = std::array::from_fn(|c| w.row(col0 + c).as_ptr().cast());
        let xp = x.as_ptr().wrapping_add(row0 * d_in);
        let mut acc = [[_mm512_setzero_ps(); W]; H];
        let mut wv = [_mm512_setzero_ps(); W];
        let mut k = 0;
        while k < d_in {
            let mask = crate::kernels::tail_mask(d_in - k);
            for (c, v) in wv.iter_mut().enumerate() {
                // SAFETY: the mask limits the load to the values left in weight row c.
                *v = unsafe { widen(wp[c].add(k), mask) };
                _mm_prefetch::<_MM_HINT_T1>(wp[c].wrapping_add(PREFETCH_ROWS * d_in + k).cast());
            }
            for (r, acc) in acc.iter_mut().enumerate() {
                // SAFETY: the mask limits the load to the values left in input row r.
                let xv = unsafe { _mm512_maskz_loadu_ps(mask, xp.add(r * d_in + k)) };
                for (a, v) in acc.iter_mut().zip(&wv) {
                    *a = _mm512_fmadd_ps(*v, xv, *a);
                }
            }
            k += 16;
        }
        for (r, acc) in acc.iter().enumerate() {
            for (c, a) in acc.iter().enumerate() {
                dots[r][c] = _mm512_reduce_add_ps(*a);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_util::Lcg;

    #[test]
    fn tiles_match_a_reference() {
        let mut rng = Lcg::new(3);
        for cols in [576, 37, 16, 100] {
            let w = Bf16Matrix::from_f32(&rng.vec(5 * cols, -1.0, 1.0), 5, cols);
            let x = rng.vec(9 * cols, -2.0, 2.0);
            for (width, height) in [(1, 1), (4, 4), (3, 8), (2, 5)] {
                let (col0, row0) = (5 - width, 9 - height);
                let mut dots = [[0.0; 4]; 8];
                dot_tile(&w, col0, width, &x, row0, height, &mut dots);
                for (r, row) in dots.iter().enumerate().take(height) {
                    for (c, &dot) in row.iter().enumerate().take(width) {
                        let want: f64 = w
                            .row(col0 + c)
                            .iter()
                            .zip(&x[(row0 + r) * cols..][..cols])
                            .map(|(w, &x)| f64::from(w.to_f32()) * f64::from(x))
                            .sum();
                        let got = f64::from(dot);
                        assert!(
                            (got - want).abs() <= 1e-4 * (1.0 + want.abs()),
                            "{got} vs {want}"
                        );
                    }
                }
            }
        }
    }
}
