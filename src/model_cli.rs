//! `sonograph vad` and `sonograph transcribe`: Silero VAD and NeMo ASR exports through
//! sonograph-model (onnxruntime, loaded at run time).
//!
//! Both stream: a file is decoded chunk by chunk, the VAD consumes each chunk at once, and
//! `transcribe` keeps only the audio a segment not yet given out can still need. Bad input (a
//! file that does not decode, NaN samples, a model folder that is not one) stops the command
//! with one line naming the file and the reason (exit 2); outputs are written under a
//! temporary name and renamed when complete, so a failed run leaves none.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::{anyhow, Context, Result};
use clap::{Args, ValueEnum};
use rayon::prelude::*;
use sonograph_dsp::{CpuExtractor, FeatureSpec};
use sonograph_io::manifest::{Entry, Source, SourceItem};
use sonograph_io::transcripts::{TranscriptRow, TranscriptWriter};
use sonograph_io::{AudioReader, DecodeOptions, StreamError};
use sonograph_model::{
    AsrModel, ModelBatch, ModelError, Runtime, Segment, VadParams, VadSegmenter,
};
use sonograph_pipeline::{AdaptiveBatcher, BatcherConfig, FeatureRows, NoFallback};

use crate::{user, LimitArgs};

/// Timestamps are given in samples at this rate, whatever the file's.
const OUT_RATE: u32 = 16_000;

/// What both commands take about their input and the runtime.
#[derive(Args)]
pub(crate) struct InputArgs {
    /// Use one channel (0-based) instead of the mean of all channels.
    #[arg(long)]
    channel: Option<usize>,
    #[command(flatten)]
    limits: LimitArgs,
    /// The onnxruntime library (libonnxruntime.so, .dylib, onnxruntime.dll) or its folder.
    /// Default: next to the binary, else python3's onnxruntime package
    /// (pip install onnxruntime==1.31.1).
    #[arg(long, env = "SONOGRAPH_ORT_LIB")]
    ort_lib: Option<PathBuf>,
}

impl InputArgs {
    fn runtime(&self) -> Result<&'static Runtime> {
        Runtime::get(self.ort_lib.as_deref()).map_err(|e| user(e.to_string()))
    }

    /// The decoding of `item`: the channel and limits, the item's offset and duration.
    fn options(&self, item: &SourceItem) -> Result<DecodeOptions> {
        Ok(DecodeOptions {
            offset_s: item.offset_s,
            duration_s: item.duration_s,
            ..crate::decode_options(self.channel, &self.limits)?
        })
    }
}

/// `get_speech_timestamps`' parameters, with its defaults.
#[derive(Args)]
pub(crate) struct VadFlags {
    /// Speech where the probability is at least this.
    #[arg(long, default_value_t = 0.5)]
    threshold: f64,
    /// Silence (within speech) below this; default max(threshold − 0.15, 0.01).
    #[arg(long)]
    neg_threshold: Option<f64>,
    /// Segments must be longer than this.
    #[arg(long, default_value_t = 250.0)]
    min_speech_ms: f64,
    /// Segments longer than this are cut (inf: never).
    #[arg(long, default_value_t = f64::INFINITY)]
    max_speech_s: f64,
    /// Silence this long ends a segment.
    #[arg(long, default_value_t = 100.0)]
    min_silence_ms: f64,
    /// Padding on each side of a segment.
    #[arg(long, default_value_t = 30.0)]
    speech_pad_ms: f64,
    /// Silences longer than this are where a segment over --max-speech-s may be cut.
    #[arg(long, default_value_t = 98.0)]
    min_silence_at_max_speech_ms: f64,
    /// Cut a segment over --max-speech-s at its longest silence (false: at its last one).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    use_max_poss_sil_at_max_speech: bool,
}

