//! Training-time test: the rows of an unrolled draft chain over a batch of recorded sequences.
//!
//! For a sequence `x_0..x_{n-1}` with target features `f_0..f_{n-1}`, draft step 0 runs row `r`
//! (`0 <= r < n - 1`) on `(f_r, x_{r+1})` at position `r`, like the proposer's committed rows.
//! Step `j >= 1` runs row `r` on the step `j - 1` output of row `r` and token `x_{r+1+j}` at
//! position `r + j`, seeing the step-0 rows `0..=r` and its own chain (row `r` of steps
//! `1..j`), exactly what the proposer's draft cache holds at that point of a chain. Every
//! row of step `j` predicts the target's greedy token after position `r + 1 + j`; rows that
//! start inside the prompt (`r < prompt_len - 1`) are not drafted at inference and carry no
//! loss.

use aquila_model_loader::model::SequenceInput;

/// One sequence of a training batch.
#[derive(Debug, Clone, Copy)]
pub struct PlannedSequence<'a> {
    /// Prompt and response tokens.
    pub tokens: &'a [u32],
    /// Prompt length.
    pub prompt_len: usize,
}

/// One draft step of an unrolled batch.
#[derive(Debug, Clone)]
pub struct StepPlan {
    /// The head's forward inputs (slot = sequence index in the batch).
    pub sequences: Vec<SequenceInput>,
    /// For steps after the first: the row of the previous step's output that each row
    /// continues (its recycled hidden input).
    pub carry_rows: Vec<usize>,
    /// Rows of this step that carry a loss.
    pub loss_rows: Vec<usize>,
    /// For each loss row: the batch-local token index whose feature and argmax are its target.
    pub targets: Vec<usize>,
    /// For each loss row: `(sequence, chain start row r)`, to follow a chain across steps.
    pub chains: Vec<(usize, usize)>,
}

/// The unrolled steps of a batch.
#[derive(Debug, Clone)]
pub struct BatchPlan {
    /// Batch-local token index of the feature each step-0 row consumes (`f_r`).
    pub input_features: Vec<usize>,
    /// Step 0, then the unrolled steps (sequences too short for a step drop out of it).
    pub steps: Vec<StepPlan>,
    /// Batch-local offset of each sequence's first token.
    pub offsets: Vec<usize>,
}

