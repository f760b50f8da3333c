//! Micro benchmark of the CPU f32 kernels at SmolLM2-135M sizes.
//!
//! ```text
//! cargo run --release -p aquila-model-loader --example bench_kernels
//! ```
//!
//! Prints microseconds per call and GFLOP/s for attention prefill (512 rows, causal), decode
//! (1 row, 600 and 200 keys) and a k = 3 verification (4 rows, 200 keys) with 9 query / 3
//! key-value heads of 64, `silu_mul` on 512x1536, `rms_norm` on 512x576 and `apply_rope` on
//! 512 rows x 9 heads x 64. Attention is also timed against a naive scalar implementation
//! (materialized score row, softmax, weighted sum) and the speedup is printed; the two outputs
//! are checked to agree. Times are the fastest of repeated ~10 ms batches.
//!
//! FLOP counts are nominal: attention `4 * head_dim` per visible (query head, key) pair (q.k and
//! the weighted value sum), `silu_mul` 5 per element (exp counted as one), `rms_norm` 4 per
//! element, `apply_rope` 3 per element.

mod common;

use aquila_model_loader::kernels::{
    apply_rope, grouped_query_attention, has_avx512, rms_norm, silu_mul, AttentionShape, Visibility,
};
use common::inputs;
use std::hint::black_box;
use std::time::{Duration, Instant};

/// Time per call of `f`: after a warm-up, calls run in batches of about 10 ms until `budget`
/// has passed, and the fastest batch counts (robust to preemption on a shared machine).
fn time_per_call(budget: Duration, mut f: impl FnMut()) -> Duration {
    f();
    let mut batch = 1u32;
    loop {
        let start = Instant::now();
        for _ in 0..batch {
            f();
        }
        if start.elapsed() >= Duration::from_millis(10) || batch >= 1 << 20 {
            break;
        }
        batch *= 2;
    }
    let start = Instant::now();
    let mut best = Duration::MAX;
    while start.elapsed() < budget || best == Duration::MAX {
        let batch_start = Instant::now();
        for _ in 0..batch {
            f();
        }
        best = best.min(batch_start.elapsed() / batch);
    }
    best
}

fn report(name: &str, per_call: Duration, flops: f64) {
    let us = per_call.as_secs_f64() * 1e6;
    let gflops = flops / per_call.as_secs_f64() / 1e9;
    println!("{name:<34} {us:>10.1} µs/call {gflops:>8.2} GFLOP/s");
}

/// Naive attention, the same scalar reference as the kernel tests (f32 here).
fn naive_attention(
    query: &[f32],
    keys: &[f32],
    values: &[f32],
    shape: &AttentionShape,
    visibility: &Visibility<'_>,
    out: &mut [f32],
) {
    let AttentionShape {
        rows,
        len,
        num_heads,
        head_dim,
        ..
    } = *shape;
    let group = shape.group_size();
    let scale = 1.0 / (head_dim as f32).sqrt();
    let mut scores = vec![0.0_f32; len];
    for r in 0..rows {
        let end = match *visibility {
            Visibility::Causal { cached } => cached + r + 1,
            _ => len,
        };
        for h in 0..num_heads {
            let kv = h / group;
            let q = &query[(r * num_heads + h) * head_dim..][..head_dim];
            let mut max = f32::NEG_INFINITY;
            for (j, score) in scores[..end].iter_mut().enumerate() {
                let visible = match *visibility {
                    Visibility::Mask(mask) => mask[r * len + j],
                    _ => true,
                };
                let k = &keys[(kv * len + j) * head_dim..][..head_dim];
                *score = if visible {
                    q.iter().zip(k).map(|(a, b)| a * b).sum::<f32>() * scale
                } else {
                    f32::NEG_INFINITY
                };
                max = max.max(*score);
            }
            let o = &mut out[(r * num_heads + h) * head_dim..][..head_dim];
            o.fill(0.0);
            if max == f32::NEG_INFINITY {
                continue;
            }
            let mut total = 0.0;
            for score in &mut scores[..end] {
                *score = (*score - max).exp();
                total += *score;
            }
            for (j, &w) in scores[..end].iter().enumerate() {
                let v = &values[(kv * len + j) * head_dim..][..head_dim];
                for (o, &v) in o.iter_mut().zip(v) {
                    *o += w / total * v;
                }
            }
        }
    }
}

