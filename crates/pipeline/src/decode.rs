//! The decode stage: workers that open, decode and resample items. Short items go to the
//! prefetch queue whole and long ones in pieces; when every device is a CPU (and no stage needs
//! the units), each worker computes its items itself, long ones streamed.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Receiver, Sender};
use sonograph_dsp::span::Span;
use sonograph_dsp::{CpuExtractor, ItemError, OutputKind};
use sonograph_io::decode::{AudioReader, DecodeOptions};
use sonograph_io::manifest::{Entry, SourceItem};
use sonograph_io::sigmf::{IqReader, IqSource};
use sonograph_io::span::Blob;
use sonograph_io::{ItemReader, StreamError};
use sonograph_model::{Runtime, Segment, VadSegmenter};
use thiserror::Error;

use crate::augment::Augmenter;
use crate::budget::{BytesHeld, MemoryBudget};
use crate::config::JobConfig;
use crate::error::panic_text;
use crate::executor::{Permit, Unit};
use crate::live::{LiveDevice, LiveJob, Queue, Stage};
use crate::report::Failure;
use crate::segment::{extract_from_reader, PieceCutter, PiecePlan, PieceWindow};
use crate::writer::{feature_row, item_seconds, RowMsg, WriterMsg};

/// What a decode worker did: seconds busy decoding (not counting time blocked on a full
/// queue), and seconds computing whole items itself, with how many.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct WorkerStats {
    pub decode_s: f64,
    pub compute_s: f64,
    pub items_computed: u64,
}

/// Decodes items; short ones go to the prefetch queue, long ones too in pieces (or, when they
/// are computed here, through this worker's extractor).
#[allow(clippy::too_many_arguments)]
pub(crate) fn decode_worker(
    config: &JobConfig,
    augmenter: Option<&Augmenter>,
    work: Receiver<Entry>,
    units: Sender<Unit>,
    writer: Sender<WriterMsg>,
    computed: Computed,
    mark_pcm16: bool,
    budget: &Arc<MemoryBudget>,
    executors_running: &Weak<()>,
    live: &LiveJob,
) -> WorkerStats {
    let spec = Arc::new(config.spec.clone());
    let mut extractor: Option<CpuExtractor> = None;
    // With --vad, this worker's segmenter (an onnxruntime session), opened on first use.
    let mut segmenter: Option<Result<VadSegmenter, String>> = None;
    let mut stats = WorkerStats::default();
    for entry in work.iter() {
        if live.is_canceled() {
            break; // the entry stays undone; the resumed job decodes it
        }
        live.observe_queue(Queue::Work, work.len());
        let t = Instant::now();
        let mut blocked = 0.0;
        // An IQ recording goes through the same stages as an audio file, as an item named
        // by its file, whose samples are interleaved I/Q values.
        let work = match entry {
            Entry::Invalid { id, reason } => Err(Failure {
                id,
                source: config.source.display().to_string(),
                reason,
            }),
            Entry::Item(item) => Ok(WorkItem { item, iq: None }),
            Entry::Iq { id, source } => Ok(WorkItem {
                item: SourceItem {
                    id,
                    path: source.path(),
                    offset_s: 0.0,
                    duration_s: None,
                    member: None,
                },
                iq: Some(source),
            }),
        };
        let outcome = match work {
            Err(failure) => Err(WriterMsg::Failed(failure)),
            Ok(work) => {
                let ex = extractor.get_or_insert_with(|| {
                    CpuExtractor::with_precision(&spec, config.precision)
                        .expect("the spec was validated")
                });
                let vad = config.vad.as_ref().map(|params| {
                    segmenter.get_or_insert_with(|| {
                        Runtime::get(config.ort_lib.as_deref())
                            .and_then(|rt| VadSegmenter::new(rt, params, spec.sample_rate))
                            .map_err(|e| format!("voice activity: {e}"))
                    })
                });
                // A bug tripped by one file must not take the shard down with it (it would trip
                // again on every resume): the item fails with the panic's message.
                let run = std::panic::AssertUnwindSafe(|| {
                    decode_item(
                        config,
                        augmenter,
                        &work,
                        ex,
                        vad,
                        Outputs {
                            units: &units,
                            writer: &writer,
                            live,
                            budget,
                            executors_running,
                            mark_pcm16,
                        },
                        &computed,
                        &mut blocked,
                        &mut stats,
                    )
                });
                std::panic::catch_unwind(run).unwrap_or_else(|payload| {
                    // Pieces sent before the panic may still be on their way.
                    Err(WriterMsg::FailedPiece(Failure {
                        id: work.item.id.clone(),
                        source: work.item.path.display().to_string(),
                        reason: format!("internal error while decoding: {}", panic_text(&*payload)),
                    }))
                })
            }
        };
        let took = t.elapsed().as_secs_f64() - blocked;
        stats.decode_s += took;
        live.add_busy(Stage::Decode, took);
        let sent = match outcome {
            Ok(Flow::Continue) => true,
            Ok(Flow::Stop) => false,
            Err(failed) => writer.send(failed).is_ok(),
        };
        if !sent {
            break;
        }
    }
    stats
}

