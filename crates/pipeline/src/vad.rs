//! Silero VAD over streamed audio: the segmenters kept from file to file, [`stream_vad`] (which
//! `transcribe` cuts long items with), and the `vad` command's job: the speech segments of
//! files, folders and manifests as JSON lines, computed in parallel and written in order to one
//! file published whole.

use std::collections::HashMap;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rayon::prelude::*;
use sonograph_io::decode::{ChannelMix, DecodeOptions, Limits};
use sonograph_io::manifest::{Entry, Source, SourceItem};
use sonograph_io::{AudioReader, StreamError};
use sonograph_model::{ModelError, Runtime, Segment, VadParams, VadSegmenter};

use crate::error::JobError;

/// Timestamps are given in samples at this rate, whatever the file's.
pub const OUT_RATE: u32 = 16_000;

/// A `vad` job: the speech segments of `inputs` to the JSON lines of `out`.
#[derive(Debug, Clone)]
pub struct VadJob {
    /// Audio files, or folders walked for audio files (sorted).
    pub inputs: Vec<PathBuf>,
    /// One JSON line per segment: source, start and end (samples at 16 kHz), start_s, end_s.
    pub out: PathBuf,
    pub params: VadParams,
    /// Files segmented at once, one onnxruntime thread each (0: one per core).
    pub jobs: usize,
    /// One channel (0-based) instead of the mean of all.
    pub channel: Option<usize>,
    pub limits: Limits,
    /// The onnxruntime library, where it is not found by itself.
    pub ort_lib: Option<PathBuf>,
}

/// Files whose segments are computed at once (in parallel) before they are written in order.
const VAD_CHUNK: usize = 256;

/// Runs a `vad` job. Bad input (a file that does not decode, a folder entry that is not
/// audio) stops it with the file and the reason ([`JobError::Input`]); the output is written
/// under a temporary name and published only when complete.
pub fn run_vad(job: &VadJob) -> Result<(), JobError> {
    job.params
        .validate()
        .map_err(|e| JobError::Config(e.to_string()))?;
    job.limits.validate().map_err(JobError::Config)?;
    let rt = Runtime::get(job.ort_lib.as_deref()).map_err(|e| JobError::Model(e.to_string()))?;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(job.jobs)
        .build()
        .map_err(|e| JobError::Internal(format!("cannot start the thread pool: {e}")))?;
    // One set of segmenters per worker at most, reused from chunk to chunk.
    let idle: Mutex<Vec<Segmenters>> = Mutex::new(Vec::new());
    let segments_of = |item: &SourceItem| -> Result<(u32, Vec<Segment>), JobError> {
        let taken = idle.lock().map(|mut v| v.pop()).unwrap_or(None);
        let mut segmenters = taken.unwrap_or_else(|| Segmenters::new(rt, job.params));
        let opts = DecodeOptions {
            mix: job.channel.map_or(ChannelMix::Mean, ChannelMix::Select),
            limits: job.limits,
            offset_s: item.offset_s,
            duration_s: item.duration_s,
        };
        let mut found = Vec::new();
        let rate = stream_vad(
            &mut segmenters,
            &sonograph_io::Roots::anywhere(),
            item,
            &opts,
            None,
            |event| {
                if let VadEvent::Segment(s) = event {
                    found.push(s);
                }
                Ok(())
            },
        )
        .map_err(|e| match e {
            // onnxruntime failing mid-run is the model device's failure, not the input's.
            VadStop::Runtime(message) => JobError::Device(message),
            input => JobError::Input(input.to_string()),
        })?;
        if let Ok(mut v) = idle.lock() {
            v.push(segmenters);
        }
        Ok((rate, found))
    };
    // The output the user named: a usage error, as every `vad` error about its files is.
    let cannot_write =
        |e: std::io::Error| JobError::Input(format!("{}: cannot write: {e}", job.out.display()));
    let (draft, file) = sonograph_io::publish::Draft::create(&job.out).map_err(cannot_write)?;
    let mut w = BufWriter::new(file);
    let mut chunk: Vec<SourceItem> = Vec::with_capacity(VAD_CHUNK);
    let mut write_chunk = |chunk: &mut Vec<SourceItem>| -> Result<(), JobError> {
        let results: Vec<_> = pool.install(|| chunk.par_iter().map(&segments_of).collect());
        for (item, result) in chunk.drain(..).zip(results) {
            let (rate, segments) = result?;
            for s in segments {
                let (start, end) = (at_16k(s.start, rate), at_16k(s.end, rate));
                let line = serde_json::json!({
                    "source": item.id,
                    "start": start,
                    "end": end,
                    "start_s": start as f64 / f64::from(OUT_RATE),
                    "end_s": end as f64 / f64::from(OUT_RATE),
                });
                writeln!(w, "{line}").map_err(cannot_write)?;
            }
        }
        Ok(())
    };
    for_each_input_item(&job.inputs, |item| {
        chunk.push(item);
        if chunk.len() == VAD_CHUNK {
            write_chunk(&mut chunk)?;
        }
        Ok(())
    })?;
    write_chunk(&mut chunk)?;
    let file = w.into_inner().map_err(|e| cannot_write(e.into_error()))?;
    draft
        .sync(file)
        .and_then(|synced| synced.publish())
        .map_err(cannot_write)
}

