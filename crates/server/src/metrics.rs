//! `GET /metrics`: the latest telemetry sample and the process totals in the OpenMetrics text
//! format (which Prometheus scrapes), encoded by prometheus-client.
//!
//! `sonograph_*` names follow Prometheus's conventions (`_total` counters, `_seconds`,
//! `_bytes`); NVIDIA GPUs also get dcgm-exporter's names and labels (`gpu`, `UUID`,
//! `modelName`), where NVML gives the value, so that existing GPU dashboards work unchanged.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use sonograph_pipeline::alerts::{Alert, AlertLevel};
use sonograph_pipeline::telemetry::{Sample, Totals};

use crate::jobs::JobState;

type Labels = Vec<(String, String)>;
type GaugeF = Family<Labels, Gauge<f64, AtomicU64>>;
type CounterF = Family<Labels, Counter<f64, AtomicU64>>;

/// The content type of the exposition.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

struct Metrics {
    registry: Registry,
}

impl Metrics {
    fn gauge(&mut self, name: &str, help: &str) -> GaugeF {
        let f = GaugeF::default();
        self.registry.register(name, help, f.clone());
        f
    }

    /// One value without labels.
    fn gauge1(&mut self, name: &str, help: &str, value: f64) {
        let g = Gauge::<f64, AtomicU64>::default();
        g.set(value);
        self.registry.register(name, help, g);
    }

    /// One total without labels (the exposition adds `_total`).
    fn counter1(&mut self, name: &str, help: &str, value: f64) {
        let c = Counter::<f64, AtomicU64>::default();
        c.inc_by(value);
        self.registry.register(name, help, c);
    }

    /// Registered as `name`; the exposition adds `_total`.
    fn counter(&mut self, name: &str, help: &str) -> CounterF {
        let f = CounterF::default();
        self.registry.register(name, help, f.clone());
        f
    }
}

/// What one scrape shows.
pub struct Scrape<'a> {
    pub sample: Option<&'a Sample>,
    pub totals: &'a Totals,
    pub alerts: &'a [Alert],
    pub jobs: &'a [(JobState, i64)],
    /// Whether a job runs now, where the server knows it from its queue (`None` for the
    /// read-only server of `extract --metrics-addr`, which goes by the telemetry's sample).
    pub job_running: Option<bool>,
    pub ready: bool,
}

