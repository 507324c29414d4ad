//! `alert_rules`: the `--alerts` rules file (TOML), and the alert engine under the rules it
//! gives, fed a history in which every rule's condition comes and goes.

use std::collections::BTreeMap;
use std::sync::Arc;

use sonograph_dsp::MemoryStats;
use sonograph_pipeline::alerts::{AlertEngine, AlertEvent, AlertRules, RULES};
use sonograph_pipeline::live::DeviceCounters;
use sonograph_pipeline::telemetry::{DeviceReading, DeviceSample, JobSample, QueueSample, Sample};

use crate::harness::{assert_json_equal, run};

/// The bytes as a rules file.
pub fn alert_rules(data: &[u8]) {
    run("alert_rules", || {
        let Ok(text) = std::str::from_utf8(data) else {
            return;
        };
        let Ok(rules) = AlertRules::from_toml(text) else {
            return;
        };
        rules
            .validate()
            .unwrap_or_else(|e| panic!("parsed rules do not validate: {e}"));
        let written = toml::to_string(&rules)
            .unwrap_or_else(|e| panic!("rules read from TOML cannot be written as TOML: {e}"));
        let back = AlertRules::from_toml(&written)
            .unwrap_or_else(|e| panic!("written rules do not read back: {e}\n{written}"));
        assert_eq!(back, rules, "rules changed through TOML");
        // The service shows them as JSON (`/api/v1/status`).
        let json = serde_json::to_string(&rules).expect("rules serialise");
        let back: AlertRules = serde_json::from_str(&json)
            .unwrap_or_else(|e| panic!("rules' JSON does not read back: {e}\n{json}"));
        assert_json_equal(
            "rules through JSON",
            &serde_json::to_value(&back).expect("rules serialise"),
            &serde_json::to_value(&rules).expect("rules serialise"),
        );
        check_engine(rules);
    })
}

/// A GPU in trouble (hot, its pool full and fragmented, out of memory again and again, then
/// lost), one starved of input, and a job that fails items and stops progressing.
fn troubled(seq: u64, time: f64) -> Sample {
    let k = seq + 1;
    let pool = MemoryStats {
        allocated_bytes: 1,
        reserved_bytes: 1000,
        fragmentation: 0.999,
        largest_free_block: 999,
        ..Default::default()
    };
    let gpu = |id: &str, lost: bool, ooms: u64| DeviceSample {
        reading: DeviceReading {
            id: id.into(),
            name: format!("Test GPU {id}"),
            state: if lost { "failed" } else { "busy" }.into(),
            utilization_percent: Some(0.0),
            temperature_c: Some(1e4),
            ..Default::default()
        },
        budget_bytes: Some(1000),
        pool: Some(pool.clone()),
        executor: DeviceCounters {
            name: id.into(),
            is_cpu: false,
            batches: k,
            ooms,
            lost,
            lost_reason: lost.then(|| "the test lost it".into()),
            ..Default::default()
        },
        busy_ratio: Some(0.0),
        wait_ratio: Some(1.0),
    };
    Sample {
        seq,
        time,
        uptime_s: time,
        devices: vec![
            gpu("gpu:0", seq >= 2, k * 1_000_000),
            gpu("gpu:1", false, u64::MAX - 1000 + k),
        ],
        job: Some(JobSample {
            id: "7".into(),
            items_total: u64::MAX,
            items_failed: k * (u64::MAX / 8),
            first_failures: vec!["a.wav: corrupt".into()],
            seconds_since_progress: time * 1e300,
            queues: vec![QueueSample {
                stage: "prefetch".into(),
                depth: 0,
                capacity: 8,
            }],
            stage_busy_s: BTreeMap::new(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn check_engine(rules: AlertRules) {
    let keep_closed = rules.keep_closed;
    let disabled = rules.disabled.clone();
    let mut engine = AlertEngine::new(rules);
    let mut history: Vec<Arc<Sample>> = Vec::new();
    let mut events: Vec<AlertEvent> = Vec::new();
    let times = [0.0, 1.0, 2.5, 1e3, 1e6, 1e9];
    for (seq, &time) in times.iter().enumerate() {
        history.push(Arc::new(troubled(seq as u64, time)));
        events.extend(engine.evaluate(&history));
        // The same history again: nothing new fires.
        let again = engine.evaluate(&history);
        assert!(
            again.is_empty(),
            "the same history, evaluated again, gave events: {again:?}"
        );
    }
    // All clear: the devices gone, the job detached.
    history.push(Arc::new(Sample {
        seq: times.len() as u64,
        time: 2e9,
        ..Default::default()
    }));
    events.extend(engine.evaluate(&history));
    let mut open: BTreeMap<(String, String), u64> = BTreeMap::new();
    for e in &events {
        let a = e.alert();
        assert!(RULES.contains(&a.rule.as_str()), "unknown rule {}", a.rule);
        assert!(
            !disabled.contains(&a.rule),
            "disabled rule {} fired",
            a.rule
        );
        assert!(
            !a.message.contains('\n'),
            "an alert message spans lines: {:?}",
            a.message
        );
        let key = (a.rule.clone(), a.subject.clone());
        match e {
            AlertEvent::Fired(a) => {
                assert!(a.ended.is_none());
                assert!(
                    open.insert(key, a.id).is_none(),
                    "{} on {} fired twice in one episode",
                    a.rule,
                    a.subject
                );
            }
            AlertEvent::Resolved(a) => {
                assert!(a.ended.is_some_and(|end| end >= a.started));
                assert_eq!(
                    open.remove(&key),
                    Some(a.id),
                    "{} on {} resolved without firing",
                    a.rule,
                    a.subject
                );
            }
        }
    }
    assert!(
        open.is_empty(),
        "alerts left active after all clear: {open:?}"
    );
    let all = engine.all();
    assert!(all.iter().all(|a| a.ended.is_some()));
    assert!(
        all.len() <= keep_closed,
        "{} closed alerts kept, the rules say {keep_closed}",
        all.len()
    );
    let fired = events
        .iter()
        .filter(|e| matches!(e, AlertEvent::Fired(_)))
        .count();
    assert_eq!(all.len(), fired.min(keep_closed));
}