impl VadFlags {
    pub(crate) fn params(&self) -> Result<VadParams> {
        let p = VadParams {
            threshold: self.threshold,
            neg_threshold: self.neg_threshold,
            min_speech_duration_ms: self.min_speech_ms,
            max_speech_duration_s: self.max_speech_s,
            min_silence_duration_ms: self.min_silence_ms,
            speech_pad_ms: self.speech_pad_ms,
            min_silence_at_max_speech_ms: self.min_silence_at_max_speech_ms,
            use_max_poss_sil_at_max_speech: self.use_max_poss_sil_at_max_speech,
        };
        p.validate().map_err(|e| user(e.to_string()))?;
        Ok(p)
    }
}

#[derive(Args)]
pub(crate) struct VadArgs {
    /// Audio files, or folders walked for audio files.
    #[arg(required = true)]
    inputs: Vec<PathBuf>,
    /// Output JSON lines, one per segment: source, start and end (samples at 16 kHz),
    /// start_s, end_s.
    #[arg(long)]
    out: PathBuf,
    #[command(flatten)]
    vad: VadFlags,
    /// Files segmented at once, one onnxruntime thread each (0: one per core).
    #[arg(long, default_value_t = 0)]
    jobs: usize,
    #[command(flatten)]
    input: InputArgs,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum SegmentMode {
    /// An item longer than --window-s is cut at its speech segments (Silero VAD; the --vad
    /// flags apply); a shorter one is transcribed whole, as NeMo and onnx-asr transcribe it.
    Vad,
    /// Consecutive windows of --window-s seconds.
    Fixed,
}

#[derive(Args)]
pub(crate) struct TranscribeArgs {
    /// An audio file, a folder (walked), or a manifest (NeMo .jsonl, or .csv).
    source: PathBuf,
    /// The model folder: a NeMo Parakeet/FastConformer export as onnx-asr reads it (CTC:
    /// model.onnx; TDT/RNN-T: encoder-model.onnx + decoder_joint-model.onnx; vocab.txt,
    /// config.json).
    #[arg(long)]
    model: PathBuf,
    /// Output: JSON lines, or Parquet when it ends in .parquet (id, source, start_s, end_s,
    /// text, tokens, timestamps).
    #[arg(long)]
    out: PathBuf,
    /// How items longer than --window-s are cut.
    #[arg(long, value_enum, default_value_t = SegmentMode::Vad)]
    segment: SegmentMode,
    /// The model's window, in seconds: an item up to this long (by its header) is transcribed
    /// whole; a longer one is cut (at speech with --segment vad, in windows of this length with
    /// --segment fixed).
    #[arg(long, default_value_t = 30.0)]
    window_s: f64,
    #[command(flatten)]
    vad: VadFlags,
    /// Segments per model batch (the batcher splits a batch that runs out of memory).
    #[arg(long, default_value_t = 8)]
    batch: usize,
    /// onnxruntime threads (0: one per core).
    #[arg(long, default_value_t = 0)]
    threads: usize,
    #[command(flatten)]
    input: InputArgs,
}

/// `path` written under a temporary name beside it, published by [`Staged::commit`].
struct Staged(sonograph_io::publish::Draft);

impl Staged {
    fn create(path: &Path) -> Result<(Self, BufWriter<File>)> {
        let (draft, f) = sonograph_io::publish::Draft::create(path)
            .map_err(|e| user(format!("{}: cannot write: {e}", path.display())))?;
        Ok((Staged(draft), BufWriter::new(f)))
    }
    fn path(&self) -> &Path {
        self.0.path()
    }
    fn commit(self, w: BufWriter<File>) -> Result<()> {
        let path = self.path().to_path_buf();
        let f = w
            .into_inner()
            .map_err(|e| anyhow!("{}: cannot write: {e}", path.display()))?;
        self.0
            .sync(f)
            .and_then(|s| s.publish())
            .with_context(|| format!("{}: cannot write", path.display()))
    }
}

/// Calls `each` with the audio items of the inputs, in order: files as given, folders walked
/// (sorted), manifests (with `manifests`) streamed line by line. A manifest line that cannot be
/// used stops the command with its id and reason.
fn for_each_item(
    inputs: &[PathBuf],
    manifests: bool,
    mut each: impl FnMut(&SourceItem) -> Result<()>,
) -> Result<()> {
    for input in inputs {
        if input.is_dir() || (manifests && input.is_file() && is_manifest(input)) {
            let source = Source::open(input).map_err(|e| user(e.to_string()))?;
            for entry in source.entries().map_err(|e| user(e.to_string()))? {
                match entry.map_err(|e| user(e.to_string()))? {
                    Entry::Item(item) => each(&item)?,
                    Entry::Invalid { id, reason } => {
                        return Err(user(format!("{}: {id}: {reason}", input.display())))
                    }
                    // `Source::open` lists audio only.
                    Entry::Iq { id, .. } => {
                        return Err(user(format!("{}: {id}: not audio", input.display())))
                    }
                }
            }
        } else {
            each(&SourceItem {
                id: input.display().to_string(),
                path: input.clone(),
                offset_s: 0.0,
                duration_s: None,
            })?;
        }
    }
    Ok(())
}

fn is_manifest(p: &Path) -> bool {
    matches!(
        p.extension().and_then(|e| e.to_str()),
        Some("jsonl" | "json" | "ndjson" | "csv")
    )
}

/// An error that stops a stream from inside its sink, carried out of sonograph-io unchanged
/// (it names its file already; a bad-input error stays one).
#[derive(Debug)]
struct Stop(anyhow::Error);

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#}", self.0)
    }
}

