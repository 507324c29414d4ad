//! The GPU extractor: WGSL kernels over a whole batch of items of any lengths in one
//! submission (a per-frame item table tells each invocation where its samples are). Where the
//! Stockham FFT can take n_fft, one fused kernel frames (padding, dither, Kaldi's per-frame
//! steps, the window), transforms, and projects onto mel bands with the log, in workgroup
//! memory; elsewhere three passes (framing, direct DFT, mel) go through device memory. The
//! spectral core is f64 where the adapter allows. Item-level steps that need the whole item
//! (drop last frame, dynamic range, DCT, affine, normalisation, Welch averaging) run on the
//! host after readback, in the CPU path's own arithmetic (`plan::finish_item`).

use std::num::NonZeroU64;
use std::time::{Duration, Instant};

use bytemuck::{Pod, Zeroable};
use rayon::prelude::*;
use sonograph_dsp::dct::Dct;
use sonograph_dsp::mel::MelBank;
use sonograph_dsp::span::{prepare_span, Span};
use sonograph_dsp::spec::{FeatureSpec, OutputKind, PadMode, PreemphasisScope};
use sonograph_dsp::window::window;
use sonograph_dsp::{AudioBatch, DeviceError, Extractor, FeatureBatch, ItemError, Precision};
use wgpu::util::DeviceExt;

use crate::context::{self, GpuDevice};
use crate::plan::{batch_buffers, finish_item, gpu_row_width, log_params, scalar_bytes, uses_mel};
use crate::pool::{human_bytes, BlockAllocator, BlockKind, MemoryPool, MemoryStats, PoolBlock};
use crate::GpuOptions;

const COMMON: &str = include_str!("../kernels/common.wgsl");
const FRAMING: &str = include_str!("../kernels/framing.wgsl");
const FRAME: &str = include_str!("../kernels/frame.wgsl");
const DFT: &str = include_str!("../kernels/dft.wgsl");
const FUSED: &str = include_str!("../kernels/fused.wgsl");
const MEL: &str = include_str!("../kernels/mel.wgsl");

/// Mirrors `Params` in kernels/common.wgsl.
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
struct Params {
    n_fft: u32,
    win_length: u32,
    hop: u32,
    window_offset: u32,
    reflect: u32,
    remove_dc: u32,
    preemph: f32,
    total_frames: u32,
    n_freq: u32,
    out_bins: u32,
    n_mels: u32,
    magnitude: u32,
    log_kind: u32,
    guard_add: u32,
    guard: f32,
    grid_y: u32,
    frame_row: u32,
    dither: f32,
    dither_seed_lo: u32,
    dither_seed_hi: u32,
}

// A uniform is a whole number of 16-byte rows; the kernels' struct has no padding of its own.
// (Every field's name, offset and type is checked against the WGSL in the tests below.)
const _: () = assert!(std::mem::size_of::<Params>().is_multiple_of(16));

/// Mirrors `Item` in kernels/common.wgsl.
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
struct ItemRecord {
    sample_offset: u32,
    n_samples: u32,
    frame_offset: u32,
    n_frames: u32,
    /// Where the first frame starts, relative to the first uploaded sample (negative inside
    /// the left padding). Indices relative to the window stay small however long the item.
    first_start: i32,
    /// The signal's samples from the first uploaded one on (a piece's window ends at the
    /// signal's end, or reads nothing past its own end).
    signal_len: u32,
    /// The item's frame index of the first frame (dither is keyed by it).
    first_frame: u32,
    _pad: u32,
}

/// Mirrors `Filter` in kernels/common.wgsl.
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
struct FilterRecord {
    start: u32,
    len: u32,
    weight_offset: u32,
    _pad: u32,
}

/// Makes wgpu buffers for the pool, catching the device's out-of-memory error.
pub struct WgpuAllocator {
    device: wgpu::Device,
    max_buffer: u64,
}

impl BlockAllocator for WgpuAllocator {
    type Block = wgpu::Buffer;

