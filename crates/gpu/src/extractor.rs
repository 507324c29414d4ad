//! The GPU extractor: WGSL kernels over a whole batch of items of any lengths in one
//! submission (a per-frame item table tells each invocation where its samples are). Where the
//! Stockham FFT can take n_fft, one fused kernel frames (padding, dither, Kaldi's per-frame
//! steps, the window), transforms, and projects onto mel bands with the log, in workgroup
//! memory; elsewhere three passes (framing, direct DFT, mel) go through device memory. The
//! spectral core is f64 where the adapter allows. Samples go as f32, or as their 16-bit
//! integers where every item of a chunk is on the 16-bit grid and the kernels can make the
//! spec's input from them exactly (`SampleFormat`, `takes_pcm16`). Item-level steps that need
//! the whole item run after the mel kernel where the device can apply them as the host would
//! (the dynamic-range clamp and the affine of mel and log-mel rows, and NeMo's per-feature
//! normalisation in f64: kernels/item_steps.wgsl, `plan::device_item_steps`), and otherwise on
//! the host after readback (drop last frame,
//! DCT, normalisation, Welch averaging, and the rest), in the CPU path's own arithmetic
//! (`plan::finish_item`).

use std::num::NonZeroU64;
use std::time::{Duration, Instant};

use bytemuck::{Pod, Zeroable};
use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};
use rayon::prelude::*;
use sonograph_dsp::dct::Dct;
use sonograph_dsp::mel::MelBank;
use sonograph_dsp::pcm16::to_pcm16_into;
use sonograph_dsp::signal::EdgePadding;
use sonograph_dsp::span::{
    check_finite, prepare_piece_into, prepared_as_is, prepared_layout, Span,
};
use sonograph_dsp::spec::{FeatureSpec, Normalize, OutputKind, PreemphasisScope};
use sonograph_dsp::window::window;
use sonograph_dsp::{AudioBatch, DeviceError, Extractor, FeatureBatch, ItemError, Precision};
use wgpu::util::DeviceExt;

use crate::context::{self, GpuDevice};
use crate::plan::{
    batch_buffers, device_item_steps, f32_rows, finish_item, gpu_row_width, host_finish_spec,
    item_steps_fit, log_params, rows_final_on_device, scalar_bytes, uses_mel, ItemSteps,
};
use crate::pool::{human_bytes, BlockAllocator, BlockKind, MemoryPool, MemoryStats, PoolBlock};
use crate::transfer::{StagingRing, RING_DEPTH};
use crate::GpuOptions;
use sonograph_dsp::TransferStats;

const COMMON: &str = include_str!("../kernels/common.wgsl");
const FRAMING: &str = include_str!("../kernels/framing.wgsl");
const FRAME: &str = include_str!("../kernels/frame.wgsl");
const DFT: &str = include_str!("../kernels/dft.wgsl");
const FUSED: &str = include_str!("../kernels/fused.wgsl");
const MEL: &str = include_str!("../kernels/mel.wgsl");
const ITEM_STEPS: &str = include_str!("../kernels/item_steps.wgsl");
const F16_ROWS: &str = include_str!("../kernels/f16_rows.wgsl");
const WAVEFORM: &str = include_str!("../kernels/waveform.wgsl");

/// Samples per chunk sent to the device, in bytes: big enough that a chunk holds an item per
/// core for the host's per-item finishing (64 × 30 s Whisper clips on an H200 machine with 16
/// cores, host to host: 8 MiB chunks 172,807 audio-s/s, 16 MiB 204,922, 32 MiB 224,970,
/// 64 MiB 218,018), small enough that a batch goes through in several chunks whose filling,
/// kernels and finishing overlap. Its staging ring holds about 3 × 1.5 × (this + its rows).
const DEFAULT_CHUNK_BYTES: usize = 32 << 20;

/// The chunk size: `SONOGRAPH_GPU_CHUNK_MB` (whole MiB, 1 to 1024) where set, for measuring
/// the transfers at other sizes on a real GPU (bench/gpu/run.sh); else the default.
fn chunk_bytes_from_env() -> usize {
    match std::env::var("SONOGRAPH_GPU_CHUNK_MB") {
        Ok(v) => match v.trim().parse::<usize>() {
            Ok(mb @ 1..=1024) => mb << 20,
            _ => {
                tracing::warn!("SONOGRAPH_GPU_CHUNK_MB={v:?} is not 1 to 1024: the default chunks");
                DEFAULT_CHUNK_BYTES
            }
        },
        Err(_) => DEFAULT_CHUNK_BYTES,
    }
}

/// Whether `SONOGRAPH_GPU_ITEM_STEPS=host` keeps the whole-row steps on the host, for
/// measuring what the device's steps save on a real GPU (bench/gpu/run.sh).
fn item_steps_on_host_from_env() -> bool {
    std::env::var("SONOGRAPH_GPU_ITEM_STEPS").is_ok_and(|v| v.trim() == "host")
}

/// Samples per piece of an item copied into the staging memory by one task: 1 MiB of f32, a
/// multiple of 4 so that every piece starts where a mapped range may (8 bytes) in either
/// sample format.
const FILL_PIECE_SAMPLES: usize = 1 << 18;

/// How a chunk's samples travel to the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SampleFormat {
    F32,
    /// Their 16-bit integers, half the bytes: where every item of the chunk is on the 16-bit
    /// grid (`sonograph_dsp::pcm16`) and the kernels can make the spec's input from them
    /// exactly ([`takes_pcm16`]).
    Pcm16,
}

impl SampleFormat {
    fn bytes(self) -> usize {
        match self {
            SampleFormat::F32 => 4,
            SampleFormat::Pcm16 => 2,
        }
    }

    /// An item's place in the staging memory is a multiple of this many samples, so that
    /// every item starts 8-byte aligned (where a mapped range may start).
    fn align(self) -> usize {
        8 / self.bytes()
    }

    /// The kernels' `samples` binding and its `load_sample` (kernels/framing.wgsl) for
    /// `spec`.
    fn wgsl(self, spec: &FeatureSpec) -> String {
        match self {
            SampleFormat::F32 => SAMPLES_F32.into(),
            // 2^-15 times the spec's input scale, a power of two: `k · scale` is exact, and
            // the f32 the CPU path makes of sample k / 32768 times the input scale. Written out
            // in full (a power of two has a short exact decimal), so the literal is the value.
            SampleFormat::Pcm16 => SAMPLES_PCM16.replace(
                "@SCALE@",
                &format!("{:e}", f64::from(spec.input_scale) / 32_768.0),
            ),
        }
    }
}

/// Whether the kernels make the spec's input from 16-bit samples exactly as the CPU path
/// makes it from their f32: the spec scales them by a power of two, or not at all (Kaldi's
/// 32768, so that its input is the integers themselves), and pre-emphasises, if at all, in
/// the kernels (each frame, as Kaldi; or the signal, as NeMo, where
/// [`preemphasis_on_device`]).
fn takes_pcm16(spec: &FeatureSpec) -> bool {
    let scale = spec.input_scale;
    // Within 2^±64: `scale / 32768` stays normal (a GPU may flush subnormals) and `k · scale`
    // finite.
    let power_of_two =
        (2f32.powi(-64)..=2f32.powi(64)).contains(&scale) && scale.to_bits() & 0x007f_ffff == 0;
    let preemphasis_on_host = spec.preemphasis != 0.0
        && spec.preemphasis_scope == PreemphasisScope::Signal
        && !preemphasis_on_device(spec);
    power_of_two && !preemphasis_on_host
}

/// Whether the kernels pre-emphasise the signal (NeMo's `x[n] - a x[n-1]`, the first sample
/// as it is) as each sample is read, so that the host copies the samples as they are (or as
/// 16-bit samples) instead of pre-emphasising every sample on the way into the staging memory
/// (NeMo's fill took 9.1-9.6 ms of a 64-clip batch on an H200 machine, Whisper's 6.7): where
/// the spec does not scale its input, so that the kernels read the signal's own samples.
fn preemphasis_on_device(spec: &FeatureSpec) -> bool {
    spec.preemphasis != 0.0
        && spec.preemphasis_scope == PreemphasisScope::Signal
        && spec.input_scale == 1.0
}