/// Encodes one scrape.
pub fn render(s: &Scrape) -> Result<String, std::fmt::Error> {
    let mut m = Metrics {
        registry: Registry::default(),
    };
    let t = s.totals;
    let items = m.counter("sonograph_items", "Items settled, by status (ok, failed)");
    items
        .get_or_create(&labels(&[("status", "ok")]))
        .inc_by(t.items_ok as f64);
    items
        .get_or_create(&labels(&[("status", "failed")]))
        .inc_by(t.items_failed as f64);
    m.counter1("sonograph_rows", "Rows of features written", t.rows as f64);
    m.counter1(
        "sonograph_audio_seconds",
        "Seconds of audio turned into features",
        t.audio_seconds,
    );
    let ooms = m.counter(
        "sonograph_oom",
        "Out-of-memory errors per device (each batch split and retried)",
    );
    for (device, n) in &t.ooms {
        ooms.get_or_create(&labels(&[("device", device)]))
            .inc_by(*n as f64);
    }
    let batches = m.counter("sonograph_batches", "Batches run per device");
    for (device, n) in &t.batches {
        batches
            .get_or_create(&labels(&[("device", device)]))
            .inc_by(*n as f64);
    }
    let busy = m.counter(
        "sonograph_stage_busy_seconds",
        "Seconds each stage was busy, summed over its threads",
    );
    for (stage, secs) in &t.stage_busy_s {
        busy.get_or_create(&labels(&[("stage", stage)]))
            .inc_by(*secs);
    }
    let active = m.gauge("sonograph_alerts_active", "Alerts firing now, by level");
    for level in AlertLevel::ALL {
        let n = s
            .alerts
            .iter()
            .filter(|a| a.ended.is_none() && a.level == level)
            .count();
        active
            .get_or_create(&labels(&[("level", level.as_str())]))
            .set(n as f64);
    }
    let jobs = m.gauge("sonograph_jobs", "Jobs of the server's queue, by state");
    for state in JobState::ALL {
        let n = s
            .jobs
            .iter()
            .find(|(st, _)| *st == state)
            .map_or(0, |(_, n)| *n);
        jobs.get_or_create(&labels(&[("state", state.as_str())]))
            .set(n as f64);
    }
    m.gauge1(
        "sonograph_ready",
        "1 once the devices are probed",
        if s.ready { 1.0 } else { 0.0 },
    );

    let Some(sample) = s.sample else {
        return finish(&m);
    };
    let p = &sample.process;
    m.counter1(
        "process_cpu_seconds",
        "CPU time of this process",
        p.cpu_seconds,
    );
    m.gauge1(
        "process_resident_memory_bytes",
        "Resident set size of this process",
        p.rss_bytes as f64,
    );
    // The queue's own word where there is one: the sample is up to a telemetry interval old,
    // and the gauge would disagree with sonograph_jobs{state="running"} meanwhile.
    let running = s
        .job_running
        .unwrap_or_else(|| sample.job.as_ref().is_some_and(|j| !j.finished));
    m.gauge1(
        "sonograph_job_running",
        "1 while a job runs",
        if running { 1.0 } else { 0.0 },
    );
    let depth = m.gauge("sonograph_queue_depth", "Items waiting in each queue");
    let capacity = m.gauge("sonograph_queue_capacity", "Capacity of each queue");
    let batch = m.gauge(
        "sonograph_batch_size",
        "Size of the batch last run, per device",
    );
    let progress = m.gauge(
        "sonograph_job_items",
        "The running job's items, by state (total, ok, failed, resumed)",
    );
    if let Some(job) = &sample.job {
        for q in &job.queues {
            depth
                .get_or_create(&labels(&[("stage", &q.stage)]))
                .set(q.depth as f64);
            capacity
                .get_or_create(&labels(&[("stage", &q.stage)]))
                .set(q.capacity as f64);
        }
        m.gauge1(
            "sonograph_items_per_second",
            "Items settled per second over the last sample interval",
            job.items_per_second,
        );
        m.gauge1(
            "sonograph_audio_seconds_per_second",
            "Audio seconds per second over the last sample interval",
            job.audio_seconds_per_second,
        );
        for (state, n) in [
            ("total", job.items_total),
            ("ok", job.items_ok),
            ("failed", job.items_failed),
            ("resumed", job.items_resumed),
        ] {
            progress
                .get_or_create(&labels(&[("state", state)]))
                .set(n as f64);
        }
    }
    let pool = m.gauge(
        "sonograph_pool_bytes",
        "Device memory pool, by kind (allocated, reserved, requested, budget, largest_free)",
    );
    let frag = m.gauge(
        "sonograph_pool_fragmentation_ratio",
        "1 - allocated / reserved of each device's pool",
    );
    let state = m.gauge(
        "sonograph_device_state",
        "1 for each device's current state",
    );
    let busy_ratio = m.gauge(
        "sonograph_device_busy_ratio",
        "Share of the last interval each executor computed",
    );
    let util = m.gauge("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %), from NVML");
    let fb_used = m.gauge("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB)");
    let fb_free = m.gauge("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB)");
    let temp = m.gauge("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C)");
    let power = m.gauge("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W)");
    for d in &sample.devices {
        let id = d.reading.id.as_str();
        state
            .get_or_create(&labels(&[("device", id), ("state", &d.reading.state)]))
            .set(1.0);
        batch
            .get_or_create(&labels(&[("device", id)]))
            .set(d.executor.batch_size as f64);
        if let Some(b) = d.busy_ratio {
            busy_ratio.get_or_create(&labels(&[("device", id)])).set(b);
        }
        if let Some(stats) = &d.pool {
            for (kind, v) in [
                ("allocated", stats.allocated_bytes),
                ("reserved", stats.reserved_bytes),
                ("requested", stats.requested_bytes),
                ("budget", stats.budget_bytes),
                ("largest_free", stats.largest_free_block),
            ] {
                pool.get_or_create(&labels(&[("device", id), ("kind", kind)]))
                    .set(v as f64);
            }
            frag.get_or_create(&labels(&[("device", id)]))
                .set(stats.fragmentation);
        }
        // dcgm-exporter's labels: NVML's index as `gpu`, the UUID, the model name.
        let (Some(index), Some(uuid)) = (d.reading.nvml_index, d.reading.uuid.as_deref()) else {
            continue;
        };
        let index = index.to_string();
        let dcgm = labels(&[
            ("gpu", &index),
            ("UUID", uuid),
            ("modelName", &d.reading.name),
            ("device", &format!("nvidia{index}")),
        ]);
        let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
        if let Some(u) = d.reading.utilization_percent {
            util.get_or_create(&dcgm).set(u);
        }
        if let Some(b) = d.reading.memory_used_bytes {
            fb_used.get_or_create(&dcgm).set(mib(b));
        }
        if let Some(b) = d.reading.memory_free_bytes {
            fb_free.get_or_create(&dcgm).set(mib(b));
        }
        if let Some(c) = d.reading.temperature_c {
            temp.get_or_create(&dcgm).set(c);
        }
        if let Some(w) = d.reading.power_w {
            power.get_or_create(&dcgm).set(w);
        }
    }
    finish(&m)
}

fn finish(m: &Metrics) -> Result<String, std::fmt::Error> {
    let mut out = String::new();
    encode(&mut out, &m.registry)?;
    Ok(out)
}
