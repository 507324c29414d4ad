//! How the model tests compare outputs with their references (crates/model/tests/asr.rs and
//! tests/extract_model.rs, which include this file with `#[path]`).

use serde_json::Value;

/// A JSON array of numbers as f32.
pub fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

/// Largest |a − b| relative to max(1, |b|) (`b` the reference).
pub fn worst(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs() / y.abs().max(1.0))
        .fold(0.0, f32::max)
}
