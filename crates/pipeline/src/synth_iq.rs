//! `synth-iq` as a job: a synthetic IQ dataset of `count` recordings, as SigMF pairs or
//! Parquet parts of rows, generated in groups on a thread pool (the noise stage on a device
//! where one is given) and published a group at a time. Every recording is a function of
//! (spec, seed, index), so shards split the indices and a run killed at any instant and run
//! again writes only what is missing: a recording (or part) is there whole or not at all
//! (`sonograph_io::sigmf::publish_sigmf`, `sonograph_io::publish`). Each run writes a report
//! beside the recordings, under `__sonograph/`.

use std::path::{Path, PathBuf};
use std::time::Instant;

use rayon::prelude::*;
use serde::Serialize;
use sonograph_io::sigmf::{
    publish_sigmf, sigmf_paths, write_sigmf_group_unsynced, SigmfDraft, SigmfRecording,
    SigmfWritten, WriteType, HASHED_TOGETHER,
};
use sonograph_io::table::{write_table, Column};
use sonograph_rf::sigmf::{truth_annotation, DataType, SigmfMeta};
use sonograph_rf::{Complex32, NoiseDevice, NoiseJob, Synth, SynthSpec, Truth};

use crate::error::JobError;
use crate::layout::{io_err, OutputLayout};
use crate::live::LiveJob;
use crate::report::peak_rss_mb;

/// SigMF recordings are generated and published in groups of at most this many, and of at most
/// [`GROUP_BYTES`] of samples: a group is held whole (generated, then its files written).
const SIGMF_GROUP: u64 = 64;
const GROUP_BYTES: u64 = 256 << 20;

/// Recordings of `n_samples` per SigMF group: 64, fewer for long recordings (one at least).
fn sigmf_group(n_samples: usize) -> u64 {
    (GROUP_BYTES / (n_samples as u64 * 8).max(1)).clamp(1, SIGMF_GROUP)
}

/// How the recordings are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SynthFormat {
    /// One SigMF pair per recording (`sample-000000042.sigmf-meta` / `-data`).
    Sigmf(WriteType),
    /// Parquet parts of this many rows, named by the indices they hold.
    Parquet { rows_per_part: u64 },
}

/// A `synth-iq` job.
#[derive(Debug, Clone)]
pub struct SynthIqJob {
    pub spec: SynthSpec,
    pub seed: u64,
    /// Recordings in the whole dataset (all shards).
    pub count: u64,
    pub out: PathBuf,
    pub format: SynthFormat,
    pub shard_index: usize,
    pub shard_count: usize,
    /// Where the job may write: anywhere (the CLI, Python), or beneath the service's data
    /// roots.
    pub roots: sonograph_io::Roots,
}

/// What a run did, written to `__sonograph/report[-IIIII].json`.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct SynthReport {
    pub spec_id: String,
    pub seed: u64,
    pub shard_index: usize,
    pub shard_count: usize,
    /// The shard's recordings.
    pub recordings: u64,
    /// Written by this run.
    pub written: u64,
    /// Found whole from an earlier run (or another process) and left as they were.
    pub already_there: u64,
    pub wall_seconds: f64,
    /// Recordings written per wall second.
    pub recordings_per_second: f64,
    /// The process's CPU time over wall time × cores.
    pub core_utilisation: f64,
    /// Where the noise stage ran ("cpu" or the device's name).
    pub noise_device: String,
    pub peak_rss_mb: f64,
}

/// Runs the job on `pool`, the noise stage on `noise` where given.
pub fn run_synth_iq(
    job: &SynthIqJob,
    noise: Option<Box<dyn NoiseDevice>>,
    pool: &rayon::ThreadPool,
) -> Result<SynthReport, JobError> {
    run_synth_iq_live(job, noise, pool, &LiveJob::new())
}

/// [`run_synth_iq`], its progress counted in `live` as it goes (recordings of the shard,
/// those already there, each one written and its seconds of signal), for `--metrics-addr`.
/// A cancel stops it at a group's boundary with [`JobError::Canceled`]; what was written
/// stays, and the same job run again writes the rest.
pub fn run_synth_iq_live(
    job: &SynthIqJob,
    noise: Option<Box<dyn NoiseDevice>>,
    pool: &rayon::ThreadPool,
    live: &LiveJob,
) -> Result<SynthReport, JobError> {
    let report = synth_iq(job, noise, pool, live);
    live.set_finished();
    report
}

