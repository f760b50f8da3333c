//! Reading draft logits back from the device.

use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

/// The argmax column of every row of `logits` (`[rows, vocab]`), computed on the device.
pub(super) fn argmax_rows<B: Backend>(logits: Tensor<B, 2>) -> Vec<u32> {
    logits
        .argmax(1)
        .into_data()
        .iter::<i64>()
        .map(|id| id as u32)
        .collect()
}

/// The rows of `logits` (`[rows, vocab]`) as `f32` vectors.
pub(super) fn float_rows<B: Backend>(logits: Tensor<B, 2>) -> Vec<Vec<f32>> {
    let [_, vocab] = logits.dims();
    let values: Vec<f32> = logits.into_data().iter::<f32>().collect();
    values.chunks(vocab.max(1)).map(<[f32]>::to_vec).collect()
}

/// The `k` largest columns of every row of `logits` (`[rows, vocab]`) with their
/// log-probabilities under the row's softmax, best first (ties: lower column first); at most
/// `vocab` per row. The rows are read back once and ranked on the host in one pass each: `k`
/// is a handful, and a device-side sort of every draft-vocabulary row cost more than the head's
/// own forward.
pub(super) fn top_k_rows<B: Backend>(logits: Tensor<B, 2>, k: usize) -> Vec<Vec<(u32, f32)>> {
    let [rows, vocab] = logits.dims();
    let k = k.min(vocab);
    if rows == 0 || k == 0 {
        return vec![Vec::new(); rows];
    }
    float_rows(logits)
        .iter()
        .map(|row| {
            let log_normalizer = log_sum_exp(row);
            largest(row, k)
                .into_iter()
                .map(|column| (column as u32, row[column] - log_normalizer))
                .collect()
        })
        .collect()
}

/// `ln Σ exp(x)` of a non-empty row, shifted by its maximum so nothing overflows.
fn log_sum_exp(row: &[f32]) -> f32 {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if !max.is_finite() {
        return max;
    }
    max + row.iter().map(|&x| (x - max).exp()).sum::<f32>().ln()
}

/// The columns of the `k` largest values of `row`, largest first, ties by lower column.
fn largest(row: &[f32], k: usize) -> Vec<usize> {
    let mut best: Vec<usize> = Vec::with_capacity(k + 1);
    for (column, &value) in row.iter().enumerate() {
        if value.is_nan() || (best.len() == k && value <= row[best[k - 1]]) {
            continue;
        }
        let at = best.partition_point(|&b| row[b] >= value);
        best.insert(at, column);
        best.truncate(k);
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    type B = burn::backend::Flex;

    #[test]
    fn top_k_rows_rank_columns_and_normalize_each_row() {
        let logits = Tensor::<B, 2>::from_floats(
            [[0.0, 3.0, 1.0, 2.0], [5.0, 5.5, -1.0, 0.0]],
            &Default::default(),
        );
        let top = top_k_rows(logits.clone(), 2);
        let ids: Vec<Vec<u32>> = top
            .iter()
            .map(|row| row.iter().map(|t| t.0).collect())
            .collect();
        assert_eq!(ids, vec![vec![1, 3], vec![1, 0]]);
        let lse = (0f32.exp() + 3f32.exp() + 1f32.exp() + 2f32.exp()).ln();
        assert!((top[0][0].1 - (3.0 - lse)).abs() < 1e-5);
        assert!((top[0][1].1 - (2.0 - lse)).abs() < 1e-5);
        assert_eq!(argmax_rows(logits.clone()), vec![1, 1]);
        assert_eq!(top_k_rows(logits.clone(), 9)[0].len(), 4, "at most vocab");
        assert_eq!(top_k_rows(logits, 0), vec![Vec::new(), Vec::new()]);
    }

    #[test]
    fn largest_matches_a_full_sort_and_breaks_ties_by_column() {
        let row: Vec<f32> = (0..5000)
            .map(|i| ((i * 7919 % 1000) as f32 * 0.37).sin())
            .collect();
        let mut sorted: Vec<usize> = (0..row.len()).collect();
        sorted.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
        for k in [1, 2, 4, 10] {
            assert_eq!(largest(&row, k), sorted[..k], "k = {k}");
        }
        assert_eq!(largest(&[1.0, 2.0, 2.0, f32::NAN, 0.5], 3), vec![1, 2, 0]);
        let lse = log_sum_exp(&row);
        let direct = row.iter().map(|x| x.exp()).sum::<f32>().ln();
        assert!((lse - direct).abs() < 1e-4, "{lse} vs {direct}");
    }
}