/// An item to decode: an audio file (or a span of one), or an IQ recording (`iq`) named by
/// its file.
struct WorkItem {
    item: SourceItem,
    iq: Option<IqSource>,
}

/// Where a decoded item goes, and the job's counters and cancel switch.
#[derive(Clone, Copy)]
struct Outputs<'a> {
    units: &'a Sender<Unit>,
    writer: &'a Sender<WriterMsg>,
    live: &'a LiveJob,
    /// Room for the units handed on; waited for before each is sent.
    budget: &'a Arc<MemoryBudget>,
    /// Dead once every executor has ended: nothing will give room back then.
    executors_running: &'a Weak<()>,
    /// Whether units are scanned for the 16-bit grid: only where a GPU may take them.
    mark_pcm16: bool,
}

impl Outputs<'_> {
    /// Room in the budget for a unit of `samples` (and the features computed from them);
    /// `None` when the job stops while waiting.
    fn room_for(&self, config: &JobConfig, samples: usize) -> Option<BytesHeld> {
        let values_per_sample = if config.spec.is_complex() { 2.0 } else { 1.0 };
        let seconds = samples as f64 / values_per_sample / f64::from(config.spec.sample_rate);
        self.budget.acquire(config.item_bytes(seconds), || {
            self.live.is_canceled() || self.executors_running.strong_count() == 0
        })
    }
}

/// Why an item over max-seconds is not augmented: it is streamed in pieces, and speed
/// perturbation, reverberation and noise are drawn for a whole item.
fn long_augmented(config: &JobConfig) -> String {
    format!(
        "augmentation applies to items of up to --max-seconds ({} s); this one is longer \
         (cut it in a manifest, or raise --max-seconds)",
        config.max_seconds
    )
}

/// The key of an item's augmentation draws: the first 8 bytes of the SHA-256 of its id, the
/// same on every run, worker count and shard.
pub(crate) fn augment_key(id: &str) -> u64 {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(id.as_bytes());
    u64::from_le_bytes(digest[..8].try_into().expect("8 bytes of 32"))
}