/// [`run_synth_iq_live`] on a pool of `workers` threads of its own.
pub fn run_synth_iq_on_threads(
    job: &SynthIqJob,
    noise: Option<Box<dyn NoiseDevice>>,
    workers: usize,
    live: &LiveJob,
) -> Result<SynthReport, JobError> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(workers)
        .build()
        .map_err(|e| JobError::Internal(format!("cannot start the thread pool: {e}")))?;
    run_synth_iq_live(job, noise, &pool, live)
}

fn synth_iq(
    job: &SynthIqJob,
    mut noise: Option<Box<dyn NoiseDevice>>,
    pool: &rayon::ThreadPool,
    live: &LiveJob,
) -> Result<SynthReport, JobError> {
    if let SynthFormat::Parquet { rows_per_part: 0 } = job.format {
        return Err(JobError::Config("rows_per_part must be at least 1".into()));
    }
    let count = usize::try_from(job.count)
        .map_err(|_| JobError::Config(format!("count {} is too large", job.count)))?;
    let range = sonograph_io::manifest::shard_range(count, job.shard_index, job.shard_count);
    let synth = Synth::new(&job.spec).map_err(|e| JobError::Config(e.to_string()))?;
    crate::layout::refuse_bucket(&job.out)?;
    confine(job)?;
    claim_folder(&job.out, synth.spec(), job.seed, job.count)?;
    let cpu_at_start = crate::host::process_cpu_seconds();
    let started = Instant::now();
    let (mut written, mut already_there) = (0u64, 0u64);
    // Groups at absolute-index boundaries: Parquet parts are named by the indices they hold,
    // so a resume or another shard split finds them again.
    let step = match job.format {
        SynthFormat::Parquet { rows_per_part } => rows_per_part,
        SynthFormat::Sigmf(_) => sigmf_group(job.spec.n_samples),
    };
    let total = (range.end - range.start) as u64;
    let seconds_each = job.spec.n_samples as f64 / job.spec.sample_rate;
    live.set_items(total, 0);
    // SigMF recordings are written on the cores a group at a time, then synced and put in
    // place by a publisher thread while the next group is generated: the disk's time overlaps
    // the cores' instead of following it (1,000 one-second recordings on this 2-core machine's
    // disk: 8.3 s when each file was synced as it was written).
    let (published, made) = std::thread::scope(|scope| {
        let (to_publish, groups) = crossbeam_channel::bounded::<Vec<SigmfWritten>>(1);
        let publisher = scope.spawn(move || publish_groups(groups, live, seconds_each));
        let made = (|| -> Result<(), JobError> {
            // The last group's sample buffers, for the next one.
            let mut spare: Vec<Vec<Complex32>> = Vec::new();
            let mut start = range.start as u64;
            while start < range.end as u64 {
                if live.is_canceled() {
                    return Err(JobError::Canceled {
                        undone: range.end as u64 - start,
                    });
                }
                let end = ((start / step + 1) * step).min(range.end as u64);
                match job.format {
                    SynthFormat::Sigmf(dtype) => {
                        let todo: Vec<u64> = (start..end)
                            .filter(|&i| !sigmf_paths(&recording_base(&job.out, i)).0.exists())
                            .collect();
                        already_there += end - start - todo.len() as u64;
                        live.set_items(total, already_there);
                        if todo.is_empty() {
                            // The whole group is there from an earlier run.
                            start = end;
                            continue;
                        }
                        let recs = generate_reusing(
                            &synth,
                            job.seed,
                            &todo,
                            noise.as_deref_mut(),
                            pool,
                            &mut spare,
                        )?;
                        let group = write_group(job, dtype, &todo, &recs, pool)?;
                        spare.extend(recs.into_iter().map(|(iq, _)| iq));
                        if to_publish.send(group).is_err() {
                            // The publisher stopped on an error, which it returns.
                            return Ok(());
                        }
                    }
                    SynthFormat::Parquet { .. } => {
                        let path = job.out.join(format!("part-{start:09}-{end:09}.parquet"));
                        if path.exists() {
                            already_there += end - start;
                            live.set_items(total, already_there);
                        } else {
                            let indices: Vec<u64> = (start..end).collect();
                            let recs =
                                generate(&synth, job.seed, &indices, noise.as_deref_mut(), pool)?;
                            write_iq_part(&path, &indices, &recs, &job.spec, job.seed)?;
                            written += end - start;
                            for _ in &indices {
                                live.row_written(seconds_each);
                                live.item_done();
                            }
                        }
                    }
                }
                start = end;
            }
            Ok(())
        })();
        drop(to_publish);
        let published = publisher
            .join()
            .unwrap_or_else(|_| Err(JobError::Internal("the SigMF publisher panicked".into())));
        (published, made)
    });
    // The publisher's error first: the writer stopped because of it.
    written += published?;
    made?;
    let wall = started.elapsed().as_secs_f64();
    let report = SynthReport {
        spec_id: synth.spec().spec_id(),
        seed: job.seed,
        shard_index: job.shard_index,
        shard_count: job.shard_count,
        recordings: (range.end - range.start) as u64,
        written,
        already_there,
        wall_seconds: wall,
        recordings_per_second: written as f64 / wall.max(1e-9),
        core_utilisation: crate::host::core_utilisation(cpu_at_start, wall),
        noise_device: noise.map_or_else(|| "cpu".to_string(), |d| d.name()),
        peak_rss_mb: peak_rss_mb(),
    };
    let layout = OutputLayout::new(&job.out, job.shard_index, job.shard_count);
    std::fs::create_dir_all(&layout.meta_dir).map_err(io_err(&layout.meta_dir))?;
    let text =
        serde_json::to_string_pretty(&report).map_err(|e| JobError::Internal(e.to_string()))?;
    sonograph_io::publish::publish_bytes(&layout.report, text.as_bytes())
        .map_err(io_err(&layout.report))?;
    Ok(report)
}