    fn allocate(&mut self, size: u64, kind: BlockKind) -> Result<wgpu::Buffer, String> {
        if size > self.max_buffer {
            return Err(format!(
                "{} is over the device's largest buffer ({})",
                human_bytes(size),
                human_bytes(self.max_buffer)
            ));
        }
        let usage = match kind {
            BlockKind::Storage => {
                wgpu::BufferUsages::STORAGE
                    | wgpu::BufferUsages::COPY_DST
                    | wgpu::BufferUsages::COPY_SRC
            }
            BlockKind::Uniform => wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            BlockKind::Readback => wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        };
        // Fault injection: the device refusing an allocation, as wgpu's OOM error scope would.
        fail::fail_point!("gpu::device_alloc", |_| Err(format!(
            "injected by failpoint gpu::device_alloc: {} refused",
            human_bytes(size)
        )));
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let buffer = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("sonograph pool block"),
            size,
            usage,
            mapped_at_creation: false,
        });
        match pollster::block_on(scope.pop()) {
            Some(e) => Err(e.to_string()),
            None => Ok(buffer),
        }
    }
}

/// The GPU backend for one spec on one device.
pub struct GpuBackend {
    spec: FeatureSpec,
    gpu: GpuDevice,
    label: String,
    kernels: Kernels,
    /// The spectral core's scalar (`real` in the kernels).
    precision: Precision,
    window_buf: wgpu::Buffer,
    twiddle_buf: wgpu::Buffer,
    /// Sparse mel filters and their weights (mel outputs only).
    mel_bufs: Option<(wgpu::Buffer, wgpu::Buffer)>,
    pool: MemoryPool<WgpuAllocator>,
    dct: Option<Dct>,
    /// How long one batch may take before the device counts as lost.
    deadline: Duration,
}

/// The kernels of one spec.
enum Kernels {
    /// kernels/fused.wgsl (its mel or power entry point): where n_fft factors into radices
    /// 2..8 and two copies of a frame fit in workgroup memory.
    Fused(wgpu::ComputePipeline),
    /// frame.wgsl, dft.wgsl and, for mel outputs, mel.wgsl: any n_fft.
    Passes {
        frame: wgpu::ComputePipeline,
        dft: wgpu::ComputePipeline,
        mel: Option<wgpu::ComputePipeline>,
    },
}

fn unavailable(msg: impl Into<String>) -> DeviceError {
    DeviceError::Unavailable(msg.into())
}

impl GpuBackend {
    /// Opens the adapter `options` names (or the best one, software included: asking for the
    /// GPU backend is naming it) and prepares the kernels for `spec`.
    pub fn new(spec: &FeatureSpec, options: &GpuOptions) -> Result<Self, DeviceError> {
        crate::check_spec(spec)?;
        let (gpu, index) = context::open_adapter(options.adapter).map_err(unavailable)?;
        Self::on_device(spec, gpu, index, options)
    }

