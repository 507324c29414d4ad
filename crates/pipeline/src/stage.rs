//! Stages a job can take besides its own, in two places of the data path (Vector's
//! transforms, in its source → transform → sink words):
//!
//! ```text
//! decode + segment ──▶ [unit stages] ──▶ prefetch queue ──▶ executors ──▶ [row stages] ──▶ writer
//! ```
//!
//! A unit stage sees every unit (a whole item, or a piece of a long one) before it is batched:
//! voice-activity segmentation goes there. A row stage sees every row of features before it is
//! written: a model on the features goes there. Each runs on its own thread between two
//! bounded queues, so inserting one changes neither its neighbours nor the job's wiring.

use crossbeam_channel::{Receiver, Sender};

use crate::executor::Unit;
use crate::report::Failure;
use crate::writer::{RowMsg, WriterMsg};

/// A transform of units between segmentation and the executors.
pub trait UnitStage: Send {
    fn name(&self) -> &str;
    /// Passes `unit` on as zero or more units pushed to `out`; `Err(reason)` fails the unit's
    /// item (recorded in the report, the job goes on).
    fn process(&mut self, unit: Unit, out: &mut Vec<Unit>) -> Result<(), String>;
}

/// A transform of rows between the executors and the writer.
pub trait RowStage: Send {
    fn name(&self) -> &str;
    /// Passes `row` on as zero or more rows pushed to `out`; `Err(reason)` fails its item.
    fn process(&mut self, row: RowMsg, out: &mut Vec<RowMsg>) -> Result<(), String>;
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
        let (id, source) = (unit.id.clone(), unit.source.clone());
        let result = stage.process(unit, &mut out);
        busy += started.elapsed().as_secs_f64();
        if let Err(reason) = result {
            out.clear();
            let reason = format!("{}: {reason}", stage.name());
            if writer
                .send(WriterMsg::Failed(Failure { id, source, reason }))
                .is_err()
            {
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
            WriterMsg::Failed(f) => output.send(WriterMsg::Failed(f)).is_ok(),
            WriterMsg::Row(row) => {
                let (id, source) = (row.row.id.clone(), row.row.source.clone());
                let result = stage.process(*row, &mut out);
                busy += started.elapsed().as_secs_f64();
                match result {
                    Err(reason) => {
                        out.clear();
                        let reason = format!("{}: {reason}", stage.name());
                        output
                            .send(WriterMsg::Failed(Failure { id, source, reason }))
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
