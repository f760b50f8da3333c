//! Tests of the attention kernel against a naive f64 reference.
use super::*;
use crate::kernels::test_util::{assert_close, Lcg};

/// Naive attention in f64 with a materialized score row.
fn reference(
    query: &[f32],
    keys: &[f32],
    values: &[f32],
    shape: &AttentionShape,
    visibility: &Visibility<'_>,
) -> Vec<f64> {
    let AttentionShape {
        rows,
        len,
        num_heads,
        head_dim,
        ..
    } = *shape;
    let group = shape.group_size();
    let scale = 1.0 / (head_dim as f64).sqrt();
    let mut out = vec![0.0; rows * num_heads * head_dim];
    for r in 0..rows {
        for h in 0..num_heads {
            let kv = h / group;
            let q = &query[(r * num_heads + h) * head_dim..][..head_dim];
            let seen: Vec<usize> = (0..len)
                .filter(|&j| match *visibility {
                    Visibility::All => true,
                    Visibility::Causal { cached } => j <= cached + r,
                    Visibility::Mask(mask) => mask[r * len + j],
                })
                .collect();
            if seen.is_empty() {
                continue;
            }
            let scores: Vec<f64> = seen
                .iter()
                .map(|&j| {
                    let k = &keys[(kv * len + j) * head_dim..][..head_dim];
                    q.iter()
                        .zip(k)
                        .map(|(&a, &b)| a as f64 * b as f64)
                        .sum::<f64>()
                        * scale
                })
                .collect();
            let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let weights: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
            let total: f64 = weights.iter().sum();
            let o = &mut out[(r * num_heads + h) * head_dim..][..head_dim];
            for (&j, &w) in seen.iter().zip(&weights) {
                let v = &values[(kv * len + j) * head_dim..][..head_dim];
                for (o, &v) in o.iter_mut().zip(v) {
                    *o += w / total * v as f64;
                }
            }
        }
    }
    out
}

struct Case {
    shape: AttentionShape,
    query: Vec<f32>,
    keys: Vec<f32>,
    values: Vec<f32>,
}

impl Case {
    fn new(rng: &mut Lcg, shape: AttentionShape) -> Self {
        let q_len = shape.rows * shape.num_heads * shape.head_dim;
        let kv_len = shape.num_kv_heads * shape.len * shape.head_dim;
        // Wide enough queries and keys for peaked softmaxes (scores up to ~±20).
        Self {
            shape,
            query: rng.vec(q_len, -2.0, 2.0),
            keys: rng.vec(kv_len, -2.0, 2.0),
            values: rng.vec(kv_len, -1.0, 1.0),
        }
    }

    /// Checks the public function and both paths against the reference.
    fn check(&self, visibility: &Visibility<'_>, what: &str) {
        let want = reference(
            &self.query,
            &self.keys,
            &self.values,
            &self.shape,
            visibility,
        );
        let run = |allowed: Option<Allowed>| {
            let mut out = vec![f32::NAN; want.len()];
            match allowed {
                None => grouped_query_attention(
                    &self.query,
                    &self.keys,
                    &self.values,
                    &self.shape,
                    visibility,
                    &mut out,
                ),
                Some(allowed) => attention_with(
                    &self.query,
                    &self.keys,
                    &self.values,
                    &self.shape,
                    visibility,
                    &mut out,
                    allowed,
                ),
            }
            out
        };
        for allowed in [
            None,
            Some(Allowed::Scalar),
            Some(Allowed::Avx2),
            Some(Allowed::Any),
        ] {
            let what = format!("{what} {:?} {allowed:?}", self.shape);
            assert_close(&run(allowed), &want, 1e-5, &what);
        }
    }
}

fn shape(
    rows: usize,
    len: usize,
    num_heads: usize,
    num_kv_heads: usize,
    head_dim: usize,
) -> AttentionShape {
    AttentionShape::new(rows, len, num_heads, num_kv_heads, head_dim)
}

/// (num_heads, num_kv_heads, head_dim): SmolLM2-135M's 9/3/64, group 1 and group 3 with
/// head dims 32, 80 (not a multiple of 16) and 128, and one head dim for each other
/// register-tile instance of the AVX-512 path (1 to 8 and 16 vectors) plus one past it
/// (scalar path).
const HEADS: [(usize, usize, usize); 12] = [
    (9, 3, 64),
    (2, 2, 32),
    (6, 2, 32),
    (3, 1, 80),
    (6, 2, 80),
    (4, 4, 128),
    (3, 3, 7),
    (6, 2, 48),
    (4, 2, 96),
    (2, 1, 112),
    (2, 1, 200),
    (2, 2, 300),
];

