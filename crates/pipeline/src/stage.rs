//! Stages a job can take besides its own, in two places of the data path (Vector's
//! transforms, in its source → transform → sink words):
//!
//! ```text
//! decode + segment ──▶ [unit stages] ──▶ prefetch queue ──▶ executors ──▶ [row stages] ──▶ writer
//! ```
//!
//! A unit stage sees every unit (a whole item, or a piece of a long one) before it is batched
//! and transforms it (gain, filtering, a check that may fail the item). A row stage sees every
//! row of features before it is written, and may hold rows to pass them on in batches: a model
//! on the features goes there. Each passes every input on exactly once; segmentation that
//! turns one item into several rows (voice activity) is a segmenter in the decode stage, which
//! numbers the pieces it cuts. Each runs on its own thread between two
//! bounded queues, so inserting one changes neither its neighbours nor the job's wiring.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TryRecvError};

use crate::executor::Unit;
use crate::report::Failure;
use crate::writer::{RowMsg, WriterMsg};

/// A transform of units between segmentation and the executors.
pub trait UnitStage: Send {
    fn name(&self) -> &str;
    /// Passes `unit` on as exactly one unit pushed to `out` (its samples transformed), or
    /// fails its item with `Err(reason)` (recorded in the report; the job goes on). The job
    /// counts an item done when the row of its last piece is written, so a stage that dropped
    /// a unit would leave its item forever undone, and one that doubled it would write a
    /// piece twice: either is recorded as the item's failure, naming the stage.
    fn process(&mut self, unit: Unit, out: &mut Vec<Unit>) -> Result<(), String>;
}

/// A transform of rows between the executors and the writer. It may hold rows and pass them
/// on later (a model runs on batches of rows), in any order, but must pass each row it was
/// given on exactly once, by the time [`finish`](Self::finish) returns: a row it never passes
/// on, or one it was not given, fails its item (naming the stage), and the job goes on.
pub trait RowStage: Send {
    fn name(&self) -> &str;
    /// Takes `row`; passes on through `out` the rows ready to go on (this one, earlier ones,
    /// or none), or fails one it held; `Err(reason)` fails `row`'s item.
    fn process(&mut self, row: RowMsg, out: &mut RowOut) -> Result<(), String>;
    /// The input has ended: passes on (or fails) every row still held.
    fn finish(&mut self, _out: &mut RowOut) -> Result<(), String> {
        Ok(())
    }
    /// As the stage takes its next input: `depth` messages still wait in its input queue (of
    /// `capacity`), and it waited `waited` for this one, with nothing to take (the time the
    /// side feeding it was behind).
    fn queued(&mut self, _depth: usize, _capacity: usize, _waited: Duration) {}
    /// Its input queue is empty and it is about to wait: a stage that holds rows may pass them
    /// on (or fail them) now rather than sit on them.
    fn idle(&mut self, _out: &mut RowOut) {}
}

/// What a row stage gives back: rows passed on, and rows it held that failed (with why).
#[derive(Default)]
pub struct RowOut {
    passed: Vec<RowMsg>,
    failed: Vec<(RowMsg, String)>,
}

impl RowOut {
    pub fn pass(&mut self, row: RowMsg) {
        self.passed.push(row);
    }
    /// Fails `row`'s item with `reason` (the stage's name is put before it).
    pub fn fail(&mut self, row: RowMsg, reason: String) {
        self.failed.push((row, reason));
    }
}

/// The reason an item fails when a stage gave `outputs` results for one input.
fn not_one(outputs: usize) -> Result<(), String> {
    if outputs == 1 {
        Ok(())
    } else {
        Err(format!(
            "gave {outputs} results for one input; a stage passes each on as exactly one"
        ))
    }
}

/// The stages a job inserts, in order.
#[derive(Default)]
pub struct Stages {
    pub units: Vec<Box<dyn UnitStage>>,
    pub rows: Vec<Box<dyn RowStage>>,
}

/// Runs a unit stage from `input` to `output` until `input` ends or a downstream stage stops;
/// item failures go to `writer`. Returns the seconds spent busy.
pub(crate) fn run_unit_stage(
    mut stage: Box<dyn UnitStage>,
    input: Receiver<Unit>,
    output: Sender<Unit>,
    writer: Sender<WriterMsg>,
) -> f64 {
    let mut busy = 0.0;
    let mut out = Vec::new();
    for unit in input {
        let started = std::time::Instant::now();
        let (id, source, piece) = (unit.id.clone(), unit.source.clone(), unit.piece.is_some());
        let result = stage
            .process(unit, &mut out)
            .and_then(|()| not_one(out.len()));
        busy += started.elapsed().as_secs_f64();
        if let Err(reason) = result {
            out.clear();
            let reason = format!("{}: {reason}", stage.name());
            let failure = Failure { id, source, reason };
            let msg = if piece {
                WriterMsg::FailedPiece(failure)
            } else {
                WriterMsg::Failed(failure)
            };
            if writer.send(msg).is_err() {
                return busy;
            }
            continue;
        }
        for mut unit in out.drain(..) {
            // The stage may have changed the samples; sent as f32, they need no new scan.
            unit.pcm16 = false;
            if output.send(unit).is_err() {
                return busy; // the executors have stopped: the job is ending
            }
        }
    }
    busy
}