    /// Prepares the kernels for `spec` on an open device.
    pub fn on_device(
        spec: &FeatureSpec,
        gpu: GpuDevice,
        index: usize,
        options: &GpuOptions,
    ) -> Result<Self, DeviceError> {
        crate::check_spec(spec)?;
        let budget = crate::nvml::budget_for(options.budget, &gpu.info);
        spec.validate()
            .map_err(|e| DeviceError::InvalidSpec(e.to_string()))?;
        let precision = match options.precision {
            Precision::F64 if !gpu.device.features().contains(wgpu::Features::SHADER_F64) => {
                tracing::warn!(
                    adapter = %gpu.info.name,
                    "no f64 in shaders on this adapter: the GPU computes in f32, which holds \
                     1e-4 parity with the CPU's f64 core only for Whisper and PSD specs"
                );
                Precision::F32
            }
            p => p,
        };
        // The WGSL scalar type of the spectral core.
        let real = precision.name();
        let d = &gpu.device;
        let scope = d.push_error_scope(wgpu::ErrorFilter::Validation);
        let pipeline = |name: &str, body: &str, entry: &str| {
            let source = kernel_source(real, body);
            context::compute_pipeline(d, name, &source, entry)
        };
        let radices = fft_radices(spec.n_fft)
            .filter(|_| !options.force_dft)
            .filter(|_| {
                // Two ping-pong halves of n_fft complex values.
                4 * spec.n_fft as u64 * scalar_bytes(precision)
                    <= u64::from(gpu.limits.max_compute_workgroup_storage_size)
            });
        let kernels = match radices {
            Some(radices) => {
                let list: Vec<String> = radices.iter().map(|r| format!("{r}u")).collect();
                let body = FUSED
                    .replace("@N@", &spec.n_fft.to_string())
                    .replace("@TWO_N@", &(2 * spec.n_fft).to_string())
                    .replace("@NSTAGES@", &radices.len().to_string())
                    .replace("@RADICES@", &list.join(", "));
                let entry = if uses_mel(spec) {
                    "main_mel"
                } else {
                    "main_power"
                };
                Kernels::Fused(pipeline("fused", &format!("{FRAMING}\n{body}"), entry))
            }
            None => Kernels::Passes {
                frame: pipeline("frame", &format!("{FRAMING}\n{FRAME}"), "main"),
                dft: pipeline("dft", DFT, "main"),
                mel: uses_mel(spec).then(|| pipeline("mel", MEL, "main")),
            },
        };
        let init = |label: &str, contents: &[u8]| {
            d.create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some(label),
                contents,
                usage: wgpu::BufferUsages::STORAGE,
            })
        };
        let window_buf = init(
            "window",
            &real_bytes(
                precision,
                window(spec.window, spec.win_length, spec.periodic),
            ),
        );
        // cos and sin of 2 pi i / N in f64, rounded once to `real`.
        let n = spec.n_fft as f64;
        let twiddle = (0..spec.n_fft).flat_map(|i| {
            let a = 2.0 * std::f64::consts::PI * i as f64 / n;
            [a.cos(), a.sin()]
        });
        let twiddle_buf = init("twiddle", &real_bytes(precision, twiddle));
        let mel_bufs = uses_mel(spec).then(|| {
            let bank = MelBank::new(spec);
            let mut filters = Vec::with_capacity(bank.filters.len());
            let mut weights: Vec<f64> = Vec::with_capacity(bank.nnz() + 1);
            for f in &bank.filters {
                filters.push(FilterRecord {
                    start: f.start as u32,
                    len: f.weights.len() as u32,
                    weight_offset: weights.len() as u32,
                    _pad: 0,
                });
                weights.extend_from_slice(&f.weights);
            }
            // A binding cannot be empty (every filter of a degenerate bank may be).
            weights.push(0.0);
            (
                init("mel filters", bytemuck::cast_slice(&filters)),
                init("mel weights", &real_bytes(precision, weights)),
            )
        });
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(DeviceError::Kernel(format!(
                "on {} ({:?}): {e}",
                gpu.info.name, gpu.info.backend
            )));
        }
        let label = format!(
            "gpu:{index} {} ({:?}, {real})",
            gpu.info.name, gpu.info.backend
        );
        let allocator = WgpuAllocator {
            device: gpu.device.clone(),
            max_buffer: gpu.limits.max_buffer_size,
        };
        Ok(GpuBackend {
            dct: (spec.output == OutputKind::Mfcc)
                .then(|| Dct::new(spec.n_mels, spec.n_mfcc, f64::from(spec.lifter))),
            spec: spec.clone(),
            label,
            kernels,
            precision,
            window_buf,
            twiddle_buf,
            mel_bufs,
            pool: MemoryPool::new(allocator, budget),
            deadline: Duration::from_secs(60),
            gpu,
        })
    }

    /// The spectrum kernel in use: "fft" (the fused kernel's Stockham FFT) or "dft" (the
    /// direct DFT of the three-pass path).
    pub fn spectrum_kernel(&self) -> &'static str {
        match self.kernels {
            Kernels::Fused(_) => "fft",
            Kernels::Passes { .. } => "dft",
        }
    }

    fn fused(&self) -> bool {
        matches!(self.kernels, Kernels::Fused(_))
    }

    /// The scalar the spectral core computes in: what `GpuOptions::precision` asked for, or
    /// f32 where the adapter has no f64 in shaders.
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// How long a batch may run before the device counts as lost (default 60 s).
    pub fn set_deadline(&mut self, deadline: Duration) {
        self.deadline = deadline;
    }

    fn params(&self, total_frames: usize, grid_y: u32, frame_row: u32) -> Params {
        let s = &self.spec;
        let (log_kind, guard_add, guard) = log_params(s);
        Params {
            n_fft: s.n_fft as u32,
            win_length: s.win_length as u32,
            hop: s.hop_length as u32,
            window_offset: s.window_offset() as u32,
            reflect: u32::from(s.pad_mode == PadMode::Reflect),
            remove_dc: u32::from(s.remove_dc),
            preemph: if s.preemphasis_scope == PreemphasisScope::Frame {
                s.preemphasis
            } else {
                0.0
            },
            total_frames: total_frames as u32,
            n_freq: (s.n_fft / 2 + 1) as u32,
            out_bins: gpu_row_width(s) as u32,
            n_mels: s.n_mels as u32,
            // The mel projection of a power-1 spec sums magnitudes (the CPU's sqrt before mel).
            magnitude: u32::from(uses_mel(s) && s.power == 1.0),
            log_kind: if uses_mel(s) { log_kind } else { 0 },
            guard_add,
            guard,
            grid_y,
            frame_row,
            dither: s.dither,
            dither_seed_lo: s.dither_seed as u32,
            dither_seed_hi: (s.dither_seed >> 32) as u32,
        }
    }

    /// Runs the kernels over a prepared batch; returns the rows (`frames × gpu_row_width`).
    fn run(
        &mut self,
        samples: &[f32],
        records: &[ItemRecord],
        frame_item: &[u32],
        n_items: usize,
    ) -> Result<Vec<f32>, DeviceError> {
        let spec = &self.spec;
        let total = frame_item.len();
        let max_dim = self.gpu.limits.max_compute_workgroups_per_dimension.max(1);
        let max_binding = self.gpu.limits.max_storage_buffer_binding_size;
        let too_big = |what: &str, bytes: u64| {
            DeviceError::OutOfMemory(format!(
                "a batch of {n_items} items ({total} frames) needs {} for its {what}, over the \
                 device's largest binding ({}); {}",
                human_bytes(bytes),
                human_bytes(max_binding),
                next_step(n_items)
            ))
        };
        let buffers = batch_buffers(
            spec,
            self.precision,
            self.fused(),
            records.len(),
            samples.len(),
            total,
        );
        let kind = |what: &str| match what {
            "readback" => BlockKind::Readback,
            _ => BlockKind::Storage,
        };
        let mut sizes = buffers
            .map(|(what, bytes)| (what, bytes, kind(what)))
            .to_vec();
        sizes.push((
            "params",
            std::mem::size_of::<Params>() as u64,
            BlockKind::Uniform,
        ));
        for &(what, bytes, kind) in &sizes {
            // Indices inside the kernels are u32 element counts.
            if (kind == BlockKind::Storage && bytes > max_binding)
                || bytes / 4 > u64::from(u32::MAX)
            {
                return Err(too_big(what, bytes));
            }
        }
        let wgs = total.div_ceil(64) as u64;
        let frame_x = wgs.min(u64::from(max_dim)) as u32;
        let frame_y = wgs.div_ceil(u64::from(frame_x)) as u32;
        let grid_y = (total as u64).min(u64::from(max_dim)) as u32;
        let grid_z = (total as u64).div_ceil(u64::from(grid_y)) as u32;
        if frame_y > max_dim || grid_z > max_dim {
            return Err(too_big("dispatch grid", 4 * total as u64));
        }
        let mut blocks: Vec<PoolBlock<wgpu::Buffer>> = Vec::with_capacity(sizes.len());
        for &(what, bytes, kind) in &sizes {
            match self.pool.alloc(bytes, kind) {
                Ok(b) => blocks.push(b),
                Err(e) => return Err(self.give_back_oom(blocks, &format!("{what}: {e}"), n_items)),
            }
        }
        let result = self.encode_and_read(
            &blocks,
            &sizes.iter().map(|s| s.1).collect::<Vec<_>>(),
            samples,
            records,
            frame_item,
            (grid_y, grid_z, frame_x, frame_y),
        );
        for b in blocks {
            self.pool.free(b);
        }
        result
    }

    fn give_back_oom(
        &mut self,
        blocks: Vec<PoolBlock<wgpu::Buffer>>,
        msg: &str,
        n_items: usize,
    ) -> DeviceError {
        for b in blocks {
            self.pool.free(b);
        }
        DeviceError::OutOfMemory(format!(
            "{msg}; a batch of {n_items} items; {}",
            next_step(n_items)
        ))
    }

    fn encode_and_read(
        &self,
        blocks: &[PoolBlock<wgpu::Buffer>],
        sizes: &[u64],
        samples: &[f32],
        records: &[ItemRecord],
        frame_item: &[u32],
        (grid_y, grid_z, frame_x, frame_y): (u32, u32, u32, u32),
    ) -> Result<Vec<f32>, DeviceError> {
        let spec = &self.spec;
        let total = frame_item.len();
        let d = &self.gpu.device;
        let q = &self.gpu.queue;
        let [b_samples, b_items, b_table, b_spec, b_mel, b_read, b_params] =
            [0, 1, 2, 4, 5, 6, 7].map(|i| &blocks[i].block);
        let bind = |i: usize| {
            let buffer = &blocks[i].block;
            wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                buffer,
                offset: 0,
                size: NonZeroU64::new(sizes[i]),
            })
        };
        let oom_scope = d.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let val_scope = d.push_error_scope(wgpu::ErrorFilter::Validation);
        let started = Instant::now();
        let params = self.params(total, grid_y, frame_x * 64);
        q.write_buffer(b_params, 0, bytemuck::bytes_of(&params));
        q.write_buffer(b_samples, 0, bytemuck::cast_slice(samples));
        q.write_buffer(b_items, 0, bytemuck::cast_slice(records));
        q.write_buffer(b_table, 0, bytemuck::cast_slice(frame_item));
        let bind_group = |label: &str, pipe: &wgpu::ComputePipeline, list| {
            d.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some(label),
                layout: &pipe.get_bind_group_layout(0),
                entries: &entries(list),
            })
        };
        let mel = uses_mel(spec);
        let (filters, weights) = match &self.mel_bufs {
            Some((f, w)) => (Some(f), Some(w)),
            None => (None, None),
        };
        let mut enc = d.create_command_encoder(&wgpu::CommandEncoderDescriptor {
            label: Some("sonograph batch"),
        });
        {
            let mut pass = enc.begin_compute_pass(&Default::default());
            match &self.kernels {
                Kernels::Fused(pipe) => {
                    let mut list = vec![
                        (0, bind(7)),
                        (1, bind(0)),
                        (2, bind(1)),
                        (3, bind(2)),
                        (4, self.window_buf.as_entire_binding()),
                        (5, self.twiddle_buf.as_entire_binding()),
                    ];
                    match (filters, weights) {
                        (Some(f), Some(w)) if mel => list.extend([
                            (6, f.as_entire_binding()),
                            (7, w.as_entire_binding()),
                            (8, bind(5)),
                        ]),
                        _ => list.push((9, bind(4))),
                    }
                    pass.set_pipeline(pipe);
                    pass.set_bind_group(0, &bind_group("fused", pipe, list), &[]);
                    pass.dispatch_workgroups(grid_y, grid_z, 1);
                }
                Kernels::Passes {
                    frame,
                    dft,
                    mel: mel_pipe,
                } => {
                    let list = vec![
                        (0, bind(7)),
                        (1, bind(0)),
                        (2, bind(1)),
                        (3, bind(2)),
                        (4, self.window_buf.as_entire_binding()),
                        (5, bind(3)),
                    ];
                    pass.set_pipeline(frame);
                    pass.set_bind_group(0, &bind_group("frame", frame, list), &[]);
                    pass.dispatch_workgroups(frame_x, frame_y, 1);
                    let list = vec![
                        (0, bind(7)),
                        (1, bind(3)),
                        (2, self.twiddle_buf.as_entire_binding()),
                        (3, bind(4)),
                    ];
                    pass.set_pipeline(dft);
                    pass.set_bind_group(0, &bind_group("dft", dft, list), &[]);
                    pass.dispatch_workgroups(n_freq_groups(spec), grid_y, grid_z);
                    if let (Some(pipe), Some(f), Some(w)) = (mel_pipe, filters, weights) {
                        let list = vec![
                            (0, bind(7)),
                            (1, bind(4)),
                            (2, f.as_entire_binding()),
                            (3, w.as_entire_binding()),
                            (4, bind(5)),
                        ];
                        pass.set_pipeline(pipe);
                        pass.set_bind_group(0, &bind_group("mel", pipe, list), &[]);
                        pass.dispatch_workgroups(spec.n_mels.div_ceil(64) as u32, grid_y, grid_z);
                    }
                }
            }
        }
        let (result_buf, result_bytes) = if mel {
            (b_mel, sizes[5])
        } else {
            (b_spec, sizes[4])
        };
        enc.copy_buffer_to_buffer(result_buf, 0, b_read, 0, result_bytes);
        let encoded = Instant::now();
        let index = q.submit([enc.finish()]);
        if let Some(e) = pollster::block_on(val_scope.pop()) {
            return Err(DeviceError::Kernel(format!("wgpu rejected the batch: {e}")));
        }
        // Fault injection: the device lost while the batch runs (its blocks go back to the
        // pool in `run`, as after a real loss).
        fail::fail_point!("gpu::device_lost", |_| Err(DeviceError::DeviceLost(
            format!("{}: injected by failpoint gpu::device_lost", self.label)
        )));
        if let Some(e) = pollster::block_on(oom_scope.pop()) {
            return Err(DeviceError::OutOfMemory(format!(
                "the device ran out of memory running a batch of {} items: {e}; {}",
                records.len(),
                next_step(records.len())
            )));
        }
        if self.gpu.is_lost() {
            return Err(DeviceError::DeviceLost(self.label.clone()));
        }
        let submitted = Instant::now();
        let f64_rows = spectrum_is_f64(spec, self.precision);
        // One copy out of the mapping, rounding f64 spectra to f32 rows as it goes.
        let rows = context::read_mapped(
            &self.gpu,
            b_read,
            result_bytes,
            index,
            self.deadline,
            |bytes| {
                if f64_rows {
                    bytes
                        .chunks_exact(8)
                        .map(|b| f64::from_le_bytes(b.try_into().expect("8 bytes")) as f32)
                        .collect()
                } else {
                    let mut rows = vec![0f32; bytes.len() / 4];
                    bytemuck::cast_slice_mut::<f32, u8>(&mut rows).copy_from_slice(bytes);
                    rows
                }
            },
        )
        .map_err(|e| DeviceError::DeviceLost(format!("{}: {e}", self.label)))?;
        tracing::debug!(
            upload_and_encode_ms = (encoded - started).as_secs_f64() * 1e3,
            submit_ms = (submitted - encoded).as_secs_f64() * 1e3,
            run_and_read_ms = submitted.elapsed().as_secs_f64() * 1e3,
            upload_bytes = 4 * (samples.len() + frame_item.len()),
            read_bytes = result_bytes,
            "gpu batch on the device"
        );
        Ok(rows)
    }
}