#[test]
fn all_visible() {
    let mut rng = Lcg::new(21);
    for (num_heads, num_kv_heads, head_dim) in HEADS {
        for (rows, len) in [(1, 1), (1, 600), (3, 17), (8, 130), (20, 64), (5, 0)] {
            let case = Case::new(
                &mut rng,
                shape(rows, len, num_heads, num_kv_heads, head_dim),
            );
            case.check(&Visibility::All, "all");
        }
    }
}

#[test]
fn causal_prefill_and_with_cache() {
    let mut rng = Lcg::new(22);
    for (num_heads, num_kv_heads, head_dim) in HEADS {
        for (rows, cached) in [
            (1, 0),
            (7, 0),
            (33, 0),
            (70, 0),
            (1, 599),
            (5, 100),
            (17, 63),
        ] {
            let len = cached + rows;
            let case = Case::new(
                &mut rng,
                shape(rows, len, num_heads, num_kv_heads, head_dim),
            );
            case.check(
                &Visibility::Causal { cached },
                &format!("causal cached {cached}"),
            );
        }
    }
}

#[test]
fn explicit_masks_with_a_hidden_row() {
    let mut rng = Lcg::new(23);
    for (num_heads, num_kv_heads, head_dim) in HEADS {
        for (rows, len, density) in [(1, 40, 0.5), (6, 150, 0.3), (18, 70, 0.8), (4, 200, 0.05)] {
            let case = Case::new(
                &mut rng,
                shape(rows, len, num_heads, num_kv_heads, head_dim),
            );
            let mut mask: Vec<bool> = (0..rows * len).map(|_| rng.next_unit() < density).collect();
            // Row 0 sees nothing; the last row sees only its last key.
            mask[..len].fill(false);
            if rows > 1 {
                let last = &mut mask[(rows - 1) * len..];
                last.fill(false);
                last[len - 1] = true;
            }
            case.check(&Visibility::Mask(&mask), &format!("mask density {density}"));
        }
    }
}

#[test]
fn parallel_prefill() {
    // Large enough for rayon: several row blocks and kv heads, causal with a cache.
    let mut rng = Lcg::new(24);
    let case = Case::new(&mut rng, shape(100, 140, 9, 3, 64));
    case.check(&Visibility::Causal { cached: 40 }, "parallel causal");
    case.check(&Visibility::All, "parallel all");
}

#[test]
fn mask_matching_causal_gives_same_output() {
    let mut rng = Lcg::new(25);
    let (rows, cached) = (9, 50);
    let len = rows + cached;
    let case = Case::new(&mut rng, shape(rows, len, 9, 3, 64));
    let mask: Vec<bool> = (0..rows * len)
        .map(|i| i % len <= cached + i / len)
        .collect();
    let mut causal = vec![0.0; case.query.len()];
    let mut masked = vec![0.0; case.query.len()];
    let args = (&case.query, &case.keys, &case.values, &case.shape);
    grouped_query_attention(
        args.0,
        args.1,
        args.2,
        args.3,
        &Visibility::Causal { cached },
        &mut causal,
    );
    grouped_query_attention(
        args.0,
        args.1,
        args.2,
        args.3,
        &Visibility::Mask(&mask),
        &mut masked,
    );
    assert_eq!(causal, masked);
}

/// `[heads, len, head_dim]` values in buffers of `capacity` rows per head, the rows past `len`
/// filled with NaN so that reading one would show in the output.
fn padded(compact: &[f32], heads: usize, len: usize, head_dim: usize, capacity: usize) -> Vec<f32> {
    let mut out = vec![f32::NAN; heads * capacity * head_dim];
    for h in 0..heads {
        let head = &compact[h * len * head_dim..(h + 1) * len * head_dim];
        out[h * capacity * head_dim..][..len * head_dim].copy_from_slice(head);
    }
    out
}

#[test]
fn padded_key_value_buffers_read_only_their_first_len_rows() {
    let mut rng = Lcg::new(27);
    for (num_heads, num_kv_heads, head_dim) in HEADS {
        for (rows, cached, capacity) in [(1, 70, 128), (4, 12, 16), (9, 0, 64)] {
            let len = cached + rows;
            let case = Case::new(
                &mut rng,
                shape(rows, len, num_heads, num_kv_heads, head_dim),
            );
            let pad = |compact: &[f32]| padded(compact, num_kv_heads, len, head_dim, capacity);
            let (keys, values) = (pad(&case.keys), pad(&case.values));
            let wide = case.shape.with_kv_capacity(capacity);
            let visibility = Visibility::Causal { cached };
            let run = |keys: &[f32], values: &[f32], shape: &AttentionShape, allowed| {
                let mut out = vec![f32::NAN; case.query.len()];
                attention_with(
                    &case.query,
                    keys,
                    values,
                    shape,
                    &visibility,
                    &mut out,
                    allowed,
                );
                out
            };
            for allowed in [Allowed::Scalar, Allowed::Avx2, Allowed::Any] {
                let want = run(&case.keys, &case.values, &case.shape, allowed);
                let got = run(&keys, &values, &wide, allowed);
                assert_eq!(got, want, "{wide:?} {allowed:?}");
            }
        }
    }
}

