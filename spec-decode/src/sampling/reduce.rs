//! Vectorizable reductions over logit and probability vectors.
//!
//! The loops keep sixteen independent f32 lanes so the compiler turns them into SIMD code
//! (a single running value, or an f64 accumulator fed element by element, stays scalar).
//! Sums accumulate per chunk of [`CHUNK`] values in f32 and across chunks in f64, which keeps
//! the rounding error near f32 resolution for vocabularies of any size.

/// Values per chunk of a chunked sum.
pub(crate) const CHUNK: usize = 256;

/// The largest value of `values` ignoring NaN (`-inf` if there is none).
pub(crate) fn max_value(values: &[f32]) -> f32 {
    let larger = |m: f32, v: f32| if v > m { v } else { m };
    let mut lanes = [f32::NEG_INFINITY; 16];
    let mut groups = values.chunks_exact(16);
    for group in &mut groups {
        for (lane, &v) in lanes.iter_mut().zip(group) {
            *lane = larger(*lane, v);
        }
    }
    let tail = groups
        .remainder()
        .iter()
        .fold(f32::NEG_INFINITY, |m, &v| larger(m, v));
    lanes.iter().fold(tail, |m, &v| larger(m, v))
}

/// `Σ f(v)` over `values`, chunked (module docs).
#[inline(always)]
pub(crate) fn sum_mapped(values: &[f32], f: impl Fn(f32) -> f32 + Copy) -> f64 {
    values
        .chunks(CHUNK)
        .map(|chunk| chunk_sum_mapped(chunk, f))
        .sum()
}

/// `Σ f(v)` over at most [`CHUNK`] values, over sixteen f32 lanes.
#[inline(always)]
pub(crate) fn chunk_sum_mapped(values: &[f32], f: impl Fn(f32) -> f32) -> f64 {
    let mut lanes = [0.0f32; 16];
    let mut groups = values.chunks_exact(16);
    for group in &mut groups {
        for (lane, &v) in lanes.iter_mut().zip(group) {
            *lane += f(v);
        }
    }
    let tail: f32 = groups.remainder().iter().map(|&v| f(v)).sum();
    f64::from(lanes.iter().sum::<f32>() + tail)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_ignores_nan_and_handles_tails() {
        let mut values: Vec<f32> = (0..37).map(|i| i as f32).collect();
        values[5] = f32::NAN;
        assert_eq!(max_value(&values), 36.0);
        assert_eq!(max_value(&[f32::NAN]), f32::NEG_INFINITY);
        assert_eq!(max_value(&[-3.0, f32::INFINITY]), f32::INFINITY);
    }

    #[test]
    fn chunked_sum_matches_f64_sum() {
        let values: Vec<f32> = (0..10_007)
            .map(|i| ((i * 37) % 101) as f32 / 101.0)
            .collect();
        let exact: f64 = values.iter().map(|&v| f64::from(v)).sum();
        assert!((sum_mapped(&values, |v| v) - exact).abs() / exact < 1e-6);
        assert_eq!(sum_mapped(&values, |v| v * 0.0), 0.0);
    }
}
