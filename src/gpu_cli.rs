//! The GPU half of the command line: `sonograph devices`, `features --device`, and
//! `bench --device`.

use std::time::Duration;

use anyhow::Result;
use clap::Args;
use sonograph_dsp::{AudioBatch, CpuBackend, Extractor, FeatureBatch, FeatureSpec, Precision};
use sonograph_gpu::{
    Budget, DeviceRegistry, DeviceSelection, DeviceState, GpuBackend, GpuOptions, Selected,
};
use sonograph_pipeline::{AdaptiveBatcher, BatchStats, BatcherConfig};

use super::{load_spec, user, BenchArgs, FeaturesArgs};

/// How long the health probe of `sonograph devices` may take per adapter.
const PROBE_DEADLINE: Duration = Duration::from_secs(5);

#[derive(Args)]
pub struct DevicesArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Skip the health probe (a tiny kernel on each adapter, 5 s deadline, 2 tries).
    #[arg(long)]
    no_probe: bool,
}

/// Every device, those named in `SONOGRAPH_DISABLE_DEVICES` (comma-separated ids such as
/// "gpu:1") marked `Disabled`: never selected, left out of `all`.
pub fn registry() -> Result<DeviceRegistry> {
    let mut registry = DeviceRegistry::discover();
    let Ok(list) = std::env::var("SONOGRAPH_DISABLE_DEVICES") else {
        return Ok(registry);
    };
    for id in list.split(',').map(str::trim).filter(|id| !id.is_empty()) {
        if id == "cpu" {
            return Err(user(
                "SONOGRAPH_DISABLE_DEVICES: the CPU cannot be disabled (it is every device's fallback)",
            ));
        }
        if registry.get(id).is_none() {
            return Err(user(format!(
                "SONOGRAPH_DISABLE_DEVICES: no device {id} (see `sonograph devices`)"
            )));
        }
        registry.set_state(
            id,
            DeviceState::Disabled,
            Some("disabled by SONOGRAPH_DISABLE_DEVICES".into()),
        );
    }
    Ok(registry)
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
        println!("(built without the `gpu` feature: only the CPU is available)");
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

/// Resolves `--device` for a command that runs on one device.
pub fn select(device: &str) -> Result<Selected> {
    let selection: DeviceSelection = device.parse().map_err(|e| user(format!("{e}")))?;
    if selection == DeviceSelection::Cpu {
        return Ok(Selected::Cpu);
    }
    registry()?
        .select(selection)
        .map_err(|e| user(e.to_string()))
}

/// Opens the GPU backend that `--device` (`device`) selected. `auto` means "the GPU if it
/// can": where the backend cannot open or cannot take the spec, `Ok(None)` (and a warning)
/// leaves the work to the CPU; a GPU named outright that cannot is an error.
pub fn open_selected(
    device: &str,
    spec: &FeatureSpec,
    options: &GpuOptions,
) -> Result<Option<GpuBackend>> {
    match GpuBackend::new(spec, options) {
        Ok(gpu) => Ok(Some(gpu)),
        Err(e) if device.trim() == "auto" => {
            tracing::warn!("--device auto: {e}; computing on the CPU");
            Ok(None)
        }
        Err(e) => {
            let name = options.adapter.map_or("gpu".into(), |i| format!("gpu:{i}"));
            Err(user(format!("--device {name}: {e}")))
        }
    }
}

/// `features --device gpu...`: the whole file decoded, then one item on the GPU, through the
/// adaptive batcher: a file that does not fit on the device (or a device lost on it) is
/// computed on the CPU, with a warning.
pub fn features(args: &FeaturesArgs, spec: &FeatureSpec, mut gpu: GpuBackend) -> Result<()> {
    let samples = sonograph_io::decode_mono(
        &args.input,
        &super::decode_options(args.channel),
        spec.sample_rate,
    )
    .map_err(|e| user(e.to_string()))?;
    let mut cpu =
        CpuBackend::new(spec, args.spec.precision.into()).map_err(|e| user(e.to_string()))?;
    let mut batcher = AdaptiveBatcher::new(BatcherConfig {
        initial: 1,
        max: 1,
        ..Default::default()
    });
    let mut out = FeatureBatch::new(spec.n_bins());
    batcher.run(
        &AudioBatch::from_items([samples.as_slice()]),
        &mut gpu,
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
                sonograph_io::decode_mono(p, &Default::default(), spec.sample_rate)
                    .map_err(|e| user(e.to_string()))
            })
            .collect::<Result<_>>()?
    };
    let batch = AudioBatch::from_items(clips.iter().map(|c| c.as_slice()));
    let seconds = batch.samples().len() as f64 / f64::from(spec.sample_rate);
    let registry = registry()?;
    let targets: Vec<Selected> = if device == "all" {
        registry
            .devices()
            .iter()
            .filter(|d| d.usable())
            .map(|d| d.index.map_or(Selected::Cpu, Selected::Gpu))
            .collect()
    } else {
        let selection: DeviceSelection = device.parse().map_err(|e| user(format!("{e}")))?;
        vec![registry
            .select(selection)
            .map_err(|e| user(e.to_string()))?]
    };
    let budget = args
        .gpu_memory
        .as_deref()
        .map(|text| Budget::parse(text).map_err(|e| user(format!("--gpu-memory: {e}"))))
        .transpose()?;
    let precision: Precision = args.spec.precision.into();
    let longest = clips.iter().map(|c| c.len()).max().unwrap_or(0);
    for target in targets {
        let mut fallback = CpuBackend::new(&spec, precision).map_err(|e| user(e.to_string()))?;
        let (name, timing, memory) = match target {
            Selected::Cpu => {
                let mut cpu = if args.threads == 0 {
                    CpuBackend::new(&spec, precision)
                } else {
                    CpuBackend::with_threads(&spec, precision, args.threads)
                }
                .map_err(|e| user(e.to_string()))?;
                let config = BatcherConfig::for_device(&cpu, longest, clips.len());
                let timing = time_backend(&mut cpu, &mut fallback, &batch, config, args.repeat)?;
                (cpu.device(), timing, None)
            }
            Selected::Gpu(i) => {
                let options = GpuOptions {
                    adapter: Some(i),
                    budget,
                    precision,
                    ..Default::default()
                };
                let mut gpu = match GpuBackend::new(&spec, &options) {
                    Ok(g) => g,
                    Err(e) => {
                        let report = serde_json::json!({"device": format!("gpu:{i}"), "error": e.to_string()});
                        println!("{report}");
                        continue;
                    }
                };
                let config = BatcherConfig::for_device(&gpu, longest, clips.len());
                let timing = time_backend(&mut gpu, &mut fallback, &batch, config, args.repeat)?;
                (gpu.device(), timing, Some(gpu.memory_stats()))
            }
        };
        let (times, failed, batcher) = timing;
        let median = times[times.len() / 2];
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
