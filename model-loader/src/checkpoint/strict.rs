//! `StrictReader`: takes tensors by name and expected shape, remembers every problem instead of
//! stopping at the first, and at the end reports them together with the tensors nobody took.

use super::{Checkpoint, CheckpointError, MismatchReport, ShapeMismatch};
use std::collections::BTreeSet;
use std::ops::Range;

/// Takes tensors out of a [`Checkpoint`] by name with an expected shape.
///
/// Each `take` returns `None` when the tensor is missing, has another shape or cannot be
/// converted, and records why; [`StrictReader::finish`] then fails with one
/// [`CheckpointError::Mismatch`] listing every problem and every tensor that was not taken.
/// Callers can therefore build a whole model, treating `None` as "already reported", and get a
/// complete list of differences in one error.
#[derive(Debug)]
pub struct StrictReader<'a> {
    checkpoint: &'a Checkpoint,
    taken: BTreeSet<String>,
    report: MismatchReport,
}

impl<'a> StrictReader<'a> {
    /// A reader over `checkpoint` with nothing taken yet.
    pub fn new(checkpoint: &'a Checkpoint) -> Self {
        Self {
            checkpoint,
            taken: BTreeSet::new(),
            report: MismatchReport::default(),
        }
    }

    /// The checkpoint being read.
    pub fn checkpoint(&self) -> &'a Checkpoint {
        self.checkpoint
    }

    /// Whether the checkpoint holds `name` (taken or not).
    pub fn contains(&self, name: &str) -> bool {
        self.checkpoint.contains(name)
    }

    /// Takes a floating-point tensor of shape `shape`, converted to `f32` (row-major).
    pub fn f32(&mut self, name: &str, shape: &[usize]) -> Option<Vec<f32>> {
        self.take(name, shape, Checkpoint::read_f32)
    }

    /// Takes a floating-point matrix stored with shape `shape` = `[rows, cols]` and returns it
    /// transposed (`[cols, rows]`, row-major), as `f32`.
    pub fn f32_transposed(&mut self, name: &str, shape: [usize; 2]) -> Option<Vec<f32>> {
        self.take(name, &shape, Checkpoint::read_f32_transposed)
    }

    /// Takes a floating-point matrix of shape `[rows, cols]` and hands `build` a source of its
    /// rows: `read(range)` returns rows `range` as `f32`, row-major (their file pages released
    /// once converted), so that a large matrix can be packed without ever being held whole as
    /// `f32`. `None` (recorded) where [`StrictReader::f32`] would give `None`.
    pub fn f32_rows<T>(
        &mut self,
        name: &str,
        shape: [usize; 2],
        build: impl FnOnce(&mut dyn FnMut(Range<usize>) -> Vec<f32>) -> T,
    ) -> Option<T> {
        self.take(name, &shape, |checkpoint, name| {
            // A first read checks the type once; then no row range inside the checked shape
            // can fail.
            checkpoint.read_f32_rows(name, 0..0)?;
            let mut read = |rows: Range<usize>| {
                checkpoint
                    .read_f32_rows(name, rows)
                    .expect("rows of a floating-point matrix of the checked shape")
            };
            Ok(build(&mut read))
        })
    }

    /// Like [`StrictReader::f32`], but an absent tensor is not a problem (`None`).
    pub fn optional_f32(&mut self, name: &str, shape: &[usize]) -> Option<Vec<f32>> {
        if self.contains(name) {
            self.f32(name, shape)
        } else {
            None
        }
    }

    /// Takes an integer tensor (`I64` or `I32`) of shape `shape` as `i64`.
    pub fn i64(&mut self, name: &str, shape: &[usize]) -> Option<Vec<i64>> {
        self.take(name, shape, Checkpoint::read_i64)
    }

    /// Takes a boolean tensor of shape `shape`.
    pub fn bool(&mut self, name: &str, shape: &[usize]) -> Option<Vec<bool>> {
        self.take(name, shape, Checkpoint::read_bool)
    }

    /// Marks every tensor whose name satisfies `ignore` as taken without reading it (for
    /// buffers the model recomputes, such as `rotary_emb.inv_freq`).
    pub fn skip_where(&mut self, ignore: impl Fn(&str) -> bool) {
        let skipped: Vec<String> = self
            .checkpoint
            .names()
            .filter(|name| ignore(name))
            .map(str::to_string)
            .collect();
        self.taken.extend(skipped);
    }

    /// The problems recorded so far (leftovers are only known at [`StrictReader::finish`]).
    pub fn report(&self) -> &MismatchReport {
        &self.report
    }

    /// Fails with every recorded problem and every tensor that was not taken, if any.
    pub fn finish(mut self) -> Result<(), CheckpointError> {
        self.report.unexpected = self
            .checkpoint
            .names()
            .filter(|name| !self.taken.contains(*name))
            .map(str::to_string)
            .collect();
        if self.report.is_empty() {
            Ok(())
        } else {
            Err(CheckpointError::Mismatch {
                path: self.checkpoint.origin().to_path_buf(),
                report: self.report,
            })
        }
    }

    fn take<R>(
        &mut self,
        name: &str,
        shape: &[usize],
        read: impl FnOnce(&Checkpoint, &str) -> Result<R, CheckpointError>,
    ) -> Option<R> {
        let Some(info) = self.checkpoint.info(name) else {
            if !self.report.missing.iter().any(|m| m == name) {
                self.report.missing.push(name.to_string());
            }
            return None;
        };
        self.taken.insert(name.to_string());
        if info.shape != shape {
            self.report.wrong_shapes.push(ShapeMismatch {
                name: name.to_string(),
                expected: shape.to_vec(),
                found: info.shape,
            });
            return None;
        }
        match read(self.checkpoint, name) {
            Ok(data) => Some(data),
            Err(err) => {
                self.report.unreadable.push(err.to_string());
                None
            }
        }
    }
}
