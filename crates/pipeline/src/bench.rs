//! The `bench` command's measurements: extraction (or decoding) of audio already in memory,
//! timed as the median of repeated runs, per device through the adaptive batcher that jobs
//! use, with the device's memory pool and data path counters beside the rate.

use std::path::{Path, PathBuf};
use std::time::Instant;

use rayon::prelude::*;
use serde::Serialize;
use sonograph_dsp::{
    AudioBatch, CpuBackend, Extractor, FeatureBatch, FeatureSpec, MemoryStats, Precision,
};
use sonograph_io::DecodeOptions;

use crate::batcher::{AdaptiveBatcher, BatchStats, BatcherConfig};
use crate::error::JobError;

/// One measurement of extraction or decoding on the CPU.
#[derive(Debug, Clone, Serialize)]
pub struct Timing {
    /// `extract` or `decode`.
    pub mode: &'static str,
    pub spec_id: String,
    pub threads: usize,
    pub files: usize,
    pub audio_seconds: f64,
    pub median_seconds: f64,
    pub audio_seconds_per_second: f64,
    pub repeats: usize,
}

/// One device's measurement through the adaptive batcher.
#[derive(Debug, Clone, Serialize)]
pub struct DeviceTiming {
    pub device: String,
    pub spec_id: String,
    pub items: usize,
    pub failed_items: usize,
    pub audio_seconds: f64,
    pub median_seconds: f64,
    pub audio_seconds_per_second: f64,
    pub repeats: usize,
    pub batcher: BatchStats,
    pub memory: Option<MemoryStats>,
    /// The data path's counters over the timed runs (devices that have one).
    pub transfer: Option<TransferTiming>,
}

/// A device's data path over the timed runs, per run (the warm-up run included).
#[derive(Debug, Clone, Serialize)]
pub struct TransferTiming {
    pub chunks_per_run: f64,
    pub chunks_filled_while_busy: u64,
    /// Staging buffers made during the runs: none, once the ring is sized.
    pub staging_allocations_during_runs: u64,
    pub staging_bytes: u64,
    /// The kernels' own time, where the device has timestamp queries.
    pub kernel_seconds_per_run: Option<f64>,
    /// Host time: copying into the staging memory, waiting for the device, finishing rows.
    pub fill_seconds_per_run: f64,
    pub wait_seconds_per_run: f64,
    pub finish_seconds_per_run: f64,
    /// The kernels' rate alone (the audio already on the device: what "resident" peers time).
    pub kernel_audio_seconds_per_second: Option<f64>,
    /// Bytes of samples sent to the device, and chunks sent as 16-bit samples.
    pub sample_bytes_per_run: f64,
    pub pcm16_chunks_per_run: f64,
    /// Bytes of rows read back, and chunks whose rows came back as f16.
    pub row_bytes_per_run: f64,
    pub f16_chunks_per_run: f64,
}

