//! The examples' integration tests, one binary: device choice, the EAGLE report and the
//! shipped head.
//!
//! All test files of the crate compile into this one binary, so the suite links once instead
//! of once per file.

mod device_choice;
mod eagle_report;
mod shipped_head;