#[allow(clippy::too_many_arguments)]
fn decode_item(
    config: &JobConfig,
    augmenter: Option<&Augmenter>,
    work: &WorkItem,
    extractor: &mut CpuExtractor,
    vad: Option<&mut Result<VadSegmenter, String>>,
    outputs: Outputs,
    computed: &Computed,
    blocked: &mut f64,
    stats: &mut WorkerStats,
) -> Result<Flow, WriterMsg> {
    let Outputs {
        units,
        writer,
        live,
        ..
    } = outputs;
    let item = &work.item;
    let source = item.path.display().to_string();
    let fail = |reason: String| WriterMsg::Failed(item_failure(item, reason));
    let opts = decode_options(config, item);
    // A shard's member: its archive opened once, as listed (no HEAD), for its audio and its
    // sample's text members, which a small sample's one request brings together. (For audio
    // and a real spec only: another pairing fails in `open_item`, saying why.)
    let audio = work.iq.is_none() && !config.spec.is_complex();
    let archive = match &item.member {
        Some(member) if audio => Some(member.open(&config.roots).map_err(|source| {
            fail(
                sonograph_io::DecodeError::Open {
                    path: item.path.clone(),
                    source,
                }
                .to_string(),
            )
        })?),
        _ => None,
    };
    let mut reader =
        open_item(config, item, archive.as_ref(), work.iq.as_ref(), &opts).map_err(fail)?;
    // A WebDataset sample's text members, for its rows: sent before any row of the item, so
    // the writer has them when the first one comes (stages pass them on at once).
    if let (Some(member), Some(archive)) = (&item.member, &archive) {
        if let Some(text) = sonograph_io::webdataset::read_sample(archive, member)
            .map_err(|e| fail(format!("{}: {e}", item.path.display())))?
        {
            let sample = WriterMsg::Sample {
                id: item.id.clone(),
                text,
            };
            if writer.send(sample).is_err() {
                return Ok(Flow::Stop); // the writer has stopped; the item waits for a resume
            }
        }
    }
    if let Some(vad) = vad {
        let vad = vad.as_mut().map_err(|e| fail(e.clone()))?;
        let Computed::OnExecutors(executors_running) = computed else {
            return Err(fail(
                "internal error: segments go to the executors, and this job streams items".into(),
            ));
        };
        return send_segments(
            config,
            item,
            reader,
            outputs,
            executors_running,
            vad,
            blocked,
        );
    }
    // An item of a fixed-length spec is decoded only that far (see `decoded_seconds`): short.
    let short = config.spec.fixed_seconds().is_some()
        || reader
            .expected_seconds()
            .is_some_and(|s| s <= config.max_seconds);
    if short {
        // Held whole only as far as max-seconds: a header that says "short" and lies costs
        // no more than an honest one, and the item goes on as a long one.
        let rate = config.spec.sample_rate;
        let values_per_sample = if config.spec.is_complex() { 2.0 } else { 1.0 };
        let most = (config.max_seconds * f64::from(rate)).ceil() * values_per_sample;
        // A second of slack: the resampler's output rounds, and an item at the bound is short.
        let most = most as usize + rate as usize;
        match reader.read_up_to(rate, most) {
            Err(e) => return Err(fail(e.to_string())),
            Ok(Some(samples)) => {
                let samples = match augmenter {
                    Some(a) => {
                        a.waveform(0, augment_key(&item.id), samples, rate, &item.path, None)
                            .map_err(fail)?
                            .0
                    }
                    None => samples,
                };
                if let Computed::Here(cpu) = computed {
                    return compute_here(
                        config, item, source, &samples, extractor, outputs, cpu, blocked, stats,
                    );
                }
                let wait = Instant::now();
                let Some(room) = outputs.room_for(config, samples.len()) else {
                    return Ok(Flow::Stop); // the item stays undone for a resume
                };
                let sent = units.send(Unit {
                    id: item.id.clone(),
                    source,
                    offset_s: item.offset_s,
                    pcm16: outputs.mark_pcm16 && sonograph_dsp::pcm16::is_pcm16(&samples),
                    samples,
                    piece: None,
                    _permit: None,
                    _bytes: Some(room),
                });
                *blocked += wait.elapsed().as_secs_f64();
                // A closed queue means the job is stopping; the item stays undone for a
                // resume.
                return Ok(if sent.is_ok() {
                    Flow::Continue
                } else {
                    Flow::Stop
                });
            }
            Ok(None) if augmenter.is_some() => return Err(fail(long_augmented(config))),
            Ok(None) => {
                tracing::debug!(id = %item.id, "its header said under max-seconds; streamed in pieces");
                reader = open_item(config, item, archive.as_ref(), work.iq.as_ref(), &opts)
                    .map_err(fail)?;
            }
        }
    }
    if augmenter.is_some() {
        return Err(fail(long_augmented(config)));
    }
    if let (Computed::OnExecutors(live_executors), false) =
        (computed, config.spec.output == OutputKind::Psd)
    {
        return send_pieces(config, item, reader, outputs, live_executors, blocked);
    }
    // Streamed here, through this worker's extractor (Welch PSD, which averages the whole
    // item into one row, always is).
    let spec = &config.spec;
    let mut pieces = 0u32;
    let result = extract_from_reader(reader, extractor, Some(config.chunk_seconds), |piece| {
        if live.is_canceled() {
            // Stop inside a long item: its pieces written so far are kept for the resume.
            return Err(WriterGone);
        }
        pieces += 1;
        let wait = Instant::now();
        let sent = writer
            .send(WriterMsg::Row(Box::new(RowMsg {
                row: feature_row(
                    spec,
                    item.id.clone(),
                    source.clone(),
                    item.offset_s + piece.offset_s,
                    piece.duration_s,
                    piece.frames,
                    piece.rows,
                ),
                piece: piece.index,
                last: piece.last,
            })))
            .map_err(|_| WriterGone);
        *blocked += wait.elapsed().as_secs_f64();
        sent
    });
    if let (Computed::Here(cpu), 1..) = (computed, pieces) {
        // Its pieces count on the CPU device as the executors' do (their time stays in
        // decoding's: the stream interleaves the two).
        stats.items_computed += u64::from(pieces);
        cpu.batch_done(pieces as usize, Duration::ZERO, Duration::ZERO, 0, 0, None);
    }
    match result {
        Ok(_) => Ok(Flow::Continue),
        Err(StreamError::Sink { .. }) => Ok(Flow::Stop), // the writer has stopped
        Err(e) if pieces > 0 => Err(fail(format!(
            "{e} (after {pieces} pieces; earlier pieces of this item may be in the output)"
        ))),
        Err(e) => Err(fail(e.to_string())),
    }
}

