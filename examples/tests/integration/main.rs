//! The examples' integration tests, one binary: device choice, the EAGLE report, a new head's MLP
//! width, engines run step by step in turn, the shipped head, validation sets from prompts files,
//! and warm-starting a head's training; `tiny` holds what the tests on the tiny fixture model
//! share.
//!
//! All test files of the crate compile into this one binary, so the suite links once instead
//! of once per file.

mod device_choice;
mod eagle_report;
mod follow_up_data;
mod head_shape;
mod interleaved;
mod self_instructed_data;
mod shipped_head;
mod tiny;
mod validation_set;
mod warm_start;