/// Runs `f` once to warm up, then `repeat` times; the sorted durations in seconds.
pub fn timed(
    repeat: usize,
    mut f: impl FnMut() -> Result<(), JobError>,
) -> Result<Vec<f64>, JobError> {
    if repeat == 0 {
        return Err(JobError::Config("repeat must be at least 1".into()));
    }
    f()?;
    let mut times = Vec::with_capacity(repeat);
    for _ in 0..repeat {
        let t = Instant::now();
        f()?;
        times.push(t.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    Ok(times)
}

/// A generated batch: `items` clips of `seconds` seconds at the spec's rate (a chirp over
/// noise, each different, the same on every run).
pub fn generated_clips(
    spec: &FeatureSpec,
    items: usize,
    seconds: f64,
) -> Result<Vec<Vec<f32>>, JobError> {
    if items == 0 || !(seconds > 0.0 && seconds <= 3600.0) {
        return Err(JobError::Config(
            "clips must be at least 1 and seconds in (0, 3600]".into(),
        ));
    }
    let rate = f64::from(spec.sample_rate);
    Ok((0..items)
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
        .collect())
}

/// Rounds every sample to the 16-bit grid (half away from zero, clipped), as a 16-bit
/// recording of the same signal decodes.
pub fn round_to_pcm16(clips: &mut [Vec<f32>]) {
    for x in clips.iter_mut().flatten() {
        let k = (*x * 32_768.0).round().clamp(-32_768.0, 32_767.0) as i16;
        *x = sonograph_dsp::pcm16::from_pcm16(k);
    }
}

/// Every file decoded to the spec's rate, whole.
pub fn decode_clips(
    paths: &[PathBuf],
    opts: &DecodeOptions,
    spec: &FeatureSpec,
) -> Result<Vec<Vec<f32>>, JobError> {
    paths
        .iter()
        .map(|p| {
            sonograph_io::decode_mono(p, opts, spec.sample_rate)
                .map_err(|e| JobError::Input(e.to_string()))
        })
        .collect()
}

/// The CPU backend `extract` runs, on `threads` workers (0: every core), over `clips`.
pub fn time_cpu(
    spec: &FeatureSpec,
    precision: Precision,
    threads: usize,
    clips: &[Vec<f32>],
    repeat: usize,
) -> Result<Timing, JobError> {
    let batch = AudioBatch::from_items(clips.iter().map(|c| c.as_slice()));
    let mut backend = CpuBackend::with_threads(spec, precision, threads)
        .map_err(|e| JobError::Config(e.to_string()))?;
    let mut out = FeatureBatch::new(spec.n_bins());
    let times = timed(repeat, || {
        out.reset(spec.n_bins());
        backend
            .extract_batch(&batch, &mut out)
            .map_err(|e| JobError::Device(e.to_string()))?;
        for i in 0..out.len() {
            out.item(i).map_err(|e| JobError::Input(e.to_string()))?;
        }
        Ok(())
    })?;
    let seconds = clips.iter().map(|c| c.len()).sum::<usize>() as f64 / f64::from(spec.sample_rate);
    Ok(timing(
        "extract",
        spec,
        backend.threads(),
        clips.len(),
        seconds,
        &times,
    ))
}

/// Decoding of `paths` at their own rates on `threads` workers, the samples discarded.
pub fn time_decode(
    spec: &FeatureSpec,
    paths: &[PathBuf],
    opts: &DecodeOptions,
    threads: usize,
    repeat: usize,
) -> Result<Timing, JobError> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .map_err(|e| JobError::Internal(format!("cannot start the thread pool: {e}")))?;
    let mut seconds = 0.0;
    for path in paths {
        let (frames, rate) = decode_native(path, opts)?;
        seconds += frames as f64 / f64::from(rate);
    }
    let times = timed(repeat, || {
        pool.install(|| {
            paths
                .par_iter()
                .try_for_each(|p| decode_native(p, opts).map(|_| ()))
        })
    })?;
    Ok(timing(
        "decode",
        spec,
        pool.current_num_threads(),
        paths.len(),
        seconds,
        &times,
    ))
}

fn timing(
    mode: &'static str,
    spec: &FeatureSpec,
    threads: usize,
    files: usize,
    audio_seconds: f64,
    times: &[f64],
) -> Timing {
    let median = times[times.len() / 2];
    Timing {
        mode,
        spec_id: spec.spec_id(),
        threads,
        files,
        audio_seconds,
        median_seconds: median,
        audio_seconds_per_second: audio_seconds / median,
        repeats: times.len(),
    }
}

/// Decodes at the file's own rate, discarding the samples; its frames and rate.
fn decode_native(path: &Path, opts: &DecodeOptions) -> Result<(u64, u32), JobError> {
    let input = |e: sonograph_io::DecodeError| JobError::Input(e.to_string());
    let mut reader = sonograph_io::AudioReader::open(path, opts).map_err(input)?;
    while reader.next_chunk().map_err(input)?.is_some() {}
    Ok((reader.frames_read(), reader.info().sample_rate))
}

/// `clips` through `executor` under an adaptive batcher sized for it, `repeat` times, with
/// `fallback` taking what the device cannot (as in a job).
pub fn time_device(
    executor: &mut dyn Extractor,
    fallback: &mut CpuBackend,
    clips: &[Vec<f32>],
    repeat: usize,
) -> Result<DeviceTiming, JobError> {
    let spec = executor.spec().clone();
    let bins = spec.n_bins();
    let mut batch = AudioBatch::from_items(clips.iter().map(|c| c.as_slice()));
    // As a job's decode workers do for each item they make (not timed here either).
    batch.find_pcm16();
    let seconds = batch.samples().len() as f64 / f64::from(spec.sample_rate);
    // A fixed item length is what the device holds of each clip, however short.
    let longest = clips
        .iter()
        .map(|c| c.len())
        .max()
        .unwrap_or(0)
        .max(spec.fixed_samples);
    let config = BatcherConfig::for_device(executor, longest, clips.len());
    let before = executor.transfer_stats();
    let mut batcher = AdaptiveBatcher::new(config);
    let mut out = FeatureBatch::new(bins);
    let times = timed(repeat, || {
        out.reset(bins);
        batcher.run(&batch, executor, fallback, &mut out);
        Ok(())
    })?;
    let failed_items = (0..out.len()).filter(|&i| out.item(i).is_err()).count();
    let median = times[times.len() / 2];
    // Per run, the warm-up run included.
    let runs = (times.len() + 1) as f64;
    let transfer = executor
        .transfer_stats()
        .zip(before)
        .map(|(after, before)| {
            let d = after.since(&before);
            TransferTiming {
                chunks_per_run: d.chunks as f64 / runs,
                chunks_filled_while_busy: d.chunks_filled_while_busy,
                staging_allocations_during_runs: d.staging_allocations,
                staging_bytes: d.staging_bytes,
                kernel_seconds_per_run: (d.timed_chunks > 0).then(|| d.kernel_seconds / runs),
                fill_seconds_per_run: d.fill_seconds / runs,
                wait_seconds_per_run: d.wait_seconds / runs,
                finish_seconds_per_run: d.finish_seconds / runs,
                kernel_audio_seconds_per_second: (d.timed_chunks > 0 && d.kernel_seconds > 0.0)
                    .then(|| seconds * runs / d.kernel_seconds),
                sample_bytes_per_run: d.sample_bytes_sent as f64 / runs,
                pcm16_chunks_per_run: d.pcm16_chunks as f64 / runs,
                row_bytes_per_run: d.row_bytes_read as f64 / runs,
                f16_chunks_per_run: d.f16_chunks as f64 / runs,
            }
        });
    Ok(DeviceTiming {
        device: executor.device(),
        spec_id: spec.spec_id(),
        items: clips.len(),
        failed_items,
        audio_seconds: seconds,
        median_seconds: median,
        audio_seconds_per_second: seconds / median,
        repeats: times.len(),
        batcher: batcher.stats().clone(),
        memory: executor.memory_stats(),
        transfer,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_clips_are_deterministic_distinct_and_bounded() {
        let spec = FeatureSpec::preset("whisper").unwrap();
        let a = generated_clips(&spec, 3, 0.5).unwrap();
        assert_eq!(a, generated_clips(&spec, 3, 0.5).unwrap());
        assert_eq!(a.len(), 3);
        assert!(a.iter().all(|c| c.len() == 8000));
        assert_ne!(a[0], a[1]);
        assert!(a.iter().flatten().all(|x| x.abs() < 0.32));
        for (items, seconds) in [(0, 1.0), (1, 0.0), (1, f64::NAN), (1, 3601.0)] {
            assert!(
                matches!(
                    generated_clips(&spec, items, seconds),
                    Err(JobError::Config(_))
                ),
                "{items} {seconds}"
            );
        }
    }

    #[test]
    fn clips_rounded_to_16_bits_are_on_the_grid_within_half_a_step() {
        let spec = FeatureSpec::preset("whisper").unwrap();
        let before = generated_clips(&spec, 2, 0.5).unwrap();
        let mut after = before.clone();
        round_to_pcm16(&mut after);
        assert!(!before.iter().any(|c| sonograph_dsp::pcm16::is_pcm16(c)));
        assert!(after.iter().all(|c| sonograph_dsp::pcm16::is_pcm16(c)));
        for (a, b) in before.iter().flatten().zip(after.iter().flatten()) {
            assert!((a - b).abs() <= 0.5 / 32_768.0, "{a} -> {b}");
        }
        let mut loud = vec![vec![1.5f32, -1.5, 0.999_99]];
        round_to_pcm16(&mut loud);
        assert_eq!(loud[0], [32_767.0 / 32_768.0, -1.0, 32_767.0 / 32_768.0]);
    }

    #[test]
    fn the_cpu_is_timed_on_every_clip_and_a_zero_repeat_is_refused() {
        let spec = FeatureSpec::preset("whisper").unwrap();
        let clips = generated_clips(&spec, 2, 1.0).unwrap();
        let t = time_cpu(&spec, Precision::F32, 1, &clips, 2).unwrap();
        assert_eq!((t.files, t.repeats, t.threads), (2, 2, 1));
        assert!((t.audio_seconds - 2.0).abs() < 1e-9);
        assert!(t.median_seconds > 0.0 && t.audio_seconds_per_second > 0.0);
        let mut cpu = CpuBackend::new(&spec, Precision::F32).unwrap();
        let mut fallback = CpuBackend::new(&spec, Precision::F32).unwrap();
        let d = time_device(&mut cpu, &mut fallback, &clips, 1).unwrap();
        assert_eq!((d.items, d.failed_items, d.repeats), (2, 0, 1));
        assert!(d.transfer.is_none(), "the CPU has no data path to count");
        assert!(matches!(
            time_cpu(&spec, Precision::F32, 1, &clips, 0),
            Err(JobError::Config(_))
        ));
    }
}