/// Threads that sync a group's recordings side by side: they only wait for the disk, which
/// takes many writes at once better than one after another.
const SYNC_THREADS: usize = 8;

/// Writes a group's recordings under temporary names on `pool`, unsynced: each thread takes
/// up to [`HASHED_TOGETHER`] recordings at once, whose SHA-512s it computes side by side, and
/// as many as spread the group over all the threads.
fn write_group(
    job: &SynthIqJob,
    dtype: WriteType,
    indices: &[u64],
    recs: &[(Vec<Complex32>, Truth)],
    pool: &rayon::ThreadPool,
) -> Result<Vec<SigmfWritten>, JobError> {
    let each = indices
        .len()
        .div_ceil(pool.current_num_threads())
        .clamp(1, HASHED_TOGETHER);
    let bases: Vec<PathBuf> = indices
        .iter()
        .map(|&i| recording_base(&job.out, i))
        .collect();
    let group = pool.install(|| {
        indices
            .par_chunks(each)
            .zip(recs.par_chunks(each))
            .zip(bases.par_chunks(each))
            .map(|((indices, recs), bases)| {
                let recordings = indices
                    .iter()
                    .zip(recs)
                    .zip(bases)
                    .map(|((&i, (iq, truth)), base)| {
                        let mut meta = SigmfMeta::new(DataType::Cf32Le, job.spec.sample_rate);
                        meta.declare_extension();
                        meta.global.description = Some(format!(
                            "sonograph synth-iq, seed {}, recording {i}",
                            job.seed
                        ));
                        meta.annotations.push(truth_annotation(truth));
                        SigmfRecording { base, iq, meta }
                    })
                    .collect();
                let written = write_sigmf_group_unsynced(recordings, dtype)?;
                Ok(indices
                    .iter()
                    .zip(written)
                    .map(|(i, (written, clipped))| {
                        if clipped > 0 {
                            tracing::warn!(
                                "recording {i}: {clipped} values clipped to the ci16 range"
                            );
                        }
                        written
                    })
                    .collect::<Vec<_>>())
            })
            .collect::<Result<Vec<_>, sonograph_io::IqError>>()
    })?;
    Ok(group.into_iter().flatten().collect())
}

