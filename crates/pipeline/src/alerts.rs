//! Alert rules over the telemetry history. Each rule looks at the latest samples and says,
//! per subject (a device or a job), whether its condition holds; an alert fires once when the
//! condition starts (an episode) and closes when it clears. Fired and resolved alerts go to
//! the log, and [`crate::telemetry::Telemetry`] hands them to its sinks (the server's
//! webhook, callbacks registered through the library).
//!
//! The default rules, with their thresholds configurable in a TOML file (`--alerts FILE`,
//! every key optional, unknown keys refused):
//!
//! | rule | condition | level |
//! |---|---|---|
//! | `memory_warning` | the pool holds over `memory_warning` (0.90) of its budget | WARNING |
//! | `memory_error` | over `memory_error` (0.97) of the budget | ERROR |
//! | `fragmentation` | pool fragmentation over `fragmentation_warning` (0.30) while blocks are in use | WARNING |
//! | `temperature_warning` | over `temperature_warning_c` (85 °C) | WARNING |
//! | `temperature_critical` | over `temperature_critical_c` (95 °C) | CRITICAL |
//! | `oom_burst` | `oom_count` (5) or more OOMs within `oom_window_s` (60 s) | WARNING |
//! | `device_lost` | a device failed or was lost, its work moved on | ERROR |
//! | `input_bound` | a GPU idle while the prefetch queue stays empty for `input_bound_s` (30 s) | INFO |
//! | `no_progress` | a running job settled nothing for `no_progress_s` (60 s) | ERROR |
//! | `items_failed` | `items_failed` (1) or more items failed, with the count and first reasons | WARNING |

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::sample::{unix_now, DeviceSample, Sample};

/// How bad it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum AlertLevel {
    Info,
    Warning,
    Error,
    Critical,
}

impl AlertLevel {
    pub const ALL: [AlertLevel; 4] = [
        AlertLevel::Info,
        AlertLevel::Warning,
        AlertLevel::Error,
        AlertLevel::Critical,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            AlertLevel::Info => "INFO",
            AlertLevel::Warning => "WARNING",
            AlertLevel::Error => "ERROR",
            AlertLevel::Critical => "CRITICAL",
        }
    }
}

/// One episode of a rule's condition on one subject.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Alert {
    pub id: u64,
    pub level: AlertLevel,
    pub rule: String,
    pub message: String,
    /// The device ("gpu:0") or the job ("job:3").
    pub subject: String,
    /// Unix time, seconds.
    pub started: f64,
    /// `None` while active.
    pub ended: Option<f64>,
}

/// What the sinks are told.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "event", content = "alert", rename_all = "snake_case")]
pub enum AlertEvent {
    Fired(Alert),
    Resolved(Alert),
}

impl AlertEvent {
    pub fn alert(&self) -> &Alert {
        match self {
            AlertEvent::Fired(a) | AlertEvent::Resolved(a) => a,
        }
    }
}

/// Where alerts go. Called on the sampler's thread: a sink that does I/O hands the event to a
/// thread of its own (the webhook does).
pub trait AlertSink: Send {
    fn send(&mut self, event: &AlertEvent);
}

/// A callback registered through the library is a sink.
impl<F: FnMut(&AlertEvent) + Send> AlertSink for F {
    fn send(&mut self, event: &AlertEvent) {
        self(event)
    }
}

/// The rules' thresholds (see the module's table).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AlertRules {
    pub memory_warning: f64,
    pub memory_error: f64,
    pub fragmentation_warning: f64,
    pub temperature_warning_c: f64,
    pub temperature_critical_c: f64,
    pub oom_count: u64,
    pub oom_window_s: f64,
    pub input_bound_s: f64,
    /// A GPU under this utilisation (NVML; else the executor's busy share) counts as idle.
    pub idle_percent: f64,
    pub no_progress_s: f64,
    pub items_failed: u64,
    /// Rules switched off, by name.
    pub disabled: Vec<String>,
    /// Closed alerts kept for `GET /api/v1/alerts`.
    pub keep_closed: usize,
}

