//! The decode stage: workers that open, decode and resample items. Short items go to the
//! prefetch queue whole; long ones are cut into pieces there (or, when every executor is a
//! CPU, streamed through an extractor here).

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Receiver, Sender};
use sonograph_dsp::{CpuExtractor, ItemError, OutputKind};
use sonograph_io::decode::{AudioReader, DecodeOptions};
use sonograph_io::manifest::{Entry, SourceItem};
use sonograph_io::parquet::FeatureRow;
use sonograph_io::sigmf::{IqReader, IqSource};
use sonograph_io::{ItemReader, StreamError};
use thiserror::Error;

use crate::config::JobConfig;
use crate::error::panic_text;
use crate::executor::{Permit, Unit};
use crate::live::{LiveJob, Queue, Stage};
use crate::report::Failure;
use crate::segment::{extract_from_reader, PieceCutter, PieceWindow};
use crate::writer::{RowMsg, WriterMsg};

/// Decodes items; short ones go to the prefetch queue, long ones too in pieces (or, when all
/// executors are CPUs, they are streamed here).
/// Returns the seconds spent busy (not counting time blocked on a full queue).
pub(crate) fn decode_worker(
    config: &JobConfig,
    work: Receiver<Entry>,
    units: Sender<Unit>,
    writer: Sender<WriterMsg>,
    long_items: LongItems,
    live: &LiveJob,
) -> f64 {
    let spec = Arc::new(config.spec.clone());
    let mut extractor: Option<CpuExtractor> = None;
    let mut busy = 0.0;
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
                // A bug tripped by one file must not take the shard down with it (it would trip
                // again on every resume): the item fails with the panic's message.
                let run = std::panic::AssertUnwindSafe(|| {
                    decode_item(
                        config,
                        &work,
                        ex,
                        Outputs {
                            units: &units,
                            writer: &writer,
                            live,
                        },
                        &long_items,
                        &mut blocked,
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
        busy += took;
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
    busy
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
}

fn decode_item(
    config: &JobConfig,
    work: &WorkItem,
    extractor: &mut CpuExtractor,
    outputs: Outputs,
    long_items: &LongItems,
    blocked: &mut f64,
) -> Result<Flow, WriterMsg> {
    let Outputs {
        units,
        writer,
        live,
    } = outputs;
    let item = &work.item;
    let source = item.path.display().to_string();
    let fail = |reason: String| WriterMsg::Failed(item_failure(item, reason));
    let opts = DecodeOptions {
        mix: config.mix,
        limits: config.limits,
        offset_s: item.offset_s,
        duration_s: item.duration_s,
    };
    let reader = open_item(config, item, work.iq.as_ref(), &opts).map_err(fail)?;
    let short = reader
        .expected_seconds()
        .is_some_and(|s| s <= config.max_seconds);
    if short {
        let samples = reader
            .read_all(config.spec.sample_rate)
            .map_err(|e| fail(e.to_string()))?;
        let wait = Instant::now();
        let sent = units.send(Unit {
            id: item.id.clone(),
            source,
            offset_s: item.offset_s,
            samples,
            piece: None,
            _permit: None,
        });
        *blocked += wait.elapsed().as_secs_f64();
        // A closed queue means the job is stopping; the item stays undone for a resume.
        return Ok(if sent.is_ok() {
            Flow::Continue
        } else {
            Flow::Stop
        });
    }
    if let (LongItems::ToExecutors(live_executors), false) =
        (long_items, config.spec.output == OutputKind::Psd)
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
                row: FeatureRow {
                    id: item.id.clone(),
                    source: source.clone(),
                    offset_s: item.offset_s + piece.offset_s,
                    duration_s: piece.duration_s,
                    sample_rate: spec.sample_rate,
                    num_frames: piece.frames as u32,
                    num_bins: spec.n_bins() as u32,
                    features: piece.rows,
                    model: None,
                },
                piece: piece.index,
                last: piece.last,
            })))
            .map_err(|_| WriterGone);
        *blocked += wait.elapsed().as_secs_f64();
        sent
    });
    match result {
        Ok(_) => Ok(Flow::Continue),
        Err(StreamError::Sink { .. }) => Ok(Flow::Stop), // the writer has stopped
        Err(e) if pieces > 0 => Err(fail(format!(
            "{e} (after {pieces} pieces; earlier pieces of this item may be in the output)"
        ))),
        Err(e) => Err(fail(e.to_string())),
    }
}

