//! The GPU half of the command line: `sonograph devices`, `features --device`, and
//! `bench --device`.

use std::time::Duration;

use anyhow::Result;
use clap::Args;
use sonograph_dsp::{AudioBatch, CpuBackend, Extractor, FeatureBatch, FeatureSpec};
use sonograph_gpu::{
    Budget, DeviceRegistry, DeviceRequest, DeviceSelection, DeviceSet, GpuError, OpenError,
    OpenOptions, ProbePolicy, Selected,
};
use sonograph_pipeline::{AdaptiveBatcher, BatchStats, BatcherConfig};

use super::{load_spec, user, BenchArgs, FeaturesArgs};

/// How long the health probe of `sonograph devices` may take per adapter.
const PROBE_DEADLINE: Duration = Duration::from_secs(5);

#[derive(Args)]
pub struct DevicesArgs {
    /// Print JSON instead of a table.
    #[arg(long, env = "SONOGRAPH_JSON")]
    json: bool,
    /// Skip the health probe (a tiny kernel on each adapter, 5 s deadline, 2 tries).
    #[arg(long, env = "SONOGRAPH_NO_PROBE")]
    no_probe: bool,
}

/// Every device, with the disabled ones marked.
pub fn registry() -> Result<DeviceRegistry> {
    let mut registry = DeviceRegistry::discover();
    registry
        .disable(&sonograph_gpu::disabled_devices())
        .map_err(|e| user(format!("SONOGRAPH_DISABLE_DEVICES: {e}")))?;
    Ok(registry)
}

/// Resolves `--device` once: parsed, disabled devices left out, candidates probed (a device
/// that fails its probe is not used, and the run says so on stderr).
pub fn device_set(device: &str) -> Result<DeviceSet> {
    let request: DeviceRequest = device.parse().map_err(|e| user(format!("--device: {e}")))?;
    let set = DeviceSet::resolve(
        &request,
        &sonograph_gpu::disabled_devices(),
        ProbePolicy::default(),
    )
    .map_err(|e| match e {
        GpuError::CannotDisable(..) => user(format!("SONOGRAPH_DISABLE_DEVICES: {e}")),
        e => user(format!("--device {device}: {e}")),
    })?;
    for note in set.notes() {
        eprintln!("sonograph: warning: {note}");
    }
    Ok(set)
}

/// Opens an executor per device of `set`: a device named outright that cannot open, or a bad
/// spec, is a usage error (exit 2); a kernel that does not compile is a bug (exit 1).
pub fn open(
    set: &DeviceSet,
    spec: &FeatureSpec,
    options: &OpenOptions,
) -> Result<Vec<Box<dyn Extractor>>> {
    let mut store = sonograph_io::calibration::FileStore::open();
    let opened = set
        .open_with(spec, options, &mut store)
        .map_err(|e| match e {
            OpenError::Kernel(_) => anyhow::Error::new(e),
            e => user(format!("--device: {e}")),
        })?;
    for note in &opened.notes {
        eprintln!("sonograph: warning: {note}");
    }
    if let Some(c) = &opened.calibration {
        eprintln!("sonograph: auto chose {}: {}", c.chose, c.why);
    }
    Ok(opened.executors)
}

/// Opens a job's devices (`--device`, `--gpu-memory`) for its spec: a device named outright
/// that cannot open is a usage error (exit 2), a kernel that does not compile a bug (exit 1).
pub fn open_job(
    device: &str,
    gpu_memory: Option<&str>,
    config: &mut sonograph_pipeline::JobConfig,
) -> Result<Vec<Box<dyn Extractor>>> {
    let devices = sonograph_gpu::JobDevices::parse(device, gpu_memory).map_err(user)?;
    let disabled = sonograph_gpu::disabled_devices();
    let mut store = sonograph_io::calibration::FileStore::open();
    let opened = devices
        .open(&config.spec, config.precision, &disabled, &mut store)
        .map_err(|e| match e {
            OpenError::Kernel(_) => anyhow::Error::new(e),
            e => user(e.to_string()),
        })?;
    for note in &opened.notes {
        eprintln!("sonograph: warning: {note}");
    }
    if let Some(c) = &opened.calibration {
        eprintln!("sonograph: auto chose {}: {}", c.chose, c.why);
        config.device_choice = serde_json::to_value(c).ok();
    }
    Ok(opened.executors)
}

/// `--gpu-memory`, parsed.
pub fn budget(text: Option<&str>) -> Result<Option<Budget>> {
    text.map(|t| Budget::parse(t).map_err(|e| user(format!("--gpu-memory: {e}"))))
        .transpose()
}