/// How `item` is decoded.
fn decode_options(config: &JobConfig, item: &SourceItem) -> DecodeOptions {
    DecodeOptions {
        mix: config.mix,
        limits: config.limits,
        offset_s: item.offset_s,
        duration_s: config.decoded_seconds(item),
    }
}

/// Starts fetching an upcoming entry's first bytes where it is an audio object of its own
/// (`AudioReader::read_ahead`; a shard's members come with their shard's reads).
pub(crate) fn read_ahead(config: &JobConfig, entry: &Entry) {
    if let Entry::Item(item) = entry {
        if item.member.is_none() && !config.spec.is_complex() {
            AudioReader::read_ahead(&config.roots, &item.path, &decode_options(config, item));
        }
    }
}

/// Opens an item for the spec: an audio file (or a member of `archive`, opened already) for a
/// real spec, an IQ recording at the spec's rate for a complex one (IQ is never resampled).
/// Any other pairing is the item's failure, naming the file and why.
fn open_item(
    config: &JobConfig,
    item: &SourceItem,
    archive: Option<&Blob>,
    iq: Option<&IqSource>,
    opts: &DecodeOptions,
) -> Result<ItemReader, String> {
    let spec = &config.spec;
    let path = item.path.display();
    match (iq, spec.is_complex()) {
        (None, false) => Ok(ItemReader::Audio(
            match (archive, &item.member) {
                (Some(archive), Some(member)) => {
                    AudioReader::open_member(archive, member, &item.path, opts)
                }
                _ => AudioReader::open_item(&config.roots, item, opts),
            }
            .map_err(|e| e.to_string())?,
        )),
        (None, true) => Err(format!(
            "{path}: an audio file, and the spec takes complex IQ input (\"input\": \"complex\"): \
             use an audio preset, or give IQ recordings"
        )),
        (Some(_), false) => Err(format!(
            "{path}: an IQ recording, and the spec takes real audio: use an IQ preset \
             (iq-spectrogram, iq-power) or a spec with \"input\": \"complex\""
        )),
        (Some(source), true) => {
            let reader = IqReader::open_in(
                &config.roots,
                source,
                config.iq.sample_rate,
                config.iq.max_samples,
            )
            .map_err(|e| e.to_string())?;
            let rate = reader.sample_rate();
            if rate != f64::from(spec.sample_rate) {
                return Err(format!(
                    "{path}: recorded at {rate} Hz, and the spec is for {} Hz (IQ is not \
                     resampled: give a spec at the recording's rate)",
                    spec.sample_rate
                ));
            }
            Ok(ItemReader::Iq(reader))
        }
    }
}

/// Sends the pieces of one item to the executors, each with the window of samples it reads.
/// At most `--batch-items` pieces of the item are queued or being computed at a time: a
/// decoder outruns the executors, and the queue would otherwise fill with pieces of one file.
struct PieceSender<'a> {
    config: &'a JobConfig,
    item: &'a SourceItem,
    source: String,
    outputs: Outputs<'a>,
    units: &'a Sender<Unit>,
    live: &'a LiveJob,
    executors_running: &'a Weak<()>,
    permits: Sender<()>,
    taken: Receiver<()>,
    blocked: &'a mut f64,
}