/// Calls `each` with the audio items of `inputs`, in order: files as given, folders walked
/// (sorted). A folder entry that cannot be used stops the walk with its id and reason.
fn for_each_input_item(
    inputs: &[PathBuf],
    mut each: impl FnMut(SourceItem) -> Result<(), JobError>,
) -> Result<(), JobError> {
    // Source errors name their file; an entry that cannot be used is named under its input.
    let bad = |input: &Path, what: String| JobError::Input(format!("{}: {what}", input.display()));
    for input in inputs {
        if !input.is_dir() {
            each(SourceItem {
                id: input.display().to_string(),
                path: input.clone(),
                offset_s: 0.0,
                duration_s: None,
                member: None,
            })?;
            continue;
        }
        let source = Source::open(input).map_err(|e| JobError::Input(e.to_string()))?;
        for entry in source
            .entries()
            .map_err(|e| JobError::Input(e.to_string()))?
        {
            match entry.map_err(|e| JobError::Input(e.to_string()))? {
                Entry::Item(item) => each(item)?,
                Entry::Invalid { id, reason } => return Err(bad(input, format!("{id}: {reason}"))),
                // `Source::open` lists audio only.
                Entry::Iq { id, .. } => return Err(bad(input, format!("{id}: not audio"))),
            }
        }
    }
    Ok(())
}

/// An error from inside a stream's sink, carried out of sonograph-io as it is.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct SinkStop(pub(crate) String);

/// What [`stream_vad`] reports, in order: the samples of a chunk, the segments they complete,
/// then the segmenter after the chunk.
pub enum VadEvent<'a> {
    Samples(&'a [f32]),
    Segment(Segment),
    Pushed(&'a VadSegmenter),
}

/// Why streaming a file through the VAD stopped. Each message names the file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VadStop {
    /// The input: a file that does not decode, NaN samples, a rate the model cannot take.
    #[error("{0}")]
    Input(String),
    /// onnxruntime itself.
    #[error("{0}")]
    Runtime(String),
}

/// A model error on `path`: the input's fault unless onnxruntime failed.
fn model_error(path: &Path, e: ModelError) -> VadStop {
    match e {
        ModelError::Runtime(msg) => {
            VadStop::Runtime(format!("{}: onnxruntime: {msg}", path.display()))
        }
        other => VadStop::Input(format!("{}: {other}", path.display())),
    }
}

/// Segmenters by rate, kept from one file to the next: opening one loads the model into a new
/// onnxruntime session, which costs more than a short clip's VAD.
pub struct Segmenters {
    rt: &'static Runtime,
    params: VadParams,
    by_rate: HashMap<u32, VadSegmenter>,
}

impl Segmenters {
    pub fn new(rt: &'static Runtime, params: VadParams) -> Self {
        Segmenters {
            rt,
            params,
            by_rate: HashMap::new(),
        }
    }

    /// A segmenter at `rate`, reset.
    pub(crate) fn at(&mut self, rate: u32) -> Result<&mut VadSegmenter, ModelError> {
        let seg = match self.by_rate.entry(rate) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(VadSegmenter::new(self.rt, &self.params, rate)?)
            }
        };
        seg.reset();
        Ok(seg)
    }
}

/// Streams `item` through Silero VAD: at the file's rate where silero-vad takes it (8 kHz, or
/// a multiple of 16 kHz, decimated as it does), else resampled to 16 kHz (or always at
/// `force_rate`); returns that rate, in whose samples the segments are. An error from `on`
/// (an input error, naming the file) stops the stream. The file is opened beneath `roots`.
pub fn stream_vad(
    segmenters: &mut Segmenters,
    roots: &sonograph_io::Roots,
    item: &SourceItem,
    opts: &DecodeOptions,
    force_rate: Option<u32>,
    mut on: impl FnMut(VadEvent<'_>) -> Result<(), String>,
) -> Result<u32, VadStop> {
    let reader =
        AudioReader::open_item(roots, item, opts).map_err(|e| VadStop::Input(e.to_string()))?;
    let native = reader.info().sample_rate;
    let rate = force_rate.unwrap_or(match VadSegmenter::model_rate(native) {
        Some(_) => native,
        None => OUT_RATE,
    });
    let seg = segmenters
        .at(rate)
        .map_err(|e| model_error(&item.path, e))?;
    let mut found = Vec::new();
    let mut runtime_failed = None;
    sonograph_io::stream_reader(reader, rate, |chunk| {
        on(VadEvent::Samples(chunk)).map_err(SinkStop)?;
        if let Err(e) = seg.push(chunk, &mut found) {
            let stop = model_error(&item.path, e);
            let message = stop.to_string();
            runtime_failed = Some(stop);
            return Err(SinkStop(message));
        }
        for s in found.drain(..) {
            on(VadEvent::Segment(s)).map_err(SinkStop)?;
        }
        on(VadEvent::Pushed(seg)).map_err(SinkStop)
    })
    .map_err(|e| match (runtime_failed.take(), e) {
        (Some(stop), _) => stop,
        (None, StreamError::Sink { source, .. }) => VadStop::Input(source.0),
        (None, other) => VadStop::Input(other.to_string()),
    })?;
    seg.finish(&mut found)
        .map_err(|e| model_error(&item.path, e))?;
    for s in found.drain(..) {
        on(VadEvent::Segment(s)).map_err(VadStop::Input)?;
    }
    Ok(rate)
}

/// Samples at `rate` as samples at 16 kHz: exact for 8 kHz (× 2) and for multiples of 16 kHz
/// (segments there are multiples of the decimation step).
pub fn at_16k(samples: u64, rate: u32) -> u64 {
    samples * u64::from(OUT_RATE) / u64::from(rate)
}