impl Default for AlertRules {
    fn default() -> Self {
        AlertRules {
            memory_warning: 0.90,
            memory_error: 0.97,
            fragmentation_warning: 0.30,
            temperature_warning_c: 85.0,
            temperature_critical_c: 95.0,
            oom_count: 5,
            oom_window_s: 60.0,
            input_bound_s: 30.0,
            idle_percent: 10.0,
            no_progress_s: 60.0,
            items_failed: 1,
            disabled: Vec::new(),
            keep_closed: 1000,
        }
    }
}

/// The rules' names, as alerts and `disabled` spell them.
pub const RULES: [&str; 10] = [
    "memory_warning",
    "memory_error",
    "fragmentation",
    "temperature_warning",
    "temperature_critical",
    "oom_burst",
    "device_lost",
    "input_bound",
    "no_progress",
    "items_failed",
];

/// A rules file that cannot be used.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum AlertConfigError {
    #[error("alert rules: {0}")]
    Parse(String),
    #[error("alert rules: {0}")]
    Invalid(String),
}

impl AlertRules {
    /// Reads a rules file (TOML; every key optional).
    pub fn from_toml(text: &str) -> Result<Self, AlertConfigError> {
        let rules: AlertRules =
            toml::from_str(text).map_err(|e| AlertConfigError::Parse(e.to_string()))?;
        rules.validate()?;
        Ok(rules)
    }

    pub fn validate(&self) -> Result<(), AlertConfigError> {
        let bad = |m: String| Err(AlertConfigError::Invalid(m));
        for (name, v) in [
            ("memory_warning", self.memory_warning),
            ("memory_error", self.memory_error),
            ("fragmentation_warning", self.fragmentation_warning),
        ] {
            if !(v.is_finite() && v > 0.0 && v <= 1.0) {
                return bad(format!("{name} = {v} is not a share in (0, 1]"));
            }
        }
        for (name, v) in [
            ("temperature_warning_c", self.temperature_warning_c),
            ("temperature_critical_c", self.temperature_critical_c),
            ("oom_window_s", self.oom_window_s),
            ("input_bound_s", self.input_bound_s),
            ("no_progress_s", self.no_progress_s),
            ("idle_percent", self.idle_percent),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return bad(format!("{name} = {v} must be above 0"));
            }
        }
        if self.oom_count == 0 || self.items_failed == 0 {
            return bad("oom_count and items_failed must be at least 1".into());
        }
        if let Some(r) = self.disabled.iter().find(|r| !RULES.contains(&r.as_str())) {
            return bad(format!(
                "disabled: no rule {r:?} (rules: {})",
                RULES.join(", ")
            ));
        }
        Ok(())
    }
}

/// Evaluates the rules and keeps the alerts.
pub struct AlertEngine {
    rules: AlertRules,
    next_id: u64,
    /// Active alerts by (rule, subject).
    active: BTreeMap<(String, String), Alert>,
    closed: VecDeque<Alert>,
}

impl AlertEngine {
    pub fn new(rules: AlertRules) -> Self {
        AlertEngine {
            rules,
            next_id: 1,
            active: BTreeMap::new(),
            closed: VecDeque::new(),
        }
    }

    /// Active alerts first, then closed ones, newest first in each.
    pub fn all(&self) -> Vec<Alert> {
        let mut active: Vec<Alert> = self.active.values().cloned().collect();
        active.sort_by_key(|a| std::cmp::Reverse(a.id));
        active.extend(self.closed.iter().rev().cloned());
        active
    }

