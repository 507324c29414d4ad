//! The telemetry sampler: every `interval` (`--telemetry-interval`, 1 s by default) a thread
//! reads the devices (through a [`DeviceProbe`]: NVML lives in the gpu crate, which this crate
//! does not depend on), the running job's [`LiveJob`] counters and the process (/proc), keeps
//! the sample in a bounded history, evaluates the alert rules on it and tells the observers
//! (the server's event stream and metrics).

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::alerts::{AlertEngine, AlertEvent, AlertRules, AlertSink};
use crate::live::{lock, DeviceCounters, JobCounters, LiveJob};
// The samples' types, which the alert rules read too, live in their own module (no circle
// between the sampler and the rules); they are this module's public ones as before.
pub use crate::sample::{
    unix_now, DeviceProbe, DeviceReading, DeviceSample, JobSample, NoDevices, ProcessSample,
    QueueSample, Sample,
};

/// Counters over the whole life of the process (every job so far), for Prometheus counters
/// that never go down.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Totals {
    pub items_ok: u64,
    pub items_failed: u64,
    pub rows: u64,
    pub audio_seconds: f64,
    /// Per device id.
    pub ooms: BTreeMap<String, u64>,
    pub batches: BTreeMap<String, u64>,
    pub stage_busy_s: BTreeMap<String, f64>,
    pub jobs_finished: u64,
}

impl Totals {
    fn add(&mut self, job: &JobCounters) {
        self.items_ok += job.items_ok;
        self.items_failed += job.items_failed;
        self.rows += job.rows;
        self.audio_seconds += job.audio_seconds;
        for d in &job.devices {
            *self.ooms.entry(device_id(&d.name)).or_default() += d.ooms;
            *self.batches.entry(device_id(&d.name)).or_default() += d.batches;
        }
        for (stage, s) in &job.busy_s {
            *self.stage_busy_s.entry(stage.name().into()).or_default() += s;
        }
    }
}

/// What observers are told.
#[derive(Debug, Clone)]
pub enum TelemetryEvent {
    Sample(Arc<Sample>),
    Alert(AlertEvent),
}

type Observer = Arc<dyn Fn(&TelemetryEvent) + Send + Sync>;

/// Sampler settings.
#[derive(Debug, Clone)]
pub struct TelemetryConfig {
    pub interval: Duration,
    /// Samples kept (an hour at 1 s by default).
    pub history: usize,
    pub rules: AlertRules,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        TelemetryConfig {
            interval: Duration::from_secs(1),
            history: 3600,
            rules: AlertRules::default(),
        }
    }
}

struct Attached {
    id: String,
    live: Arc<LiveJob>,
    /// The counters at the previous sample, and when they last moved.
    last: Option<(Instant, JobCounters)>,
    progressed: Instant,
}

struct State {
    history: VecDeque<Arc<Sample>>,
    job: Option<Attached>,
    totals: Totals,
    cpu: Option<(Instant, f64)>,
    /// Each device's (when, compute, wait seconds) at the previous sample.
    device_times: BTreeMap<String, (Instant, f64, f64)>,
}