const SAMPLES_F32: &str = "@group(0) @binding(1) var<storage, read> samples: array<f32>;
fn load_sample(i: u32) -> f32 {
    return samples[i];
}";

// Two samples to a word, the first in its low half (the staging memory is little-endian),
// sign-extended by an arithmetic shift; then scaled by a power of two (`@SCALE@`: exact, where
// WGSL's division promises only 2.5 ULP).
const SAMPLES_PCM16: &str = "@group(0) @binding(1) var<storage, read> samples: array<u32>;
fn load_sample(i: u32) -> f32 {
    let word = samples[i >> 1u];
    let k = bitcast<i32>(word << (16u - 16u * (i & 1u))) >> 16u;
    return f32(k) * @SCALE@;
}";

/// The two kernel timestamps read back after a chunk's rows.
const TIMESTAMP_BYTES: u64 = 16;

/// Mirrors `Params` in kernels/common.wgsl.
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
struct Params {
    n_fft: u32,
    win_length: u32,
    hop: u32,
    window_offset: u32,
    edge: u32,
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
    n_items: u32,
    item_row: u32,
    item_steps: u32,
    dynamic_range: f32,
    affine_add: f32,
    affine_scale: f32,
    signal_preemph: f32,
    pack_row: u32,
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
    /// Where the first frame starts, relative to the first prepared sample (negative inside
    /// the left padding; a context sample sent before it is at -1). Indices relative to the
    /// window stay small however long the item.
    first_start: i32,
    /// The signal's samples from the first prepared one on (a piece's window ends at the
    /// signal's end, or reads nothing past its own end).
    signal_len: u32,
    /// The item's frame index of the first frame (dither is keyed by it).
    first_frame: u32,
    /// The frames the whole-row steps read (all but a last one the host drops).
    step_frames: u32,
    /// 1 where the sample before the first is uploaded too (the signal's pre-emphasis on the
    /// device reads it).
    context: u32,
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
    /// The same kernels reading 16-bit samples, made when a chunk first needs them.
    kernels_pcm16: OnDemand<Kernels>,
    /// The fused kernel's FFT radices (`None`: the three passes).
    radices: Option<Vec<u32>>,
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
    /// Staging memory, made once and reused by every batch.
    ring: StagingRing,
    /// Items go to the device in chunks of about this many bytes of samples.
    chunk_bytes: usize,
    /// Two timestamps around each chunk's kernels, where the device has timestamp queries,
    /// and the buffer they are resolved into.
    timestamps: Option<(wgpu::QuerySet, wgpu::Buffer)>,
    /// The whole-row steps the device applies, and their kernels.
    item_steps: Option<(ItemSteps, StepKernels)>,
    /// The spec the host finishes the device's rows by: without the device's steps.
    host_spec: FeatureSpec,
    /// The device's rows are the output values (`plan::rows_final_on_device`): they may come
    /// back as f16, through kernels/f16_rows.wgsl, made at first need.
    rows_final: bool,
    f16_pack: OnDemand<wgpu::ComputePipeline>,
    /// The rows come back as f16: the job stores f16 and nothing reads them before
    /// ([`Extractor::set_rows_stored_as_f16`]).
    f16_rows: bool,
}

/// kernels/item_steps.wgsl's entry points: each item's statistics (its maximum, or its bands'
/// means and deviations), then the steps.
struct StepKernels {
    statistics: wgpu::ComputePipeline,
    apply: wgpu::ComputePipeline,
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
    /// frame.wgsl then waveform.wgsl: a waveform's samples, no spectrum.
    Samples {
        frame: wgpu::ComputePipeline,
        rows: wgpu::ComputePipeline,
    },
}

/// Kernels made at first need (those that read 16-bit samples, the f16 rows' kernel).
enum OnDemand<T> {
    NotYet,
    Ready(T),
    /// The adapter would not build them (logged once): chunks go as f32, rows come as f32.
    Refused,
}

fn unavailable(msg: impl Into<String>) -> DeviceError {
    DeviceError::Unavailable(msg.into())
}

