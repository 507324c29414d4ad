//! Stages a job can take besides its own, in two places of the data path (Vector's
//! transforms, in its source → transform → sink words):
//!
//! ```text
//! decode + segment ──▶ [unit stages] ──▶ prefetch queue ──▶ executors ──▶ [row stages] ──▶ writer
//! ```
//!
//! A unit stage sees every unit (a whole item, or a piece of a long one) before it is batched
//! and transforms it (gain, filtering, a check that may fail the item). A row stage sees every
//! row of features before it is written: a model on the features goes there. Both pass each
//! input on as exactly one output: segmentation that turns one item into several rows (voice
//! activity) is a segmenter in the decode stage, which numbers the pieces it cuts. Each runs on its own thread between two
//! bounded queues, so inserting one changes neither its neighbours nor the job's wiring.

use crossbeam_channel::{Receiver, Sender};

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

/// A transform of rows between the executors and the writer.
pub trait RowStage: Send {
    fn name(&self) -> &str;
    /// Passes `row` on as exactly one row pushed to `out`, or fails its item with
    /// `Err(reason)`; any other count fails the item, as for a [`UnitStage`].
    fn process(&mut self, row: RowMsg, out: &mut Vec<RowMsg>) -> Result<(), String>;
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
        for unit in out.drain(..) {
            if output.send(unit).is_err() {
                return busy; // the executors have stopped: the job is ending
            }
        }
    }
    busy
}

/// Runs a row stage from `input` to `output`; failures pass through, and a failed row fails
/// its item. Returns the seconds spent busy.
pub(crate) fn run_row_stage(
    mut stage: Box<dyn RowStage>,
    input: Receiver<WriterMsg>,
    output: Sender<WriterMsg>,
) -> f64 {
    let mut busy = 0.0;
    let mut out = Vec::new();
    for msg in input {
        let started = std::time::Instant::now();
        let sent = match msg {
            failed @ (WriterMsg::Failed(_) | WriterMsg::FailedPiece(_)) => {
                output.send(failed).is_ok()
            }
            WriterMsg::Row(row) => {
                let (id, source) = (row.row.id.clone(), row.row.source.clone());
                let whole = row.piece == 0 && row.last;
                let result = stage
                    .process(*row, &mut out)
                    .and_then(|()| not_one(out.len()));
                busy += started.elapsed().as_secs_f64();
                match result {
                    Err(reason) => {
                        out.clear();
                        let reason = format!("{}: {reason}", stage.name());
                        let failure = Failure { id, source, reason };
                        output
                            .send(if whole {
                                WriterMsg::Failed(failure)
                            } else {
                                WriterMsg::FailedPiece(failure)
                            })
                            .is_ok()
                    }
                    Ok(()) => out
                        .drain(..)
                        .all(|row| output.send(WriterMsg::Row(Box::new(row))).is_ok()),
                }
            }
        };
        if !sent {
            break; // the writer has stopped
        }
    }
    busy
}