pub fn devices(args: &DevicesArgs) -> Result<()> {
    let mut registry = registry()?;
    if !args.no_probe {
        registry.probe_all(PROBE_DEADLINE, 2);
    }
    let auto = registry.select(DeviceSelection::Auto)?;
    if args.json {
        let report = serde_json::json!({
            "gpu_built": sonograph_gpu::GPU_BUILT,
            "auto": selected_id(auto),
            "devices": registry.devices(),
        });
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    println!(
        "{:<6} {:<15} {:<7} {:>5} {:<10} {:<4} NAME / DRIVER",
        "ID", "TYPE", "BACKEND", "SCORE", "STATE", "CORE"
    );
    for d in registry.devices() {
        println!(
            "{:<6} {:<15} {:<7} {:>5} {:<10} {:<4} {}{}{}",
            d.id,
            format!("{:?}", d.device_type),
            d.backend,
            d.score,
            format!("{:?}", d.state),
            if d.f64_core { "f64" } else { "f32" },
            d.name,
            if d.driver.is_empty() {
                String::new()
            } else {
                format!(" / {}", d.driver)
            },
            d.reason
                .as_ref()
                .map(|r| format!("  ({r})"))
                .unwrap_or_default()
        );
        if let Some(t) = &d.telemetry {
            println!("{:<6} {}", "", telemetry_line(t));
        }
    }
    println!("--device auto selects: {}", selected_id(auto));
    if !sonograph_gpu::GPU_BUILT {
        println!("GPU support was not built into this sonograph (cargo feature `gpu`): only the CPU is available");
    }
    Ok(())
}

/// One line of NVML telemetry under an NVIDIA device; "?" where a query failed.
fn telemetry_line(t: &sonograph_gpu::GpuTelemetry) -> String {
    fn or_unknown<T>(v: Option<T>, f: impl Fn(T) -> String) -> String {
        v.map_or_else(|| "?".into(), f)
    }
    let bytes = |b: Option<u64>| or_unknown(b, sonograph_gpu::pool::human_bytes);
    let watts = |w: Option<f64>| or_unknown(w, |w| format!("{w:.0} W"));
    format!(
        "nvml:{} {}  bus {}  mem {} / {}  util {} (mem {})  {}  power {} / {}",
        t.nvml_index,
        t.uuid.as_deref().unwrap_or("?"),
        t.pci_bus_id.as_deref().unwrap_or("?"),
        bytes(t.memory_used_bytes),
        bytes(t.memory_total_bytes),
        or_unknown(t.utilization_gpu_percent, |p| format!("{p}%")),
        or_unknown(t.utilization_memory_percent, |p| format!("{p}%")),
        or_unknown(t.temperature_c, |c| format!("{c} C")),
        watts(t.power_w),
        watts(t.power_limit_w),
    )
}

fn selected_id(s: Selected) -> String {
    match s {
        Selected::Cpu => "cpu".into(),
        Selected::Gpu(i) => format!("gpu:{i}"),
    }
}

/// `features --device gpu...`: the whole file decoded, then one item on the GPU, through the
/// adaptive batcher: a file that does not fit on the device (or a device lost on it) is
/// computed on the CPU, with a warning.
pub fn features(
    args: &FeaturesArgs,
    spec: &FeatureSpec,
    mut gpu: Box<dyn Extractor>,
) -> Result<()> {
    let samples = sonograph_io::decode_mono(
        &args.input,
        &super::decode_options(args.channel, &args.limits)?,
        spec.sample_rate,
    )
    .map_err(|e| user(e.to_string()))?;
    let mut cpu = CpuBackend::new(spec, args.spec.precision.for_spec(spec))
        .map_err(|e| user(e.to_string()))?;
    let mut batcher = AdaptiveBatcher::new(BatcherConfig {
        initial: 1,
        max: 1,
        ..Default::default()
    });
    let mut out = FeatureBatch::new(spec.n_bins());
    batcher.run(
        &AudioBatch::from_items([samples.as_slice()]),
        gpu.as_mut(),
        &mut cpu,
        &mut out,
    );
    for alert in &batcher.stats().alerts {
        eprintln!("sonograph: warning: {}: {alert}", args.input.display());
    }
    let (frames, rows) = out
        .item(0)
        .map_err(|e| user(format!("{}: {e}", args.input.display())))?;
    if frames == 0 {
        eprintln!(
            "sonograph: warning: {}: {} samples at {} Hz are shorter than one frame; writing 0 frames (as the reference does)",
            args.input.display(),
            samples.len(),
            spec.sample_rate
        );
    }
    sonograph_io::write_npy(&args.out, &[frames, spec.n_bins()], rows, args.dtype.into())
        .map_err(|e| user(e.to_string()))?;
    tracing::info!(device = %gpu.device(), frames, "wrote {}", args.out.display());
    Ok(())
}

/// A generated batch: `items` clips of `seconds` seconds (a chirp over noise, all different).
fn generated(spec: &FeatureSpec, items: usize, seconds: f64) -> Vec<Vec<f32>> {
    let rate = f64::from(spec.sample_rate);
    (0..items)
        .map(|k| {
            let n = (seconds * rate) as usize;
            let mut state = 0x9E37_79B9_7F4A_7C15u64 ^ k as u64;
            (0..n)
                .map(|i| {
                    let t = i as f64 / rate;
                    let f = 100.0 + 50.0 * k as f64 + 3000.0 * t / seconds;
                    // xorshift noise: deterministic, no dependency.
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    let noise = (state >> 40) as f64 / (1u64 << 24) as f64 - 0.5;
                    (0.3 * (2.0 * std::f64::consts::PI * f * t).sin() + 0.01 * noise) as f32
                })
                .collect()
        })
        .collect()
}

/// `bench --device all|cpu|gpu|gpu:N`: audio-seconds per second per device, with the memory
/// pool's and the batcher's statistics.
pub fn bench(args: &BenchArgs, device: &str) -> Result<()> {
    let spec = load_spec(&args.spec)?;
    let clips: Vec<Vec<f32>> = if args.inputs.is_empty() {
        if args.clips == 0 || !(args.seconds > 0.0 && args.seconds <= 3600.0) {
            return Err(user(
                "--clips must be at least 1 and --seconds in (0, 3600]",
            ));
        }
        generated(&spec, args.clips, args.seconds)
    } else {
        args.inputs
            .iter()
            .map(|p| {
                sonograph_io::decode_mono(
                    p,
                    &super::decode_options(None, &args.limits)?,
                    spec.sample_rate,
                )
                .map_err(|e| user(e.to_string()))
            })
            .collect::<Result<_>>()?
    };
    let batch = AudioBatch::from_items(clips.iter().map(|c| c.as_slice()));
    let seconds = batch.samples().len() as f64 / f64::from(spec.sample_rate);
    let precision = args.spec.precision.for_spec(&spec);
    let options = OpenOptions {
        precision,
        budget: budget(args.gpu_memory.as_deref())?,
        cpu_threads: (args.threads > 0).then_some(args.threads),
    };
    let executors = open(&device_set(device)?, &spec, &options)?;
    let longest = clips.iter().map(|c| c.len()).max().unwrap_or(0);
    for mut executor in executors {
        let mut fallback = CpuBackend::new(&spec, precision).map_err(|e| user(e.to_string()))?;
        let config = BatcherConfig::for_device(executor.as_ref(), longest, clips.len());
        let before = executor.transfer_stats();
        let timing = time_backend(
            executor.as_mut(),
            &mut fallback,
            &batch,
            config,
            args.repeat,
        )?;
        let (name, memory) = (executor.device(), executor.memory_stats());
        let (times, failed, batcher) = timing;
        let median = times[times.len() / 2];
        // The data path's counters over the timed runs, and the kernels' own rate where the
        // device timed them (the audio on the device already: what "resident" peers measure).
        let transfer = executor.transfer_stats().zip(before).map(|(after, before)| {
            let kernel_seconds = after.kernel_seconds - before.kernel_seconds;
            let timed = after.timed_chunks - before.timed_chunks;
            let runs = (after.chunks - before.chunks) as f64;
            // Per run, the warm-up run included.
            let per_run = |x: f64| x / (times.len() + 1) as f64;
            serde_json::json!({
                "chunks_per_run": per_run(runs),
                "chunks_filled_while_busy": after.chunks_filled_while_busy - before.chunks_filled_while_busy,
                "staging_allocations_during_runs": after.staging_allocations - before.staging_allocations,
                "staging_bytes": after.staging_bytes,
                "kernel_seconds_per_run": (timed > 0).then(|| per_run(kernel_seconds)),
                // Host time per run: copying into the staging memory, waiting for the
                // device, finishing the rows.
                "fill_seconds_per_run": per_run(after.fill_seconds - before.fill_seconds),
                "wait_seconds_per_run": per_run(after.wait_seconds - before.wait_seconds),
                "finish_seconds_per_run": per_run(after.finish_seconds - before.finish_seconds),
                "kernel_audio_seconds_per_second": (timed > 0 && kernel_seconds > 0.0)
                    .then(|| seconds * (times.len() + 1) as f64 / kernel_seconds),
            })
        });
        let report = serde_json::json!({
            "device": name,
            "spec_id": spec.spec_id(),
            "items": clips.len(),
            "failed_items": failed,
            "audio_seconds": seconds,
            "median_seconds": median,
            "audio_seconds_per_second": seconds / median,
            "repeats": times.len(),
            "batcher": batcher,
            "memory": memory,
            "transfer": transfer,
        });
        println!("{report}");
    }
    Ok(())
}

/// Times `repeat` runs of the batch through an adaptive batcher on `backend`; returns the
/// sorted times, the items that failed, and the batcher's counters.
fn time_backend(
    backend: &mut dyn Extractor,
    fallback: &mut CpuBackend,
    batch: &AudioBatch,
    config: BatcherConfig,
    repeat: usize,
) -> Result<(Vec<f64>, usize, BatchStats)> {
    let bins = backend.spec().n_bins();
    let mut batcher = AdaptiveBatcher::new(config);
    let mut out = FeatureBatch::new(bins);
    let times = super::timed(repeat, || {
        out.reset(bins);
        batcher.run(batch, backend, fallback, &mut out);
        Ok(())
    })?;
    let failed = (0..out.len()).filter(|&i| out.item(i).is_err()).count();
    Ok((times, failed, batcher.stats().clone()))
}