impl GpuBackend {
    /// Opens the adapter `options` names (or the best one, software included: asking for the
    /// GPU backend is naming it) and prepares the kernels for `spec`.
    pub fn new(spec: &FeatureSpec, options: &GpuOptions) -> Result<Self, DeviceError> {
        crate::check_spec(spec)?;
        let (gpu, index) = context::open_adapter(options.adapter, crate::device::adapter_score)
            .map_err(unavailable)?;
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
        let d = &gpu.device;
        let scope = d.push_error_scope(wgpu::ErrorFilter::Validation);
        let radices = fft_radices(spec.n_fft)
            .filter(|_| !options.force_dft)
            .filter(|_| {
                // Two ping-pong halves of n_fft complex values.
                4 * spec.n_fft as u64 * scalar_bytes(precision)
                    <= u64::from(gpu.limits.max_compute_workgroup_storage_size)
            });
        let kernels = build_kernels(&gpu, spec, precision, radices.as_deref(), SampleFormat::F32);
        let item_steps = device_item_steps(spec, precision)
            .filter(|_| !options.item_steps_on_host && !item_steps_on_host_from_env())
            .map(|steps| {
                let source = kernel_source(precision.name(), ITEM_STEPS);
                let pipeline = |entry| context::compute_pipeline(d, "item steps", &source, entry);
                let kernels = StepKernels {
                    statistics: pipeline(if steps.normalize.is_some() {
                        "band_stats"
                    } else {
                        "item_max"
                    }),
                    apply: pipeline("apply"),
                };
                (steps, kernels)
            });
        let host_spec = host_finish_spec(spec, item_steps.as_ref().map(|s| s.0));
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
            "gpu:{index} {} ({:?}, {})",
            gpu.info.name,
            gpu.info.backend,
            precision.name()
        );
        let allocator = WgpuAllocator {
            device: gpu.device.clone(),
            max_buffer: gpu.limits.max_buffer_size,
        };
        Ok(GpuBackend {
            dct: Dct::of_spec(spec),
            spec: spec.clone(),
            label,
            kernels,
            kernels_pcm16: OnDemand::NotYet,
            radices,
            precision,
            window_buf,
            twiddle_buf,
            mel_bufs,
            pool: MemoryPool::new(allocator, budget),
            deadline: Duration::from_secs(60),
            ring: StagingRing::new(),
            chunk_bytes: chunk_bytes_from_env(),
            timestamps: gpu
                .device
                .features()
                .contains(wgpu::Features::TIMESTAMP_QUERY)
                .then(|| {
                    let queries = gpu.device.create_query_set(&wgpu::QuerySetDescriptor {
                        label: Some("sonograph kernel time"),
                        ty: wgpu::QueryType::Timestamp,
                        count: 2,
                    });
                    let resolved = gpu.device.create_buffer(&wgpu::BufferDescriptor {
                        label: Some("sonograph kernel time"),
                        size: TIMESTAMP_BYTES,
                        usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
                        mapped_at_creation: false,
                    });
                    (queries, resolved)
                }),
            rows_final: rows_final_on_device(spec, &host_spec),
            host_spec,
            item_steps,
            f16_pack: OnDemand::NotYet,
            f16_rows: false,
            gpu,
        })
    }

    /// Whether the device applies the spec's whole-row steps (`plan::device_item_steps`), so
    /// that the host only copies the rows out.
    pub fn item_steps_on_device(&self) -> bool {
        self.item_steps.is_some()
    }

    /// The spectrum kernel in use: "fft" (the fused kernel's Stockham FFT), "dft" (the
    /// direct DFT of the three-pass path) or "none" (a waveform's samples).
    pub fn spectrum_kernel(&self) -> &'static str {
        match self.kernels {
            Kernels::Fused(_) => "fft",
            Kernels::Passes { .. } => "dft",
            Kernels::Samples { .. } => "none",
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

    /// How chunk `items` travels: as 16-bit samples where the spec takes them
    /// ([`takes_pcm16`]) and every item is on the 16-bit grid (and the kernels for them
    /// build), else as f32.
    fn chunk_format(&mut self, batch: &AudioBatch, items: &[Laid]) -> SampleFormat {
        if !takes_pcm16(&self.spec) || !items.iter().all(|l| batch.is_pcm16(l.item)) {
            return SampleFormat::F32;
        }
        if let OnDemand::NotYet = self.kernels_pcm16 {
            let scope = self
                .gpu
                .device
                .push_error_scope(wgpu::ErrorFilter::Validation);
            let kernels = build_kernels(
                &self.gpu,
                &self.spec,
                self.precision,
                self.radices.as_deref(),
                SampleFormat::Pcm16,
            );
            self.kernels_pcm16 = match pollster::block_on(scope.pop()) {
                None => OnDemand::Ready(kernels),
                Some(e) => {
                    tracing::warn!(
                        device = %self.label,
                        "the kernels for 16-bit samples did not build; samples go as f32: {e}"
                    );
                    OnDemand::Refused
                }
            };
        }
        match self.kernels_pcm16 {
            OnDemand::Ready(_) => SampleFormat::Pcm16,
            _ => SampleFormat::F32,
        }
    }

    /// The kernels that read `format`.
    fn kernels(&self, format: SampleFormat) -> &Kernels {
        match (&self.kernels_pcm16, format) {
            (OnDemand::Ready(k), SampleFormat::Pcm16) => k,
            // `chunk_format` chooses 16-bit samples only once their kernels are ready.
            _ => &self.kernels,
        }
    }

    fn params(
        &self,
        total_frames: usize,
        grid_y: u32,
        frame_row: u32,
        items: ItemGrid,
        pack_row: u32,
        steps_on_device: bool,
    ) -> Params {
        let s = &self.spec;
        let (log_kind, guard_add, guard) = log_params(s);
        let steps = self
            .item_steps
            .as_ref()
            .map(|(steps, _)| *steps)
            .filter(|_| steps_on_device);
        let range = steps.and_then(|s| s.dynamic_range);
        let affine = steps.and_then(|s| s.affine);
        Params {
            n_fft: s.n_fft as u32,
            win_length: s.win_length as u32,
            hop: s.hop_length as u32,
            window_offset: s.window_offset() as u32,
            edge: match EdgePadding::of(s) {
                EdgePadding::Zeros => 0,
                EdgePadding::Reflect => 1,
                EdgePadding::Symmetric => 2,
            },
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
            n_items: items.n_items,
            item_row: items.row,
            item_steps: u32::from(range.is_some())
                | (u32::from(affine.is_some()) << 1)
                | (u32::from(steps.is_some_and(|s| s.normalize.is_some())) << 2)
                | (u32::from(
                    steps.is_some_and(|s| s.normalize == Some(Normalize::ZeroMeanUnitVar)),
                ) << 3),
            dynamic_range: range.unwrap_or(0.0),
            affine_add: affine.map_or(0.0, |a| a.0),
            affine_scale: affine.map_or(1.0, |a| a.1),
            signal_preemph: if preemphasis_on_device(s) {
                s.preemphasis
            } else {
                0.0
            },
            pack_row,
        }
    }

    /// Runs a batch's items on the device, chunk by chunk through the staging ring; returns
    /// each laid-out item's rows, finished, in order.
    fn run(&mut self, batch: &AudioBatch, laid: &[Laid]) -> Result<Vec<ItemResult>, DeviceError> {
        let chunks = chunks(laid, self.chunk_bytes);
        let n_items = laid.len();
        let total: usize = laid.iter().map(|l| l.frames).sum();
        // The device buffers of the largest chunk: chunks run one after another on the
        // device, so one set serves them all.
        let largest = |f: fn(&Chunk) -> usize| chunks.iter().map(f).max().unwrap_or(0);
        let (items, samples, frames) = (
            largest(|c| c.items.len()),
            largest(|c| c.samples),
            largest(|c| c.frames),
        );
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
            &self.spec,
            self.precision,
            self.fused(),
            self.f16_rows,
            items,
            samples,
            frames,
        );
        // The rows come back through the ring, not a pooled buffer.
        let mut sizes: Vec<(&str, u64, BlockKind)> = buffers
            .iter()
            .filter(|(what, _)| *what != "readback")
            .map(|&(what, bytes)| (what, bytes, BlockKind::Storage))
            .collect();
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
        let wgs = frames.div_ceil(64) as u64;
        if wgs.div_ceil(u64::from(max_dim)) > u64::from(max_dim)
            || (frames as u64).div_ceil(u64::from(max_dim)) > u64::from(max_dim)
        {
            return Err(too_big("dispatch grid", 4 * frames as u64));
        }
        let mut blocks: Vec<PoolBlock<wgpu::Buffer>> = Vec::with_capacity(sizes.len());
        for &(what, bytes, kind) in &sizes {
            match self.pool.alloc(bytes, kind) {
                Ok(b) => blocks.push(b),
                Err(e) => return Err(self.give_back_oom(blocks, &format!("{what}: {e}"), n_items)),
            }
        }
        let device = DeviceBuffers {
            blocks: &blocks,
            sizes: sizes.iter().map(|s| s.1).collect(),
        };
        let result = self.pipeline(batch, laid, &chunks, &device);
        for b in blocks {
            self.pool.free(b);
        }
        if result.is_err() {
            // A slot may be mapped or in flight: the next batch starts with a fresh ring.
            self.ring.reset();
        }
        result
    }

    /// The chunks through the ring. Step k waits for chunk k − 2 (the device has had it for
    /// a step, and runs chunk k − 1 meanwhile); then, side by side on the host's threads,
    /// finishes that chunk's rows out of its slot's readback buffer and fills chunk k into the
    /// upload buffer of its slot (chunk k − 3's, read at the step before); then submits chunk
    /// k. (Filling and finishing one after the other took 5.9 + 5.4 ms of a 64-clip batch's
    /// 13.5 ms on an H200 machine, with the device idle for most of it.) An item with a
    /// non-finite sample is found as it is filled and fails alone when its chunk is finished.
    fn pipeline(
        &mut self,
        batch: &AudioBatch,
        laid: &[Laid],
        chunks: &[Chunk],
        device: &DeviceBuffers,
    ) -> Result<Vec<ItemResult>, DeviceError> {
        // Chunk k's slot is free once chunk k − RING_DEPTH has been read, a step before.
        const LAG: usize = RING_DEPTH - 1;
        let lost = |label: &str, e: String| DeviceError::DeviceLost(format!("{label}: {e}"));
        let mut rows: Vec<ItemResult> = Vec::with_capacity(laid.len());
        // Per chunk sent, each item's first non-finite sample (found by the fill), and how its
        // rows come back.
        let mut refused: Vec<Vec<Option<ItemError>>> = Vec::with_capacity(chunks.len());
        let mut returned: Vec<Returned> = Vec::with_capacity(chunks.len());
        for k in 0..chunks.len() + LAG {
            let collecting = match k.checked_sub(LAG) {
                Some(c) => self
                    .ring
                    .wait(&self.gpu, c, self.deadline)
                    .map_err(|e| lost(&self.label, e))?
                    .map(|bytes| (c, bytes, &laid[chunks[c].items.clone()])),
                None => None,
            };
            let sending = match chunks.get(k) {
                Some(chunk) => {
                    let items = &laid[chunk.items.clone()];
                    Some((self.stage(batch, items, chunk, k)?, items))
                }
                None => None,
            };
            let this = &*self;
            let (finished, filled) = rayon::join(
                || {
                    collecting.map(|(c, bytes, items)| {
                        let started = Instant::now();
                        let rows = this.finish_chunk(c, bytes, items, &refused[c], returned[c]);
                        (rows, started.elapsed().as_secs_f64())
                    })
                },
                || {
                    sending.as_ref().map(|(staged, items)| {
                        let started = Instant::now();
                        let filled = this.fill(batch, items, staged, k);
                        (filled, started.elapsed().as_secs_f64())
                    })
                },
            );
            if let Some((finished, seconds)) = finished {
                self.ring.stats.finish_seconds += seconds;
                let (finished, kernel_seconds) = finished.map_err(|e| lost(&self.label, e))?;
                if let Some(s) = kernel_seconds {
                    self.ring.stats.kernel_seconds += s;
                    self.ring.stats.timed_chunks += 1;
                }
                rows.extend(finished);
            }
            if let (Some((filled, seconds)), Some((staged, _))) = (filled, sending) {
                self.ring.stats.fill_seconds += seconds;
                refused.push(filled?);
                returned.push(staged.returned);
                self.dispatch(k, device, staged)?;
            }
        }
        Ok(rows)
    }

    /// Lays out chunk `k` (its items' records, its parameters, where each part goes in its
    /// staging buffer) and readies the slot's upload buffer for it.
    fn stage(
        &mut self,
        batch: &AudioBatch,
        items: &[Laid],
        chunk: &Chunk,
        k: usize,
    ) -> Result<Staged, DeviceError> {
        let format = self.chunk_format(batch, items);
        let spec = &self.spec;
        let frames = chunk.frames;
        let max_dim = self.gpu.limits.max_compute_workgroups_per_dimension.max(1);
        let (frame_x, frame_y) = wrapped(frames.div_ceil(64), max_dim);
        let (grid_y, grid_z) = wrapped(frames, max_dim);
        let (row, rows) = wrapped(items.len(), max_dim);
        let item_grid = ItemGrid {
            n_items: items.len() as u32,
            row,
            rows,
        };
        // The f16 kernel: an invocation per word of two values.
        let words = (frames * gpu_row_width(spec)).div_ceil(2);
        let pack_grid = wrapped(words.div_ceil(64), max_dim);
        // Each item's steps within every invocation's loop bound, or the host applies them
        // to the whole chunk (and its rows come back as f32 for that).
        let steps_on_device = self.item_steps.as_ref().is_some_and(|(steps, _)| {
            items
                .iter()
                .all(|l| item_steps_fit(*steps, l.frames, gpu_row_width(spec)))
        });
        let returned = Returned {
            steps_on_device,
            f16: self.f16_rows && (steps_on_device || self.item_steps.is_none()),
        };
        let params = self.params(
            frames,
            grid_y,
            frame_x * 64,
            item_grid,
            pack_grid.0,
            steps_on_device,
        );
        let mut records = Vec::with_capacity(items.len());
        let (mut next_sample, mut next_frame) = (0usize, 0usize);
        for l in items {
            let first_start = i32::try_from(spec.frame_start(l.span.first_frame) - l.base as isize);
            let fields = [
                next_sample + l.context,
                l.len,
                next_frame,
                l.frames,
                l.span.signal_len - l.base,
                l.span.first_frame + l.frames,
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
            records.push(ItemRecord {
                sample_offset,
                n_samples,
                frame_offset,
                n_frames,
                first_start,
                signal_len,
                first_frame: l.span.first_frame as u32,
                step_frames: n_frames
                    - u32::from(n_frames > 0 && l.span.last && spec.drop_last_frame),
                context: l.context as u32,
                _pad: 0,
            });
            // Each item starts 8-byte aligned (see the staging layout below).
            next_sample += l.uploaded().next_multiple_of(format.align());
            next_frame += l.frames;
        }
        // The slot's staging layout: params, item records, frame table, then each item's
        // samples at an offset of a multiple of 8 bytes (where a mapped range may start, so
        // that each item is written through a view of its own, on its own thread).
        let params_bytes = std::mem::size_of::<Params>();
        let records_bytes = std::mem::size_of_val(records.as_slice());
        let table_bytes = 4 * frames;
        let samples_at = (params_bytes + records_bytes + table_bytes).next_multiple_of(8);
        let samples_bytes = format.bytes() * next_sample;
        let upload = (samples_at + samples_bytes) as u64;
        let result_bytes = self.result_bytes(frames, returned.f16);
        self.ring
            .ready_upload(&self.gpu, k, upload)
            .map_err(|e| DeviceError::OutOfMemory(format!("staging memory: {e}")))?;
        let starts = records
            .iter()
            .map(|r| {
                let first_uploaded = (r.sample_offset - r.context) as usize;
                (samples_at + format.bytes() * first_uploaded) as u64
            })
            .collect();
        Ok(Staged {
            params,
            format,
            records,
            starts,
            offsets: UploadOffsets {
                records: params_bytes as u64,
                table: (params_bytes + records_bytes) as u64,
                samples: samples_at as u64,
                end: upload,
            },
            frames,
            grid: (grid_y, grid_z, frame_x, frame_y),
            item_grid,
            pack_grid,
            result_bytes,
            returned,
        })
    }

    /// Fills chunk `k`'s mapped upload buffer: its parameters, item records and frame table,
    /// then its items' windows as the kernels read them, straight from the decoded items
    /// (scaled and pre-emphasised on the way where the spec says), each item in pieces on
    /// several threads: one thread's copy into this memory ran at about 2.7 GB/s
    /// on an H200 machine, and a chunk holds fewer items than such a machine has cores. Each
    /// piece is scanned for non-finite samples just before it is copied, while it is in the
    /// cache; returns each item's first, as the CPU path's check names it.
    fn fill(
        &self,
        batch: &AudioBatch,
        items: &[Laid],
        staged: &Staged,
        k: usize,
    ) -> Result<Vec<Option<ItemError>>, DeviceError> {
        let spec = &self.spec;
        let buffer = self.ring.upload(k);
        let mapped = |range: std::ops::Range<u64>| {
            buffer
                .slice(range)
                .get_mapped_range_mut()
                .map_err(|e| DeviceError::DeviceLost(format!("{}: {e}", self.label)))
        };
        {
            let mut head = mapped(0..staged.offsets.samples)?;
            let params_bytes = staged.offsets.records as usize;
            let (mut part, rest) = head.slice(..).split_at(params_bytes);
            part.copy_from_slice(bytemuck::bytes_of(&staged.params));
            let (mut part, rest) = rest.split_at(std::mem::size_of_val(staged.records.as_slice()));
            part.copy_from_slice(bytemuck::cast_slice(&staged.records));
            let (table, _) = rest.split_at(4 * staged.frames);
            table.write_iter(
                staged
                    .records
                    .iter()
                    .enumerate()
                    .flat_map(|(i, r)| std::iter::repeat_n(i as u32, r.n_frames as usize))
                    .flat_map(u32::to_le_bytes),
            );
        }
        // With the signal's pre-emphasis on the device, the samples go as they are.
        let as_is = prepared_as_is(spec) || preemphasis_on_device(spec);
        let format = staged.format;
        let bytes = format.bytes() as u64;
        items
            .par_iter()
            .zip(&staged.starts)
            .map(|(l, &at)| {
                let raw = batch.item(l.item);
                // A later piece's first sample is context: outside the window sent where the
                // host pre-emphasises (or nothing does), sent where the kernels do.
                let unsent = raw.len() - l.uploaded();
                let first = l.span.sample_start;
                let refused = check_finite(&raw[..unsent], first, 1).err();
                let pieces = (0..l.uploaded().div_ceil(FILL_PIECE_SAMPLES))
                    .into_par_iter()
                    .map_init(Scratch::default, |scratch, i| {
                        let start = i * FILL_PIECE_SAMPLES;
                        let len = FILL_PIECE_SAMPLES.min(l.uploaded() - start);
                        let offset = unsent + start;
                        let samples = &raw[offset..offset + len];
                        let non_finite = || check_finite(samples, first + offset, 1).err();
                        let from = at + bytes * start as u64;
                        let refused = match format {
                            SampleFormat::Pcm16 => {
                                // Whole words (a mapped range is a multiple of 4 bytes): an
                                // odd last piece takes a zero more, inside its item's place.
                                let words = len.next_multiple_of(2);
                                scratch.pcm16.clear();
                                scratch.pcm16.resize(words, 0);
                                // The conversion checks every sample: NaN and infinity are off
                                // the grid, so only a piece it refuses is scanned for them (the
                                // CPU's message comes first).
                                let refused = to_pcm16_into(samples, &mut scratch.pcm16[..len])
                                    .err()
                                    .map(|at| {
                                        non_finite().unwrap_or(ItemError::NotPcm16 {
                                            index: first + offset + at,
                                        })
                                    });
                                mapped(from..from + 2 * words as u64)?
                                    .copy_from_slice(bytemuck::cast_slice(&scratch.pcm16));
                                refused
                            }
                            SampleFormat::F32 if as_is => {
                                let refused = non_finite();
                                mapped(from..from + 4 * len as u64)?
                                    .copy_from_slice(bytemuck::cast_slice(samples));
                                refused
                            }
                            SampleFormat::F32 => {
                                // Scaled and pre-emphasised a piece at a time, in the cache,
                                // instead of the whole window in memory first.
                                let refused = non_finite();
                                scratch.f32.clear();
                                scratch.f32.resize(len, 0.0f32);
                                prepare_piece_into(spec, raw, &l.span, start, &mut scratch.f32);
                                mapped(from..from + 4 * len as u64)?
                                    .copy_from_slice(bytemuck::cast_slice(&scratch.f32));
                                refused
                            }
                        };
                        Ok::<_, DeviceError>(refused)
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                // The first piece's error is the window's first non-finite sample.
                Ok(refused.or(pieces.into_iter().flatten().next()))
            })
            .collect()
    }

    /// Submits filled chunk `k`: its staging copied into the device buffers, the kernels, its
    /// rows copied into the slot's readback buffer (made ready here, now that the rows of the
    /// slot's last chunk have been read).
    fn dispatch(
        &mut self,
        k: usize,
        device: &DeviceBuffers,
        staged: Staged,
    ) -> Result<(), DeviceError> {
        let sent = Instant::now();
        self.ring.upload(k).unmap();
        if k > 0 && self.ring.busy(&self.gpu, k - 1) {
            self.ring.stats.chunks_filled_while_busy += 1;
        }
        let read_bytes = staged.result_bytes + self.timestamp_bytes();
        self.ring
            .ready_readback(&self.gpu, k, read_bytes.max(4))
            .map_err(|e| DeviceError::OutOfMemory(format!("staging memory: {e}")))?;
        self.ring.stats.sample_bytes_sent += staged.offsets.end - staged.offsets.samples;
        if staged.format == SampleFormat::Pcm16 {
            self.ring.stats.pcm16_chunks += 1;
        }
        self.ring.stats.row_bytes_read += staged.result_bytes;
        if staged.returned.f16 {
            self.ring.stats.f16_chunks += 1;
        }
        let index = self.submit(k, device, &staged)?;
        self.ring.submitted(&self.gpu, k, index, read_bytes);
        tracing::debug!(
            chunk = k,
            items = staged.records.len(),
            frames = staged.frames,
            encode_and_submit_ms = sent.elapsed().as_secs_f64() * 1e3,
            read_bytes = staged.result_bytes,
            "gpu chunk sent"
        );
        Ok(())
    }

    /// Bytes of kernel timestamps read back after a chunk's rows (none without them).
    fn timestamp_bytes(&self) -> u64 {
        if self.timestamps.is_some() {
            TIMESTAMP_BYTES
        } else {
            0
        }
    }

    /// Bytes of the rows a chunk of `frames` frames gives back (f16 rows in whole words).
    fn result_bytes(&self, frames: usize, f16: bool) -> u64 {
        let values = (frames * gpu_row_width(&self.spec)) as u64;
        if f16 {
            return (2 * values).next_multiple_of(4);
        }
        let per_value = if spectrum_is_f64(&self.spec, self.precision) {
            8
        } else {
            4
        };
        per_value * values
    }

    /// Encodes and submits chunk `k`: its staging copied into the device buffers, the kernels,
    /// its rows copied into its readback buffer.
    fn submit(
        &self,
        k: usize,
        device: &DeviceBuffers,
        staged: &Staged,
    ) -> Result<wgpu::SubmissionIndex, DeviceError> {
        let (frames, result_bytes, offsets) = (staged.frames, staged.result_bytes, &staged.offsets);
        let (grid_y, grid_z, frame_x, frame_y) = staged.grid;
        let spec = &self.spec;
        let d = &self.gpu.device;
        let q = &self.gpu.queue;
        let blocks = device.blocks;
        let sizes = &device.sizes;
        let [b_samples, b_items, b_table, b_spec, b_mel, b_params] = [
            block::SAMPLES,
            block::ITEMS,
            block::TABLE,
            block::SPECTRUM,
            block::MEL_ROWS,
            block::PARAMS,
        ]
        .map(|i| &blocks[i].block);
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
        let upload = self.ring.upload(k);
        let mut enc = d.create_command_encoder(&wgpu::CommandEncoderDescriptor {
            label: Some("sonograph chunk"),
        });
        let copy = |enc: &mut wgpu::CommandEncoder, from: u64, to: &wgpu::Buffer, bytes: u64| {
            if bytes > 0 {
                enc.copy_buffer_to_buffer(upload, from, to, 0, bytes);
            }
        };
        copy(&mut enc, 0, b_params, offsets.records);
        copy(
            &mut enc,
            offsets.records,
            b_items,
            offsets.table - offsets.records,
        );
        copy(
            &mut enc,
            offsets.table,
            b_table,
            offsets.samples - offsets.table,
        );
        copy(
            &mut enc,
            offsets.samples,
            b_samples,
            offsets.end - offsets.samples,
        );
        #[cfg(feature = "failpoints")]
        if let Some(iterations) = fail::eval("gpu::slow_kernel", |arg| {
            arg.and_then(|a| a.parse::<u32>().ok()).unwrap_or(1 << 22)
        }) {
            // A device slower than its host (tests of the overlap): a kernel that only spins.
            self.spin(&mut enc, iterations);
        }
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
        // What the kernels that read the samples (frame.wgsl, fused.wgsl) bind first, alike.
        let sample_inputs = || {
            vec![
                (0, bind(block::PARAMS)),
                (1, bind(block::SAMPLES)),
                (2, bind(block::ITEMS)),
                (3, bind(block::TABLE)),
                (4, self.window_buf.as_entire_binding()),
            ]
        };
        // frame.wgsl, the first pass of the three-pass and the waveform paths alike.
        let dispatch_frames = |pass: &mut wgpu::ComputePass<'_>, frame: &wgpu::ComputePipeline| {
            let mut list = sample_inputs();
            list.push((5, bind(block::FRAMES)));
            pass.set_pipeline(frame);
            pass.set_bind_group(0, &bind_group("frame", frame, list), &[]);
            pass.dispatch_workgroups(frame_x, frame_y, 1);
        };
        {
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("sonograph kernels"),
                timestamp_writes: self.timestamps.as_ref().map(|(queries, _)| {
                    wgpu::ComputePassTimestampWrites {
                        query_set: queries,
                        beginning_of_pass_write_index: Some(0),
                        end_of_pass_write_index: Some(1),
                    }
                }),
            });
            match self.kernels(staged.format) {
                Kernels::Fused(pipe) => {
                    let mut list = sample_inputs();
                    list.push((5, self.twiddle_buf.as_entire_binding()));
                    match (filters, weights) {
                        (Some(f), Some(w)) if mel => list.extend([
                            (6, f.as_entire_binding()),
                            (7, w.as_entire_binding()),
                            (8, bind(block::MEL_ROWS)),
                        ]),
                        _ => list.push((9, bind(block::SPECTRUM))),
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
                    dispatch_frames(&mut pass, frame);
                    let list = vec![
                        (0, bind(block::PARAMS)),
                        (1, bind(block::FRAMES)),
                        (2, self.twiddle_buf.as_entire_binding()),
                        (3, bind(block::SPECTRUM)),
                    ];
                    pass.set_pipeline(dft);
                    pass.set_bind_group(0, &bind_group("dft", dft, list), &[]);
                    pass.dispatch_workgroups(n_freq_groups(spec), grid_y, grid_z);
                    if let (Some(pipe), Some(f), Some(w)) = (mel_pipe, filters, weights) {
                        let list = vec![
                            (0, bind(block::PARAMS)),
                            (1, bind(block::SPECTRUM)),
                            (2, f.as_entire_binding()),
                            (3, w.as_entire_binding()),
                            (4, bind(block::MEL_ROWS)),
                        ];
                        pass.set_pipeline(pipe);
                        pass.set_bind_group(0, &bind_group("mel", pipe, list), &[]);
                        pass.dispatch_workgroups(spec.n_mels.div_ceil(64) as u32, grid_y, grid_z);
                    }
                }
                Kernels::Samples { frame, rows } => {
                    dispatch_frames(&mut pass, frame);
                    let list = vec![
                        (0, bind(block::PARAMS)),
                        (1, bind(block::FRAMES)),
                        (2, bind(block::MEL_ROWS)),
                    ];
                    pass.set_pipeline(rows);
                    pass.set_bind_group(0, &bind_group("waveform", rows, list), &[]);
                    pass.dispatch_workgroups(frame_x, frame_y, 1);
                }
            }
            // The whole-row steps over the mel rows, in the same pass (wgpu orders a pass's
            // dispatches that share a storage buffer).
            if let (Some((ItemSteps { normalize, .. }, steps)), true) =
                (&self.item_steps, staged.returned.steps_on_device)
            {
                let normalize = normalize.is_some();
                let list = vec![
                    (0, bind(block::PARAMS)),
                    (1, bind(block::ITEMS)),
                    (3, bind(block::MEL_ROWS)),
                    (4, bind(block::STATISTICS)),
                ];
                let item_grid = staged.item_grid;
                let statistics = &steps.statistics;
                pass.set_pipeline(statistics);
                pass.set_bind_group(0, &bind_group("item statistics", statistics, list), &[]);
                if normalize {
                    // A workgroup per (band, item).
                    let width = gpu_row_width(spec) as u32;
                    pass.dispatch_workgroups(width, item_grid.row, item_grid.rows);
                } else {
                    pass.dispatch_workgroups(item_grid.row, item_grid.rows, 1);
                }
                let list = vec![
                    (0, bind(block::PARAMS)),
                    (1, bind(block::ITEMS)),
                    (2, bind(block::TABLE)),
                    (3, bind(block::MEL_ROWS)),
                    (4, bind(block::STATISTICS)),
                ];
                pass.set_pipeline(&steps.apply);
                pass.set_bind_group(0, &bind_group("item steps", &steps.apply, list), &[]);
                let width_groups = gpu_row_width(spec).div_ceil(64) as u32;
                pass.dispatch_workgroups(width_groups, grid_y, grid_z);
            }
            if let (true, OnDemand::Ready(pack)) = (staged.returned.f16, &self.f16_pack) {
                let list = vec![
                    (0, bind(block::PARAMS)),
                    (1, bind(block::MEL_ROWS)),
                    (2, bind(block::F16_ROWS)),
                ];
                pass.set_pipeline(pack);
                pass.set_bind_group(0, &bind_group("f16 rows", pack, list), &[]);
                pass.dispatch_workgroups(staged.pack_grid.0, staged.pack_grid.1, 1);
            }
        }
        let result_buf = match (staged.returned.f16, f32_rows(spec)) {
            (true, _) => &blocks[block::F16_ROWS].block,
            (false, true) => b_mel,
            (false, false) => b_spec,
        };
        if result_bytes > 0 {
            enc.copy_buffer_to_buffer(result_buf, 0, self.ring.readback(k), 0, result_bytes);
        }
        if let Some((queries, resolved)) = &self.timestamps {
            enc.resolve_query_set(queries, 0..2, resolved, 0);
            let readback = self.ring.readback(k);
            enc.copy_buffer_to_buffer(resolved, 0, readback, result_bytes, TIMESTAMP_BYTES);
        }
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
                "the device ran out of memory running a chunk of {frames} frames: {e}; {}",
                next_step(2)
            )));
        }
        if self.gpu.is_lost() {
            return Err(DeviceError::DeviceLost(self.label.clone()));
        }
        Ok(index)
    }

    /// Finishes chunk `k`'s items (log, normalisation, DCT; side by side) straight from its
    /// mapped rows, `result_bytes` of them; with the kernels' time where they were timed.
    fn finish_chunk(
        &self,
        k: usize,
        result_bytes: u64,
        items: &[Laid],
        refused: &[Option<ItemError>],
        returned: Returned,
    ) -> Result<(Vec<ItemResult>, Option<f64>), String> {
        // Without the steps the device has applied.
        let spec = if returned.steps_on_device {
            &self.host_spec
        } else {
            &self.spec
        };
        let dct = self.dct.as_ref();
        let width = gpu_row_width(spec);
        let f64_rows = spectrum_is_f64(spec, self.precision);
        let f16_rows = returned.f16;
        let timed = self.timestamps.is_some();
        let period_ns = f64::from(self.gpu.queue.get_timestamp_period());
        self.ring.read_rows(k, result_bytes, |bytes| {
            let (bytes, stamps) = if timed {
                let split = bytes.len() - TIMESTAMP_BYTES as usize;
                (&bytes[..split], Some(&bytes[split..]))
            } else {
                (bytes, None)
            };
            let kernel_seconds = stamps.map(|t| {
                let at =
                    |i: usize| u64::from_le_bytes(t[8 * i..8 * i + 8].try_into().expect("8 bytes"));
                at(1).saturating_sub(at(0)) as f64 * period_ns * 1e-9
            });
            let mut offset = 0usize;
            let spans: Vec<(&Laid, usize, &Option<ItemError>)> = items
                .iter()
                .zip(refused)
                .map(|(l, refused)| {
                    let at = offset;
                    offset += l.frames;
                    (l, at, refused)
                })
                .collect();
            let rows = spans
                .into_par_iter()
                .map(|(l, at, refused)| {
                    if let Some(e) = refused {
                        return Err(e.clone());
                    }
                    let (a, b) = (at * width, (at + l.frames) * width);
                    let rows: std::borrow::Cow<[f32]> = if f16_rows {
                        // Widened exactly: each value is what the writer stores.
                        let bits: &[u16] = bytemuck::cast_slice(&bytes[2 * a..2 * b]);
                        bits.reinterpret_cast::<half::f16>().to_f32_vec().into()
                    } else if f64_rows {
                        bytes[8 * a..8 * b]
                            .chunks_exact(8)
                            .map(|v| f64::from_le_bytes(v.try_into().expect("8 bytes")) as f32)
                            .collect::<Vec<f32>>()
                            .into()
                    } else {
                        bytemuck::cast_slice::<u8, f32>(&bytes[4 * a..4 * b]).into()
                    };
                    let mut out = Vec::new();
                    let frames = finish_item(spec, dct, rows, l.frames, l.span.last, &mut out);
                    Ok((frames, out))
                })
                .collect::<Vec<_>>();
            (rows, kernel_seconds)
        })
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

    /// Items are sent in chunks of about this many bytes of samples (default 32 MiB).
    pub fn set_chunk_bytes(&mut self, bytes: usize) {
        self.chunk_bytes = bytes.max(4);
    }

    /// A kernel that only spins, `iterations` times per invocation (failpoint builds only).
    #[cfg(feature = "failpoints")]
    fn spin(&self, enc: &mut wgpu::CommandEncoder, iterations: u32) {
        const SPIN: &str = "
@group(0) @binding(0) var<storage, read_write> sink: array<u32>;
override ITERATIONS: u32 = 1u;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    var x = gid.x;
    for (var i = 0u; i < ITERATIONS; i++) { x = x * 1664525u + 1013904223u; }
    sink[gid.x] = x;
}";
        let d = &self.gpu.device;
        let module = d.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("spin"),
            source: wgpu::ShaderSource::Wgsl(SPIN.into()),
        });
        let pipeline = d.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some("spin"),
            layout: None,
            module: &module,
            entry_point: Some("main"),
            compilation_options: wgpu::PipelineCompilationOptions {
                constants: &[("ITERATIONS", f64::from(iterations))],
                ..Default::default()
            },
            cache: None,
        });
        let sink = d.create_buffer(&wgpu::BufferDescriptor {
            label: Some("spin"),
            size: 4 * 64,
            usage: wgpu::BufferUsages::STORAGE,
            mapped_at_creation: false,
        });
        let group = d.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("spin"),
            layout: &pipeline.get_bind_group_layout(0),
            entries: &[wgpu::BindGroupEntry {
                binding: 0,
                resource: sink.as_entire_binding(),
            }],
        });
        let mut pass = enc.begin_compute_pass(&Default::default());
        pass.set_pipeline(&pipeline);
        pass.set_bind_group(0, &group, &[]);
        pass.dispatch_workgroups(1, 1, 1);
    }
}