    /// Applies the rules to `history` (oldest first; the last is now): fires what started,
    /// resolves what cleared, logs them; returns the events for the sinks.
    pub fn evaluate(&mut self, history: &[Arc<Sample>]) -> Vec<AlertEvent> {
        let mut now: BTreeMap<(String, String), (AlertLevel, String)> = BTreeMap::new();
        if let Some(latest) = history.last() {
            for (rule, subject, level, message) in conditions(&self.rules, history, latest) {
                if !self.rules.disabled.iter().any(|d| d == rule) {
                    now.insert((rule.to_string(), subject), (level, message));
                }
            }
        }
        let t = unix_now();
        let mut events = Vec::new();
        let cleared: Vec<(String, String)> = self
            .active
            .keys()
            .filter(|k| !now.contains_key(*k))
            .cloned()
            .collect();
        for key in cleared {
            let mut alert = self.active.remove(&key).expect("listed above");
            alert.ended = Some(t);
            self.closed.push_back(alert.clone());
            while self.closed.len() > self.rules.keep_closed {
                self.closed.pop_front();
            }
            events.push(AlertEvent::Resolved(alert));
        }
        for (key, (level, message)) in now {
            match self.active.get_mut(&key) {
                // The same episode: its message follows the figures (a count of failures),
                // without firing again.
                Some(alert) => alert.message = message,
                None => {
                    let alert = Alert {
                        id: self.next_id,
                        level,
                        rule: key.0.clone(),
                        message,
                        subject: key.1.clone(),
                        started: t,
                        ended: None,
                    };
                    self.next_id += 1;
                    self.active.insert(key, alert.clone());
                    events.push(AlertEvent::Fired(alert));
                }
            }
        }
        for e in &events {
            log(e);
        }
        events
    }
}

fn log(event: &AlertEvent) {
    let (what, a) = match event {
        AlertEvent::Fired(a) => ("alert", a),
        AlertEvent::Resolved(a) => ("alert resolved", a),
    };
    let (level, rule, subject, msg) = (a.level.as_str(), &a.rule, &a.subject, &a.message);
    match (event, a.level) {
        (AlertEvent::Resolved(_), _) | (_, AlertLevel::Info) => {
            tracing::info!(level, rule, subject, "{what}: {msg}")
        }
        (_, AlertLevel::Warning) => tracing::warn!(level, rule, subject, "{what}: {msg}"),
        _ => tracing::error!(level, rule, subject, "{what}: {msg}"),
    }
}

type Condition = (&'static str, String, AlertLevel, String);

/// Every rule's condition that holds at `latest`.
fn conditions(rules: &AlertRules, history: &[Arc<Sample>], latest: &Sample) -> Vec<Condition> {
    let mut out = Vec::new();
    let running = latest.job.as_ref().filter(|j| !j.finished);
    for d in &latest.devices {
        let id = &d.reading.id;
        if let (Some(pool), Some(budget)) = (&d.pool, d.budget_bytes.filter(|b| *b > 0)) {
            let share = pool.reserved_bytes as f64 / budget as f64;
            let msg = |limit: f64| {
                format!(
                    "{id}: the memory pool holds {:.1}% of its budget ({} of {} bytes; limit {:.0}%)",
                    share * 100.0,
                    pool.reserved_bytes,
                    budget,
                    limit * 100.0
                )
            };
            if share > rules.memory_warning {
                out.push((
                    "memory_warning",
                    id.clone(),
                    AlertLevel::Warning,
                    msg(rules.memory_warning),
                ));
            }
            if share > rules.memory_error {
                out.push((
                    "memory_error",
                    id.clone(),
                    AlertLevel::Error,
                    msg(rules.memory_error),
                ));
            }
            // A pool with nothing in use between batches holds only cache: that is not
            // fragmentation.
            if pool.allocated_bytes > 0 && pool.fragmentation > rules.fragmentation_warning {
                out.push((
                    "fragmentation",
                    id.clone(),
                    AlertLevel::Warning,
                    format!(
                        "{id}: pool fragmentation {:.1}% (limit {:.0}%); largest free block {} bytes",
                        pool.fragmentation * 100.0,
                        rules.fragmentation_warning * 100.0,
                        pool.largest_free_block
                    ),
                ));
            }
        }
        if let Some(c) = d.reading.temperature_c {
            if c > rules.temperature_warning_c {
                out.push((
                    "temperature_warning",
                    id.clone(),
                    AlertLevel::Warning,
                    format!(
                        "{id} at {c:.0} °C (limit {:.0} °C)",
                        rules.temperature_warning_c
                    ),
                ));
            }
            if c > rules.temperature_critical_c {
                out.push((
                    "temperature_critical",
                    id.clone(),
                    AlertLevel::Critical,
                    format!(
                        "{id} at {c:.0} °C (limit {:.0} °C)",
                        rules.temperature_critical_c
                    ),
                ));
            }
        }
        let ooms = recent_ooms(history, latest, id, rules.oom_window_s);
        if ooms >= rules.oom_count {
            out.push((
                "oom_burst",
                id.clone(),
                AlertLevel::Warning,
                format!(
                    "{id}: {ooms} out-of-memory errors in the last {:.0} s (batches split and retried)",
                    rules.oom_window_s
                ),
            ));
        }
        if d.executor.lost || d.reading.state == "failed" {
            let why = d
                .executor
                .lost_reason
                .clone()
                .unwrap_or_else(|| "failed".into());
            out.push((
                "device_lost",
                id.clone(),
                AlertLevel::Error,
                format!("{id} is out: {why}"),
            ));
        }
        let e = &d.executor;
        if running.is_some() && !e.is_cpu && e.batches > 0 && !e.lost {
            if let Some(secs) = input_bound_for(history, latest, id, rules) {
                out.push((
                    "input_bound",
                    id.clone(),
                    AlertLevel::Info,
                    format!(
                        "{id} idle while the prefetch queue was empty for {secs:.0} s: decoding \
                         is the bottleneck (more --workers, faster storage)"
                    ),
                ));
            }
        }
    }
    if let Some(job) = running {
        let subject = format!("job:{}", job.id);
        if job.seconds_since_progress >= rules.no_progress_s {
            out.push((
                "no_progress",
                subject.clone(),
                AlertLevel::Error,
                format!(
                    "job {} settled no item for {:.0} s ({} of {} done)",
                    job.id,
                    job.seconds_since_progress,
                    job.items_ok + job.items_failed + job.items_resumed,
                    job.items_total
                ),
            ));
        }
    }
    // A finished job counts too, until it is detached: a job that fails items and ends
    // between two samples still raises its alert (closed by the sample after the detach).
    if let Some(job) = &latest.job {
        if job.items_failed >= rules.items_failed {
            out.push((
                "items_failed",
                format!("job:{}", job.id),
                AlertLevel::Warning,
                format!(
                    "job {}: {} items failed; first: {}",
                    job.id,
                    job.items_failed,
                    job.first_failures.join("; ")
                ),
            ));
        }
    }
    out
}

fn device<'a>(s: &'a Sample, id: &str) -> Option<&'a DeviceSample> {
    s.devices.iter().find(|d| d.reading.id == id)
}