/// The WGSL of one kernel: the common declarations for scalar `real`, then `body`.
fn kernel_source(real: &str, body: &str) -> String {
    // Fault injection: a kernel that does not compile, which must never read as "no GPU".
    fail::fail_point!("gpu::broken_kernel", |_| format!(
        "{}\n{body}\nfn broken( {{",
        COMMON.replace("@REAL@", real)
    ));
    format!("{}\n{body}", COMMON.replace("@REAL@", real))
}

/// What the batcher does after an out-of-memory error on a batch of `n_items`: the end of
/// every such message.
fn next_step(n_items: usize) -> String {
    if n_items > 1 {
        format!("retry with {} items", n_items / 2)
    } else {
        "the item does not fit alone and goes to the CPU".into()
    }
}

fn entries(pairs: Vec<(u32, wgpu::BindingResource<'_>)>) -> Vec<wgpu::BindGroupEntry<'_>> {
    pairs
        .into_iter()
        .map(|(binding, resource)| wgpu::BindGroupEntry { binding, resource })
        .collect()
}

/// Radices (each 2..=8, fours first) whose product is `n`, or `None` when `n` has a prime
/// factor over 7.
fn fft_radices(mut n: usize) -> Option<Vec<u32>> {
    let mut radices = Vec::new();
    for r in [4usize, 2, 3, 5, 7] {
        while n.is_multiple_of(r) && n > 1 {
            radices.push(r as u32);
            n /= r;
        }
    }
    (n == 1 && !radices.is_empty()).then_some(radices)
}

/// True when the batch's result is an f64 spectrum (the host rounds it to f32 rows).
fn spectrum_is_f64(spec: &FeatureSpec, precision: Precision) -> bool {
    !uses_mel(spec) && precision == Precision::F64
}

/// `values` as the bytes of an `array<real>`.
fn real_bytes(precision: Precision, values: impl IntoIterator<Item = f64>) -> Vec<u8> {
    match precision {
        Precision::F32 => {
            let v: Vec<f32> = values.into_iter().map(|x| x as f32).collect();
            bytemuck::cast_slice(&v).to_vec()
        }
        Precision::F64 => {
            let v: Vec<f64> = values.into_iter().collect();
            bytemuck::cast_slice(&v).to_vec()
        }
    }
}

fn n_freq_groups(spec: &FeatureSpec) -> u32 {
    (spec.n_fft / 2 + 1).div_ceil(64) as u32
}

impl Extractor for GpuBackend {
    fn spec(&self) -> &FeatureSpec {
        &self.spec
    }

    fn device(&self) -> String {
        self.label.clone()
    }

    /// Runs the health-probe kernel on this backend's own device (5 s deadline): a device the
    /// driver reports lost never recovers.
    fn memory_stats(&self) -> Option<MemoryStats> {
        Some(self.pool.stats())
    }

    fn recover(&mut self) -> bool {
        fail::fail_point!("gpu::recover_fails", |_| false);
        if self.gpu.is_lost() {
            return false;
        }
        match context::run_probe(&self.gpu, Duration::from_secs(5)) {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(device = %self.label, "health probe after an error failed: {e}");
                false
            }
        }
    }

    /// Half the budget over the bytes one item needs, so that the pool's cache and the next
    /// batch's uploads have room, and no more than fit in the device's largest buffer.
    fn batch_hint(&self, item_samples: usize) -> Option<usize> {
        let frames = self.spec.n_raw_frames(item_samples);
        let buffers = batch_buffers(
            &self.spec,
            self.precision,
            self.fused(),
            1,
            item_samples,
            frames,
        );
        let total: u64 = buffers.iter().map(|b| b.1).sum();
        let largest = buffers.iter().map(|b| b.1).max().unwrap_or(1).max(1);
        let limits = &self.gpu.limits;
        let by_budget = self.pool.budget() / 2 / total.max(1);
        let by_buffer = limits
            .max_storage_buffer_binding_size
            .min(limits.max_buffer_size)
            / largest;
        Some(by_budget.min(by_buffer).clamp(1, usize::MAX as u64) as usize)
    }

    fn extract_batch(
        &mut self,
        batch: &AudioBatch,
        out: &mut FeatureBatch,
    ) -> Result<(), DeviceError> {
        if self.gpu.is_lost() {
            return Err(DeviceError::DeviceLost(self.label.clone()));
        }
        let spec = &self.spec;
        let started = Instant::now();
        let mut samples: Vec<f32> = Vec::with_capacity(batch.samples().len());
        let mut records: Vec<ItemRecord> = Vec::with_capacity(batch.len());
        let mut frame_item: Vec<u32> = Vec::new();
        let mut per_item: Vec<Result<usize, ItemError>> = Vec::with_capacity(batch.len());
        let mut lasts: Vec<bool> = Vec::with_capacity(batch.len());
        for (i, item) in batch.items().enumerate() {
            let start = samples.len();
            let span = batch
                .span(i)
                .copied()
                .unwrap_or_else(|| Span::whole(spec, item.len()));
            lasts.push(span.last);
            match prepare_span(spec, item, &span, &mut samples) {
                Err(e) => per_item.push(Err(e)),
                Ok(base) => {
                    let frames = span.frames;
                    let first_start =
                        i32::try_from(spec.frame_start(span.first_frame) - base as isize);
                    let fields = [
                        start,
                        samples.len() - start,
                        frame_item.len(),
                        frames,
                        span.signal_len - base,
                        span.first_frame + frames,
                    ]
                    .map(u32::try_from);
                    let (
                        [Ok(sample_offset), Ok(n_samples), Ok(frame_offset), Ok(n_frames), Ok(signal_len), Ok(_)],
                        Ok(first_start),
                    ) = (fields, first_start)
                    else {
                        return Err(DeviceError::OutOfMemory(format!(
                            "a batch of {} items holds more than 2^32 samples or frames; {}",
                            batch.len(),
                            next_step(batch.len())
                        )));
                    };
                    let index = records.len() as u32;
                    frame_item.extend(std::iter::repeat_n(index, frames));
                    per_item.push(Ok(records.len()));
                    records.push(ItemRecord {
                        sample_offset,
                        n_samples,
                        frame_offset,
                        n_frames,
                        first_start,
                        signal_len,
                        first_frame: span.first_frame as u32,
                        _pad: 0,
                    });
                }
            }
        }
        let prepared = Instant::now();
        let rows = if frame_item.is_empty() {
            Vec::new()
        } else {
            self.run(&samples, &records, &frame_item, batch.len())?
        };
        let computed = Instant::now();
        let width = gpu_row_width(&self.spec);
        // Items finish (log, normalisation, DCT) side by side: on one core this was a fifth of
        // a batch's time on an H100.
        let finished: Vec<Result<(usize, Vec<f32>), ItemError>> = per_item
            .into_par_iter()
            .zip(lasts)
            .map(|(item, last)| {
                let rec = records[item?];
                let a = rec.frame_offset as usize * width;
                let b = a + rec.n_frames as usize * width;
                let mut item_rows = Vec::new();
                let frames = finish_item(
                    &self.spec,
                    self.dct.as_ref(),
                    &rows[a..b],
                    rec.n_frames as usize,
                    last,
                    &mut item_rows,
                );
                Ok((frames, item_rows))
            })
            .collect();
        for item in finished {
            match item {
                Err(e) => out.push_error(e),
                Ok((frames, item_rows)) => out.push_owned(frames, item_rows),
            }
        }
        // Where a batch's time goes, for profiling on a real GPU (SONOGRAPH_LOG=sonograph_gpu=debug).
        tracing::debug!(
            items = batch.len(),
            frames = frame_item.len(),
            prepare_ms = (prepared - started).as_secs_f64() * 1e3,
            device_ms = (computed - prepared).as_secs_f64() * 1e3,
            finish_ms = computed.elapsed().as_secs_f64() * 1e3,
            "gpu batch"
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{fft_radices, kernel_source, FilterRecord, ItemRecord, Params, FRAME, FRAMING};
    use std::mem::{offset_of, size_of};

    /// A field of a Rust mirror: its name, byte offset and WGSL scalar type.
    type Field = (&'static str, usize, &'static str);

    macro_rules! fields {
        ($ty:ty { $($name:ident: $wgsl:literal),* $(,)? }) => {
            &[$((stringify!($name), offset_of!($ty, $name), $wgsl)),*]
        };
    }

    /// Checks a Rust mirror field by field against the struct `name` of the kernels' common
    /// declarations (in the frame kernel, as compiled), as naga — wgpu's own WGSL front end —
    /// lays it out.
    fn check_mirror(name: &str, rust: &[Field], rust_size: usize) {
        let source = kernel_source("f32", &format!("{FRAMING}\n{FRAME}"));
        let module = naga::front::wgsl::parse_str(&source).expect("the frame kernel parses");
        let (members, span) = module
            .types
            .iter()
            .find_map(|(_, ty)| match &ty.inner {
                naga::TypeInner::Struct { members, span } if ty.name.as_deref() == Some(name) => {
                    Some((members.clone(), *span))
                }
                _ => None,
            })
            .unwrap_or_else(|| panic!("no struct {name} in common.wgsl"));
        let wgsl: Vec<(String, usize, String)> = members
            .iter()
            .map(|m| {
                let scalar = match &module.types[m.ty].inner {
                    naga::TypeInner::Scalar(s) => match (s.kind, s.width) {
                        (naga::ScalarKind::Uint, 4) => "u32",
                        (naga::ScalarKind::Sint, 4) => "i32",
                        (naga::ScalarKind::Float, 4) => "f32",
                        other => panic!("{name}: unexpected scalar {other:?}"),
                    },
                    other => panic!("{name}: unexpected member type {other:?}"),
                };
                (
                    m.name.clone().unwrap_or_default(),
                    m.offset as usize,
                    scalar.to_string(),
                )
            })
            .collect();
        let rust: Vec<(String, usize, String)> = rust
            .iter()
            .map(|(n, o, t)| (n.to_string(), *o, t.to_string()))
            .collect();
        assert_eq!(
            rust, wgsl,
            "{name}: the Rust mirror and the WGSL struct differ"
        );
        assert_eq!(rust_size, span as usize, "{name}: size");
    }

    #[test]
    fn rust_mirrors_match_the_kernels_structs_field_by_field() {
        check_mirror(
            "Params",
            fields!(Params {
                n_fft: "u32",
                win_length: "u32",
                hop: "u32",
                window_offset: "u32",
                reflect: "u32",
                remove_dc: "u32",
                preemph: "f32",
                total_frames: "u32",
                n_freq: "u32",
                out_bins: "u32",
                n_mels: "u32",
                magnitude: "u32",
                log_kind: "u32",
                guard_add: "u32",
                guard: "f32",
                grid_y: "u32",
                frame_row: "u32",
                dither: "f32",
                dither_seed_lo: "u32",
                dither_seed_hi: "u32",
            }),
            size_of::<Params>(),
        );
        check_mirror(
            "Item",
            fields!(ItemRecord {
                sample_offset: "u32",
                n_samples: "u32",
                frame_offset: "u32",
                n_frames: "u32",
                first_start: "i32",
                signal_len: "u32",
                first_frame: "u32",
                _pad: "u32",
            }),
            size_of::<ItemRecord>(),
        );
        check_mirror(
            "Filter",
            fields!(FilterRecord {
                start: "u32",
                len: "u32",
                weight_offset: "u32",
                _pad: "u32"
            }),
            size_of::<FilterRecord>(),
        );
    }

    #[test]
    fn radices_multiply_back_and_large_primes_fall_back() {
        assert_eq!(fft_radices(400), Some(vec![4, 4, 5, 5]));
        assert_eq!(fft_radices(512), Some(vec![4, 4, 4, 4, 2]));
        assert_eq!(fft_radices(2048), Some(vec![4, 4, 4, 4, 4, 2]));
        assert_eq!(fft_radices(3 * 7 * 49), Some(vec![3, 7, 7, 7]));
        assert_eq!(fft_radices(2 * 11), None);
        assert_eq!(fft_radices(1), None);
    }
}
