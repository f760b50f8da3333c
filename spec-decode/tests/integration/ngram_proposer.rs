//! Prompt-lookup (n-gram) drafting, checked on hand-made histories and against a brute-force
//! reference on random ones.

use aquila_spec_decode::ngram::{NgramConfig, NgramConfigError, NgramProposer};
use aquila_spec_decode::sampling::RequestRng;

fn proposer(min_n: usize, max_n: usize, k: usize) -> NgramProposer {
    NgramProposer::new(NgramConfig { min_n, max_n, k }).unwrap()
}

/// The definition, checked naively: longest suffix length n in [min_n, max_n] that ends at an
/// earlier position e < len - 1, latest e on ties; propose up to k tokens after e.
fn brute_force(history: &[u32], min_n: usize, max_n: usize, k: usize) -> Vec<u32> {
    let len = history.len();
    for n in (min_n..=max_n).rev() {
        if n >= len {
            continue;
        }
        let suffix = &history[len - n..];
        for end in (n - 1..len - 1).rev() {
            if &history[end + 1 - n..=end] == suffix {
                return history[end + 1..len.min(end + 1 + k)].to_vec();
            }
        }
    }
    Vec::new()
}

#[test]
fn proposes_what_followed_the_matching_suffix() {
    let p = proposer(2, 2, 3);
    assert_eq!(p.propose(&[1, 2, 3, 4, 1, 2, 3]), vec![4, 1, 2]);
    assert_eq!(
        proposer(2, 2, 2).propose(&[1, 2, 3, 4, 1, 2, 3]),
        vec![4, 1]
    );
    assert_eq!(
        proposer(1, 1, 3).propose(&[1, 2, 3, 4, 1, 2, 3]),
        vec![4, 1, 2]
    );
}

#[test]
fn no_match_proposes_nothing() {
    assert_eq!(
        proposer(2, 2, 2).propose(&[1, 2, 3, 4, 1, 2, 3, 5, 6]),
        Vec::<u32>::new()
    );
    assert_eq!(proposer(1, 3, 2).propose(&[]), Vec::<u32>::new());
    assert_eq!(proposer(1, 3, 2).propose(&[7]), Vec::<u32>::new());
}

#[test]
fn the_longest_suffix_wins_over_a_later_shorter_one() {
    // "2 3" occurs twice; the 3-gram "1 2 3" only at the start.
    let history = [1, 2, 3, 100, 9, 2, 3, 200, 1, 2, 3];
    assert_eq!(proposer(2, 3, 2).propose(&history), vec![100, 9]);
    assert_eq!(proposer(2, 2, 2).propose(&history), vec![200, 1]);
}

#[test]
fn ties_go_to_the_latest_occurrence() {
    let history = [1, 2, 3, 100, 1, 2, 3, 200, 1, 2, 3, 300, 1, 2, 3];
    assert_eq!(proposer(1, 3, 2).propose(&history), vec![300, 1]);
}

#[test]
fn proposals_stop_at_the_end_of_the_history() {
    // The latest match of "5 5" ends just before the last token: one token follows it.
    assert_eq!(proposer(2, 2, 4).propose(&[5, 5, 5]), vec![5]);
    assert_eq!(proposer(1, 4, 4).propose(&[5, 5, 5, 5, 5]), vec![5]);
}

#[test]
fn min_n_filters_short_matches() {
    let history = [4, 8, 1, 7, 1];
    assert_eq!(proposer(1, 3, 2).propose(&history), vec![7, 1]);
    assert_eq!(proposer(2, 3, 2).propose(&history), Vec::<u32>::new());
}

#[test]
fn matches_brute_force_on_random_histories() {
    let mut rng = RequestRng::new(8);
    for trial in 0..2_000 {
        let len = 1 + (rng.uniform() * 60.0) as usize;
        let alphabet = 2 + (rng.uniform() * 4.0) as u32;
        let history: Vec<u32> = (0..len)
            .map(|_| (rng.uniform() * f64::from(alphabet)) as u32)
            .collect();
        let min_n = 1 + (rng.uniform() * 3.0) as usize;
        let max_n = min_n + (rng.uniform() * 4.0) as usize;
        let k = 1 + (rng.uniform() * 5.0) as usize;
        assert_eq!(
            proposer(min_n, max_n, k).propose(&history),
            brute_force(&history, min_n, max_n, k),
            "trial {trial}: {history:?} min {min_n} max {max_n} k {k}"
        );
    }
}

#[test]
fn batch_equals_one_by_one() {
    let p = proposer(1, 3, 3);
    let histories: Vec<Vec<u32>> = (0..16u32)
        .map(|i| (0..40).map(|j| (j * (i + 1)) % 7).collect())
        .collect();
    let refs: Vec<&[u32]> = histories.iter().map(Vec::as_slice).collect();
    let expected: Vec<Vec<u32>> = refs.iter().map(|h| p.propose(h)).collect();
    assert_eq!(p.propose_batch(&refs), expected);
}

#[test]
fn long_histories_find_a_planted_pattern() {
    let mut rng = RequestRng::new(3);
    let mut history: Vec<u32> = (0..100_000)
        .map(|_| 1000 + (rng.uniform() * 30_000.0) as u32)
        .collect();
    history.splice(5_000..5_000, [1, 2, 3, 4, 5, 6, 7, 8]);
    history.extend([1, 2, 3, 4]);
    assert_eq!(proposer(3, 5, 4).propose(&history), vec![5, 6, 7, 8]);
}

#[test]
fn invalid_configs_are_rejected() {
    let new = |min_n, max_n, k| NgramProposer::new(NgramConfig { min_n, max_n, k });
    assert_eq!(new(0, 2, 1).unwrap_err(), NgramConfigError::MinN);
    assert_eq!(
        new(4, 2, 1).unwrap_err().to_string(),
        "ngram max_n (2) must be >= min_n (4)"
    );
    assert_eq!(new(1, 2, 0).unwrap_err(), NgramConfigError::K);
    assert_eq!(new(2, 2, 1).unwrap().config().max_n, 2);
}