impl<'a> PieceSender<'a> {
    fn new(
        config: &'a JobConfig,
        item: &'a SourceItem,
        outputs: Outputs<'a>,
        executors_running: &'a Weak<()>,
        blocked: &'a mut f64,
    ) -> Self {
        let (permits, taken) = bounded::<()>(config.batch_items);
        PieceSender {
            config,
            item,
            source: item.path.display().to_string(),
            outputs,
            units: outputs.units,
            live: outputs.live,
            executors_running,
            permits,
            taken,
            blocked,
        }
    }

    fn send(&mut self, samples: Vec<f32>, plan: PiecePlan) -> Result<(), WriterGone> {
        if self.live.is_canceled() {
            return Err(WriterGone);
        }
        let wait = Instant::now();
        // A permit is a slot in `permits`; the unit gives it back when it is dropped. With no
        // executor left, the units still queued are never dropped: stop waiting then (the
        // item stays undone, and the job says so).
        while self
            .permits
            .send_timeout((), Duration::from_millis(50))
            .is_err()
        {
            if self.executors_running.strong_count() == 0 {
                return Err(WriterGone);
            }
        }
        let permit = Permit(self.taken.clone());
        let room = self
            .outputs
            .room_for(self.config, samples.len())
            .ok_or(WriterGone)?;
        let sent = self.units.send(Unit {
            id: self.item.id.clone(),
            source: self.source.clone(),
            offset_s: self.item.offset_s,
            pcm16: self.outputs.mark_pcm16 && sonograph_dsp::pcm16::is_pcm16(&samples),
            samples,
            piece: Some(plan),
            _permit: Some(permit),
            _bytes: Some(room),
        });
        *self.blocked += wait.elapsed().as_secs_f64();
        sent.map_err(|_| WriterGone)
    }
}

/// Cuts a long item, as it decodes, into pieces that go to the executors like short items:
/// the file is never held whole, and its pieces run on any device, several at once.
fn send_pieces(
    config: &JobConfig,
    item: &SourceItem,
    reader: ItemReader,
    outputs: Outputs,
    executors_running: &Weak<()>,
    blocked: &mut f64,
) -> Result<Flow, WriterMsg> {
    let source = item.path.display().to_string();
    let fail = |reason: String| WriterMsg::Failed(item_failure(item, reason));
    let mut cutter = PieceCutter::new(&config.spec, config.chunk_seconds);
    let mut sender = PieceSender::new(config, item, outputs, executors_running, blocked);
    let mut send = |w: PieceWindow| sender.send(w.samples, w.plan);
    let streamed = reader.stream(config.spec.sample_rate, |chunk| {
        cutter.push(chunk, &mut send)
    });
    match streamed {
        Ok(_) => {}
        // A closed queue means the job is stopping; the item stays undone for a resume.
        Err(StreamError::Sink { .. }) => return Ok(Flow::Stop),
        Err(e) if cutter.pieces() > 0 => {
            // Its pieces sent so far are queued for the executors: they may come after this.
            return Err(WriterMsg::FailedPiece(item_failure(
                item,
                format!(
                    "{e} (after {} pieces; earlier pieces of this item may be in the output)",
                    cutter.pieces()
                ),
            )));
        }
        Err(e) => return Err(fail(e.to_string())),
    }
    let Some(last) = cutter.finish() else {
        return Err(fail(format!("{source}: {}", ItemError::Empty)));
    };
    Ok(match send(last) {
        Ok(()) => Flow::Continue,
        Err(WriterGone) => Flow::Stop,
    })
}

