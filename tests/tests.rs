//! The binary's integration tests, in one test binary as ripgrep's tests/tests.rs has them:
//! one link instead of one per file, and helpers shared as modules instead of `#[path]`
//! includes. Run one file's tests with its module as the filter, e.g.
//! `cargo test --test integration extract::`. The load test (tests/load.rs) is the one binary
//! of its own, so that no other test shares the machine with it.

// Each helper is used by some of the files, and some only under a feature.
#[allow(dead_code)]
mod common;
#[allow(dead_code)]
mod shared;

mod cli;
mod dashboard;
mod extract;
mod extract_iq;
mod extract_model;
mod frameworks;
mod golden;
mod models;
mod rf_cli;
mod serve;
mod storage;
mod structure;