/// Runs a row stage from `input` to `output`; failures pass through. Every row given to the
/// stage is outstanding until it comes back out; what never does fails its item at the end.
/// Returns the seconds spent busy.
pub(crate) fn run_row_stage(
    mut stage: Box<dyn RowStage>,
    input: Receiver<WriterMsg>,
    output: Sender<WriterMsg>,
) -> f64 {
    let capacity = input.capacity().unwrap_or(usize::MAX);
    let mut busy = 0.0;
    let mut out = RowOut::default();
    // (item, piece) → (source, a whole item's only row): what the stage holds.
    let mut outstanding: HashMap<(String, u32), (String, bool)> = HashMap::new();
    let fail = |stage: &dyn RowStage, id: String, source: String, whole: bool, reason: &str| {
        let failure = Failure {
            id,
            source,
            reason: format!("{}: {reason}", stage.name()),
        };
        if whole {
            WriterMsg::Failed(failure)
        } else {
            WriterMsg::FailedPiece(failure)
        }
    };
    let pass_on = |stage: &dyn RowStage,
                   out: &mut RowOut,
                   outstanding: &mut HashMap<(String, u32), (String, bool)>|
     -> bool {
        let passed = out.passed.drain(..).map(|row| (row, None));
        let failed = out.failed.drain(..).map(|(row, why)| (row, Some(why)));
        passed.chain(failed).all(|(row, why)| {
            let key = (row.row.id.clone(), row.piece);
            let msg = match (outstanding.remove(&key), why) {
                (Some(_), None) => WriterMsg::Row(Box::new(row)),
                (Some((source, true)), Some(why)) => fail(stage, key.0, source, true, &why),
                (Some((source, false)), Some(why)) => fail(
                    stage,
                    key.0,
                    source,
                    false,
                    &format!("piece {}: {why}", key.1),
                ),
                (None, _) => fail(
                    stage,
                    key.0,
                    row.row.source,
                    false,
                    &format!("passed on piece {} it did not hold", key.1),
                ),
            };
            output.send(msg).is_ok()
        })
    };
    loop {
        let mut waited = Duration::ZERO;
        let msg = match input.try_recv() {
            Ok(msg) => msg,
            Err(TryRecvError::Disconnected) => break,
            Err(TryRecvError::Empty) => {
                let started = Instant::now();
                stage.idle(&mut out);
                busy += started.elapsed().as_secs_f64();
                if !pass_on(stage.as_ref(), &mut out, &mut outstanding) {
                    return busy;
                }
                let blocked = Instant::now();
                let next = input.recv();
                waited = blocked.elapsed();
                match next {
                    Ok(msg) => msg,
                    Err(_) => break,
                }
            }
        };
        stage.queued(input.len(), capacity, waited);
        let started = Instant::now();
        let sent = match msg {
            other @ (WriterMsg::Failed(_)
            | WriterMsg::FailedPiece(_)
            | WriterMsg::Empty { .. }
            | WriterMsg::Sample { .. }) => output.send(other).is_ok(),
            WriterMsg::Row(row) => {
                let key = (row.row.id.clone(), row.piece);
                let (source, whole) = (row.row.source.clone(), row.piece == 0 && row.last);
                outstanding.insert(key.clone(), (source.clone(), whole));
                let result = stage.process(*row, &mut out);
                busy += started.elapsed().as_secs_f64();
                match result {
                    Err(reason) => {
                        outstanding.remove(&key);
                        let held_back = pass_on(stage.as_ref(), &mut out, &mut outstanding);
                        held_back
                            && output
                                .send(fail(stage.as_ref(), key.0, source, whole, &reason))
                                .is_ok()
                    }
                    Ok(()) => pass_on(stage.as_ref(), &mut out, &mut outstanding),
                }
            }
        };
        if !sent {
            return busy; // the writer has stopped
        }
    }
    let started = Instant::now();
    let finished = stage.finish(&mut out);
    busy += started.elapsed().as_secs_f64();
    if !pass_on(stage.as_ref(), &mut out, &mut outstanding) {
        return busy;
    }
    let why = match finished {
        Err(reason) => reason,
        Ok(()) => "never passed on a row it was given".to_string(),
    };
    for ((id, piece), (source, whole)) in outstanding {
        let reason = format!("{why} (piece {piece})");
        if output
            .send(fail(stage.as_ref(), id, source, whole, &reason))
            .is_err()
        {
            break;
        }
    }
    busy
}