/// Opens an item for the spec: an audio file for a real spec, an IQ recording at the spec's
/// rate for a complex one (IQ is never resampled). Any other pairing is the item's failure,
/// naming the file and why.
fn open_item(
    config: &JobConfig,
    item: &SourceItem,
    iq: Option<&IqSource>,
    opts: &DecodeOptions,
) -> Result<ItemReader, String> {
    let spec = &config.spec;
    let path = item.path.display();
    match (iq, spec.is_complex()) {
        (None, false) => Ok(ItemReader::Audio(
            AudioReader::open(&item.path, opts).map_err(|e| e.to_string())?,
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
            let reader = IqReader::open(source, config.iq.sample_rate, config.iq.max_samples)
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

/// Cuts a long item, as it decodes, into pieces that go to the executors like short items,
/// each with the window of samples it reads: the file is never held whole, and its pieces run
/// on any device, several at once. At most `--batch-items` pieces of it are queued or being
/// computed at a time: a decoder outruns the executors, and the queue would otherwise fill
/// with pieces of one file.
fn send_pieces(
    config: &JobConfig,
    item: &SourceItem,
    reader: ItemReader,
    outputs: Outputs,
    executors_running: &Weak<()>,
    blocked: &mut f64,
) -> Result<Flow, WriterMsg> {
    let (units, live) = (outputs.units, outputs.live);
    let source = item.path.display().to_string();
    let fail = |reason: String| WriterMsg::Failed(item_failure(item, reason));
    let mut cutter = PieceCutter::new(&config.spec, config.chunk_seconds);
    let (permits, taken) = bounded::<()>(config.batch_items);
    let mut send = |w: PieceWindow| {
        if live.is_canceled() {
            return Err(WriterGone);
        }
        let wait = Instant::now();
        // A permit is a slot in `permits`; the unit gives it back when it is dropped. With no
        // executor left, the units still queued are never dropped: stop waiting then (the
        // item stays undone, and the job says so).
        while permits.send_timeout((), Duration::from_millis(50)).is_err() {
            if executors_running.strong_count() == 0 {
                return Err(WriterGone);
            }
        }
        let sent = units.send(Unit {
            id: item.id.clone(),
            source: source.clone(),
            offset_s: item.offset_s,
            samples: w.samples,
            piece: Some(w.plan),
            _permit: Some(Permit(taken.clone())),
        });
        *blocked += wait.elapsed().as_secs_f64();
        sent.map_err(|_| WriterGone)
    };
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

fn item_failure(item: &SourceItem, reason: String) -> Failure {
    Failure {
        id: item.id.clone(),
        source: item.path.display().to_string(),
        reason,
    }
}

/// Where a decode worker computes long items.
pub(crate) enum LongItems<'a> {
    /// Here, streaming them through its own CPU extractor: all executors are CPUs.
    Stream,
    /// On the executors, in pieces; with a handle that is dead once every executor has ended.
    ToExecutors(&'a Weak<()>),
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
        };
        let reader = AudioReader::open(&wav, &DecodeOptions::default()).unwrap();
        let (units, queued) = bounded::<Unit>(8);
        let executors = Arc::new(());
        let running = Arc::downgrade(&executors);
        drop(executors);
        let reader = ItemReader::Audio(reader);
        let (writer, _) = bounded::<WriterMsg>(1);
        let live = LiveJob::default();
        let outputs = Outputs {
            units: &units,
            writer: &writer,
            live: &live,
        };
        let flow = send_pieces(&config, &item, reader, outputs, &running, &mut 0.0).unwrap();
        assert!(matches!(flow, Flow::Stop));
        assert_eq!(queued.len(), 1, "one piece went out on the one permit");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