/// Why cutting an item at its speech stopped.
#[derive(Debug, Error)]
enum SegmentStop {
    #[error("voice activity: {0}")]
    Vad(#[from] sonograph_model::ModelError),
    #[error(transparent)]
    Gone(#[from] WriterGone),
}

/// Cuts an item at its speech segments as it decodes (Silero VAD and `get_speech_timestamps`,
/// as `sonograph vad` finds them, on the audio at the spec's rate): each segment goes to the
/// executors as a row of its own, its features computed over the segment alone. Holds the
/// samples from the earliest a segment still open can start, and one segment cut but not yet
/// sent (only the end of the stream says which segment is the last). An item without speech
/// is done without a row.
fn send_segments(
    config: &JobConfig,
    item: &SourceItem,
    reader: ItemReader,
    outputs: Outputs,
    executors_running: &Weak<()>,
    vad: &mut VadSegmenter,
    blocked: &mut f64,
) -> Result<Flow, WriterMsg> {
    let spec = &config.spec;
    let rate = f64::from(spec.sample_rate);
    let writer = outputs.writer;
    let mut sender = PieceSender::new(config, item, outputs, executors_running, blocked);
    // Samples from `held_from` on; the segment cut and not yet sent.
    let mut held: Vec<f32> = Vec::new();
    let mut held_from = 0u64;
    let mut ready: Option<(Vec<f32>, PiecePlan)> = None;
    let mut cut = 0u32;
    let mut found = Vec::new();
    // Cuts the segments found; sends the one before each (it is not the item's last).
    let mut take = |found: &mut Vec<Segment>,
                    held: &[f32],
                    held_from: u64,
                    sender: &mut PieceSender|
     -> Result<(), WriterGone> {
        for seg in found.drain(..) {
            // The segmenter never gives a segment that starts before what it let go.
            debug_assert!(seg.start >= held_from, "{seg:?} before sample {held_from}");
            let end = seg.end.min(held_from + held.len() as u64);
            let start = seg.start.clamp(held_from, end);
            let samples = held[(start - held_from) as usize..(end - held_from) as usize].to_vec();
            let plan = PiecePlan {
                index: cut,
                span: Span::whole(spec, samples.len()),
                offset_s: start as f64 / rate,
                duration_s: crate::writer::item_seconds(spec, samples.len()),
                last: false,
            };
            cut += 1;
            if let Some((samples, plan)) = ready.replace((samples, plan)) {
                sender.send(samples, plan)?;
            }
        }
        Ok(())
    };
    vad.reset();
    let streamed = reader.stream(spec.sample_rate, |chunk| {
        held.extend_from_slice(chunk);
        vad.push(chunk, &mut found)?;
        take(&mut found, &held, held_from, &mut sender)?;
        // What no segment still open can start at goes.
        let keep_from = vad.earliest_open_sample().max(held_from);
        let drop = ((keep_from - held_from) as usize).min(held.len());
        held.drain(..drop);
        held_from += drop as u64;
        Ok::<(), SegmentStop>(())
    });
    let sent_before = |cut: u32| cut.saturating_sub(1);
    let failed = |e: String, cut: u32| {
        if sent_before(cut) > 0 {
            // Segments sent so far are queued for the executors: they may come after this.
            WriterMsg::FailedPiece(item_failure(
                item,
                format!(
                    "{e} (after {} segments; earlier segments of this item may be in the output)",
                    sent_before(cut)
                ),
            ))
        } else {
            WriterMsg::Failed(item_failure(item, e))
        }
    };
    match streamed {
        Ok(_) => {}
        Err(StreamError::Sink {
            source: SegmentStop::Gone(_),
            ..
        }) => return Ok(Flow::Stop),
        Err(StreamError::Sink { source, .. }) => {
            vad.reset();
            return Err(failed(format!("{}: {source}", item.path.display()), cut));
        }
        Err(e) => {
            vad.reset();
            return Err(failed(e.to_string(), cut));
        }
    }
    if let Err(e) = vad.finish(&mut found) {
        return Err(failed(
            format!("{}: voice activity: {e}", item.path.display()),
            cut,
        ));
    }
    if take(&mut found, &held, held_from, &mut sender).is_err() {
        return Ok(Flow::Stop);
    }
    let Some((samples, mut plan)) = ready else {
        // No speech: the item is done, with no row.
        return Ok(
            match writer.send(WriterMsg::Empty {
                id: item.id.clone(),
            }) {
                Ok(()) => Flow::Continue,
                Err(_) => Flow::Stop,
            },
        );
    };
    plan.last = true;
    Ok(match sender.send(samples, plan) {
        Ok(()) => Flow::Continue,
        Err(WriterGone) => Flow::Stop,
    })
}

fn item_failure(item: &SourceItem, reason: String) -> Failure {
    Failure {
        id: item.id.clone(),
        source: item.path.display().to_string(),
        reason,
    }
}

/// Where a decode worker's items are computed.
pub(crate) enum Computed<'a> {
    /// Here, by the worker's own CPU extractor (long items streamed through it), counted on
    /// the job's one CPU device: every device is a CPU and no stage needs the units. Sent to
    /// an executor, an item waited for a batch to fill, for the batch's slowest item, and for
    /// the batch's rows to reach the writer: a CPU job on a 16-core H200 machine kept 0.6 of
    /// its cores busy that way (bench/RESULTS-gpu.md, 2026-11-27).
    Here(&'a LiveDevice),
    /// On the executors (short items whole, long ones in pieces); with a handle that is dead
    /// once every executor has ended.
    OnExecutors(&'a Weak<()>),
}

/// A whole item computed by this worker's extractor, its row (or its failure) sent on.
#[allow(clippy::too_many_arguments)]
fn compute_here(
    config: &JobConfig,
    item: &SourceItem,
    source: String,
    samples: &[f32],
    extractor: &mut CpuExtractor,
    outputs: Outputs,
    cpu: &LiveDevice,
    blocked: &mut f64,
    stats: &mut WorkerStats,
) -> Result<Flow, WriterMsg> {
    let spec = &config.spec;
    let started = Instant::now();
    // Fault injection: the executors' `executor::batch=sleep(ms)` (which stretches a job for
    // the kill-and-resume tests, or slows its data side) stretches this item too, a batch of
    // one.
    fail::fail_point!("executor::batch");
    let mut rows = Vec::new();
    let result = extractor.extract(samples, &mut rows);
    let took = started.elapsed();
    // Compute time, not decode time.
    *blocked += took.as_secs_f64();
    stats.compute_s += took.as_secs_f64();
    stats.items_computed += 1;
    outputs.live.add_busy(Stage::Compute, took.as_secs_f64());
    cpu.batch_done(1, Duration::ZERO, took, 0, 0, None);
    let msg = match result {
        Ok(_) => WriterMsg::Row(Box::new(RowMsg {
            row: feature_row(
                spec,
                item.id.clone(),
                source,
                item.offset_s,
                item_seconds(spec, samples.len()),
                rows.len() / spec.n_bins().max(1),
                rows,
            ),
            piece: 0,
            last: true,
        })),
        Err(e) => WriterMsg::Failed(item_failure(item, e.to_string())),
    };
    let wait = Instant::now();
    let sent = outputs.writer.send(msg);
    *blocked += wait.elapsed().as_secs_f64();
    // A closed queue means the job is stopping; the item stays undone for a resume.
    Ok(if sent.is_ok() {
        Flow::Continue
    } else {
        Flow::Stop
    })
}

/// Whether a decode worker goes on after an item.
enum Flow {
    Continue,
    /// A downstream stage has stopped: the job is ending.
    Stop,
}

#[derive(Debug, Error)]
#[error("the writer has stopped")]
struct WriterGone;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::scratch_corpus;
    use sonograph_dsp::FeatureSpec;

    /// With every executor gone, a decode worker waiting for a permit for the next piece of
    /// a long item stops (the pieces already queued are never taken, so no permit comes back)
    /// instead of hanging the job.
    #[test]
    fn a_decoder_stops_waiting_for_permits_once_no_executor_is_left() {
        let dir = scratch_corpus("permits", &[("long.wav", 100.0)]);
        let wav = dir.join("corpus/long.wav");
        let mut config = JobConfig::new(
            dir.join("corpus"),
            dir.join("out"),
            FeatureSpec::whisper(80),
        );
        config.batch_items = 1;
        let item = SourceItem {
            id: "long.wav".into(),
            path: wav.clone(),
            offset_s: 0.0,
            duration_s: None,
            member: None,
        };
        let reader = AudioReader::open(&wav, &DecodeOptions::default()).unwrap();
        let (units, queued) = bounded::<Unit>(8);
        let executors = Arc::new(());
        let running = Arc::downgrade(&executors);
        drop(executors);
        let reader = ItemReader::Audio(reader);
        let (writer, _) = bounded::<WriterMsg>(1);
        let live = LiveJob::default();
        let budget = crate::budget::MemoryBudget::new(1 << 30);
        let outputs = Outputs {
            units: &units,
            writer: &writer,
            live: &live,
            budget: &budget,
            executors_running: &running,
            mark_pcm16: false,
        };
        let flow = send_pieces(&config, &item, reader, outputs, &running, &mut 0.0).unwrap();
        assert!(matches!(flow, Flow::Stop));
        assert_eq!(queued.len(), 1, "one piece went out on the one permit");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
