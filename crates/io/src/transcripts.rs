//! Transcripts as Parquet: one row per segment with its id, source, time span, text, tokens and
//! token timestamps. Written as the feature parts are (zstd, rows buffered into row groups,
//! `.name.tmp` synced and renamed when complete), so a reader never sees half a file.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::builder::{Float64Builder, ListBuilder, StringBuilder};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

use crate::error::WriteError;
use crate::parquet::{io_error, other_error};
use crate::publish::{Draft, Synced};

/// One transcribed segment.
#[derive(Debug, Clone, PartialEq)]
pub struct TranscriptRow {
    pub id: String,
    pub source: String,
    pub start_s: f64,
    pub end_s: f64,
    pub text: String,
    pub tokens: Vec<String>,
    /// Each token's time in seconds from the start of the source.
    pub timestamps: Vec<f64>,
}

/// Rows buffered before they are encoded as a row group.
const ROW_GROUP_ROWS: usize = 4096;

pub fn transcript_schema() -> Schema {
    let list = |item: DataType| DataType::List(Arc::new(Field::new("item", item, true)));
    Schema::new(vec![
        Field::new("id", DataType::Utf8, false),
        Field::new("source", DataType::Utf8, false),
        Field::new("start_s", DataType::Float64, false),
        Field::new("end_s", DataType::Float64, false),
        Field::new("text", DataType::Utf8, false),
        Field::new("tokens", list(DataType::Utf8), false),
        Field::new("timestamps", list(DataType::Float64), false),
    ])
}

/// A Parquet file of transcripts being written.
pub struct TranscriptWriter {
    path: PathBuf,
    draft: Draft,
    schema: Arc<Schema>,
    writer: ArrowWriter<File>,
    buffer: Vec<TranscriptRow>,
}

impl TranscriptWriter {
    /// Starts `path` (as `.path.tmp`).
    pub fn create(path: &Path) -> Result<Self, WriteError> {
        let other = other_error(path);
        let schema = Arc::new(transcript_schema());
        let (draft, file) = Draft::create(path).map_err(io_error(path))?;
        let zstd = ZstdLevel::try_new(3).map_err(|e| other(e.to_string()))?;
        let props = WriterProperties::builder()
            .set_compression(Compression::ZSTD(zstd))
            .build();
        let writer = ArrowWriter::try_new(file, schema.clone(), Some(props))
            .map_err(|e| other(e.to_string()))?;
        Ok(TranscriptWriter {
            path: path.to_path_buf(),
            draft,
            schema,
            writer,
            buffer: Vec::new(),
        })
    }

    pub fn push(&mut self, row: TranscriptRow) -> Result<(), WriteError> {
        self.buffer.push(row);
        if self.buffer.len() >= ROW_GROUP_ROWS {
            self.write_row_group()?;
        }
        Ok(())
    }

    fn write_row_group(&mut self) -> Result<(), WriteError> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let other = other_error(&self.path);
        let mut id = StringBuilder::new();
        let mut source = StringBuilder::new();
        let mut start = Float64Builder::new();
        let mut end = Float64Builder::new();
        let mut text = StringBuilder::new();
        let mut tokens = ListBuilder::new(StringBuilder::new());
        let mut times = ListBuilder::new(Float64Builder::new());
        for r in &self.buffer {
            id.append_value(&r.id);
            source.append_value(&r.source);
            start.append_value(r.start_s);
            end.append_value(r.end_s);
            text.append_value(&r.text);
            for t in &r.tokens {
                tokens.values().append_value(t);
            }
            tokens.append(true);
            times.values().append_slice(&r.timestamps);
            times.append(true);
        }
        let columns: Vec<ArrayRef> = vec![
            Arc::new(id.finish()),
            Arc::new(source.finish()),
            Arc::new(start.finish()),
            Arc::new(end.finish()),
            Arc::new(text.finish()),
            Arc::new(tokens.finish()),
            Arc::new(times.finish()),
        ];
        let batch =
            RecordBatch::try_new(self.schema.clone(), columns).map_err(|e| other(e.to_string()))?;
        self.writer
            .write(&batch)
            .map_err(|e| other(e.to_string()))?;
        self.buffer.clear();
        Ok(())
    }

    /// Writes the footer, syncs and renames the file into place.
    pub fn finish(mut self) -> Result<(), WriteError> {
        self.write_row_group()?;
        let path = self.path.clone();
        let file = self
            .writer
            .into_inner()
            .map_err(|e| other_error(&path)(e.to_string()))?;
        self.draft
            .sync(file)
            .and_then(Synced::publish)
            .map_err(io_error(&path))
    }
}

/// Reads a transcripts file back (for checks and tools; a file of another schema is an error).
pub fn read_transcripts(path: &Path) -> Result<Vec<TranscriptRow>, WriteError> {
    use arrow_array::cast::AsArray;
    use arrow_array::types::Float64Type;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    let other = other_error(path);
    let file = File::open(path).map_err(io_error(path))?;
    let reader = ParquetRecordBatchReaderBuilder::try_new(file)
        .and_then(|b| b.build())
        .map_err(|e| other(e.to_string()))?;
    let mut rows = Vec::new();
    for batch in reader {
        let batch = batch.map_err(|e| other(e.to_string()))?;
        if batch.schema().fields() != transcript_schema().fields() {
            return Err(other("not a transcripts file".into()));
        }
        let string = |i: usize| batch.column(i).as_string::<i32>().clone();
        let float = |i: usize| batch.column(i).as_primitive::<Float64Type>().clone();
        let (id, source, text) = (string(0), string(1), string(4));
        let (start, end) = (float(2), float(3));
        let tokens = batch.column(5).as_list::<i32>();
        let times = batch.column(6).as_list::<i32>();
        for r in 0..batch.num_rows() {
            rows.push(TranscriptRow {
                id: id.value(r).to_string(),
                source: source.value(r).to_string(),
                start_s: start.value(r),
                end_s: end.value(r),
                text: text.value(r).to_string(),
                tokens: tokens
                    .value(r)
                    .as_string::<i32>()
                    .iter()
                    .map(|t| t.unwrap_or_default().to_string())
                    .collect(),
                timestamps: times
                    .value(r)
                    .as_primitive::<Float64Type>()
                    .values()
                    .to_vec(),
            });
        }
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_read_back_with_their_lists() {
        let dir =
            std::env::temp_dir().join(format!("sonograph-transcripts-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.parquet");
        let rows = [
            TranscriptRow {
                id: "a.wav#0".into(),
                source: "a.wav".into(),
                start_s: 0.5,
                end_s: 2.25,
                text: "hi there".into(),
                tokens: vec![" hi".into(), " there".into()],
                timestamps: vec![0.5, 0.66],
            },
            TranscriptRow {
                id: "a.wav#1".into(),
                source: "a.wav".into(),
                start_s: 3.0,
                end_s: 3.5,
                text: String::new(),
                tokens: vec![],
                timestamps: vec![],
            },
        ];
        let mut w = TranscriptWriter::create(&path).unwrap();
        for r in &rows {
            w.push(r.clone()).unwrap();
        }
        assert!(!path.exists(), "nothing at the final name before finish");
        w.finish().unwrap();
        assert_eq!(read_transcripts(&path).unwrap(), rows);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
