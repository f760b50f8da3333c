//! Selection helpers and the top-k and top-p filters.

use super::reduce::max_value;

/// Largest `k` for which [`kth_largest`] uses the one-pass [`top_n_indices`] instead of a
/// selection over a copy of the whole vector.
const SMALL_K: usize = 256;

/// The ids of the `n` largest non-NaN values, largest first, ties lowest id first.
///
/// One pass with a sorted buffer of at most `n` entries; groups of sixteen values whose
/// maximum cannot enter the buffer are skipped after one vectorized comparison, so for the
/// small `n` of log-probabilities, top-k and draft-tree expansion the cost is close to a scan.
pub fn top_n_indices(values: &[f32], n: usize) -> Vec<u32> {
    let mut best: Vec<u32> = Vec::with_capacity(n.min(values.len()) + 1);
    if n == 0 {
        return best;
    }
    for (group_index, group) in values.chunks(16).enumerate() {
        if best.len() == n && max_value(group) <= values[best[n - 1] as usize] {
            continue;
        }
        for (offset, &v) in group.iter().enumerate() {
            if v.is_nan() || (best.len() == n && v <= values[best[n - 1] as usize]) {
                continue;
            }
            // Insert after every entry that is >= v, so lower ids stay first on ties.
            let at = best.partition_point(|&j| values[j as usize] >= v);
            best.insert(at, (group_index * 16 + offset) as u32);
            best.truncate(n);
        }
    }
    best
}

/// The `k`-th largest value of `values` (1-based `k`, `0 < k <= values.len()`). `values` must
/// contain no NaN.
pub(crate) fn kth_largest(values: &[f32], k: usize) -> f32 {
    debug_assert!(k > 0 && k <= values.len());
    if k <= SMALL_K {
        return values[top_n_indices(values, k)[k - 1] as usize];
    }
    let mut scratch = values.to_vec();
    let (_, kth, _) = scratch.select_nth_unstable_by(k - 1, |a, b| b.total_cmp(a));
    *kth
}

/// Keeps the smallest set of the largest `weights` whose sum reaches `top_p` times their total
/// (`total`), zeroing the rest, and returns the kept total.
///
/// Candidates are ordered by weight, descending, then by id, ascending, so ties at the boundary
/// resolve deterministically. The boundary is found by weighted quickselect in expected O(n),
/// without sorting the candidates: flat distributions, where top-p keeps thousands of tokens,
/// cost as little as peaked ones.
pub(crate) fn keep_top_p(weights: &mut [f32], total: f64, top_p: f32) -> f64 {
    let mut keys: Vec<u64> = Vec::with_capacity(weights.len());
    keys.extend(
        weights
            .iter()
            .enumerate()
            .filter(|(_, &w)| w > 0.0)
            .map(|(id, &w)| order_key(id, w)),
    );
    let (boundary, kept_total) = select_by_mass(&mut keys, f64::from(top_p) * total);
    if boundary == u64::MAX {
        return kept_total;
    }
    // Keep what orders at or before the boundary key, compared as (weight, id) in 32-bit lanes
    // so the loop vectorizes and has no data-dependent branch.
    let boundary_weight = key_weight(boundary) as f32;
    let boundary_id = (boundary & u64::from(u32::MAX)) as u32;
    for (id, w) in (0u32..).zip(weights.iter_mut()) {
        let keep = (*w > boundary_weight) | ((*w == boundary_weight) & (id <= boundary_id));
        *w = if keep { *w } else { 0.0 };
    }
    kept_total
}

/// A key whose ascending order is weight descending, then id ascending: positive floats
/// order like their bit patterns, so the inverted bits go in the high half and the id in the
/// low half.
fn order_key(id: usize, weight: f32) -> u64 {
    (u64::from(!weight.to_bits()) << 32) | id as u64
}

/// The weight encoded in an [`order_key`].
fn key_weight(key: u64) -> f64 {
    f64::from(f32::from_bits(!((key >> 32) as u32)))
}