/// The sampler and what it keeps. Cheap to share (`Arc`); [`Telemetry::stop`] ends its
/// thread.
pub struct Telemetry {
    config: TelemetryConfig,
    started: Instant,
    seq: AtomicU64,
    probe: Mutex<Box<dyn DeviceProbe>>,
    state: Mutex<State>,
    alerts: Mutex<AlertEngine>,
    /// Taken before the alerts are evaluated and held until the last sink and observer is
    /// told, so that the events of two samples taken at once (the sampler's and
    /// `detach_job`'s) arrive in the order they were evaluated. The engine's lock is let go
    /// before the sinks are called: a sink may read [`Self::alerts`].
    sinks: Mutex<Vec<Box<dyn AlertSink>>>,
    observers: Mutex<Vec<Observer>>,
    stopping: AtomicBool,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Telemetry {
    /// A sampler that does not run on its own: [`Self::sample_now`] takes each sample.
    pub fn new(config: TelemetryConfig, probe: Box<dyn DeviceProbe>) -> Arc<Self> {
        let alerts = AlertEngine::new(config.rules.clone());
        Arc::new(Telemetry {
            config,
            started: Instant::now(),
            seq: AtomicU64::new(0),
            probe: Mutex::new(probe),
            state: Mutex::new(State {
                history: VecDeque::new(),
                job: None,
                totals: Totals::default(),
                cpu: None,
                device_times: BTreeMap::new(),
            }),
            alerts: Mutex::new(alerts),
            sinks: Mutex::new(Vec::new()),
            observers: Mutex::new(Vec::new()),
            stopping: AtomicBool::new(false),
            thread: Mutex::new(None),
        })
    }

    /// [`Self::new`], sampling every `config.interval` on a thread of its own.
    pub fn start(config: TelemetryConfig, probe: Box<dyn DeviceProbe>) -> Arc<Self> {
        let telemetry = Self::new(config, probe);
        let weak = Arc::downgrade(&telemetry);
        let interval = telemetry.config.interval;
        let handle = std::thread::Builder::new()
            .name("telemetry".into())
            .spawn(move || loop {
                let next = Instant::now() + interval;
                match weak.upgrade() {
                    Some(t) if !t.stopping.load(Ordering::SeqCst) => {
                        t.sample_now();
                    }
                    _ => return,
                }
                // Sleeps in short steps so that `stop` is prompt.
                while Instant::now() < next {
                    std::thread::sleep(
                        next.saturating_duration_since(Instant::now())
                            .min(Duration::from_millis(50)),
                    );
                    if weak
                        .upgrade()
                        .is_none_or(|t| t.stopping.load(Ordering::SeqCst))
                    {
                        return;
                    }
                }
            })
            .expect("cannot start the telemetry thread");
        *lock(&telemetry.thread) = Some(handle);
        telemetry
    }

    pub fn config(&self) -> &TelemetryConfig {
        &self.config
    }

    /// Stops the sampling thread (a sample in progress completes).
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        if let Some(h) = lock(&self.thread).take() {
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
    }

    /// Calls `observer` with every sample and alert event from now on (on the sampler's
    /// thread: it must not block).
    pub fn subscribe(&self, observer: impl Fn(&TelemetryEvent) + Send + Sync + 'static) {
        lock(&self.observers).push(Arc::new(observer));
    }

    /// Adds an alert sink (a webhook, a callback of the library's user).
    pub fn add_alert_sink(&self, sink: Box<dyn AlertSink>) {
        lock(&self.sinks).push(sink);
    }

    /// Samples `live` as job `id` from now on, until [`Self::detach_job`].
    pub fn attach_job(&self, id: &str, live: Arc<LiveJob>) {
        let mut state = lock(&self.state);
        state.job = Some(Attached {
            id: id.to_string(),
            live,
            last: None,
            progressed: Instant::now(),
        });
    }

    /// The job has ended: a last sample is taken with it, its counters go into the totals,
    /// and its alerts close.
    pub fn detach_job(&self) {
        self.sample_now();
        let mut state = lock(&self.state);
        if let Some(job) = state.job.take() {
            let counters = job.live.counters();
            state.totals.add(&counters);
            state.totals.jobs_finished += 1;
        }
        state.device_times.clear();
        drop(state);
        // Without the job, its conditions (failures, no progress, lost devices) are gone.
        self.sample_now();
    }

    /// Totals over every job, the running one included.
    pub fn totals(&self) -> Totals {
        let state = lock(&self.state);
        let mut totals = state.totals.clone();
        if let Some(job) = &state.job {
            totals.add(&job.live.counters());
        }
        totals
    }

    /// The latest sample.
    pub fn latest(&self) -> Option<Arc<Sample>> {
        lock(&self.state).history.back().cloned()
    }

    /// Samples of the last `seconds` (all of the history for `None`), oldest first.
    pub fn since(&self, seconds: Option<f64>) -> Vec<Arc<Sample>> {
        let state = lock(&self.state);
        let now = unix_now();
        state
            .history
            .iter()
            .filter(|s| seconds.is_none_or(|w| s.time >= now - w))
            .cloned()
            .collect()
    }

    /// Active alerts and the recent closed ones, newest first.
    pub fn alerts(&self) -> Vec<crate::alerts::Alert> {
        lock(&self.alerts).all()
    }

    /// Takes a sample now: reads, keeps, evaluates the alerts, tells the observers.
    pub fn sample_now(&self) -> Arc<Sample> {
        let readings = lock(&self.probe).read();
        let sample = {
            let mut state = lock(&self.state);
            let sample = Arc::new(self.build(&mut state, readings));
            state.history.push_back(sample.clone());
            while state.history.len() > self.config.history.max(1) {
                state.history.pop_front();
            }
            sample
        };
        let mut sinks = lock(&self.sinks);
        let events = {
            let history: Vec<Arc<Sample>> = lock(&self.state).history.iter().cloned().collect();
            lock(&self.alerts).evaluate(&history)
        };
        for e in &events {
            for sink in sinks.iter_mut() {
                sink.send(e);
            }
        }
        let observers: Vec<Observer> = lock(&self.observers).clone();
        for o in &observers {
            o(&TelemetryEvent::Sample(sample.clone()));
        }
        for e in events {
            for o in &observers {
                o(&TelemetryEvent::Alert(e.clone()));
            }
        }
        drop(sinks);
        sample
    }

    fn build(&self, state: &mut State, readings: Vec<DeviceReading>) -> Sample {
        let now = Instant::now();
        let process = process_sample(&mut state.cpu, now);
        let mut job_sample = None;
        let mut executors: Vec<DeviceCounters> = Vec::new();
        if let Some(job) = &mut state.job {
            let c = job.live.counters();
            let (items_per_second, audio_seconds_per_second) = match &job.last {
                Some((t, prev)) => {
                    let dt = now.duration_since(*t).as_secs_f64().max(1e-6);
                    let settled = |c: &JobCounters| c.items_ok + c.items_failed;
                    (
                        (settled(&c) - settled(prev).min(settled(&c))) as f64 / dt,
                        (c.audio_seconds - prev.audio_seconds).max(0.0) / dt,
                    )
                }
                None => (0.0, 0.0),
            };
            let moved = job.last.as_ref().is_none_or(|(_, prev)| {
                (prev.items_ok, prev.items_failed, prev.rows)
                    != (c.items_ok, c.items_failed, c.rows)
            });
            if moved && (c.items_ok + c.items_failed + c.rows) > 0 {
                job.progressed = now;
            }
            job_sample = Some(JobSample {
                id: job.id.clone(),
                elapsed_s: c.elapsed_s,
                finished: c.finished,
                items_total: c.items_total,
                items_resumed: c.items_resumed,
                items_ok: c.items_ok,
                items_failed: c.items_failed,
                rows: c.rows,
                audio_seconds: c.audio_seconds,
                items_per_second,
                audio_seconds_per_second,
                queues: c
                    .queues
                    .iter()
                    .map(|(q, depth, capacity)| QueueSample {
                        stage: q.name().into(),
                        depth: *depth,
                        capacity: *capacity,
                    })
                    .collect(),
                batch_size: c.devices.iter().map(|d| d.batch_size).max().unwrap_or(0),
                stage_busy_s: c
                    .busy_s
                    .iter()
                    .map(|(s, v)| (s.name().to_string(), *v))
                    .collect(),
                first_failures: c.first_failures.clone(),
                seconds_since_progress: now.duration_since(job.progressed).as_secs_f64(),
            });
            executors = c.devices.clone();
            job.last = Some((now, c));
        }
        let mut devices: Vec<DeviceSample> = readings
            .into_iter()
            .map(|reading| DeviceSample {
                reading,
                ..Default::default()
            })
            .collect();
        for e in executors {
            let id = device_id(&e.name);
            let (t0, compute0, wait0) = state
                .device_times
                .insert(id.clone(), (now, e.compute_s, e.wait_s))
                .unwrap_or((now, e.compute_s, e.wait_s));
            let dt = now.duration_since(t0).as_secs_f64();
            let position = devices.iter().position(|d| d.reading.id == id);
            let d = match position {
                Some(i) => &mut devices[i],
                None => {
                    devices.push(DeviceSample {
                        reading: DeviceReading {
                            id: id.clone(),
                            name: e.name.clone(),
                            state: "busy".into(),
                            ..Default::default()
                        },
                        ..Default::default()
                    });
                    devices.last_mut().expect("just pushed")
                }
            };
            d.budget_bytes = e.memory.as_ref().map(|m| m.budget_bytes);
            d.pool = e.memory.clone();
            // Unknown until two samples span some time.
            d.busy_ratio = (dt > 1e-3).then(|| ((e.compute_s - compute0) / dt).clamp(0.0, 1.0));
            d.wait_ratio = (dt > 1e-3).then(|| ((e.wait_s - wait0) / dt).clamp(0.0, 1.0));
            if e.lost {
                d.reading.state = "failed".into();
            }
            d.executor = e;
        }
        Sample {
            seq: self.seq.fetch_add(1, Ordering::Relaxed),
            time: unix_now(),
            uptime_s: self.started.elapsed().as_secs_f64(),
            process,
            devices,
            job: job_sample,
        }
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        self.stopping.store(true, Ordering::SeqCst);
    }
}

/// "gpu:0" of "gpu:0 NVIDIA H100 (Vulkan)".
pub fn device_id(label: &str) -> String {
    label.split_whitespace().next().unwrap_or(label).to_string()
}

/// CPU time from /proc/self/stat (utime + stime, in clock ticks of 1/100 s: Linux's USER_HZ
/// is 100 on every architecture it exports to user space) and RSS from /proc/self/status.
fn process_sample(last: &mut Option<(Instant, f64)>, now: Instant) -> ProcessSample {
    let cpu_seconds = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            // The command name (field 2) may hold spaces: count fields after its ')'.
            let rest = &s[s.rfind(')')? + 2..];
            let fields: Vec<&str> = rest.split_whitespace().collect();
            let utime: f64 = fields.get(11)?.parse().ok()?;
            let stime: f64 = fields.get(12)?.parse().ok()?;
            Some((utime + stime) / 100.0)
        })
        .unwrap_or(0.0);
    let rss_bytes = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024);
    let cpu_percent = match *last {
        Some((t, cpu)) => {
            100.0 * (cpu_seconds - cpu).max(0.0) / now.duration_since(t).as_secs_f64().max(1e-3)
        }
        None => 0.0,
    };
    *last = Some((now, cpu_seconds));
    ProcessSample {
        cpu_percent,
        cpu_seconds,
        rss_bytes,
    }
}
