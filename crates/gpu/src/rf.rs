//! RF kernels: the exact stage of IQ synthesis (kernels/rf_synth.wgsl), bit-identical to
//! `sonograph_rf::synth::add_noise`, and the Welch PSD of complex recordings
//! (kernels/rf_psd.wgsl), within rounding of `sonograph_rf::features::Welch` (f64 where the
//! adapter has it). Everything read off the PSD is computed on the host by the CPU path's own
//! code, so the features of both paths differ only by the PSD's rounding.

use std::time::Duration;

use bytemuck::{Pod, Zeroable};
use sonograph_dsp::window::window;
use sonograph_dsp::{DeviceError, Precision};
use sonograph_rf::features::{Psd, WelchConfig};
use sonograph_rf::{Complex32, NoiseJob};
use wgpu::util::DeviceExt;

use crate::context::{self, GpuDevice};

const SYNTH: &str = include_str!("../kernels/rf_synth.wgsl");
const PSD: &str = include_str!("../kernels/rf_psd.wgsl");

/// Mirrors `Job` in rf_synth.wgsl.
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
struct JobRecord {
    offset: u32,
    values: u32,
    first_block: u32,
    seed_lo: u32,
    seed_hi: u32,
    index_lo: u32,
    index_hi: u32,
    sigma: f32,
    scale: f32,
    inv_scale: f32,
    _pad0: u32,
    _pad1: u32,
}

/// Mirrors `Params` in rf_synth.wgsl.
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
struct SynthParams {
    n_jobs: u32,
    total_blocks: u32,
    row: u32,
    _pad: u32,
}