/// Plans `unroll` draft steps (at least 1) over `sequences`.
pub fn plan_batch(sequences: &[PlannedSequence<'_>], unroll: usize) -> BatchPlan {
    let mut offsets = Vec::with_capacity(sequences.len());
    let mut total = 0;
    for s in sequences {
        offsets.push(total);
        total += s.tokens.len();
    }
    let rows_at = |s: &PlannedSequence<'_>, step: usize| s.tokens.len().saturating_sub(1 + step);
    let mut input_features = Vec::new();
    let mut steps = Vec::with_capacity(unroll.max(1));
    // Where each sequence's rows start in the previous step's output.
    let mut previous_starts: Vec<Option<usize>> = vec![None; sequences.len()];
    for step in 0..unroll.max(1) {
        let mut plan = StepPlan {
            sequences: Vec::new(),
            carry_rows: Vec::new(),
            loss_rows: Vec::new(),
            targets: Vec::new(),
            chains: Vec::new(),
        };
        let mut starts = vec![None; sequences.len()];
        let mut row_base = 0;
        for (index, sequence) in sequences.iter().enumerate() {
            let rows = rows_at(sequence, step);
            if rows == 0 {
                continue;
            }
            starts[index] = Some(row_base);
            let tokens = sequence.tokens[1 + step..1 + step + rows].to_vec();
            let mut input = SequenceInput::new(index, tokens, step).with_all_logits();
            if step == 0 {
                input_features.extend((0..rows).map(|r| offsets[index] + r));
            } else {
                let previous = previous_starts[index].expect("a sequence of step j ran at j - 1");
                plan.carry_rows.extend((0..rows).map(|r| previous + r));
                input = input
                    .with_mask(identity(rows))
                    .with_history_mask(chain_history(sequences, index, step, rows));
            }
            for r in 0..rows {
                if r + 1 >= sequence.prompt_len {
                    plan.loss_rows.push(row_base + r);
                    plan.targets.push(offsets[index] + r + 1 + step);
                    plan.chains.push((index, r));
                }
            }
            plan.sequences.push(input);
            row_base += rows;
        }
        if plan.sequences.is_empty() {
            break;
        }
        previous_starts = starts;
        steps.push(plan);
    }
    BatchPlan {
        input_features,
        steps,
        offsets,
    }
}

/// `[n][n]`: each row sees only itself.
fn identity(n: usize) -> Vec<Vec<bool>> {
    (0..n).map(|r| (0..n).map(|c| c == r).collect()).collect()
}

/// Visibility of the cached rows (steps `0..step` of `sequence`) for the `rows` rows of
/// `step`: row `r` sees step-0 rows `0..=r` and row `r` of every later step.
fn chain_history(
    sequences: &[PlannedSequence<'_>],
    index: usize,
    step: usize,
    rows: usize,
) -> Vec<Vec<bool>> {
    let n = sequences[index].tokens.len();
    let blocks: Vec<usize> = (0..step).map(|j| n - 1 - j).collect();
    let cached: usize = blocks.iter().sum();
    (0..rows)
        .map(|r| {
            let mut visible = vec![false; cached];
            visible[..=r].iter_mut().for_each(|v| *v = true);
            let mut base = blocks[0];
            for &block in &blocks[1..] {
                visible[base + r] = true;
                base += block;
            }
            visible
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_step_zero_like_the_proposer() {
        let tokens = [10, 11, 12, 13, 14];
        let plan = plan_batch(
            &[PlannedSequence {
                tokens: &tokens,
                prompt_len: 2,
            }],
            1,
        );
        let step = &plan.steps[0];
        assert_eq!(step.sequences[0].tokens, vec![11, 12, 13, 14]);
        assert_eq!(step.sequences[0].positions, vec![0, 1, 2, 3]);
        assert_eq!(plan.input_features, vec![0, 1, 2, 3]);
        // Rows 1.. start at or after the last prompt token.
        assert_eq!(step.loss_rows, vec![1, 2, 3]);
        assert_eq!(step.targets, vec![2, 3, 4]);
    }

    #[test]
    fn unrolled_steps_follow_their_chains() {
        let a = [1, 2, 3, 4, 5];
        let b = [6, 7, 8];
        let plan = plan_batch(
            &[
                PlannedSequence {
                    tokens: &a,
                    prompt_len: 1,
                },
                PlannedSequence {
                    tokens: &b,
                    prompt_len: 1,
                },
            ],
            3,
        );
        assert_eq!(plan.offsets, vec![0, 5]);
        assert_eq!(plan.steps.len(), 3);
        let step1 = &plan.steps[1];
        assert_eq!(step1.sequences[0].tokens, vec![3, 4, 5]);
        assert_eq!(step1.sequences[0].positions, vec![1, 2, 3]);
        assert_eq!(step1.sequences[1].tokens, vec![8]);
        // Step 0 rows: a has 4 (0..4), b has 2 (4..6).
        assert_eq!(step1.carry_rows, vec![0, 1, 2, 4]);
        assert_eq!(step1.targets, vec![2, 3, 4, 7]);
        let history = step1.sequences[0].history_mask.as_ref().unwrap();
        assert_eq!(history[1], vec![true, true, false, false]);
        let step2 = &plan.steps[2];
        // b is too short for a third step.
        assert_eq!(step2.sequences.len(), 1);
        assert_eq!(step2.carry_rows, vec![0, 1]);
        let history = step2.sequences[0].history_mask.as_ref().unwrap();
        // Step-0 rows 0..=1, then row 1 of step 1 (cached columns 4..7).
        assert_eq!(
            history[1],
            vec![true, true, false, false, false, true, false]
        );
        assert_eq!(step2.targets, vec![3, 4]);
        assert_eq!(step2.chains, vec![(0, 0), (0, 1)]);
    }
}