/// Syncs each group's recordings on [`SYNC_THREADS`] threads and puts them in place, group
/// after group, counting each as done; returns how many it published.
fn publish_groups(
    groups: crossbeam_channel::Receiver<Vec<SigmfWritten>>,
    live: &LiveJob,
    seconds_each: f64,
) -> Result<u64, JobError> {
    let mut published = 0u64;
    for group in groups {
        let n = group.len() as u64;
        let mut parts: Vec<Vec<SigmfWritten>> = (0..SYNC_THREADS).map(|_| Vec::new()).collect();
        for (k, recording) in group.into_iter().enumerate() {
            parts[k % SYNC_THREADS].push(recording);
        }
        let synced = std::thread::scope(|scope| {
            let handles: Vec<_> = parts
                .into_iter()
                .map(|part| {
                    scope.spawn(move || {
                        part.into_iter()
                            .map(SigmfWritten::sync)
                            .collect::<Result<Vec<SigmfDraft>, _>>()
                    })
                })
                .collect();
            let mut synced = Vec::with_capacity(n as usize);
            for h in handles {
                let part = h
                    .join()
                    .map_err(|_| JobError::Internal("a sync thread panicked".into()))?;
                synced.extend(part?);
            }
            Ok::<_, JobError>(synced)
        })?;
        publish_sigmf(synced)?;
        published += n;
        for _ in 0..n {
            live.row_written(seconds_each);
            live.item_done();
        }
    }
    Ok(published)
}

/// Generates recordings `indices` on `pool`, the noise stage on `noise` where given.
pub fn generate<'d>(
    synth: &Synth,
    seed: u64,
    indices: &[u64],
    noise: Option<&mut (dyn NoiseDevice + 'd)>,
    pool: &rayon::ThreadPool,
) -> Result<Vec<(Vec<Complex32>, Truth)>, JobError> {
    generate_reusing(synth, seed, indices, noise, pool, &mut Vec::new())
}

/// [`generate`] into buffers taken from `spare` where it has them (a group's buffers handed
/// back after it is written: fresh ones for every group had the kernel zero their pages
/// again, every group).
fn generate_reusing<'d>(
    synth: &Synth,
    seed: u64,
    indices: &[u64],
    noise: Option<&mut (dyn NoiseDevice + 'd)>,
    pool: &rayon::ThreadPool,
    spare: &mut Vec<Vec<Complex32>>,
) -> Result<Vec<(Vec<Complex32>, Truth)>, JobError> {
    let mut iq: Vec<Vec<Complex32>> = indices
        .iter()
        .map(|_| spare.pop().unwrap_or_default())
        .collect();
    match noise {
        None => {
            let truths: Vec<Truth> = pool.install(|| {
                indices
                    .par_iter()
                    .zip(iq.par_iter_mut())
                    .map(|(&i, buf)| synth.sample_into(seed, i, buf))
                    .collect()
            });
            Ok(iq.into_iter().zip(truths).collect())
        }
        Some(device) => {
            let (truths, jobs): (Vec<Truth>, Vec<NoiseJob>) = pool.install(|| {
                indices
                    .par_iter()
                    .zip(iq.par_iter_mut())
                    .map(|(&i, buf)| synth.clean_into(seed, i, buf))
                    .unzip()
            });
            device
                .add_noise(&mut iq, &jobs)
                .map_err(|e| JobError::Device(format!("{}: {e}", device.name())))?;
            Ok(iq.into_iter().zip(truths).collect())
        }
    }
}

