//! Fault injection on the model runner (`--features failpoints`): batches that run out of
//! memory are split by the adaptive batcher and retried, a lost model device leaves its items
//! to the fallback, and every item comes out exactly once, in order, equal to what the model
//! gives it alone. Needs onnxruntime; without it the tests say why they skipped.
#![cfg(feature = "failpoints")]

#[path = "../../../tests/shared/skip_ort.rs"]
mod skip_ort;

use std::path::Path;

use sonograph_model::runner::RunnerOptions;
use sonograph_model::{DeviceError, ItemError, ModelBatch, ModelRunner};
use sonograph_pipeline::{AdaptiveBatcher, BatchDevice, BatcherConfig, FeatureRows, NoFallback};

/// The fallback: another runner of the model, out of reach of the faults injected into the
/// primary (failpoints are process-wide, so they are turned off while it runs and set back).
struct Fallback {
    runner: ModelRunner,
    faults: Vec<(&'static str, &'static str)>,
}

impl BatchDevice<FeatureRows<'_>, ModelBatch> for Fallback {
    type Error = DeviceError;
    fn name(&self) -> String {
        "cpu:fallback".into()
    }
    fn workload(&self) -> String {
        String::new()
    }
    fn run(&mut self, input: &FeatureRows<'_>, out: &mut ModelBatch) -> Result<(), DeviceError> {
        for (name, _) in &self.faults {
            fail::cfg(*name, "off").unwrap();
        }
        let r = self.runner.run(input, out);
        for (name, action) in &self.faults {
            fail::cfg(*name, action).unwrap();
        }
        r
    }
}

fn items() -> Vec<Vec<f32>> {
    // Seven items of distinct lengths (3 to 45 frames of 80 bins), smooth values.
    (0..7)
        .map(|k| {
            (0..(3 + 7 * k) * 80)
                .map(|i| ((i * (k + 1)) as f32 * 0.013).sin())
                .collect()
        })
        .collect()
}

fn open() -> Option<ModelRunner> {
    let rt = skip_ort::runtime_or_skip()?;
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/asr/ctc/model.onnx");
    Some(ModelRunner::open(rt, &path, &RunnerOptions::default()).unwrap())
}

/// What each item gives alone, failpoints off.
fn alone(m: &mut ModelRunner, rows: &[Vec<f32>]) -> Vec<Vec<f32>> {
    rows.iter()
        .map(|r| m.run_batch(&[r], 80).unwrap().item(0).unwrap().data.clone())
        .collect()
}

/// Every item has its output, in order, equal to what it gives alone (1e-4: a batch of other
/// shapes may round differently).
fn check(out: &ModelBatch, expect: &[Vec<f32>]) {
    assert_eq!(out.len(), expect.len());
    for (k, e) in expect.iter().enumerate() {
        let got = &out.item(k).unwrap().data;
        assert!(
            got.len() == e.len() && got.iter().zip(e).all(|(x, y)| (x - y).abs() <= 1e-4),
            "item {k}"
        );
    }
}

// One test function: failpoints are process-wide, so the scenarios run in sequence.
#[test]
fn ooms_split_and_a_lost_device_loses_nothing() {
    let Some(mut primary) = open() else {
        return;
    };
    let mut fallback = Fallback {
        runner: open().unwrap(),
        faults: vec![],
    };
    let scenario = fail::FailScenario::setup();
    let rows = items();
    let expect = alone(&mut primary, &rows);
    let input = FeatureRows::new(rows.iter().map(|r| r.as_slice()).collect(), 80);

    // Batches of more than two rows run out of memory.
    fail::cfg("model::oom", "return(2)").unwrap();
    let mut batcher = AdaptiveBatcher::new(BatcherConfig {
        initial: 7,
        max: 7,
        grow_after: 1,
    });
    let mut out = ModelBatch::new();
    batcher.run_on(
        &input,
        &mut primary,
        &mut NoFallback("none".into()),
        &mut out,
    );
    check(&out, &expect);
    let s = batcher.stats().clone();
    assert!(s.ooms >= 2 && s.splits >= 2, "{s:?}");
    assert_eq!(s.items_on_fallback, 0);
    let workload = primary.path().display().to_string();
    assert_eq!(batcher.ceiling_for("cpu", &workload), Some(3));
    assert!(batcher.size_for("cpu", &workload) <= 2);

    // Nothing fits, not even one row: each item goes to the fallback alone, with an alert.
    fail::cfg("model::oom", "return(0)").unwrap();
    fallback.faults = vec![("model::oom", "return(0)")];
    let mut out = ModelBatch::new();
    batcher.run_on(&input, &mut primary, &mut fallback, &mut out);
    fail::cfg("model::oom", "off").unwrap();
    check(&out, &expect);
    assert_eq!(batcher.stats().items_on_fallback, 7);
    let alert = &batcher.stats().alerts[0];
    assert!(
        alert.contains("does not fit on cpu even alone") && alert.contains("cpu:fallback"),
        "{alert}"
    );

    // The model device is lost after its first batch: the rest moves to the fallback.
    fail::cfg("model::lost", "1*off->return").unwrap();
    fallback.faults = vec![("model::lost", "return")];
    let mut batcher = AdaptiveBatcher::new(BatcherConfig {
        initial: 2,
        max: 2,
        grow_after: 100,
    });
    let mut out = ModelBatch::new();
    batcher.run_on(&input, &mut primary, &mut fallback, &mut out);
    fail::cfg("model::lost", "off").unwrap();
    check(&out, &expect);
    let s = batcher.stats();
    assert_eq!(
        (s.batches, s.devices_lost, s.items_after_loss),
        (1, 1, 5),
        "{s:?}"
    );

    // With no fallback, a lost device leaves each remaining item an error of its own.
    fail::cfg("model::lost", "return").unwrap();
    let mut batcher = AdaptiveBatcher::new(BatcherConfig::default());
    let mut out = ModelBatch::new();
    batcher.run_on(
        &input,
        &mut primary,
        &mut NoFallback("no other device".into()),
        &mut out,
    );
    fail::cfg("model::lost", "off").unwrap();
    assert_eq!(out.len(), 7);
    for k in 0..7 {
        assert!(
            matches!(out.item(k), Err(ItemError::NoDevice(m)) if m == "no other device"),
            "{:?}",
            out.item(k)
        );
    }
    scenario.teardown();
}