/// Finds the smallest prefix of `keys` in ascending order whose weights sum to at least
/// `target`; returns its last key and its mass (`u64::MAX` and the total when the whole set
/// falls short, which only rounding can cause). Reorders `keys`.
fn select_by_mass(keys: &mut [u64], target: f64) -> (u64, f64) {
    let (mut lo, mut hi) = (0, keys.len());
    // Mass of keys[..lo], all of which are kept.
    let mut kept = 0.0;
    // Median-of-three rarely degrades; past this many rounds, sort what is left instead.
    let mut rounds_left = 2 * (usize::BITS - keys.len().leading_zeros()) + 8;
    while hi - lo > 32 && rounds_left > 0 {
        rounds_left -= 1;
        let range = &mut keys[lo..hi];
        let (split, left_mass) = partition_around_median(range);
        let pivot = range[split];
        if kept + left_mass >= target {
            hi = lo + split;
        } else if kept + left_mass + key_weight(pivot) >= target {
            return (pivot, kept + left_mass + key_weight(pivot));
        } else {
            kept += left_mass + key_weight(pivot);
            lo += split + 1;
        }
    }
    let rest = &mut keys[lo..hi];
    rest.sort_unstable();
    for &key in rest.iter() {
        kept += key_weight(key);
        if kept >= target {
            return (key, kept);
        }
    }
    (u64::MAX, kept)
}

/// Partitions `keys` (at least 3) around the median of its first, middle and last keys:
/// smaller keys first, then the pivot at the returned index, then larger keys. Also returns
/// the weight of the smaller keys.
fn partition_around_median(keys: &mut [u64]) -> (usize, f64) {
    let last = keys.len() - 1;
    let mid = keys.len() / 2;
    let mut candidates = [(keys[0], 0), (keys[mid], mid), (keys[last], last)];
    candidates.sort_unstable();
    keys.swap(candidates[1].1, last);
    let pivot = keys[last];
    // Branch-free Lomuto: [0, store) < pivot <= [store, i) at every step.
    let mut store = 0;
    for i in 0..last {
        let key = keys[i];
        keys.swap(i, store);
        store += usize::from(key < pivot);
    }
    keys.swap(store, last);
    (store, mass(&keys[..store]))
}

