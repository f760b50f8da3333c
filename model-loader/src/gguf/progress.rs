//! Progress reporting of an import.

/// Receives progress of [`super::import`]; called from several threads.
pub trait ImportProgress: Sync {
    /// Dequantization of `tensors` tensors starts.
    fn start(&self, tensors: usize) {
        let _ = tensors;
    }

    /// One tensor was dequantized.
    fn tensor_done(&self, hf_name: &str) {
        let _ = hf_name;
    }

    /// A new stage starts (e.g. writing files).
    fn stage(&self, message: &str) {
        let _ = message;
    }
}

/// Reports nothing.
impl ImportProgress for () {}

/// Drives an `indicatif` bar: its length is the tensor count, its message the stage.
impl ImportProgress for indicatif::ProgressBar {
    fn start(&self, tensors: usize) {
        self.set_length(tensors as u64);
        self.set_position(0);
        self.set_message("dequantizing");
    }

    fn tensor_done(&self, _hf_name: &str) {
        self.inc(1);
    }

    fn stage(&self, message: &str) {
        self.set_message(message.to_string());
    }
}
