//! Training checkpoints: the head, the optimizer state and the history, saved together so a
//! stopped run resumes where it was.

use std::path::{Path, PathBuf};

use burn::module::AutodiffModule;

use burn::optim::adaptor::OptimizerAdaptor;
use burn::optim::{AdamW, Optimizer};
use burn::record::{BinFileRecorder, FullPrecisionSettings, Recorder};
use burn::tensor::backend::AutodiffBackend;

use super::{TrainError, TrainHistory};

/// File names inside a checkpoint directory.
const HEAD_FILE: &str = "head";
const OPTIMIZER_FILE: &str = "optimizer";
const HISTORY_FILE: &str = "history.json";
const RUN_FILE: &str = "run.txt";

/// The state restored from a checkpoint directory.
pub struct TrainCheckpoint<B: AutodiffBackend, H: AutodiffModule<B>> {
    /// The head's weights.
    pub head: H,
    /// AdamW's moments.
    pub optimizer: OptimizerAdaptor<AdamW, H, B>,
    /// Losses and validations so far.
    pub history: TrainHistory,
}

impl<B: AutodiffBackend, H: AutodiffModule<B>> TrainCheckpoint<B, H> {
    /// Saves the state into `dir` (history last, so a history on disk means a full state).
    /// `run` identifies the run's settings and data; [`TrainCheckpoint::load`] refuses a
    /// checkpoint of another run.
    pub fn save(
        dir: &Path,
        run: &str,
        head: &H,
        optimizer: &OptimizerAdaptor<AdamW, H, B>,
        history: &TrainHistory,
    ) -> Result<(), TrainError> {
        std::fs::create_dir_all(dir).map_err(|source| io(dir, source))?;
        let run_path = dir.join(RUN_FILE);
        std::fs::write(&run_path, run).map_err(|source| io(&run_path, source))?;
        let recorder = BinFileRecorder::<FullPrecisionSettings>::new();
        recorder
            .record(head.clone().into_record(), dir.join(HEAD_FILE))
            .map_err(|e| record_error(dir, e))?;
        recorder
            .record(optimizer.to_record(), dir.join(OPTIMIZER_FILE))
            .map_err(|e| record_error(dir, e))?;
        let json = serde_json::to_vec(history).map_err(|e| TrainError::Data(e.to_string()))?;
        let path = dir.join(HISTORY_FILE);
        std::fs::write(&path, json).map_err(|source| io(&path, source))
    }

    /// Loads the state saved in `dir` into `head` and `optimizer`, or `None` when `dir`
    /// holds no checkpoint. A checkpoint saved by a run other than `run` is an error.
    pub fn load(
        dir: &Path,
        run: &str,
        head: H,
        optimizer: OptimizerAdaptor<AdamW, H, B>,
    ) -> Result<Option<Self>, TrainError> {
        let history_path = dir.join(HISTORY_FILE);
        if !history_path.exists() {
            return Ok(None);
        }
        let run_path = dir.join(RUN_FILE);
        let saved = std::fs::read_to_string(&run_path).map_err(|source| io(&run_path, source))?;
        if saved != run {
            return Err(TrainError::Checkpoint(format!(
                "{} belongs to another run (settings or data differ); remove it to start over",
                dir.display()
            )));
        }
        let bytes = std::fs::read(&history_path).map_err(|source| io(&history_path, source))?;
        let history: TrainHistory = serde_json::from_slice(&bytes)
            .map_err(|e| TrainError::Data(format!("{}: {e}", history_path.display())))?;
        let device = head.devices().into_iter().next().unwrap_or_default();
        let recorder = BinFileRecorder::<FullPrecisionSettings>::new();
        let head_record = recorder
            .load(dir.join(HEAD_FILE), &device)
            .map_err(|e| record_error(dir, e))?;
        let optimizer_record = recorder
            .load(dir.join(OPTIMIZER_FILE), &device)
            .map_err(|e| record_error(dir, e))?;
        Ok(Some(Self {
            head: head.load_record(head_record),
            optimizer: optimizer.load_record(optimizer_record),
            history,
        }))
    }
}

fn io(path: &Path, source: std::io::Error) -> TrainError {
    TrainError::Io {
        path: PathBuf::from(path),
        source,
    }
}

fn record_error(dir: &Path, error: burn::record::RecorderError) -> TrainError {
    TrainError::Checkpoint(format!("{}: {error}", dir.display()))
}