/// The total weight of `keys`, over eight independent accumulators.
fn mass(keys: &[u64]) -> f64 {
    let mut lanes = [0.0f64; 8];
    let mut groups = keys.chunks_exact(8);
    for group in &mut groups {
        for (lane, &key) in lanes.iter_mut().zip(group) {
            *lane += key_weight(key);
        }
    }
    lanes.iter().sum::<f64>()
        + groups
            .remainder()
            .iter()
            .map(|&k| key_weight(k))
            .sum::<f64>()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kth_largest_counts_duplicates() {
        let v = [3.0, 1.0, 3.0, 2.0, f32::NEG_INFINITY];
        assert_eq!(kth_largest(&v, 1), 3.0);
        assert_eq!(kth_largest(&v, 2), 3.0);
        assert_eq!(kth_largest(&v, 3), 2.0);
        assert_eq!(kth_largest(&v, 5), f32::NEG_INFINITY);
    }

    #[test]
    fn top_n_handles_descending_ascending_tied_and_nan_inputs() {
        let ascending: Vec<f32> = (0..100).map(|i| i as f32).collect();
        assert_eq!(top_n_indices(&ascending, 3), vec![99, 98, 97]);
        let descending: Vec<f32> = (0..100).rev().map(|i| i as f32).collect();
        assert_eq!(top_n_indices(&descending, 3), vec![0, 1, 2]);
        let mut tied = vec![1.0f32; 40];
        tied[33] = f32::NAN;
        tied[35] = 2.0;
        assert_eq!(top_n_indices(&tied, 3), vec![35, 0, 1]);
        assert_eq!(top_n_indices(&tied, 0), Vec::<u32>::new());
        assert_eq!(top_n_indices(&[f32::NAN, 1.0], 5), vec![1]);
    }

    #[test]
    fn kth_largest_small_and_large_k_agree_with_sorting() {
        let values: Vec<f32> = (0..2000).map(|i| ((i * 7919) % 613) as f32).collect();
        let mut sorted = values.clone();
        sorted.sort_by(|a, b| b.total_cmp(a));
        for k in [1, 2, 100, SMALL_K, SMALL_K + 1, 1500, 2000] {
            assert_eq!(kth_largest(&values, k), sorted[k - 1], "k {k}");
        }
    }

    #[test]
    fn order_keys_sort_by_weight_then_id() {
        let mut keys = [
            order_key(3, 0.5),
            order_key(1, 0.25),
            order_key(0, 0.5),
            order_key(2, 1.0),
        ];
        keys.sort_unstable();
        let ids: Vec<u64> = keys.iter().map(|k| k & 0xffff_ffff).collect();
        assert_eq!(ids, vec![2, 0, 3, 1]);
        assert_eq!(key_weight(keys[0]), 1.0);
    }

    #[test]
    fn top_p_keeps_the_smallest_reaching_prefix() {
        let mut w = vec![0.1, 0.4, 0.2, 0.3];
        let kept = keep_top_p(&mut w, 1.0, 0.7);
        assert_eq!(w, vec![0.0, 0.4, 0.0, 0.3]);
        assert!((kept - 0.7).abs() < 1e-6);
        // 0.4 alone is below 0.5: the next one is needed.
        let mut w = vec![0.1, 0.4, 0.2, 0.3];
        keep_top_p(&mut w, 1.0, 0.5);
        assert_eq!(w, vec![0.0, 0.4, 0.0, 0.3]);
        // Reaching exactly the target stops.
        let mut w = vec![0.5, 0.25, 0.25];
        keep_top_p(&mut w, 1.0, 0.5);
        assert_eq!(w, vec![0.5, 0.0, 0.0]);
    }

    #[test]
    fn top_p_breaks_ties_by_lowest_id() {
        let mut w = vec![0.25; 4];
        keep_top_p(&mut w, 1.0, 0.3);
        assert_eq!(w, vec![0.25, 0.25, 0.0, 0.0]);
        // A flat distribution over 1000 tokens needs the first 900 ids for top_p = 0.9.
        let mut flat = vec![1.0f32; 1000];
        let kept = keep_top_p(&mut flat, 1000.0, 0.9);
        assert!(flat[..900].iter().all(|&x| x == 1.0));
        assert!(flat[900..].iter().all(|&x| x == 0.0));
        assert_eq!(kept, 900.0);
    }

    #[test]
    fn selection_matches_sorting_on_many_shapes() {
        // Deterministic pseudo-random weights with many ties, several sizes and targets.
        let mut state = 12345u64;
        let mut next = move || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 33) as u32
        };
        for len in [1usize, 5, 33, 100, 1000, 5000] {
            for top_p in [0.01f32, 0.3, 0.5, 0.9, 0.999] {
                let weights: Vec<f32> = (0..len).map(|_| (next() % 50) as f32 / 7.0).collect();
                let total: f64 = weights.iter().map(|&w| f64::from(w)).sum();
                if total == 0.0 {
                    continue;
                }
                let mut order: Vec<usize> = (0..len).filter(|&i| weights[i] > 0.0).collect();
                order.sort_by(|&a, &b| weights[b].total_cmp(&weights[a]).then(a.cmp(&b)));
                let mut expected = vec![0.0f32; len];
                let mut cumulative = 0.0;
                for &i in &order {
                    expected[i] = weights[i];
                    cumulative += f64::from(weights[i]);
                    if cumulative >= f64::from(top_p) * total {
                        break;
                    }
                }
                let mut actual = weights.clone();
                keep_top_p(&mut actual, total, top_p);
                assert_eq!(actual, expected, "len {len} top_p {top_p}");
            }
        }
    }
}