fn bench_attention(name: &str, shape: AttentionShape, visibility: Visibility<'_>) {
    let query = inputs(shape.rows * shape.num_heads * shape.head_dim, 1);
    let kv_len = shape.num_kv_heads * shape.len * shape.head_dim;
    let keys = inputs(kv_len, 2);
    let values = inputs(kv_len, 3);
    let mut out = vec![0.0_f32; query.len()];
    let mut naive_out = vec![0.0_f32; query.len()];

    let pairs: usize = (0..shape.rows)
        .map(|r| match visibility {
            Visibility::Causal { cached } => cached + r + 1,
            _ => shape.len,
        })
        .sum();
    let flops = 4.0 * (shape.head_dim * shape.num_heads * pairs) as f64;
    let budget = Duration::from_millis(800);

    let kernel = time_per_call(budget, || {
        grouped_query_attention(
            black_box(&query),
            &keys,
            &values,
            &shape,
            &visibility,
            &mut out,
        );
        black_box(&out);
    });
    let naive = time_per_call(budget, || {
        naive_attention(
            black_box(&query),
            &keys,
            &values,
            &shape,
            &visibility,
            &mut naive_out,
        );
        black_box(&naive_out);
    });
    let max_diff = out
        .iter()
        .zip(&naive_out)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0_f32, f32::max);
    assert!(
        max_diff < 1e-4,
        "{name}: kernel and naive differ by {max_diff}"
    );
    report(name, kernel, flops);
    report(&format!("{name} (naive)"), naive, flops);
    println!(
        "{:<34} {:>10.1}x faster than naive (max |diff| {max_diff:.1e})",
        "",
        naive.as_secs_f64() / kernel.as_secs_f64()
    );
}

fn main() {
    println!(
        "AVX-512: {}, rayon threads: {}",
        has_avx512(),
        rayon::current_num_threads()
    );
    // (name, new rows, keys): every case is causal over `keys - rows` cached keys.
    let attention_cases = [
        ("attention prefill 512 causal", 512, 512),
        ("attention decode 1x600", 1, 600),
        ("attention decode 1x200", 1, 200),
        ("attention verify 4x200", 4, 200),
    ];
    for (name, rows, keys) in attention_cases {
        bench_attention(
            name,
            AttentionShape::new(rows, keys, 9, 3, 64),
            Visibility::Causal {
                cached: keys - rows,
            },
        );
    }

    let budget = Duration::from_millis(500);
    let (rows, intermediate) = (512, 1536);
    let gate = inputs(rows * intermediate, 4);
    let up = inputs(rows * intermediate, 5);
    let mut work = gate.clone();
    // The kernel works in place: each call restores its input first. That copy is timed on its
    // own and subtracted.
    let with_copy = time_per_call(budget, || {
        work.copy_from_slice(&gate);
        silu_mul(black_box(&mut work), &up);
    });
    let copy = time_per_call(budget, || {
        work.copy_from_slice(black_box(&gate));
        black_box(&work);
    });
    let per_call = with_copy.saturating_sub(copy);
    report("silu_mul 512x1536", per_call, 5.0 * gate.len() as f64);
    println!(
        "{:<34} {:>10.1} µs/call restoring the input (subtracted above)",
        "",
        copy.as_secs_f64() * 1e6
    );

    let (rows, dim) = (512, 576);
    let x = inputs(rows * dim, 6);
    let weight = inputs(dim, 7);
    let mut out = vec![0.0_f32; x.len()];
    let per_call = time_per_call(budget, || {
        rms_norm(black_box(&x), &weight, 1e-5, &mut out);
        black_box(&out);
    });
    report("rms_norm 512x576", per_call, 4.0 * x.len() as f64);

    let (rows, heads, head_dim) = (512, 9, 64);
    let mut x = inputs(rows * heads * head_dim, 8);
    // True rotations, so repeated calls keep the magnitudes.
    let angles = inputs(rows * head_dim / 2, 9);
    let cos: Vec<f32> = angles.iter().map(|a| (3.0 * a).cos()).collect();
    let sin: Vec<f32> = angles.iter().map(|a| (3.0 * a).sin()).collect();
    let per_call = time_per_call(budget, || {
        apply_rope(black_box(&mut x), rows, heads, head_dim, &cos, &sin);
    });
    report("rope 512x9x64", per_call, 3.0 * x.len() as f64);
}