/// An item's frames and rows.
type ItemRows = (usize, Vec<f32>);

/// An item's rows, or why it failed alone.
type ItemResult = Result<ItemRows, ItemError>;

/// A filling task's own buffers, reused piece after piece.
#[derive(Default)]
struct Scratch {
    f32: Vec<f32>,
    pcm16: Vec<i16>,
}

/// An item of a batch, checked and laid out.
struct Laid {
    /// Its index in the batch.
    item: usize,
    span: Span,
    /// The signal index of its first prepared sample, and how many there are.
    base: usize,
    len: usize,
    frames: usize,
    /// Samples sent before the first prepared one: the window's context sample (1) where the
    /// kernels pre-emphasise the signal and the window is a later piece's; else 0.
    context: usize,
}

impl Laid {
    /// Samples sent to the device.
    fn uploaded(&self) -> usize {
        self.context + self.len
    }
}

/// Consecutive laid-out items sent to the device together.
struct Chunk {
    items: std::ops::Range<usize>,
    samples: usize,
    frames: usize,
}

/// Items in chunks of about `bytes` bytes of samples (one item at least each). An item's
/// samples take an even number of places (it starts 8-byte aligned).
fn chunks(laid: &[Laid], bytes: usize) -> Vec<Chunk> {
    let mut out: Vec<Chunk> = Vec::new();
    for (i, l) in laid.iter().enumerate() {
        let len = l.uploaded().next_multiple_of(2);
        match out.last_mut() {
            Some(c) if 4 * (c.samples + len) <= bytes => {
                c.items.end = i + 1;
                c.samples += len;
                c.frames += l.frames;
            }
            _ => out.push(Chunk {
                items: i..i + 1,
                samples: len,
                frames: l.frames,
            }),
        }
    }
    out
}