#[test]
#[should_panic(expected = "attention: kv_capacity 2 is below len 3")]
fn rejects_a_capacity_below_the_length() {
    let s = shape(1, 3, 1, 1, 4).with_kv_capacity(2);
    grouped_query_attention(
        &[0.0; 4],
        &[0.0; 8],
        &[0.0; 8],
        &s,
        &Visibility::All,
        &mut [0.0; 4],
    );
}

#[test]
fn dot_tile_matches_scalar_dots() {
    #[cfg(target_arch = "x86_64")]
    if super::super::has_avx512() {
        let mut rng = Lcg::new(26);
        let head_dim = 50;
        let queries = rng.vec(3 * head_dim, -1.0, 1.0);
        let keys = rng.vec(16 * head_dim, -1.0, 1.0);
        for rows in [16, 7, 1] {
            let mut got = [[0.0_f32; 16]; 3];
            // SAFETY: AVX-512F is available; the loads read the 3 queries of `head_dim`
            // (4 chunks, the last masked to 2 lanes), `dot_tile` reads `rows <= 16` rows
            // of `keys`, and the stores write the 16 elements of each `got[t]`.
            unsafe {
                let mut qv = [[_mm512_setzero_ps(); 4]; 3];
                for (t, qv) in qv.iter_mut().enumerate() {
                    for (c, qv) in qv.iter_mut().enumerate() {
                        let mask = super::super::tail_mask(head_dim - 16 * c);
                        let q = queries.as_ptr().add(t * head_dim + 16 * c);
                        *qv = _mm512_maskz_loadu_ps(mask, q);
                    }
                }
                let last = super::super::tail_mask(head_dim - 48);
                let dots = if rows == 16 {
                    dot_tile::<4, 3, true>(&qv, 4, last, keys.as_ptr(), head_dim, rows)
                } else {
                    dot_tile::<4, 3, false>(&qv, 4, last, keys.as_ptr(), head_dim, rows)
                };
                for (got, dots) in got.iter_mut().zip(dots) {
                    _mm512_storeu_ps(got.as_mut_ptr(), dots);
                }
            }
            for (t, got) in got.iter().enumerate() {
                let q = &queries[t * head_dim..(t + 1) * head_dim];
                let want: Vec<f64> = (0..16)
                    .map(|j| {
                        let k = &keys[j.min(rows - 1) * head_dim..][..head_dim];
                        q.iter().zip(k).map(|(&a, &b)| a as f64 * b as f64).sum()
                    })
                    .collect();
                assert_close(got, &want, 1e-5, &format!("dot_tile rows {rows} query {t}"));
            }
        }
    }
}

#[test]
fn empty_inputs() {
    let mut out = [];
    grouped_query_attention(
        &[],
        &[],
        &[],
        &shape(0, 0, 9, 3, 64),
        &Visibility::All,
        &mut out,
    );
    let mut out = [1.0_f32; 6];
    let s = shape(1, 0, 2, 1, 3);
    grouped_query_attention(&[0.5; 6], &[], &[], &s, &Visibility::All, &mut out);
    assert_eq!(out, [0.0; 6]);
}

#[test]
#[should_panic(expected = "attention: num_heads 9 is not a multiple of num_kv_heads 2")]
fn rejects_bad_grouping() {
    let s = shape(1, 1, 9, 2, 4);
    grouped_query_attention(
        &[0.0; 36],
        &[0.0; 8],
        &[0.0; 8],
        &s,
        &Visibility::All,
        &mut [0.0; 36],
    );
}

#[test]
#[should_panic(expected = "attention: causal cached 3 + rows 2 must equal len 6")]
fn rejects_inconsistent_causal_length() {
    let s = shape(2, 6, 1, 1, 4);
    let visibility = Visibility::Causal { cached: 3 };
    grouped_query_attention(
        &[0.0; 8],
        &[0.0; 24],
        &[0.0; 24],
        &s,
        &visibility,
        &mut [0.0; 8],
    );
}

#[test]
#[should_panic(expected = "attention: mask has 5 flags, expected rows 2 x len 3")]
fn rejects_short_mask() {
    let s = shape(2, 3, 1, 1, 4);
    let mask = [true; 5];
    let visibility = Visibility::Mask(&mask);
    grouped_query_attention(
        &[0.0; 8],
        &[0.0; 12],
        &[0.0; 12],
        &s,
        &visibility,
        &mut [0.0; 8],
    );
}

#[test]
#[should_panic(expected = "attention: keys have 11 elements")]
fn rejects_short_keys() {
    let s = shape(2, 3, 1, 1, 4);
    grouped_query_attention(
        &[0.0; 8],
        &[0.0; 11],
        &[0.0; 12],
        &s,
        &Visibility::All,
        &mut [0.0; 8],
    );
}