/// `device auto` with a GPU: the GPU for the noise stage only where it generates recordings
/// of this spec at [`GPU_MARGIN`](sonograph_dsp::calibration::GPU_MARGIN) times the CPU's
/// rate, each measured on 64 recordings (or read from `store`, by device, cores and spec);
/// with the reason, in words, for the run to say.
pub fn choose_noise_device(
    synth: &Synth,
    seed: u64,
    mut gpu: Box<dyn NoiseDevice>,
    pool: &rayon::ThreadPool,
    store: &mut dyn sonograph_dsp::CalibrationStore,
) -> Result<(Option<Box<dyn NoiseDevice>>, String), JobError> {
    use sonograph_dsp::calibration::{choose, Measured};
    let cores = pool.current_num_threads();
    let indices: Vec<u64> = (0..64).collect();
    let spec = synth.spec();
    let seconds = indices.len() as f64 * spec.n_samples as f64 / spec.sample_rate;
    let gpu_name = gpu.name();
    let mut rate = |device: &str,
                    noise: Option<&mut (dyn NoiseDevice + 'static)>|
     -> Result<Measured, JobError> {
        let key = format!("synth-iq | {device} | {cores} cores | {}", spec.spec_id());
        let measured = |rate, cached| Measured {
            id: device.into(),
            name: device.into(),
            audio_seconds_per_second: rate,
            cached,
        };
        if let Some(r) = store.get(&key) {
            return Ok(measured(r, true));
        }
        let mut noise = noise;
        // The first run warms the device (pipelines, buffers); the second is timed.
        // A reborrow, not a no-op: the device is used again below.
        #[allow(clippy::needless_option_as_deref)]
        generate(synth, seed, &indices, noise.as_deref_mut(), pool)?;
        let t = Instant::now();
        generate(synth, seed, &indices, noise, pool)?;
        let r = seconds / t.elapsed().as_secs_f64().max(1e-9);
        store.put(key, r);
        Ok(measured(r, false))
    };
    let measured = vec![rate("cpu", None)?, rate(&gpu_name, Some(gpu.as_mut()))?];
    let (index, why) = choose(&measured);
    Ok((if index == 0 { None } else { Some(gpu) }, why))
}

/// `out/sample-000000042` (the SigMF pair's base).
pub fn recording_base(out: &Path, index: u64) -> PathBuf {
    out.join(format!("sample-{index:09}"))
}

/// A confined job (the service's) writes real folders beneath its roots: the output folder, its
/// `__sonograph/` and `dataset.json` are checked, before and after the folder is made, not to be
/// symlinks (which would carry the writes elsewhere). Recordings and parts are made under
/// fresh temporary names and renamed, which replaces a symlink rather than following it.
fn confine(job: &SynthIqJob) -> Result<(), JobError> {
    if !job.roots.is_confined() {
        return Ok(());
    }
    let layout = OutputLayout::new(&job.out, job.shard_index, job.shard_count);
    layout.confine(&job.roots)?;
    std::fs::create_dir_all(&layout.meta_dir).map_err(io_err(&layout.meta_dir))?;
    layout.confine(&job.roots)?;
    let dataset = job.out.join("dataset.json");
    if std::fs::symlink_metadata(&dataset).is_ok_and(|m| m.file_type().is_symlink()) {
        return Err(JobError::Config(format!(
            "{}: a symlink, where the job writes",
            dataset.display()
        )));
    }
    Ok(())
}

/// Records the dataset's spec and seed in `out/dataset.json` the first time; a later run
/// (another shard, a resume) with a different spec or seed is refused, since its recordings
/// would not belong to the same dataset.
fn claim_folder(out: &Path, spec: &SynthSpec, seed: u64, count: u64) -> Result<(), JobError> {
    std::fs::create_dir_all(out)
        .map_err(|e| JobError::Config(format!("{}: cannot create: {e}", out.display())))?;
    let path = out.join("dataset.json");
    let internal = |e: serde_json::Error| JobError::Internal(e.to_string());
    let mine = serde_json::json!({
        "spec_id": spec.spec_id(),
        "seed": seed,
        "count": count,
        "spec": serde_json::from_str::<serde_json::Value>(&spec.to_json()).map_err(internal)?,
    });
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let theirs: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
                JobError::Config(format!("{}: not a sonograph dataset: {e}", path.display()))
            })?;
            for key in ["spec_id", "seed", "count"] {
                if theirs[key] != mine[key] {
                    return Err(JobError::Config(format!(
                        "{}: the folder holds another dataset ({key} {} here, {} asked); use a new --out",
                        path.display(),
                        theirs[key],
                        mine[key]
                    )));
                }
            }
            Ok(())
        }
        Err(_) => sonograph_io::publish::publish_bytes(
            &path,
            serde_json::to_string_pretty(&mine)
                .map_err(internal)?
                .as_bytes(),
        )
        .map_err(io_err(&path)),
    }
}