/// Indices of a batch's device buffers: the pool blocks in `batch_buffers`' order (its
/// readback excepted: rows come back through the ring), then the params uniform.
mod block {
    pub const SAMPLES: usize = 0;
    pub const ITEMS: usize = 1;
    pub const TABLE: usize = 2;
    pub const FRAMES: usize = 3;
    pub const SPECTRUM: usize = 4;
    pub const MEL_ROWS: usize = 5;
    pub const STATISTICS: usize = 6;
    pub const F16_ROWS: usize = 7;
    pub const PARAMS: usize = 8;
}

/// The device buffers of a batch (see [`block`]) and their sizes.
struct DeviceBuffers<'a> {
    blocks: &'a [PoolBlock<wgpu::Buffer>],
    sizes: Vec<u64>,
}

/// A chunk laid out for its slot: what goes into the staging buffer and where, and how it
/// runs.
struct Staged {
    params: Params,
    format: SampleFormat,
    records: Vec<ItemRecord>,
    /// Where each item's samples start in the staging buffer.
    starts: Vec<u64>,
    offsets: UploadOffsets,
    frames: usize,
    /// The dispatch grid: (grid_y, grid_z, frame_x, frame_y).
    grid: (u32, u32, u32, u32),
    item_grid: ItemGrid,
    /// The f16 kernel's grid: (workgroups per row, rows).
    pack_grid: (u32, u32),
    /// Bytes of rows the chunk gives back.
    result_bytes: u64,
    returned: Returned,
}