/// OOMs of device `id` in the last `window` seconds: its count now less its count in the
/// oldest sample of the window (a device absent then, or a new job since, counts from 0).
fn recent_ooms(history: &[Arc<Sample>], latest: &Sample, id: &str, window: f64) -> u64 {
    let now = device(latest, id).map_or(0, |d| d.executor.ooms);
    // A job that began within the window: all its OOMs are recent. Its first sample may
    // already count the first ones (a loaded machine samples late), and a difference from
    // that sample would miss them.
    if latest.job.as_ref().is_some_and(|j| j.elapsed_s <= window) {
        return now;
    }
    let job_of = |s: &Sample| s.job.as_ref().map(|j| j.id.clone());
    let before = history
        .iter()
        .find(|s| s.time >= latest.time - window)
        .filter(|s| s.seq != latest.seq && job_of(s) == job_of(latest))
        .and_then(|s| device(s, id))
        .map_or(0, |d| d.executor.ooms);
    now.saturating_sub(before)
}

/// How long device `id` has been idle with the prefetch queue empty, when at least
/// `input_bound_s`: every sample over that span must say so.
fn input_bound_for(
    history: &[Arc<Sample>],
    latest: &Sample,
    id: &str,
    rules: &AlertRules,
) -> Option<f64> {
    let starved = |s: &Sample| -> bool {
        let Some(job) = &s.job else { return false };
        let empty = job
            .queues
            .iter()
            .any(|q| q.stage == "prefetch" && q.depth == 0);
        let idle = device(s, id).is_some_and(|d| match d.reading.utilization_percent {
            Some(u) => u < rules.idle_percent,
            None => d.busy_ratio.is_some_and(|b| b * 100.0 < rules.idle_percent),
        });
        empty && idle
    };
    let mut since = None;
    for s in history.iter().rev() {
        if !starved(s) {
            break;
        }
        since = Some(s.time);
    }
    let secs = latest.time - since?;
    (secs >= rules.input_bound_s).then_some(secs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stage::{Stages, UnitStage};
    use crate::telemetry::{DeviceProbe, DeviceReading, Telemetry, TelemetryConfig};
    use crate::testing::{scratch_corpus, Flaky, Pooled};
    use crate::{run_live, JobConfig, LiveJob};
    use sonograph_dsp::{Extractor, FeatureSpec, Precision};
    use std::sync::Mutex;
    use std::time::Duration;

    /// The alert events `telemetry` tells its sinks, in order.
    fn record_alerts(telemetry: &Telemetry) -> Arc<Mutex<Vec<AlertEvent>>> {
        let events = Arc::new(Mutex::new(Vec::new()));
        let sink = events.clone();
        telemetry.add_alert_sink(Box::new(move |e: &AlertEvent| {
            sink.lock().unwrap().push(e.clone())
        }));
        events
    }

    /// A probe of one GPU whose temperature follows `script`, one value per read (the last
    /// one repeated): a stand-in for NVML.
    struct Thermometer {
        script: Vec<f64>,
        reads: usize,
    }

    impl DeviceProbe for Thermometer {
        fn read(&mut self) -> Vec<DeviceReading> {
            let t = self.script[self.reads.min(self.script.len() - 1)];
            self.reads += 1;
            vec![DeviceReading {
                id: "gpu:0".into(),
                name: "Test GPU".into(),
                state: "available".into(),
                temperature_c: Some(t),
                utilization_percent: Some(50.0),
                ..Default::default()
            }]
        }
    }

    /// `n` clips of `seconds` each: (file name, seconds).
    fn clips(n: usize, seconds: f64) -> Vec<(String, f64)> {
        (0..n).map(|i| (format!("c{i:02}.wav"), seconds)).collect()
    }

    /// Runs a job of `wavs` (file, seconds) on `devices` under a sampler of `rules` (every
    /// 25 ms); returns every alert event the sinks got, in order.
    fn watch(
        name: &str,
        wavs: &[(String, f64)],
        rules: AlertRules,
        devices: Vec<Box<dyn Extractor>>,
        stages: Stages,
        tune: impl FnOnce(&mut JobConfig),
    ) -> Vec<AlertEvent> {
        let wavs: Vec<(&str, f64)> = wavs.iter().map(|(n, s)| (n.as_str(), *s)).collect();
        let dir = scratch_corpus(name, &wavs);
        let mut config = JobConfig::new(
            dir.join("corpus"),
            dir.join("out"),
            FeatureSpec::whisper(80),
        );
        config.workers = 1;
        tune(&mut config);
        let telemetry = Telemetry::start(
            TelemetryConfig {
                interval: Duration::from_millis(25),
                history: 10_000,
                rules,
            },
            Box::new(crate::telemetry::NoDevices),
        );
        let events = record_alerts(&telemetry);
        let live = LiveJob::new();
        telemetry.attach_job("1", live.clone());
        let result = run_live(&config, devices, stages, live);
        telemetry.detach_job();
        telemetry.stop();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(result.is_ok(), "{result:?}");
        let events = events.lock().unwrap().clone();
        events
    }

    /// The events of `rule` on `subject`: asserts that it fired exactly once and was
    /// resolved once after that; returns the fired alert.
    fn one_episode(events: &[AlertEvent], rule: &str, subject: &str) -> Alert {
        let mine: Vec<&AlertEvent> = events
            .iter()
            .filter(|e| e.alert().rule == rule && e.alert().subject == subject)
            .collect();
        assert_eq!(mine.len(), 2, "{rule} on {subject}: {events:#?}");
        let (AlertEvent::Fired(fired), AlertEvent::Resolved(resolved)) = (mine[0], mine[1]) else {
            panic!("{rule}: fired then resolved expected: {mine:#?}");
        };
        assert_eq!(fired.id, resolved.id);
        assert!(fired.ended.is_none());
        assert!(resolved.ended.is_some_and(|end| end >= fired.started));
        fired.clone()
    }

    #[test]
    fn rules_read_from_toml_and_unknown_keys_are_refused() {
        let rules = AlertRules::from_toml("memory_warning = 0.8\nno_progress_s = 5\n").unwrap();
        assert_eq!(rules.memory_warning, 0.8);
        assert_eq!(rules.no_progress_s, 5.0);
        assert_eq!(rules.memory_error, 0.97, "the others keep their defaults");
        let err = AlertRules::from_toml("memory_warnings = 0.8").unwrap_err();
        assert!(err.to_string().contains("memory_warnings"), "{err}");
        assert!(AlertRules::from_toml("memory_error = 1.5").is_err());
        assert!(AlertRules::from_toml("disabled = [\"nope\"]").is_err());
        let off = AlertRules::from_toml("disabled = [\"items_failed\"]").unwrap();
        assert_eq!(off.disabled, ["items_failed"]);
    }

    /// A pool over 97 % of its budget, and fragmented, for its first batches: the memory and
    /// fragmentation alerts fire once each and close when the pool comes back down.
    #[test]
    fn memory_and_fragmentation_alerts_follow_the_pool() {
        let spec = FeatureSpec::whisper(80);
        let device = Pooled {
            high: 0.98,
            fragmentation: 0.45,
            high_batches: 6,
            ..Pooled::new(&spec, Duration::from_millis(60))
        };
        let wavs = clips(14, 0.5);
        let events = watch(
            "alert-memory",
            &wavs,
            AlertRules::default(),
            vec![Box::new(device)],
            Stages::default(),
            |c| c.batch_items = 1,
        );
        let warning = one_episode(&events, "memory_warning", "gpu:pooled");
        assert_eq!(warning.level, AlertLevel::Warning);
        assert!(warning.message.contains("98.0%"), "{}", warning.message);
        let error = one_episode(&events, "memory_error", "gpu:pooled");
        assert_eq!(error.level, AlertLevel::Error);
        let frag = one_episode(&events, "fragmentation", "gpu:pooled");
        assert_eq!(frag.level, AlertLevel::Warning);
        assert!(frag.message.contains("45.0%"), "{}", frag.message);
        // Resolved while the job still ran: the pool came down after 6 batches.
        let resolved_at = |rule: &str| {
            events
                .iter()
                .find_map(|e| match e {
                    AlertEvent::Resolved(a) if a.rule == rule => a.ended,
                    _ => None,
                })
                .unwrap()
        };
        assert!(resolved_at("memory_error") > error.started);
    }

    /// Temperatures read from the device (NVML's role, played by a script): 90 °C warns,
    /// 97 °C is critical, and both close once it cools down.
    #[test]
    fn temperature_alerts_fire_once_and_close() {
        let telemetry = Telemetry::new(
            TelemetryConfig::default(),
            Box::new(Thermometer {
                script: vec![70.0, 90.0, 91.0, 97.0, 96.0, 88.0, 60.0, 60.0],
                reads: 0,
            }),
        );
        for _ in 0..8 {
            telemetry.sample_now();
        }
        let events = telemetry.alerts();
        let warn: Vec<&Alert> = events
            .iter()
            .filter(|a| a.rule == "temperature_warning")
            .collect();
        let crit: Vec<&Alert> = events
            .iter()
            .filter(|a| a.rule == "temperature_critical")
            .collect();
        assert_eq!(warn.len(), 1, "{events:#?}");
        assert_eq!(crit.len(), 1, "{events:#?}");
        assert_eq!(crit[0].level, AlertLevel::Critical);
        // The episode's message follows the figures while it lasts: its last reading was 96.
        assert!(crit[0].message.contains("96 °C"), "{}", crit[0].message);
        assert!(warn[0].ended.is_some() && crit[0].ended.is_some());
        assert_eq!(warn[0].subject, "gpu:0");
    }

    /// A callback registered through the library may ask the telemetry for its alerts while
    /// it is told of one: it sees the alert it was given as active, then closed.
    #[test]
    fn a_sink_reads_the_alerts_it_is_told_of() {
        let telemetry = Telemetry::new(
            TelemetryConfig::default(),
            Box::new(Thermometer {
                script: vec![70.0, 90.0, 60.0],
                reads: 0,
            }),
        );
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (weak, log) = (Arc::downgrade(&telemetry), seen.clone());
        telemetry.add_alert_sink(Box::new(move |e: &AlertEvent| {
            let listed = weak.upgrade().unwrap().alerts();
            let me = listed.iter().find(|a| a.id == e.alert().id).cloned();
            log.lock().unwrap().push((e.clone(), me));
        }));
        for _ in 0..3 {
            telemetry.sample_now();
        }
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 2, "{seen:#?}");
        let (AlertEvent::Fired(fired), Some(listed)) = &seen[0] else {
            panic!("fired first, and listed: {seen:#?}");
        };
        assert_eq!(fired.rule, "temperature_warning");
        assert!(listed.ended.is_none(), "active while it is fired");
        let (AlertEvent::Resolved(_), Some(listed)) = &seen[1] else {
            panic!("resolved next, and listed: {seen:#?}");
        };
        assert!(listed.ended.is_some(), "closed once resolved");
    }

    /// A device that runs out of memory on anything over one item and on some items alone:
    /// a burst of OOMs; a device lost later is an ERROR.
    #[test]
    fn oom_bursts_and_lost_devices_alert() {
        let spec = FeatureSpec::whisper(80);
        // Six items that do not fit even alone, listed first: six OOMs or more whatever the
        // batches. The splits alone give log2 of the first batch's size, and on a loaded
        // machine the one decoder may have handed the executor fewer than 17 items by then (a
        // fresh machine's test run saw the device lost and no burst).
        let huge_seconds = 0.3;
        let device = Flaky {
            fits: 1,
            huge: (huge_seconds * 16_000.0) as usize,
            lose_after: Some(40),
            ..Flaky::new(&spec, Precision::F64)
        };
        let mut wavs: Vec<(String, f64)> = (0..6)
            .map(|i| (format!("a{i}.wav"), huge_seconds))
            .collect();
        wavs.extend(clips(70, 0.2));
        let events = watch(
            "alert-oom",
            &wavs,
            AlertRules::default(),
            vec![Box::new(device)],
            Stages::default(),
            |c| {
                c.batch_items = 64;
                c.prefetch = 2;
            },
        );
        let burst = one_episode(&events, "oom_burst", "gpu:flaky");
        assert_eq!(burst.level, AlertLevel::Warning);
        assert!(burst.message.contains("out-of-memory"), "{}", burst.message);
        let lost = one_episode(&events, "device_lost", "gpu:flaky");
        assert_eq!(lost.level, AlertLevel::Error);
        assert!(lost.message.contains("move to"), "{}", lost.message);
    }

    /// OOMs counted by a job's first sample are in its window: on a loaded machine the
    /// sampler's first tick can come after a batch's whole split (64 → 1, six OOMs), and a
    /// difference from that tick found none (CI once saw no oom_burst that way).
    #[test]
    fn ooms_before_a_jobs_first_sample_count_when_the_job_began_in_the_window() {
        let at = |seq: u64, time: f64, elapsed_s: f64, ooms: u64| {
            let mut device = crate::sample::DeviceSample::default();
            device.reading.id = "gpu:0".into();
            device.executor.ooms = ooms;
            Arc::new(Sample {
                seq,
                time,
                devices: vec![device],
                job: Some(crate::sample::JobSample {
                    id: "1".into(),
                    elapsed_s,
                    ..Default::default()
                }),
                ..Default::default()
            })
        };
        let history = [at(1, 100.0, 0.5, 6), at(2, 100.1, 0.6, 6)];
        assert_eq!(recent_ooms(&history, &history[1], "gpu:0", 60.0), 6);
        // A job older than the window counts from the window's first sample.
        let history = [at(1, 100.0, 90.0, 6), at(2, 100.1, 90.1, 8)];
        assert_eq!(recent_ooms(&history, &history[1], "gpu:0", 60.0), 2);
    }

    /// Sleeps before passing each unit on: decoding slower than the device.
    struct SlowInput(Duration);
    impl UnitStage for SlowInput {
        fn name(&self) -> &str {
            "slow-input"
        }
        fn process(&mut self, unit: crate::Unit, out: &mut Vec<crate::Unit>) -> Result<(), String> {
            std::thread::sleep(self.0);
            out.push(unit);
            Ok(())
        }
    }

    /// A GPU starved by its input for longer than `input_bound_s`: INFO, once.
    #[test]
    fn a_starved_gpu_is_input_bound() {
        let spec = FeatureSpec::whisper(80);
        let rules = AlertRules {
            input_bound_s: 0.6,
            ..Default::default()
        };
        let wavs = clips(6, 0.2);
        let events = watch(
            "alert-input",
            &wavs,
            rules,
            vec![Box::new(Flaky::new(&spec, Precision::F64))],
            Stages {
                units: vec![Box::new(SlowInput(Duration::from_millis(400)))],
                rows: Vec::new(),
            },
            |c| c.batch_items = 1,
        );
        let a = one_episode(&events, "input_bound", "gpu:flaky");
        assert_eq!(a.level, AlertLevel::Info);
        assert!(
            a.message.contains("prefetch queue was empty"),
            "{}",
            a.message
        );
    }

    /// A batch that takes longer than `no_progress_s`: ERROR on the job, closed by the item's
    /// completion.
    #[test]
    fn no_progress_alerts_and_closes_on_progress() {
        let spec = FeatureSpec::whisper(80);
        let rules = AlertRules {
            no_progress_s: 0.4,
            ..Default::default()
        };
        let events = watch(
            "alert-stall",
            &clips(1, 0.5),
            rules,
            vec![Box::new(Pooled::new(&spec, Duration::from_millis(1200)))],
            Stages::default(),
            |_| {},
        );
        let a = one_episode(&events, "no_progress", "job:1");
        assert_eq!(a.level, AlertLevel::Error);
        assert!(a.message.contains("settled no item"), "{}", a.message);
    }

    /// A job that fails items and ends before the sampler looks (here: no sampling thread at
    /// all) still raises its alert: the sample `detach_job` takes of the finished job fires
    /// it, the one after the detach resolves it.
    #[test]
    fn a_job_that_ends_between_two_samples_still_alerts_its_failures() {
        let spec = FeatureSpec::whisper(80);
        let dir = scratch_corpus("alert-fast", &[("c00.wav", 0.2)]);
        std::fs::write(dir.join("corpus").join("broken.wav"), b"RIFF junk").unwrap();
        let mut config = JobConfig::new(dir.join("corpus"), dir.join("out"), spec.clone());
        config.workers = 1;
        let telemetry = Telemetry::new(
            TelemetryConfig::default(),
            Box::new(crate::telemetry::NoDevices),
        );
        let events = record_alerts(&telemetry);
        let live = LiveJob::new();
        telemetry.attach_job("1", live.clone());
        let device = Pooled::new(&spec, Duration::from_millis(1));
        let result = run_live(&config, vec![Box::new(device)], Stages::default(), live);
        telemetry.detach_job();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(result.is_ok(), "{result:?}");
        let events = events.lock().unwrap().clone();
        let a = one_episode(&events, "items_failed", "job:1");
        assert_eq!(a.level, AlertLevel::Warning);
        assert!(a.message.contains("1 items failed"), "{}", a.message);
        assert!(a.message.contains("broken.wav"), "{}", a.message);
    }

    /// A corpus with broken files: one WARNING with the count and the first reasons.
    #[test]
    fn failed_items_alert_with_count_and_reasons() {
        let spec = FeatureSpec::whisper(80);
        let wavs = clips(4, 0.3);
        let events = watch(
            "alert-failed",
            &wavs,
            AlertRules::default(),
            vec![Box::new(Pooled::new(&spec, Duration::from_millis(50)))],
            Stages::default(),
            |c| {
                for name in ["broken1.wav", "broken2.wav"] {
                    std::fs::write(c.source.join(name), b"RIFF junk").unwrap();
                }
                c.batch_items = 1;
            },
        );
        let a = one_episode(&events, "items_failed", "job:1");
        assert_eq!(a.level, AlertLevel::Warning);
        assert!(a.message.contains("broken1.wav"), "{}", a.message);
    }
}