impl std::error::Error for Stop {}

fn stream_error(e: StreamError<Stop>) -> anyhow::Error {
    match e {
        StreamError::Sink { source, .. } => source.0,
        other => user(other.to_string()),
    }
}

/// A model error on `path`: the input's fault (exit 2) unless onnxruntime failed.
fn model_error(path: &Path, e: ModelError) -> anyhow::Error {
    match e {
        ModelError::Runtime(msg) => anyhow!("{}: onnxruntime: {msg}", path.display()),
        other => user(format!("{}: {other}", path.display())),
    }
}

/// What [`stream_vad`] reports, in order: the samples of a chunk, the segments they complete,
/// then the segmenter after the chunk.
enum VadEvent<'a> {
    Samples(&'a [f32]),
    Segment(Segment),
    Pushed(&'a VadSegmenter),
}

/// Segmenters by rate, kept from one file to the next: opening one loads the model into a new
/// onnxruntime session, which costs more than a short clip's VAD.
struct Segmenters {
    rt: &'static Runtime,
    params: VadParams,
    by_rate: HashMap<u32, VadSegmenter>,
}

impl Segmenters {
    fn new(rt: &'static Runtime, params: VadParams) -> Self {
        Segmenters {
            rt,
            params,
            by_rate: HashMap::new(),
        }
    }

    /// A segmenter at `rate`, reset.
    fn at(&mut self, rate: u32) -> Result<&mut VadSegmenter, ModelError> {
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
/// stops the stream.
fn stream_vad(
    segmenters: &mut Segmenters,
    item: &SourceItem,
    opts: &DecodeOptions,
    force_rate: Option<u32>,
    mut on: impl FnMut(VadEvent<'_>) -> Result<()>,
) -> Result<u32> {
    let reader = AudioReader::open(&item.path, opts).map_err(|e| user(e.to_string()))?;
    let native = reader.info().sample_rate;
    let rate = force_rate.unwrap_or(match VadSegmenter::model_rate(native) {
        Some(_) => native,
        None => OUT_RATE,
    });
    let seg = segmenters
        .at(rate)
        .map_err(|e| model_error(&item.path, e))?;
    let mut found = Vec::new();
    sonograph_io::stream_reader(reader, rate, |chunk| {
        on(VadEvent::Samples(chunk)).map_err(Stop)?;
        seg.push(chunk, &mut found)
            .map_err(|e| Stop(model_error(&item.path, e)))?;
        for s in found.drain(..) {
            on(VadEvent::Segment(s)).map_err(Stop)?;
        }
        on(VadEvent::Pushed(seg)).map_err(Stop)
    })
    .map_err(stream_error)?;
    seg.finish(&mut found)
        .map_err(|e| model_error(&item.path, e))?;
    for s in found.drain(..) {
        on(VadEvent::Segment(s))?;
    }
    Ok(rate)
}

/// Samples at `rate` as samples at 16 kHz: exact for 8 kHz (× 2) and for multiples of 16 kHz
/// (segments there are multiples of the decimation step).
fn at_16k(samples: u64, rate: u32) -> u64 {
    samples * u64::from(OUT_RATE) / u64::from(rate)
}

/// Files whose segments are computed at once (in parallel) before they are written in order.
const VAD_CHUNK: usize = 256;

pub(crate) fn vad(args: &VadArgs) -> Result<()> {
    let params = args.vad.params()?;
    crate::limits(&args.input.limits)?;
    let rt = args.input.runtime()?;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(args.jobs)
        .build()
        .context("cannot start the thread pool")?;
    // One set of segmenters per worker at most, reused from chunk to chunk.
    let idle: Mutex<Vec<Segmenters>> = Mutex::new(Vec::new());
    let segments_of = |item: &SourceItem| -> Result<(u32, Vec<Segment>)> {
        let taken = idle.lock().map(|mut v| v.pop()).unwrap_or(None);
        let mut segmenters = taken.unwrap_or_else(|| Segmenters::new(rt, params));
        let opts = args.input.options(item)?;
        let mut found = Vec::new();
        let rate = stream_vad(&mut segmenters, item, &opts, None, |event| {
            if let VadEvent::Segment(s) = event {
                found.push(s);
            }
            Ok(())
        })?;
        if let Ok(mut v) = idle.lock() {
            v.push(segmenters);
        }
        Ok((rate, found))
    };
    let (staged, mut w) = Staged::create(&args.out)?;
    let mut chunk: Vec<SourceItem> = Vec::with_capacity(VAD_CHUNK);
    let mut write_chunk = |chunk: &mut Vec<SourceItem>| -> Result<()> {
        let results: Vec<Result<(u32, Vec<Segment>)>> =
            pool.install(|| chunk.par_iter().map(&segments_of).collect());
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
                writeln!(w, "{line}")
                    .map_err(|e| user(format!("{}: cannot write: {e}", args.out.display())))?;
            }
        }
        Ok(())
    };
    for_each_item(&args.inputs, false, |item| {
        chunk.push(item.clone());
        if chunk.len() == VAD_CHUNK {
            write_chunk(&mut chunk)?;
        }
        Ok(())
    })?;
    write_chunk(&mut chunk)?;
    staged.commit(w)
}

/// A segment waiting for its batch.
struct Pending {
    source: String,
    index: usize,
    start: u64,
    end: u64,
    samples: Vec<f32>,
}

/// Where transcripts go.
enum Sink {
    Jsonl(Staged, BufWriter<File>),
    Parquet(Box<TranscriptWriter>),
}

impl Sink {
    fn open(path: &Path) -> Result<Self> {
        if path.extension().and_then(|e| e.to_str()) == Some("parquet") {
            Ok(Sink::Parquet(Box::new(
                TranscriptWriter::create(path).map_err(|e| user(e.to_string()))?,
            )))
        } else {
            let (staged, w) = Staged::create(path)?;
            Ok(Sink::Jsonl(staged, w))
        }
    }

    fn write(&mut self, row: TranscriptRow, start: u64, end: u64) -> Result<()> {
        match self {
            Sink::Jsonl(staged, w) => {
                let line = serde_json::json!({
                    "id": row.id,
                    "source": row.source,
                    "start": start,
                    "end": end,
                    "start_s": row.start_s,
                    "end_s": row.end_s,
                    "text": row.text,
                    "tokens": row.tokens,
                    "timestamps": row.timestamps,
                });
                writeln!(w, "{line}")
                    .with_context(|| format!("{}: cannot write", staged.path().display()))
            }
            Sink::Parquet(p) => p.push(row).map_err(|e| user(e.to_string())),
        }
    }

    fn finish(self) -> Result<()> {
        match self {
            Sink::Jsonl(staged, w) => staged.commit(w),
            Sink::Parquet(p) => p.finish().map_err(|e| anyhow!(e.to_string())),
        }
    }
}

/// The model, its features and the batcher, turning pending segments into rows.
struct Transcriber<'m> {
    model: &'m mut AsrModel,
    spec: FeatureSpec,
    batcher: AdaptiveBatcher,
    failed: usize,
    batch: usize,
}

impl Transcriber<'_> {
    /// Runs the pending segments once there is a batch of them.
    fn flush_full(&mut self, pending: &mut Vec<Pending>, sink: &mut Sink) -> Result<()> {
        if pending.len() >= self.batch {
            self.flush(pending, sink)?;
        }
        Ok(())
    }

    fn flush(&mut self, pending: &mut Vec<Pending>, sink: &mut Sink) -> Result<()> {
        if pending.is_empty() {
            return Ok(());
        }
        let spec = &self.spec;
        // NeMo normalises each segment over its own frames, as it does each utterance.
        let features: Vec<Result<Vec<f32>, String>> = pending
            .par_iter()
            .map_init(
                || CpuExtractor::new(spec).expect("validated when the model was opened"),
                |ex, p| {
                    let mut rows = Vec::new();
                    ex.extract(&p.samples, &mut rows)
                        .map(|_| rows)
                        .map_err(|e| e.to_string())
                },
            )
            .collect();
        let valid: Vec<usize> = (0..pending.len())
            .filter(|&i| features[i].is_ok())
            .collect();
        let rows = FeatureRows::new(
            valid
                .iter()
                .map(|&i| features[i].as_deref().unwrap_or_default())
                .collect(),
            self.spec.n_mels,
        );
        let mut outputs = ModelBatch::new();
        self.batcher.run_on(
            &rows,
            self.model.runner(),
            &mut NoFallback("the model's only device failed".into()),
            &mut outputs,
        );
        let mut results = valid.iter().zip(outputs.into_items());
        for (i, p) in pending.drain(..).enumerate() {
            let decoded = match &features[i] {
                Err(e) => Err(e.clone()),
                Ok(_) => {
                    let (_, out) = results.next().expect("one output per valid segment");
                    out.map_err(|e| e.to_string())
                        .and_then(|o| self.model.decode(&o).map_err(|e| e.to_string()))
                }
            };
            let (start_s, end_s) = (
                p.start as f64 / f64::from(OUT_RATE),
                p.end as f64 / f64::from(OUT_RATE),
            );
            let id = format!("{}#{}", p.source, p.index);
            let t = match decoded {
                Ok(t) => t,
                Err(e) => {
                    eprintln!("sonograph: warning: {id}: {e}");
                    self.failed += 1;
                    continue;
                }
            };
            let row = TranscriptRow {
                id,
                source: p.source,
                start_s,
                end_s,
                text: t.text,
                tokens: t.tokens,
                timestamps: t.timestamps.iter().map(|x| start_s + x).collect(),
            };
            sink.write(row, p.start, p.end)?;
        }
        Ok(())
    }
}