/// How a chunk's rows come back.
#[derive(Debug, Clone, Copy)]
struct Returned {
    /// With the spec's whole-row steps applied by the device (`item_steps_fit`).
    steps_on_device: bool,
    /// As f16 (a job storing f16, rows final on the device).
    f16: bool,
}

/// The item_steps kernel's grid: a workgroup per item, in rows of `row` ([`wrapped`]).
#[derive(Debug, Clone, Copy)]
struct ItemGrid {
    n_items: u32,
    row: u32,
    rows: u32,
}

/// `n` workgroups (at least one) as rows of at most `max_dim` (dispatch sizes stop at 65535 per
/// dimension): (per row, rows).
fn wrapped(n: usize, max_dim: u32) -> (u32, u32) {
    let n = n as u64;
    let row = n.min(u64::from(max_dim)).max(1);
    (row as u32, n.div_ceil(row).max(1) as u32)
}

/// Where each part of a chunk sits in its staging buffer.
struct UploadOffsets {
    records: u64,
    table: u64,
    samples: u64,
    end: u64,
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

/// The kernels of `spec` reading samples in `format`: the fused kernel where `radices` are
/// given, else the three passes. Validation errors surface in the caller's error scope.
fn build_kernels(
    gpu: &GpuDevice,
    spec: &FeatureSpec,
    precision: Precision,
    radices: Option<&[u32]>,
    format: SampleFormat,
) -> Kernels {
    // The WGSL scalar type of the spectral core.
    let real = precision.name();
    let pipeline = |name: &str, body: &str, entry: &str| {
        let source = kernel_source(real, body);
        context::compute_pipeline(&gpu.device, name, &source, entry)
    };
    if spec.output == OutputKind::Waveform {
        return Kernels::Samples {
            frame: pipeline("frame", &framed(FRAME, format, spec), "main"),
            rows: pipeline("waveform", WAVEFORM, "main"),
        };
    }
    match radices {
        Some(radices) => {
            let body = FUSED
                .replace("@N@", &spec.n_fft.to_string())
                .replace("@TWO_N@", &(2 * spec.n_fft).to_string())
                .replace(
                    "@FFT@",
                    &crate::fft_wgsl::fft_function(spec.n_fft as u32, radices),
                );
            let entry = if uses_mel(spec) {
                "main_mel"
            } else {
                "main_power"
            };
            Kernels::Fused(pipeline("fused", &framed(&body, format, spec), entry))
        }
        None => Kernels::Passes {
            frame: pipeline("frame", &framed(FRAME, format, spec), "main"),
            dft: pipeline("dft", DFT, "main"),
            mel: uses_mel(spec).then(|| pipeline("mel", MEL, "main")),
        },
    }
}

/// A kernel that reads samples (fused.wgsl or frame.wgsl) with the framing helpers, reading
/// `format`.
fn framed(body: &str, format: SampleFormat, spec: &FeatureSpec) -> String {
    format!(
        "{FRAMING}\n{}",
        body.replace("@SAMPLES@", &format.wgsl(spec))
    )
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
    !f32_rows(spec) && precision == Precision::F64
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

    fn transfer_stats(&self) -> Option<TransferStats> {
        Some(self.ring.stats)
    }

    /// Where the device's rows are the output values (`plan::rows_final_on_device`): they
    /// come back as f16, rounded as the writer rounds them, in half the bytes (and as f32
    /// where the adapter would not build the kernel, which is logged once).
    fn set_rows_stored_as_f16(&mut self, stored: bool) -> bool {
        if stored && self.rows_final {
            if let OnDemand::NotYet = self.f16_pack {
                let d = &self.gpu.device;
                let scope = d.push_error_scope(wgpu::ErrorFilter::Validation);
                let source = kernel_source(self.precision.name(), F16_ROWS);
                let pack = context::compute_pipeline(d, "f16 rows", &source, "pack");
                self.f16_pack = match pollster::block_on(scope.pop()) {
                    None => OnDemand::Ready(pack),
                    Some(e) => {
                        tracing::warn!(
                            device = %self.label,
                            "the kernel for f16 rows did not build; rows come back as f32: {e}"
                        );
                        OnDemand::Refused
                    }
                };
            }
        }
        self.f16_rows = stored && matches!(self.f16_pack, OnDemand::Ready(_));
        self.f16_rows
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
            self.f16_rows,
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
        let started = Instant::now();
        let before = self.ring.stats;
        // A fixed-length spec's items padded or cut to that length, as the CPU takes them.
        let fixed = batch.fixed_for(&self.spec);
        let batch = fixed.as_ref().unwrap_or(batch);
        // Every item's span checked and laid out first; one the spec cannot take fails alone.
        // (Its samples are scanned as they are copied: see `fill`.)
        let spec = &self.spec;
        let checked: Vec<Result<Laid, ItemError>> = (0..batch.len())
            .map(|i| {
                let item = batch.item(i);
                if spec.is_fixed_length() {
                    // `fixed_for` made every whole item the fixed length and left pieces be.
                    if batch.span(i).is_some() {
                        return Err(sonograph_dsp::span::piece_of_fixed_item(spec));
                    }
                    if item.is_empty() {
                        return Err(ItemError::Empty);
                    }
                }
                let span = batch
                    .span(i)
                    .copied()
                    .unwrap_or_else(|| Span::whole(spec, item.len()));
                let (base, len) = prepared_layout(spec, item.len(), &span)?;
                Ok(Laid {
                    item: i,
                    span,
                    base,
                    len,
                    frames: span.frames,
                    context: if preemphasis_on_device(spec) {
                        item.len() - len
                    } else {
                        0
                    },
                })
            })
            .collect();
        let mut results: Vec<Option<ItemResult>> = Vec::with_capacity(batch.len());
        let mut laid = Vec::with_capacity(batch.len());
        for c in checked {
            match c {
                Ok(l) => {
                    laid.push(l);
                    results.push(None);
                }
                Err(e) => results.push(Some(Err(e))),
            }
        }
        let prepared = Instant::now();
        let rows = if laid.is_empty() {
            Vec::new()
        } else {
            self.run(batch, &laid)?
        };
        for (l, r) in laid.iter().zip(rows) {
            results[l.item] = Some(r);
        }
        for r in results {
            match r.expect("every item has its result") {
                Err(e) => out.push_error(e),
                Ok((frames, item_rows)) => out.push_owned(frames, item_rows),
            }
        }
        // Where a batch's time goes, for profiling on a real GPU (SONOGRAPH_LOG=sonograph_gpu=debug).
        let stats = self.ring.stats;
        tracing::debug!(
            items = batch.len(),
            check_ms = (prepared - started).as_secs_f64() * 1e3,
            device_ms = prepared.elapsed().as_secs_f64() * 1e3,
            fill_ms = (stats.fill_seconds - before.fill_seconds) * 1e3,
            wait_ms = (stats.wait_seconds - before.wait_seconds) * 1e3,
            finish_ms = (stats.finish_seconds - before.finish_seconds) * 1e3,
            kernel_ms = (stats.kernel_seconds - before.kernel_seconds) * 1e3,
            chunks = stats.chunks,
            chunks_filled_while_busy = stats.chunks_filled_while_busy,
            staging_allocations = stats.staging_allocations,
            "gpu batch"
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{
        fft_radices, framed, kernel_source, preemphasis_on_device, takes_pcm16, FeatureSpec,
        FilterRecord, ItemRecord, Params, SampleFormat, F16_ROWS, FRAME, ITEM_STEPS, WAVEFORM,
    };
    use crate::mirror::{fields, Field};
    use std::mem::size_of;

    /// Checks a Rust mirror against the struct `name` of the kernels' common declarations
    /// (in the frame kernel, as compiled).
    fn check_mirror(name: &str, rust: &[Field], rust_size: usize) {
        let source = kernel_source(
            "f32",
            &framed(FRAME, SampleFormat::F32, &FeatureSpec::whisper(80)),
        );
        crate::mirror::check_mirror(&source, name, rust, rust_size);
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
                edge: "u32",
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
                n_items: "u32",
                item_row: "u32",
                item_steps: "u32",
                dynamic_range: "f32",
                affine_add: "f32",
                affine_scale: "f32",
                signal_preemph: "f32",
                pack_row: "u32",
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
                step_frames: "u32",
                context: "u32",
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
    fn sixteen_bit_samples_are_scaled_by_the_specs_power_of_two() {
        let (whisper, kaldi, nemo) = (
            FeatureSpec::whisper(80),
            FeatureSpec::kaldi(80),
            FeatureSpec::nemo(80),
        );
        // Kaldi scales by 32768 (its input is the integers) and pre-emphasises per frame; the
        // kernels pre-emphasise NeMo's signal, but not a scaled one's (the host does both); a
        // scale off the powers of two would round.
        assert!(takes_pcm16(&whisper) && takes_pcm16(&kaldi) && takes_pcm16(&nemo));
        assert!(preemphasis_on_device(&nemo) && !preemphasis_on_device(&kaldi));
        let mut scaled_nemo = nemo.clone();
        scaled_nemo.input_scale = 2.0;
        assert!(!takes_pcm16(&scaled_nemo) && !preemphasis_on_device(&scaled_nemo));
        let mut odd = FeatureSpec::whisper(80);
        odd.input_scale = 3.0;
        assert!(!takes_pcm16(&odd));
        // A power of two so small that `scale / 32768` would be subnormal in f32.
        odd.input_scale = 2f32.powi(-120);
        assert!(!takes_pcm16(&odd));
        for (spec, literal) in [(&whisper, "3.0517578125e-5"), (&kaldi, "1e0")] {
            let wgsl = SampleFormat::Pcm16.wgsl(spec);
            assert!(wgsl.contains(&format!("f32(k) * {literal};")), "{wgsl}");
            // Both variants parse as WGSL (naga, wgpu's own front end).
            for format in [SampleFormat::F32, SampleFormat::Pcm16] {
                let source = kernel_source("f32", &framed(FRAME, format, spec));
                naga::front::wgsl::parse_str(&source).expect("the kernel parses");
            }
        }
    }

    /// The kernels after the mel kernel (the whole-row steps, in both scalars, and the f16
    /// rows') parse and validate as wgpu's own front end takes them, without an adapter.
    #[test]
    fn the_kernels_after_the_mel_kernel_and_the_waveforms_validate() {
        use naga::valid::{Capabilities, ValidationFlags, Validator};
        for (real, body) in [
            ("f32", ITEM_STEPS),
            ("f64", ITEM_STEPS),
            ("f32", F16_ROWS),
            ("f32", WAVEFORM),
            ("f64", WAVEFORM),
        ] {
            let source = kernel_source(real, body);
            let module = naga::front::wgsl::parse_str(&source).expect("the kernel parses");
            Validator::new(ValidationFlags::all(), Capabilities::FLOAT64)
                .validate(&module)
                .unwrap_or_else(|e| panic!("{real} kernel: {e:?}"));
        }
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
