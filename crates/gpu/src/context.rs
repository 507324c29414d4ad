//! wgpu plumbing: the instance, adapter enumeration, opening a device, and the health probe.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

/// One instance over every backend this build has (Vulkan on Linux, Metal on macOS, DX12 on
/// Windows), made once and never dropped. Dropping the last instance unloads the Vulkan driver
/// (the loader dlcloses it); when the probe thread did that while the main thread was exiting,
/// the process died with SIGSEGV in code no longer mapped (one run in ~150 of `bench --device
/// all` with a failing probe, on lavapipe: bench/teardown.sh). A static is never dropped, so
/// the driver stays loaded until the process ends.
fn instance() -> &'static wgpu::Instance {
    static INSTANCE: std::sync::OnceLock<wgpu::Instance> = std::sync::OnceLock::new();
    INSTANCE.get_or_init(|| {
        let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
        desc.backends = wgpu::Backends::all();
        wgpu::Instance::new(desc)
    })
}

/// Every adapter, in a stable order: `gpu:N` is the N-th.
pub fn adapters() -> Vec<wgpu::Adapter> {
    pollster::block_on(instance().enumerate_adapters(wgpu::Backends::all()))
}

/// Opens adapter `gpu:N`, or with `None` the one `score` ranks first (software included:
/// asking for a GPU backend is naming it); returns the device and its index. (The ranking is
/// the device registry's, passed in: this module is the wgpu plumbing under it.)
pub fn open_adapter(
    adapter: Option<usize>,
    score: fn(&wgpu::AdapterInfo) -> u32,
) -> Result<(GpuDevice, usize), String> {
    let adapters = adapters();
    if adapters.is_empty() {
        return Err(
            "no wgpu adapter (no Vulkan/Metal/DX12 driver; on Debian install mesa-vulkan-drivers for lavapipe)"
                .into(),
        );
    }
    let index = match adapter {
        Some(i) if i < adapters.len() => i,
        Some(i) => return Err(format!("no adapter gpu:{i} (there are {})", adapters.len())),
        None => (0..adapters.len())
            .max_by_key(|&i| score(&adapters[i].get_info()))
            .unwrap_or(0),
    };
    Ok((GpuDevice::open(&adapters[index])?, index))
}

/// A compute pipeline of `entry` in the WGSL `source` (layout from the shader).
pub fn compute_pipeline(
    d: &wgpu::Device,
    name: &str,
    source: &str,
    entry: &str,
) -> wgpu::ComputePipeline {
    let module = d.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some(name),
        source: wgpu::ShaderSource::Wgsl(source.into()),
    });
    d.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some(name),
        layout: None,
        module: &module,
        entry_point: Some(entry),
        compilation_options: Default::default(),
        cache: None,
    })
}

/// A software rasteriser (lavapipe, llvmpipe, WARP, SwiftShader) rather than a GPU.
pub fn is_software(info: &wgpu::AdapterInfo) -> bool {
    info.device_type == wgpu::DeviceType::Cpu
}

/// An open device with its queue and a flag raised when the driver reports it lost.
#[derive(Clone)]
pub struct GpuDevice {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub info: wgpu::AdapterInfo,
    pub limits: wgpu::Limits,
    pub lost: Arc<AtomicBool>,
}

impl GpuDevice {
    /// Opens `adapter` with the largest limits it offers (big batches need big bindings) and
    /// f64 in shaders where it has them.
    pub fn open(adapter: &wgpu::Adapter) -> Result<Self, String> {
        let limits = adapter.limits();
        let desc = wgpu::DeviceDescriptor {
            label: Some("sonograph"),
            required_limits: limits.clone(),
            // f64 for the spectral core where the adapter has it (see kernels/common.wgsl), and
            // timestamp queries to time the kernels alone.
            required_features: adapter.features()
                & (wgpu::Features::SHADER_F64 | wgpu::Features::TIMESTAMP_QUERY),
            ..Default::default()
        };
        let (device, queue) =
            pollster::block_on(adapter.request_device(&desc)).map_err(|e| e.to_string())?;
        let lost = Arc::new(AtomicBool::new(false));
        let flag = lost.clone();
        device.set_device_lost_callback(move |reason, msg| {
            tracing::error!(?reason, "gpu device lost: {msg}");
            flag.store(true, Ordering::SeqCst);
        });
        // wgpu's default handler panics on an uncaptured error; every operation that can fail
        // is inside an error scope, so anything arriving here is only logged.
        device.on_uncaptured_error(Arc::new(|e| tracing::error!("uncaptured wgpu error: {e}")));
        Ok(GpuDevice {
            device,
            queue,
            info: adapter.get_info(),
            limits,
            lost,
        })
    }

    pub fn is_lost(&self) -> bool {
        self.lost.load(Ordering::SeqCst)
    }
}

const PROBE_WGSL: &str = "
@group(0) @binding(0) var<storage, read_write> data: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    data[gid.x] = gid.x * 2u + 1u;
}
";

