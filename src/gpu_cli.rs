//! The GPU half of the command line: `sonograph devices`, the devices of `features` and
//! `extract`, and `bench --device`.

use std::time::Duration;

use anyhow::Result;
use clap::Args;
use sonograph_dsp::{CpuBackend, Extractor, FeatureSpec};
use sonograph_gpu::{
    Budget, DeviceRegistry, DeviceRequest, DeviceSelection, DeviceSet, GpuError, OpenError,
    OpenOptions, ProbePolicy, Selected,
};
use sonograph_pipeline::bench;

use super::{load_spec, user, BenchArgs};

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

/// `bench --device all|cpu|gpu|gpu:N`: audio-seconds per second per device, with the memory
/// pool's and the batcher's statistics.
pub fn bench(args: &BenchArgs, device: &str) -> Result<()> {
    let spec = load_spec(&args.spec)?;
    let clips = if args.inputs.is_empty() {
        bench::generated_clips(&spec, args.clips, args.seconds).map(|mut clips| {
            if args.pcm16 {
                bench::round_to_pcm16(&mut clips);
            }
            clips
        })
    } else {
        bench::decode_clips(
            &args.inputs,
            &super::decode_options(None, &args.limits)?,
            &spec,
        )
    }
    .map_err(crate::job_error)?;
    let precision = args.spec.precision.for_spec(&spec);
    let options = OpenOptions {
        precision,
        budget: budget(args.gpu_memory.as_deref())?,
        cpu_threads: (args.threads > 0).then_some(args.threads),
    };
    for mut executor in open(&device_set(device)?, &spec, &options)? {
        executor.set_rows_stored_as_f16(args.dtype == sonograph_pipeline::DtypeChoice::F16);
        let mut fallback = CpuBackend::new(&spec, precision).map_err(|e| user(e.to_string()))?;
        let timing = bench::time_device(executor.as_mut(), &mut fallback, &clips, args.repeat)
            .map_err(crate::job_error)?;
        println!("{}", serde_json::to_string(&timing)?);
    }
    Ok(())
}