/// A Parquet part of recordings `indices`: their truth as columns, their IQ interleaved.
fn write_iq_part(
    path: &Path,
    indices: &[u64],
    recs: &[(Vec<Complex32>, Truth)],
    spec: &SynthSpec,
    seed: u64,
) -> Result<(), JobError> {
    let truths: Vec<&Truth> = recs.iter().map(|r| &r.1).collect();
    let f64s = |f: &dyn Fn(&Truth) -> f64| Column::F64(truths.iter().map(|t| f(t)).collect());
    let columns = vec![
        (
            "id".to_string(),
            Column::Utf8(indices.iter().map(|i| format!("sample-{i:09}")).collect()),
        ),
        ("index".to_string(), Column::U64(indices.to_vec())),
        (
            "label".to_string(),
            Column::Utf8(truths.iter().map(|t| t.label.clone()).collect()),
        ),
        ("sample_rate".to_string(), f64s(&|t| t.sample_rate)),
        ("snr_db".to_string(), f64s(&|t| t.snr_db)),
        ("cfo_hz".to_string(), f64s(&|t| t.cfo_hz)),
        (
            "noise_sigma".to_string(),
            f64s(&|t| f64::from(t.noise_sigma)),
        ),
        (
            "truth".to_string(),
            Column::Utf8(
                truths
                    .iter()
                    .map(|t| serde_json::to_string(t).expect("truth serialises"))
                    .collect(),
            ),
        ),
        (
            "iq".to_string(),
            Column::ListF32(
                recs.iter()
                    .map(|(iq, _)| iq.iter().flat_map(|v| [v.re, v.im]).collect())
                    .collect(),
            ),
        ),
    ];
    let meta = [
        ("sonograph.synth_spec".to_string(), spec.to_json()),
        ("sonograph.spec_id".to_string(), spec.spec_id()),
        ("sonograph.seed".to_string(), seed.to_string()),
    ];
    write_table(path, &columns, &meta)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sigmf_group_holds_at_most_a_quarter_gib_of_samples() {
        assert_eq!(sigmf_group(200_000), 64);
        assert_eq!(sigmf_group(1 << 22), 8);
        assert_eq!(sigmf_group(1 << 31), 1);
        // Within the budget, but for a recording over it alone, which makes a group of one.
        for k in 1..=64usize {
            let (group, bytes) = (sigmf_group(k << 20), (k << 20) as u64 * 8);
            assert!(
                group * bytes <= GROUP_BYTES || group == 1,
                "{k} MiSa: {group}"
            );
        }
    }

    /// Recordings generated into a previous group's buffers (longer, shorter and empty, full
    /// of other values) are the recordings generated fresh, and every spare buffer is used.
    #[test]
    fn recordings_in_reused_buffers_are_the_fresh_ones() {
        let spec = SynthSpec {
            n_samples: 4_000,
            ..SynthSpec::default()
        };
        let synth = Synth::new(&spec).unwrap();
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let indices: Vec<u64> = (10..16).collect();
        let fresh = generate(&synth, 7, &indices, None, &pool).unwrap();
        let mut spare: Vec<Vec<Complex32>> = [9_000usize, 3_999, 0, 4_000]
            .iter()
            .map(|&n| vec![Complex32::new(1.0, -1.0); n])
            .collect();
        let reused = generate_reusing(&synth, 7, &indices, None, &pool, &mut spare).unwrap();
        assert!(spare.is_empty());
        assert_eq!(reused.len(), fresh.len());
        for ((a, ta), (b, tb)) in fresh.iter().zip(&reused) {
            assert_eq!(a, b, "recording {}", ta.index);
            assert_eq!(ta.index, tb.index);
            assert_eq!(ta.snr_db, tb.snr_db);
        }
    }
}
