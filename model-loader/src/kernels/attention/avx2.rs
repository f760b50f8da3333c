//! The AVX2 path of the attention kernel, for CPUs without AVX-512: one query at a time, its
//! accumulator of weighted values in registers, the scores of a block of keys exponentiated
//! eight at a time.

use super::*;
use crate::kernels::avx2::sum_lanes;

/// Head dimensions the AVX2 path takes: whole 8-lane vectors, at most 16 of them.
pub(super) fn fits(head_dim: usize) -> bool {
    head_dim.is_multiple_of(8) && head_dim / 8 <= 16
}

/// AVX2 path of one task; `NC` is the number of 8-lane vectors per head (`head_dim / 8`).
///
/// # Safety
///
/// The CPU must support AVX2 and FMA, and `head_dim` must be `8 * NC`.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn run_task_avx2<const NC: usize>(inputs: &Inputs<'_>, task: Task<'_>) {
    let head_dim = inputs.shape.head_dim;
    assert_eq!(head_dim, 8 * NC);
    let (keys, values) = inputs.kv_head(task.kv_head);
    let mut scores = [0.0_f32; KEY_BLOCK];
    let mut weights = [0.0_f32; KEY_BLOCK];
    task.for_each_query(inputs, |Query { end, mask, q, out }| {
        // SAFETY: the query holds `head_dim = 8 NC` values.
        let q: [__m256; NC] = std::array::from_fn(|c| unsafe {
            _mm256_mul_ps(
                _mm256_loadu_ps(q.as_ptr().add(8 * c)),
                _mm256_set1_ps(inputs.scale),
            )
        });
        let mut acc = [_mm256_setzero_ps(); NC];
        let mut running = Running {
            max: f32::NEG_INFINITY,
            sum: 0.0,
        };
        for start in (0..end).step_by(KEY_BLOCK) {
            let count = (end - start).min(KEY_BLOCK);
            let mut block_max = f32::NEG_INFINITY;
            for (j, score) in scores.iter_mut().enumerate().take(count) {
                if mask.is_some_and(|mask| !mask[start + j]) {
                    *score = f32::NEG_INFINITY;
                    continue;
                }
                // SAFETY: key start + j < len has `head_dim` values.
                let k = unsafe { keys.as_ptr().add((start + j) * head_dim) };
                let mut dots = [_mm256_setzero_ps(); 2];
                for (c, q) in q.iter().enumerate() {
                    // SAFETY: 8 c + 8 <= head_dim, inside key row start + j.
                    let kv = unsafe { _mm256_loadu_ps(k.add(8 * c)) };
                    dots[c % 2] = _mm256_fmadd_ps(*q, kv, dots[c % 2]);
                }
                *score = sum_lanes(_mm256_add_ps(dots[0], dots[1]));
                block_max = block_max.max(*score);
            }
            if block_max == f32::NEG_INFINITY {
                continue;
            }
            if block_max > running.max {
                if running.max > f32::NEG_INFINITY {
                    let alpha = exp_scalar(running.max - block_max);
                    running.sum *= alpha;
                    let alpha = _mm256_set1_ps(alpha);
                    acc.iter_mut().for_each(|a| *a = _mm256_mul_ps(*a, alpha));
                }
                running.max = block_max;
            }
            let max = _mm256_set1_ps(running.max);
            let chunks = scores.chunks_exact(8).zip(weights.chunks_exact_mut(8));
            for (s, w) in chunks.take(count.div_ceil(8)) {
                // SAFETY: both chunks hold 8 values.
                unsafe {
                    let e = crate::kernels::exp::exp_avx2(_mm256_sub_ps(
                        _mm256_loadu_ps(s.as_ptr()),
                        max,
                    ));
                    _mm256_storeu_ps(w.as_mut_ptr(), e);
                }
            }
            for j in 0..count {
                // Masked keys get exact zeros (the clamped exp of -inf is not zero).
                if scores[j] == f32::NEG_INFINITY {
                    continue;
                }
                running.sum += weights[j];
                let p = _mm256_set1_ps(weights[j]);
                // SAFETY: value start + j < len has `head_dim` values.
                let v = unsafe { values.as_ptr().add((start + j) * head_dim) };
                for (c, a) in acc.iter_mut().enumerate() {
                    // SAFETY: 8 c + 8 <= head_dim, inside value row start + j.
                    *a = _mm256_fmadd_ps(p, unsafe { _mm256_loadu_ps(v.add(8 * c)) }, *a);
                }
            }
        }
        let inv = if running.sum > 0.0 {
            1.0 / running.sum
        } else {
            0.0
        };
        for (c, a) in acc.iter().enumerate() {
            // SAFETY: `out` holds `head_dim = 8 NC` values.
            unsafe {
                _mm256_storeu_ps(
                    out.as_mut_ptr().add(8 * c),
                    _mm256_mul_ps(*a, _mm256_set1_ps(inv)),
                )
            };
        }
    });
}