/// Mirrors `Params`, `Segment` and `Recording` in rf_psd.wgsl.
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
struct PsdParams {
    total_segments: u32,
    row: u32,
    hop: u32,
    detrend: u32,
    n_recordings: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
struct SegmentRecord {
    recording: u32,
    start: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
struct RecordingRecord {
    first_segment: u32,
    segments: u32,
}

/// The PSD kernels of one (nperseg, window).
struct PsdPlan {
    cfg: WelchConfig,
    power: wgpu::ComputePipeline,
    average: wgpu::ComputePipeline,
    window: wgpu::Buffer,
    twiddle: wgpu::Buffer,
    wss: f64,
}

/// RF work on one GPU.
pub struct RfGpu {
    gpu: GpuDevice,
    label: String,
    precision: Precision,
    synth: wgpu::ComputePipeline,
    ndtri: wgpu::Buffer,
    psd: Option<PsdPlan>,
    deadline: Duration,
}

fn unavailable(msg: impl Into<String>) -> DeviceError {
    DeviceError::Unavailable(msg.into())
}

impl RfGpu {
    /// Opens adapter `gpu:N` (or the best one, software included) and compiles the synthesis
    /// kernel.
    pub fn new(adapter: Option<usize>) -> Result<Self, DeviceError> {
        let (gpu, index) =
            context::open_adapter(adapter, crate::device::adapter_score).map_err(unavailable)?;
        let precision = if gpu.device.features().contains(wgpu::Features::SHADER_F64) {
            Precision::F64
        } else {
            Precision::F32
        };
        let d = &gpu.device;
        let scope = d.push_error_scope(wgpu::ErrorFilter::Validation);
        let synth = context::compute_pipeline(d, "rf_synth", SYNTH, "main");
        let ndtri = d.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some("ndtri table"),
            contents: bytemuck::cast_slice(&sonograph_rf::normal::table_flat()),
            usage: wgpu::BufferUsages::STORAGE,
        });
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(unavailable(format!(
                "the RF kernels do not compile here: {e}"
            )));
        }
        let label = format!("gpu:{index} {} ({:?})", gpu.info.name, gpu.info.backend);
        Ok(RfGpu {
            gpu,
            label,
            precision,
            synth,
            ndtri,
            psd: None,
            deadline: Duration::from_secs(60),
        })
    }

    pub fn device(&self) -> &str {
        &self.label
    }

    /// The PSD's scalar: f64 where the adapter has it in shaders.
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// Runs the exact stage on every recording: the same bits as `add_noise` on the CPU.
    pub fn add_noise(
        &mut self,
        items: &mut [Vec<Complex32>],
        jobs: &[NoiseJob],
    ) -> Result<(), DeviceError> {
        assert_eq!(items.len(), jobs.len(), "one job per recording");
        if items.is_empty() {
            return Ok(());
        }
        let mut data: Vec<f32> = Vec::with_capacity(items.iter().map(|i| 2 * i.len()).sum());
        let mut records = Vec::with_capacity(jobs.len());
        let mut blocks = 0u64;
        for (iq, job) in items.iter().zip(jobs) {
            let values = 2 * iq.len() as u64;
            let offset = data.len() as u64;
            if offset + values > u64::from(u32::MAX) || blocks > u64::from(u32::MAX) {
                return Err(DeviceError::OutOfMemory(format!(
                    "a batch of {} recordings holds more than 2^32 values; send fewer at once",
                    items.len()
                )));
            }
            data.extend(iq.iter().flat_map(|v| [v.re, v.im]));
            let scale = if job.quantize_bits > 0 {
                (1u32 << (job.quantize_bits - 1)) as f32
            } else {
                0.0
            };
            records.push(JobRecord {
                offset: offset as u32,
                values: values as u32,
                first_block: blocks as u32,
                seed_lo: job.seed as u32,
                seed_hi: (job.seed >> 32) as u32,
                index_lo: job.index as u32,
                index_hi: (job.index >> 32) as u32,
                sigma: job.sigma,
                scale,
                inv_scale: if scale > 0.0 { 1.0 / scale } else { 0.0 },
                _pad0: 0,
                _pad1: 0,
            });
            blocks += values.div_ceil(4);
        }
        let bytes = 4 * data.len() as u64;
        self.check_binding("IQ values", bytes, items.len())?;
        let (x, y) = self.grid(blocks.div_ceil(64), items.len())?;
        let params = SynthParams {
            n_jobs: records.len() as u32,
            total_blocks: blocks as u32,
            row: x * 64,
            _pad: 0,
        };
        let d = &self.gpu.device;
        let storage = d.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some("rf iq"),
            contents: bytemuck::cast_slice(&data),
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
        });
        let jobs_buf = init(
            d,
            "rf jobs",
            bytemuck::cast_slice(&records),
            wgpu::BufferUsages::STORAGE,
        );
        let params_buf = init(
            d,
            "rf params",
            bytemuck::bytes_of(&params),
            wgpu::BufferUsages::UNIFORM,
        );
        let entries = [
            (0, params_buf.as_entire_binding()),
            (1, jobs_buf.as_entire_binding()),
            (2, self.ndtri.as_entire_binding()),
            (3, storage.as_entire_binding()),
        ];
        let out = self.run(&self.synth, &entries, (x, y), &storage, bytes)?;
        let values: &[f32] = bytemuck::cast_slice(&out);
        let mut at = 0;
        for iq in items.iter_mut() {
            for v in iq.iter_mut() {
                *v = Complex32::new(values[at], values[at + 1]);
                at += 2;
            }
        }
        Ok(())
    }

    /// Welch PSDs of `recordings` (each at its rate), as `Welch::compute` gives them. nperseg
    /// must be a power of two whose FFT fits in workgroup memory (1024 in f64 on 32 KiB).
    pub fn welch(
        &mut self,
        recordings: &[&[Complex32]],
        rates: &[f64],
        cfg: &WelchConfig,
    ) -> Result<Vec<Psd>, DeviceError> {
        cfg.validate().map_err(|e| unavailable(e.to_string()))?;
        self.prepare_psd(cfg)?;
        let n = cfg.nperseg;
        let hop = cfg.nperseg - cfg.noverlap;
        let mut samples: Vec<f32> = Vec::new();
        let mut segs = Vec::new();
        let mut recs = Vec::new();
        for (r, iq) in recordings.iter().enumerate() {
            let k = cfg.segments(iq.len());
            if k == 0 {
                return Err(unavailable(format!(
                    "recording {r}: {} samples, fewer than one Welch segment of {n}",
                    iq.len()
                )));
            }
            let base = samples.len() / 2;
            recs.push(RecordingRecord {
                first_segment: segs.len() as u32,
                segments: k as u32,
            });
            for s in 0..k {
                segs.push(SegmentRecord {
                    recording: r as u32,
                    start: (base + s * hop) as u32,
                });
            }
            samples.extend(iq.iter().flat_map(|v| [v.re, v.im]));
        }
        let real = if self.precision == Precision::F64 {
            8
        } else {
            4
        };
        let power_bytes = (segs.len() * n * real) as u64;
        self.check_binding("segment spectra", power_bytes, recordings.len())?;
        self.check_binding("samples", 4 * samples.len() as u64, recordings.len())?;
        let plan = self.psd.as_ref().expect("prepared above");
        let d = &self.gpu.device;
        let (sx, sy) = self.grid(segs.len() as u64, recordings.len())?;
        let psd_len = recs.len() * n;
        let (ax, ay) = self.grid((psd_len as u64).div_ceil(64), recordings.len())?;
        let params = |row: u32| PsdParams {
            total_segments: segs.len() as u32,
            row,
            hop: hop as u32,
            detrend: u32::from(cfg.detrend),
            n_recordings: recs.len() as u32,
            _pad0: 0,
            _pad1: 0,
            _pad2: 0,
        };
        let u = wgpu::BufferUsages::STORAGE;
        let samples_buf = init(d, "rf samples", bytemuck::cast_slice(&samples), u);
        let segs_buf = init(d, "rf segments", bytemuck::cast_slice(&segs), u);
        let recs_buf = init(d, "rf recordings", bytemuck::cast_slice(&recs), u);
        let power_buf = d.create_buffer(&wgpu::BufferDescriptor {
            label: Some("rf power"),
            size: power_bytes,
            usage: u,
            mapped_at_creation: false,
        });
        let psd_buf = d.create_buffer(&wgpu::BufferDescriptor {
            label: Some("rf psd"),
            size: (psd_len * real) as u64,
            usage: u | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        let p1 = init(
            d,
            "rf psd params",
            bytemuck::bytes_of(&params(sx)),
            wgpu::BufferUsages::UNIFORM,
        );
        let p2 = init(
            d,
            "rf avg params",
            bytemuck::bytes_of(&params(ax)),
            wgpu::BufferUsages::UNIFORM,
        );
        let e1 = [
            (0, p1.as_entire_binding()),
            (1, samples_buf.as_entire_binding()),
            (2, segs_buf.as_entire_binding()),
            (3, plan.window.as_entire_binding()),
            (4, plan.twiddle.as_entire_binding()),
            (5, power_buf.as_entire_binding()),
        ];
        let e2 = [
            (0, p2.as_entire_binding()),
            (5, power_buf.as_entire_binding()),
            (6, recs_buf.as_entire_binding()),
            (7, psd_buf.as_entire_binding()),
        ];
        let scope = d.push_error_scope(wgpu::ErrorFilter::Validation);
        let oom = d.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let mut enc = d.create_command_encoder(&Default::default());
        {
            let mut pass = enc.begin_compute_pass(&Default::default());
            pass.set_pipeline(&plan.power);
            pass.set_bind_group(0, &bind_group(d, &plan.power, &e1), &[]);
            pass.dispatch_workgroups(sx, sy, 1);
            pass.set_pipeline(&plan.average);
            pass.set_bind_group(0, &bind_group(d, &plan.average, &e2), &[]);
            pass.dispatch_workgroups(ax, ay, 1);
        }
        let bytes = (psd_len * real) as u64;
        let out = self.finish(enc, &psd_buf, bytes, oom, scope, recordings.len())?;
        let sums: Vec<f64> = if real == 8 {
            bytemuck::pod_collect_to_vec::<u8, f64>(&out)
        } else {
            bytemuck::pod_collect_to_vec::<u8, f32>(&out)
                .into_iter()
                .map(f64::from)
                .collect()
        };
        let wss = plan.wss;
        let window = window(cfg.window, n, true);
        Ok(sums
            .chunks_exact(n)
            .zip(&recs)
            .zip(rates)
            .map(|((acc, rec), &fs)| {
                // The CPU path's scaling and fftshift, in its arithmetic.
                let scale = 1.0 / (fs * wss * f64::from(rec.segments));
                let h = n / 2;
                Psd {
                    fs,
                    density: acc[n - h..]
                        .iter()
                        .chain(&acc[..n - h])
                        .map(|a| a * scale)
                        .collect(),
                    segments: rec.segments as usize,
                    dof: sonograph_rf::features::welch_dof(&window, hop, rec.segments as usize),
                }
            })
            .collect())
    }

    fn prepare_psd(&mut self, cfg: &WelchConfig) -> Result<(), DeviceError> {
        if self.psd.as_ref().is_some_and(|p| p.cfg == *cfg) {
            return Ok(());
        }
        let n = cfg.nperseg;
        if !n.is_power_of_two() || n < 2 {
            return Err(unavailable(format!(
                "the GPU PSD needs a power-of-two nperseg (got {n})"
            )));
        }
        let real_bytes = if self.precision == Precision::F64 {
            8
        } else {
            4
        };
        let shared = (2 * n + 2 * 256) * real_bytes;
        if shared as u64 > u64::from(self.gpu.limits.max_compute_workgroup_storage_size) {
            return Err(unavailable(format!(
                "nperseg {n} needs {shared} bytes of workgroup memory; this adapter has {}",
                self.gpu.limits.max_compute_workgroup_storage_size
            )));
        }
        let real = if self.precision == Precision::F64 {
            "f64"
        } else {
            "f32"
        };
        let source = PSD
            .replace("@REAL@", real)
            .replace("@N@", &n.to_string())
            .replace("@LOG2N@", &n.trailing_zeros().to_string());
        let d = &self.gpu.device;
        let scope = d.push_error_scope(wgpu::ErrorFilter::Validation);
        let power = context::compute_pipeline(d, "rf_psd power", &source, "segment_power");
        let average = context::compute_pipeline(d, "rf_psd average", &source, "average");
        let w = window(cfg.window, n, true);
        let wss = w.iter().map(|v| v * v).sum();
        let twiddle: Vec<f64> = (0..n / 2)
            .flat_map(|k| {
                let a = 2.0 * std::f64::consts::PI * k as f64 / n as f64;
                [a.cos(), a.sin()]
            })
            .collect();
        let bytes = |v: &[f64]| -> Vec<u8> {
            if real == "f64" {
                bytemuck::cast_slice(v).to_vec()
            } else {
                let f: Vec<f32> = v.iter().map(|&x| x as f32).collect();
                bytemuck::cast_slice(&f).to_vec()
            }
        };
        let u = wgpu::BufferUsages::STORAGE;
        let window = init(d, "rf window", &bytes(&w), u);
        let twiddle = init(d, "rf twiddle", &bytes(&twiddle), u);
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(unavailable(format!(
                "the RF PSD kernels do not compile here: {e}"
            )));
        }
        self.psd = Some(PsdPlan {
            cfg: *cfg,
            power,
            average,
            window,
            twiddle,
            wss,
        });
        Ok(())
    }

    fn check_binding(&self, what: &str, bytes: u64, items: usize) -> Result<(), DeviceError> {
        let max = self
            .gpu
            .limits
            .max_storage_buffer_binding_size
            .min(self.gpu.limits.max_buffer_size);
        if bytes > max {
            return Err(DeviceError::OutOfMemory(format!(
                "{items} recordings need {bytes} bytes for their {what}, over the device's largest binding ({max}); send fewer at once"
            )));
        }
        Ok(())
    }

    /// A dispatch grid of `groups` workgroups within the per-dimension limit.
    fn grid(&self, groups: u64, items: usize) -> Result<(u32, u32), DeviceError> {
        let max = u64::from(self.gpu.limits.max_compute_workgroups_per_dimension.max(1));
        let x = groups.clamp(1, max);
        let y = groups.div_ceil(x).max(1);
        if y > max {
            return Err(DeviceError::OutOfMemory(format!(
                "{items} recordings need {groups} workgroups, over the dispatch limit; send fewer at once"
            )));
        }
        Ok((x as u32, y as u32))
    }

    fn run(
        &self,
        pipe: &wgpu::ComputePipeline,
        entries: &[(u32, wgpu::BindingResource<'_>)],
        (x, y): (u32, u32),
        result: &wgpu::Buffer,
        bytes: u64,
    ) -> Result<Vec<u8>, DeviceError> {
        let d = &self.gpu.device;
        let scope = d.push_error_scope(wgpu::ErrorFilter::Validation);
        let oom = d.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let mut enc = d.create_command_encoder(&Default::default());
        {
            let mut pass = enc.begin_compute_pass(&Default::default());
            pass.set_pipeline(pipe);
            pass.set_bind_group(0, &bind_group(d, pipe, entries), &[]);
            pass.dispatch_workgroups(x, y, 1);
        }
        self.finish(enc, result, bytes, oom, scope, 0)
    }

    /// Copies `bytes` of `result` back after the encoded work, turning errors into
    /// `DeviceError`s.
    fn finish(
        &self,
        mut enc: wgpu::CommandEncoder,
        result: &wgpu::Buffer,
        bytes: u64,
        oom: wgpu::ErrorScopeGuard,
        scope: wgpu::ErrorScopeGuard,
        items: usize,
    ) -> Result<Vec<u8>, DeviceError> {
        let d = &self.gpu.device;
        let readback = d.create_buffer(&wgpu::BufferDescriptor {
            label: Some("rf readback"),
            size: bytes,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        enc.copy_buffer_to_buffer(result, 0, &readback, 0, bytes);
        let index = self.gpu.queue.submit([enc.finish()]);
        if let Some(e) = pollster::block_on(oom.pop()) {
            return Err(DeviceError::OutOfMemory(format!(
                "the device ran out of memory on {items} recordings: {e}; send fewer at once"
            )));
        }
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(unavailable(format!(
                "wgpu rejected the RF batch (a bug): {e}"
            )));
        }
        if self.gpu.is_lost() {
            return Err(DeviceError::DeviceLost(self.label.clone()));
        }
        context::read_buffer(&self.gpu, &readback, bytes, index, self.deadline)
            .map_err(|e| DeviceError::DeviceLost(format!("{}: {e}", self.label)))
    }
}

fn init(d: &wgpu::Device, label: &str, contents: &[u8], usage: wgpu::BufferUsages) -> wgpu::Buffer {
    d.create_buffer_init(&wgpu::util::BufferInitDescriptor {
        label: Some(label),
        contents,
        usage,
    })
}

fn bind_group(
    d: &wgpu::Device,
    pipe: &wgpu::ComputePipeline,
    entries: &[(u32, wgpu::BindingResource<'_>)],
) -> wgpu::BindGroup {
    let entries: Vec<wgpu::BindGroupEntry<'_>> = entries
        .iter()
        .map(|(binding, resource)| wgpu::BindGroupEntry {
            binding: *binding,
            resource: resource.clone(),
        })
        .collect();
    d.create_bind_group(&wgpu::BindGroupDescriptor {
        label: None,
        layout: &pipe.get_bind_group_layout(0),
        entries: &entries,
    })
}

#[cfg(test)]
mod tests {
    use super::{JobRecord, PsdParams, RecordingRecord, SegmentRecord, SynthParams, PSD, SYNTH};
    use crate::mirror::{check_mirror, fields};
    use std::mem::size_of;

    #[test]
    fn rust_mirrors_match_the_rf_kernels_structs_field_by_field() {
        check_mirror(
            SYNTH,
            "Job",
            fields!(JobRecord {
                offset: "u32",
                values: "u32",
                first_block: "u32",
                seed_lo: "u32",
                seed_hi: "u32",
                index_lo: "u32",
                index_hi: "u32",
                sigma: "f32",
                scale: "f32",
                inv_scale: "f32",
                _pad0: "u32",
                _pad1: "u32",
            }),
            size_of::<JobRecord>(),
        );
        check_mirror(
            SYNTH,
            "Params",
            fields!(SynthParams {
                n_jobs: "u32",
                total_blocks: "u32",
                row: "u32",
                _pad: "u32",
            }),
            size_of::<SynthParams>(),
        );
        let psd = PSD
            .replace("@REAL@", "f32")
            .replace("@N@", "256")
            .replace("@LOG2N@", "8");
        check_mirror(
            &psd,
            "Params",
            fields!(PsdParams {
                total_segments: "u32",
                row: "u32",
                hop: "u32",
                detrend: "u32",
                n_recordings: "u32",
                _pad0: "u32",
                _pad1: "u32",
                _pad2: "u32",
            }),
            size_of::<PsdParams>(),
        );
        check_mirror(
            &psd,
            "Segment",
            fields!(SegmentRecord {
                recording: "u32",
                start: "u32",
            }),
            size_of::<SegmentRecord>(),
        );
        check_mirror(
            &psd,
            "Recording",
            fields!(RecordingRecord {
                first_segment: "u32",
                segments: "u32",
            }),
            size_of::<RecordingRecord>(),
        );
    }
}