/// Runs a tiny kernel on `adapter` and checks its result, giving up after `deadline`. The
/// probe runs on its own thread so that a driver that hangs cannot hang the caller; a hung
/// probe thread is left behind (it owns nothing the caller needs).
pub fn probe(adapter: wgpu::Adapter, deadline: Duration) -> Result<Duration, String> {
    let (tx, rx) = mpsc::channel();
    let started = std::time::Instant::now();
    let spawned = std::thread::Builder::new()
        .name("sonograph-gpu-probe".into())
        .spawn(move || {
            let r = (|| -> Result<(), String> {
                fail::fail_point!("gpu::probe_hang", |_| {
                    std::thread::sleep(Duration::from_secs(3600));
                    Err("injected hang".to_string())
                });
                fail::fail_point!("gpu::probe_fails", |_| Err(
                    "injected by failpoint gpu::probe_fails".to_string()
                ));
                let gpu = GpuDevice::open(&adapter)?;
                run_probe(&gpu, deadline)
            })();
            // Nothing of the GPU outlives the answer: once the caller has it, it may exit.
            drop(adapter);
            // The receiver may have given up already; nothing to do then.
            let _ = tx.send(r);
        });
    if let Err(e) = spawned {
        return Err(format!("cannot start the probe thread: {e}"));
    }
    match rx.recv_timeout(deadline) {
        Ok(Ok(())) => Ok(started.elapsed()),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(format!(
            "the probe kernel did not finish within {:.1} s",
            deadline.as_secs_f64()
        )),
    }
}

pub(crate) fn run_probe(gpu: &GpuDevice, deadline: Duration) -> Result<(), String> {
    let d = &gpu.device;
    let n = 64u64;
    let scope = d.push_error_scope(wgpu::ErrorFilter::Validation);
    let pipeline = compute_pipeline(d, "probe", PROBE_WGSL, "main");
    let storage = d.create_buffer(&wgpu::BufferDescriptor {
        label: Some("probe"),
        size: n * 4,
        usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
        mapped_at_creation: false,
    });
    let readback = d.create_buffer(&wgpu::BufferDescriptor {
        label: Some("probe readback"),
        size: n * 4,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let bind = d.create_bind_group(&wgpu::BindGroupDescriptor {
        label: None,
        layout: &pipeline.get_bind_group_layout(0),
        entries: &[wgpu::BindGroupEntry {
            binding: 0,
            resource: storage.as_entire_binding(),
        }],
    });
    let mut enc = d.create_command_encoder(&Default::default());
    {
        let mut pass = enc.begin_compute_pass(&Default::default());
        pass.set_pipeline(&pipeline);
        pass.set_bind_group(0, &bind, &[]);
        pass.dispatch_workgroups(1, 1, 1);
    }
    enc.copy_buffer_to_buffer(&storage, 0, &readback, 0, n * 4);
    let index = gpu.queue.submit([enc.finish()]);
    if let Some(e) = pollster::block_on(scope.pop()) {
        return Err(format!("probe kernel rejected: {e}"));
    }
    let data = read_buffer(gpu, &readback, n * 4, index, deadline)?;
    let words: &[u32] = bytemuck::cast_slice(&data);
    match words
        .iter()
        .enumerate()
        .find(|(i, &v)| v != *i as u32 * 2 + 1)
    {
        None => Ok(()),
        Some((i, v)) => Err(format!(
            "probe kernel computed {v} at {i}, expected {}",
            i * 2 + 1
        )),
    }
}

/// Waits up to `deadline` for submission `index` to finish on the device.
pub(crate) fn wait_for(
    gpu: &GpuDevice,
    index: wgpu::SubmissionIndex,
    deadline: Duration,
) -> Result<(), String> {
    gpu.device
        .poll(wgpu::PollType::Wait {
            submission_index: Some(index),
            timeout: Some(deadline),
        })
        .map(|_| ())
        .map_err(|e| {
            format!(
                "the device did not finish within {:.1} s: {e}",
                deadline.as_secs_f64()
            )
        })
}

/// Waits for submission `index`, maps the first `len` bytes of `buffer` and copies them out.
pub fn read_buffer(
    gpu: &GpuDevice,
    buffer: &wgpu::Buffer,
    len: u64,
    index: wgpu::SubmissionIndex,
    deadline: Duration,
) -> Result<Vec<u8>, String> {
    read_mapped(gpu, buffer, len, index, deadline, <[u8]>::to_vec)
}

/// Waits for submission `index`, maps the first `len` bytes of `buffer` and hands them to
/// `read` while mapped: one copy out of the mapping, where `read` converts as it copies.
pub fn read_mapped<T>(
    gpu: &GpuDevice,
    buffer: &wgpu::Buffer,
    len: u64,
    index: wgpu::SubmissionIndex,
    deadline: Duration,
    read: impl FnOnce(&[u8]) -> T,
) -> Result<T, String> {
    let slice = buffer.slice(..len);
    let (tx, rx) = mpsc::channel();
    slice.map_async(wgpu::MapMode::Read, move |r| {
        let _ = tx.send(r);
    });
    wait_for(gpu, index, deadline)?;
    match rx.recv_timeout(deadline) {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(format!("cannot map the readback buffer: {e}")),
        Err(_) => return Err("the readback buffer was never mapped".into()),
    }
    let out = match slice.get_mapped_range() {
        Ok(view) => read(&view),
        Err(e) => return Err(format!("cannot read the mapped buffer: {e}")),
    };
    buffer.unmap();
    Ok(out)
}