/// Transcribes; returns the exit code (3 when some segments failed; they were named on
/// stderr).
pub(crate) fn transcribe(args: &TranscribeArgs) -> Result<u8> {
    let params = args.vad.params()?;
    if !(args.window_s.is_finite() && args.window_s > 0.0) {
        return Err(user(format!(
            "--window-s must be > 0, not {}",
            args.window_s
        )));
    }
    let batch = args.batch.max(1);
    let rt = args.input.runtime()?;
    let mut model =
        AsrModel::open(rt, &args.model, args.threads).map_err(|e| user(e.to_string()))?;
    let n_mels = model.n_mels();
    let mut spec = FeatureSpec::preset(if n_mels == 128 { "nemo-128" } else { "nemo" })
        .map_err(|e| anyhow!(e.to_string()))?;
    spec.n_mels = n_mels;
    spec.validate()
        .map_err(|e| user(format!("{}: {e}", args.model.display())))?;
    crate::limits(&args.input.limits)?;
    let mut sink = Sink::open(&args.out)?;
    let mut tr = Transcriber {
        model: &mut model,
        spec,
        batcher: AdaptiveBatcher::new(BatcherConfig {
            initial: batch,
            max: batch,
            ..Default::default()
        }),
        failed: 0,
        batch,
    };
    let window = (args.window_s * f64::from(OUT_RATE)).round().max(1.0) as u64;
    let mut segmenters = Segmenters::new(rt, params);
    // Segments wait here for a full batch, across files: at most `batch` at a time.
    let mut pending: Vec<Pending> = Vec::new();
    for_each_item(std::slice::from_ref(&args.source), true, |item| {
        let opts = args.input.options(item)?;
        // Samples from `base` on: what a segment not yet given out may still need.
        let mut buf: Vec<f32> = Vec::new();
        let mut base = 0u64;
        let mut index = 0usize;
        let mut cut = |start: u64, end: u64, buf: &[f32], base: u64| -> Result<Pending> {
            // A segment never starts before what the segmenter let go (earliest_open_sample)
            // nor ends past what it was given; if one did, that is a bug, said so.
            let kept = base..base + buf.len() as u64;
            if !(kept.start <= start && start <= end && end <= kept.end) {
                return Err(anyhow!(
                    "{}: segment {start}..{end} is outside the samples kept ({kept:?}): a bug in sonograph",
                    item.path.display()
                ));
            }
            let p = Pending {
                source: item.id.clone(),
                index,
                start,
                end,
                samples: buf[(start - base) as usize..(end - base) as usize].to_vec(),
            };
            index += 1;
            Ok(p)
        };
        // An item that fits the model's window is transcribed whole, whatever the mode: one
        // window of the fixed cut. (A header that understates the length is cut in windows.)
        let fits = sonograph_io::AudioReader::open(&item.path, &opts)
            .ok()
            .and_then(|r| r.expected_seconds())
            .is_some_and(|s| s <= args.window_s);
        let segment = if fits {
            SegmentMode::Fixed
        } else {
            args.segment
        };
        match segment {
            SegmentMode::Vad => {
                stream_vad(&mut segmenters, item, &opts, Some(OUT_RATE), |event| {
                    match event {
                        VadEvent::Samples(chunk) => buf.extend_from_slice(chunk),
                        VadEvent::Segment(s) => {
                            pending.push(cut(s.start, s.end, &buf, base)?);
                            tr.flush_full(&mut pending, &mut sink)?;
                        }
                        VadEvent::Pushed(seg) => {
                            // Drop what no segment still to come can start at.
                            let keep = seg.earliest_open_sample().max(base);
                            buf.drain(..(keep - base) as usize);
                            base = keep;
                        }
                    }
                    Ok(())
                })?;
            }
            SegmentMode::Fixed => {
                let mut total = 0u64;
                sonograph_io::stream_mono(&item.path, &opts, OUT_RATE, |chunk| {
                    buf.extend_from_slice(chunk);
                    total += chunk.len() as u64;
                    while total - base >= window {
                        pending.push(cut(base, base + window, &buf, base).map_err(Stop)?);
                        buf.drain(..window as usize);
                        base += window;
                        tr.flush_full(&mut pending, &mut sink).map_err(Stop)?;
                    }
                    Ok::<(), Stop>(())
                })
                .map_err(stream_error)?;
                if total > base {
                    pending.push(cut(base, total, &buf, base)?);
                    tr.flush_full(&mut pending, &mut sink)?;
                }
            }
        }
        Ok(())
    })?;
    tr.flush(&mut pending, &mut sink)?;
    let failed = tr.failed;
    sink.finish()?;
    Ok(if failed > 0 { 3 } else { 0 })
}
