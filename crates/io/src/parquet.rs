//! Parquet parts: one row per item (or per piece of a long item), zstd, written under a
//! temporary name and renamed when complete, so a reader never sees half a part.

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::builder::{Float64Builder, StringBuilder, UInt32Builder};
use arrow_array::{
    ArrayRef, FixedSizeListArray, Float16Array, Float32Array, ListArray, RecordBatch, UInt32Array,
};
use arrow_schema::{DataType, Field, Schema};
use parquet::arrow::arrow_writer::{
    compute_leaves, ArrowColumnChunk, ArrowColumnWriter, ArrowRowGroupWriterFactory,
};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, Encoding, ZstdLevel};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::types::ColumnPath;

use crate::error::WriteError;
use crate::publish::{Draft, Synced};

/// Storage type of the `features` column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Dtype {
    #[default]
    F32,
    F16,
}

impl Dtype {
    /// Its name: "f32", "f16".
    pub fn name(self) -> &'static str {
        match self {
            Dtype::F32 => "f32",
            Dtype::F16 => "f16",
        }
    }

    /// Bytes per stored value.
    pub fn bytes(self) -> usize {
        match self {
            Dtype::F32 => 4,
            Dtype::F16 => 2,
        }
    }
}

/// One output row.
#[derive(Debug, Clone, PartialEq)]
pub struct FeatureRow {
    pub id: String,
    pub source: String,
    pub offset_s: f64,
    pub duration_s: f64,
    pub sample_rate: u32,
    pub num_frames: u32,
    pub num_bins: u32,
    /// `num_frames × num_bins`, row-major.
    pub features: Vec<f32>,
    /// What a model gave on the features (`extract --model`); `None` in a job without one.
    pub model: Option<ModelColumns>,
    /// Its WebDataset sample's text members, as a JSON object by field (`{"json": {...},
    /// "txt": "..."}`), in a part with the `sample` column; `None` for an item without any.
    pub sample: Option<String>,
}

impl FeatureRow {
    /// Float values the row holds: its features and its model outputs.
    pub fn values(&self) -> usize {
        self.features.len() + self.model.as_ref().map_or(0, |m| m.values.len())
    }

    /// Whether its features are whole frames of the part's `bins`, and its model outputs
    /// whole frames of their dimension.
    fn check(&self, bins: u32) -> Result<(), String> {
        if self.num_bins != bins {
            return Err(format!(
                "row {:?} has frames of {} bins, and the part's rows frames of {bins}",
                self.id, self.num_bins
            ));
        }
        let frames_of = |values: usize, frames: u32, width: u32| {
            values as u64 == u64::from(frames) * u64::from(width)
        };
        if !frames_of(self.features.len(), self.num_frames, self.num_bins) {
            return Err(format!(
                "row {:?} has {} feature values, not {} frames of {} bins",
                self.id,
                self.features.len(),
                self.num_frames,
                self.num_bins
            ));
        }
        if let Some(m) = &self.model {
            if !frames_of(m.values.len(), m.frames, m.dim) {
                return Err(format!(
                    "row {:?} has {} model values, not {} frames of {}",
                    self.id,
                    m.values.len(),
                    m.frames,
                    m.dim
                ));
            }
        }
        Ok(())
    }
}

/// A model's output for one row: `frames × dim` values, time-major (an encoder's `outputs`
/// up to its `encoded_lengths`, or a CTC model's log-probabilities).
#[derive(Debug, Clone, PartialEq)]
pub struct ModelColumns {
    pub frames: u32,
    pub dim: u32,
    pub values: Vec<f32>,
}

/// Keys of the file metadata.
pub const META_SPEC_ID: &str = "sonograph.spec_id";
pub const META_SPEC: &str = "sonograph.spec";
pub const META_PRECISION: &str = "sonograph.precision";
/// The model whose outputs a part holds, and the precision it ran at (JSON).
pub const META_MODEL: &str = "sonograph.model";

/// What every part says about how its features were computed: the spec (its id and JSON) and
/// the spectral core's precision, which the spec does not fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartMeta {
    pub spec_id: String,
    pub spec_json: String,
    /// "f32" or "f64".
    pub precision: String,
    /// With a model (`extract --model`): what it is, as JSON; the part then has the model
    /// columns `model_frames`, `model_dim` and `model_outputs`.
    pub model: Option<String>,
    /// Values in a frame of features (the spec's bins): the width of the `features` column's
    /// frames.
    pub bins: u32,
    /// The part has the `sample` column (a job over WebDataset shards): each row's sample's
    /// text members as JSON, null where the item has none. It comes last, after any model's.
    pub sample: bool,
}

impl PartMeta {
    fn pairs(&self) -> Vec<(&'static str, &str)> {
        let mut pairs = vec![
            (META_SPEC_ID, self.spec_id.as_str()),
            (META_SPEC, &self.spec_json),
            (META_PRECISION, &self.precision),
        ];
        if let Some(model) = &self.model {
            pairs.push((META_MODEL, model));
        }
        pairs
    }
}

/// A column of frames: a list of fixed-size lists of `width` floats in the stored dtype, so
/// that pyarrow, pandas, Hugging Face datasets and Ray Data see a `[frames, width]` array
/// per row without reshaping.
fn frames_list(dtype: Dtype, width: u32) -> Result<DataType, String> {
    let width = i32::try_from(width).map_err(|_| format!("frames of {width} values"))?;
    let frame = DataType::FixedSizeList(Arc::new(Field::new("item", float(dtype), false)), width);
    Ok(DataType::List(Arc::new(Field::new("item", frame, false))))
}

/// A list column of floats in the stored dtype.
fn float_list(dtype: Dtype) -> DataType {
    DataType::List(Arc::new(Field::new("item", float(dtype), false)))
}

fn float(dtype: Dtype) -> DataType {
    match dtype {
        Dtype::F32 => DataType::Float32,
        Dtype::F16 => DataType::Float16,
    }
}

/// The values of a list column of floats in the stored dtype.
fn float_values<'a>(dtype: Dtype, values: impl Iterator<Item = &'a f32>) -> ArrayRef {
    match dtype {
        Dtype::F32 => Arc::new(Float32Array::from_iter_values(values.copied())),
        Dtype::F16 => Arc::new(Float16Array::from_iter_values(
            values.map(|&v| half::f16::from_f32(v)),
        )),
    }
}

/// The Parquet leaf of a column of frames: its values, in the list of fixed-size lists.
fn frames_leaf(column: &str) -> ColumnPath {
    ColumnPath::new(
        [column, "list", "item", "list", "item"]
            .map(String::from)
            .to_vec(),
    )
}

/// Index of the first model column: the model's columns follow the features.
const MODEL_COLUMNS: usize = 8;

/// The Arrow schema of a part.
pub fn schema(dtype: Dtype, meta: &PartMeta) -> Result<Schema, String> {
    let mut fields = vec![
        Field::new("id", DataType::Utf8, false),
        Field::new("source", DataType::Utf8, false),
        Field::new("offset_s", DataType::Float64, false),
        Field::new("duration_s", DataType::Float64, false),
        Field::new("sample_rate", DataType::UInt32, false),
        Field::new("num_frames", DataType::UInt32, false),
        Field::new("num_bins", DataType::UInt32, false),
        Field::new("features", frames_list(dtype, meta.bins)?, false),
    ];
    if meta.model.is_some() {
        // A flat list: a model's output width is known from its first output only, and
        // every part of a job (an empty one too) must have the same schema.
        fields.extend([
            Field::new("model_frames", DataType::UInt32, false),
            Field::new("model_dim", DataType::UInt32, false),
            Field::new("model_outputs", float_list(dtype), false),
        ]);
    }
    if meta.sample {
        fields.push(Field::new("sample", DataType::Utf8, true));
    }
    let metadata: HashMap<String, String> = meta
        .pairs()
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Ok(Schema::new_with_metadata(fields, metadata))
}

fn record_batch(
    rows: &[FeatureRow],
    schema: Arc<Schema>,
    dtype: Dtype,
) -> Result<RecordBatch, String> {
    let mut id = StringBuilder::new();
    let mut source = StringBuilder::new();
    let mut offset = Float64Builder::new();
    let mut duration = Float64Builder::new();
    let mut rate = UInt32Builder::new();
    let mut frames = UInt32Builder::new();
    let mut bins = UInt32Builder::new();
    for r in rows {
        id.append_value(&r.id);
        source.append_value(&r.source);
        offset.append_value(r.offset_s);
        duration.append_value(r.duration_s);
        rate.append_value(r.sample_rate);
        frames.append_value(r.num_frames);
        bins.append_value(r.num_bins);
    }
    let features = {
        let DataType::List(frame_field) = schema.field(7).data_type().clone() else {
            return Err("the features column is a list".into());
        };
        let DataType::FixedSizeList(value_field, width) = frame_field.data_type().clone() else {
            return Err("the features column is a list of fixed-size frames".into());
        };
        let offsets = list_offsets(rows.iter().map(|r| r.num_frames as usize))?;
        let values = float_values(dtype, rows.iter().flat_map(|r| r.features.iter()));
        let total = rows.iter().map(|r| r.num_frames as usize).sum();
        let frames =
            FixedSizeListArray::try_new_with_length(value_field, width, values, None, total)
                .map_err(|e| e.to_string())?;
        let list = ListArray::try_new(frame_field, offsets, Arc::new(frames), None)
            .map_err(|e| e.to_string())?;
        Arc::new(list) as ArrayRef
    };
    let mut columns: Vec<ArrayRef> = vec![
        Arc::new(id.finish()),
        Arc::new(source.finish()),
        Arc::new(offset.finish()),
        Arc::new(duration.finish()),
        Arc::new(rate.finish()),
        Arc::new(frames.finish()),
        Arc::new(bins.finish()),
        features,
    ];
    if schema.column_with_name("model_outputs").is_some() {
        let model: Vec<&ModelColumns> = rows
            .iter()
            .map(|r| {
                r.model.as_ref().ok_or_else(|| {
                    format!(
                        "row {:?} has no model outputs, and the part has a model",
                        r.id
                    )
                })
            })
            .collect::<Result<_, _>>()?;
        let frames = UInt32Array::from_iter_values(model.iter().map(|m| m.frames));
        let dims = UInt32Array::from_iter_values(model.iter().map(|m| m.dim));
        let DataType::List(item_field) = schema.field(MODEL_COLUMNS + 2).data_type().clone() else {
            return Err("the model_outputs column is a list".into());
        };
        let offsets = list_offsets(model.iter().map(|m| m.values.len()))?;
        let values = float_values(dtype, model.iter().flat_map(|m| m.values.iter()));
        let outputs =
            ListArray::try_new(item_field, offsets, values, None).map_err(|e| e.to_string())?;
        columns.extend([
            Arc::new(frames) as ArrayRef,
            Arc::new(dims),
            Arc::new(outputs),
        ]);
    }
    if schema.column_with_name("sample").is_some() {
        let samples: arrow_array::StringArray = rows.iter().map(|r| r.sample.as_deref()).collect();
        columns.push(Arc::new(samples));
    }
    RecordBatch::try_new(schema, columns).map_err(|e| e.to_string())
}

pub(crate) fn list_offsets(
    lengths: impl Iterator<Item = usize>,
) -> Result<arrow_buffer::OffsetBuffer<i32>, String> {
    let mut total = 0usize;
    let mut offsets = vec![0i32];
    for len in lengths {
        total += len;
        offsets.push(
            i32::try_from(total)
                .map_err(|_| "a part holds more than 2^31 values; lower --part-mb".to_string())?,
        );
    }
    Ok(arrow_buffer::OffsetBuffer::new(offsets.into()))
}

/// Encodes `rows` as one row group's column chunks (on an encoder thread), the way
/// `ArrowWriter` does: each column's leaves to the next writers, in schema order.
fn encode_row_group(
    rows: &[FeatureRow],
    schema: Arc<Schema>,
    dtype: Dtype,
    mut writers: Vec<ArrowColumnWriter>,
) -> Result<Vec<ArrowColumnChunk>, String> {
    let batch = record_batch(rows, schema.clone(), dtype)?;
    let mut next = writers.iter_mut();
    for (field, column) in schema.fields().iter().zip(batch.columns()) {
        for leaf in compute_leaves(field, column).map_err(|e| e.to_string())? {
            next.next()
                .ok_or("more Parquet leaves than column writers")?
                .write(&leaf)
                .map_err(|e| e.to_string())?;
        }
    }
    writers
        .into_iter()
        .map(|w| w.close().map_err(|e| e.to_string()))
        .collect()
}

/// zstd's level: 1 compresses split float bytes within 1 % of level 3, at less cost.
const ZSTD_LEVEL: i32 = 1;

/// Features buffered before they are encoded as a row group: bounds the writer's memory
/// whatever the part's size. 2 MiB rather than 8: with two groups in flight on two cores, 8 MiB
/// groups raised a job's peak RSS from ~295 to ~400 MiB, 2 MiB ones left it at ~300, and the
/// parts grew 0.07 % (zstd works page by page either way).
const ROW_GROUP_BYTES: usize = 2 << 20;

/// Row groups encoded at once by default, on the encoder threads: encoding them on the writer
/// thread alone (zstd, byte splitting, Parquet's levels) took 39 % of a 2-core job's CPU, and a
/// 16-core job ran at one core's worth (bench/RESULTS.md), so groups are encoded side by side
/// and appended in order.
/// Each one in flight holds a few times [`ROW_GROUP_BYTES`] (the rows, their Arrow copy, the
/// list's levels, the pages).
pub fn default_encoders() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(MAX_ENCODERS))
}

/// Encoder threads (and a part's row groups in flight) at most, whatever the cores.
pub const MAX_ENCODERS: usize = 8;

/// The process's encoder threads, one per core up to [`MAX_ENCODERS`], made once: a thread
/// per row group (as before) gave each
/// group a fresh allocator heap to fault in and abandon, which took a visible share of a
/// job's CPU in page clearing and left its peak RSS up to 35 MiB apart from run to run.
fn encoder_pool() -> Option<&'static rayon::ThreadPool> {
    static POOL: std::sync::OnceLock<Option<rayon::ThreadPool>> = std::sync::OnceLock::new();
    POOL.get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(default_encoders())
            .thread_name(|_| "parquet-encode".into())
            .build()
            .ok()
    })
    .as_ref()
}

/// A row group being encoded: its column chunks, in schema order, when it is done (a
/// disconnected channel: the encoder panicked).
type RowGroupEncoding = std::sync::mpsc::Receiver<Result<Vec<ArrowColumnChunk>, String>>;

/// A part being written: rows go to `path.tmp` in row groups of about [`ROW_GROUP_BYTES`] as
/// they arrive, so memory does not grow with the part.
pub struct PartWriter {
    path: PathBuf,
    draft: Draft,
    schema: Arc<Schema>,
    dtype: Dtype,
    bins: u32,
    file: SerializedFileWriter<File>,
    row_groups: ArrowRowGroupWriterFactory,
    /// Row groups handed to encoder threads and not yet appended, oldest first.
    encoding: VecDeque<RowGroupEncoding>,
    /// Row groups encoded at once, at most.
    encoders: usize,
    row_groups_started: usize,
    buffer: Vec<FeatureRow>,
    buffered_bytes: usize,
    rows: usize,
}

/// A part whose temporary file is complete and synced, waiting to be renamed into place.
pub struct ClosedPart {
    synced: Synced,
    pub bytes: u64,
    pub rows: usize,
}

pub(crate) fn io_error(path: &Path) -> impl Fn(std::io::Error) -> WriteError + '_ {
    move |source| WriteError::Io {
        path: path.to_path_buf(),
        source,
    }
}

pub(crate) fn other_error(path: &Path) -> impl Fn(String) -> WriteError + '_ {
    move |e| WriteError::Io {
        path: path.to_path_buf(),
        source: std::io::Error::other(e),
    }
}

impl PartWriter {
    /// Starts `path` (as `path.tmp`, replacing any leftover of a crashed run), encoding up to
    /// [`default_encoders`] row groups at once.
    pub fn create(path: &Path, dtype: Dtype, meta: &PartMeta) -> Result<Self, WriteError> {
        Self::create_with_encoders(path, dtype, meta, default_encoders())
    }

    /// [`create`](Self::create), encoding up to `encoders` row groups at once (a job gives its
    /// worker count: a user who keeps a job to a few cores keeps its writer to them too).
    pub fn create_with_encoders(
        path: &Path,
        dtype: Dtype,
        meta: &PartMeta,
        encoders: usize,
    ) -> Result<Self, WriteError> {
        let other = other_error(path);
        let schema = Arc::new(schema(dtype, meta).map_err(&other)?);
        let (draft, file) = Draft::create(path).map_err(io_error(path))?;
        let zstd = ZstdLevel::try_new(ZSTD_LEVEL).map_err(|e| other(e.to_string()))?;
        // The features are almost all distinct floats: a dictionary only costs time (and
        // grew the file), min/max statistics of them serve no query. Their bytes split by
        // significance (BYTE_STREAM_SPLIT) compress under zstd where interleaved floats
        // hardly do: the e2e speech corpus's Whisper parts are 1.29x smaller than the raw f32
        // (they were 1.01x with a dictionary; 1.10x PLAIN). The path is the Arrow list's
        // leaf; a test reads the encodings back, so a renamed path cannot go unnoticed.
        let features = frames_leaf("features");
        // In the footer's key-value metadata too, where `parquet meta` tools look, besides the
        // Arrow schema's (which pyarrow shows as `schema.metadata`).
        let model = ColumnPath::new(vec!["model_outputs".into(), "list".into(), "item".into()]);
        let mut props = WriterProperties::builder().set_compression(Compression::ZSTD(zstd));
        // A model's outputs are floats as distinct as the features.
        for floats in [features, model] {
            props = props
                .set_column_dictionary_enabled(floats.clone(), false)
                .set_column_statistics_enabled(floats.clone(), EnabledStatistics::None);
            // f16 is a 2-byte FIXED_LEN_BYTE_ARRAY, whose split bytes DuckDB 2.0 cannot read
            // ("BYTE_STREAM_SPLIT encoding is only supported for FLOAT, DOUBLE, INT32 or
            // INT64"): PLAIN keeps f16 parts readable by every reader in docs/reading.md, for
            // 1.19x the bytes (tests/data's 13 Whisper items: 254 KB against 214 KB split).
            props = props.set_column_encoding(
                floats,
                match dtype {
                    Dtype::F32 => Encoding::BYTE_STREAM_SPLIT,
                    Dtype::F16 => Encoding::PLAIN,
                },
            );
        }
        let props = props
            .set_key_value_metadata(Some(
                meta.pairs()
                    .iter()
                    .map(|(k, v)| KeyValue::new(k.to_string(), v.to_string()))
                    .collect(),
            ))
            .build();
        // The Arrow writer puts the Arrow schema in the footer; its parts then encode row groups
        // on several threads.
        let (file, row_groups) = ArrowWriter::try_new(file, schema.clone(), Some(props))
            .and_then(ArrowWriter::into_serialized_writer)
            .map_err(|e| other(e.to_string()))?;
        Ok(PartWriter {
            path: path.to_path_buf(),
            draft,
            schema,
            dtype,
            bins: meta.bins,
            file,
            row_groups,
            encoding: VecDeque::new(),
            encoders: encoders.clamp(1, MAX_ENCODERS),
            row_groups_started: 0,
            buffer: Vec::new(),
            buffered_bytes: 0,
            rows: 0,
        })
    }

    /// Buffers `row`; a row whose features are not frames of the part's bins is refused.
    pub fn push(&mut self, row: FeatureRow) -> Result<(), WriteError> {
        row.check(self.bins).map_err(other_error(&self.path))?;
        self.buffered_bytes += row.values() * 4;
        self.buffer.push(row);
        self.rows += 1;
        if self.buffered_bytes >= ROW_GROUP_BYTES {
            self.write_row_group()?;
        }
        Ok(())
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Hands the buffered rows to an encoder thread, then appends the oldest row groups until
    /// at most `encoders` are being encoded.
    fn write_row_group(&mut self) -> Result<(), WriteError> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let writers = self
            .row_groups
            .create_column_writers(self.row_groups_started)
            .map_err(|e| other_error(&self.path)(e.to_string()))?;
        self.row_groups_started += 1;
        let rows = std::mem::take(&mut self.buffer);
        self.buffered_bytes = 0;
        let (schema, dtype) = (self.schema.clone(), self.dtype);
        let (done, encoding) = std::sync::mpsc::sync_channel(1);
        let encode = move || {
            // A panic drops `done` unsent, which the writer reads as the encoder's failure
            // (inside rayon an uncaught panic would abort the process).
            if let Ok(chunks) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                encode_row_group(&rows, schema, dtype, writers)
            })) {
                let _ = done.send(chunks);
            }
        };
        match encoder_pool() {
            Some(pool) => pool.spawn(encode),
            None => encode(),
        }
        self.encoding.push_back(encoding);
        while self.encoding.len() > self.encoders {
            self.append_oldest_row_group()?;
        }
        Ok(())
    }

    /// Waits for the oldest row group in flight and appends it to the file.
    fn append_oldest_row_group(&mut self) -> Result<(), WriteError> {
        let Some(encoding) = self.encoding.pop_front() else {
            return Ok(());
        };
        let other = other_error(&self.path);
        let chunks = encoding
            .recv()
            .map_err(|_| other("a row group's encoder panicked".into()))?
            .map_err(&other)?;
        let mut group = self
            .file
            .next_row_group()
            .map_err(|e| other(e.to_string()))?;
        for chunk in chunks {
            chunk
                .append_to_row_group(&mut group)
                .map_err(|e| other(e.to_string()))?;
        }
        group.close().map_err(|e| other(e.to_string()))?;
        Ok(())
    }

    /// Writes the footer and syncs the temporary file.
    pub fn close(mut self) -> Result<ClosedPart, WriteError> {
        self.write_row_group()?;
        while !self.encoding.is_empty() {
            self.append_oldest_row_group()?;
        }
        let path = self.path.clone();
        let file = self
            .file
            .into_inner()
            .map_err(|e| other_error(&path)(e.to_string()))?;
        ClosedPart::sync(self.draft, file, &path, self.rows)
    }
}

impl ClosedPart {
    /// `draft`'s finished `file` (the part `path`, of `rows` rows), synced.
    pub(crate) fn sync(
        draft: Draft,
        file: File,
        path: &Path,
        rows: usize,
    ) -> Result<Self, WriteError> {
        let bytes = file.metadata().map_err(io_error(path))?.len();
        let synced = draft.sync(file).map_err(io_error(path))?;
        Ok(ClosedPart {
            synced,
            bytes,
            rows,
        })
    }

    /// Renames the part into place, durably.
    pub fn publish(self) -> Result<u64, WriteError> {
        let path = self.synced.path().to_path_buf();
        self.synced.publish().map_err(io_error(&path))?;
        Ok(self.bytes)
    }
}

/// Writes `rows` as the part `path` (via `path.tmp`, synced, then renamed). Returns the
/// file's size in bytes.
pub fn write_part(
    path: &Path,
    rows: &[FeatureRow],
    dtype: Dtype,
    meta: &PartMeta,
) -> Result<u64, WriteError> {
    let mut part = PartWriter::create(path, dtype, meta)?;
    for row in rows {
        part.push(row.clone())?;
    }
    part.close()?.publish()
}

/// Reads every row of a part (for tests and tools). f16 values come back as f32.
pub fn read_part(path: &Path) -> Result<(Vec<FeatureRow>, HashMap<String, String>), String> {
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Float16Type, Float32Type, Float64Type, UInt32Type};
    let file = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let builder = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
        .map_err(|e| e.to_string())?;
    let metadata = builder.schema().metadata().clone();
    let reader = builder.build().map_err(|e| e.to_string())?;
    let mut rows = Vec::new();
    for batch in reader {
        let b = batch.map_err(|e| e.to_string())?;
        let id = b.column(0).as_string::<i32>();
        let source = b.column(1).as_string::<i32>();
        let offset = b.column(2).as_primitive::<Float64Type>();
        let duration = b.column(3).as_primitive::<Float64Type>();
        let rate = b.column(4).as_primitive::<UInt32Type>();
        let frames = b.column(5).as_primitive::<UInt32Type>();
        let bins = b.column(6).as_primitive::<UInt32Type>();
        let features = b.column(7).as_list::<i32>();
        // A row's frames, flattened (a part of an older version held the flat list).
        let floats = |values: ArrayRef| -> Vec<f32> {
            let values = match values.data_type() {
                DataType::FixedSizeList(..) => values.as_fixed_size_list().values().clone(),
                _ => values,
            };
            match values.data_type() {
                DataType::Float16 => values
                    .as_primitive::<Float16Type>()
                    .values()
                    .iter()
                    .map(|v| v.to_f32())
                    .collect(),
                _ => values.as_primitive::<Float32Type>().values().to_vec(),
            }
        };
        let sample = b
            .column_by_name("sample")
            .map(|c| c.as_string::<i32>().clone());
        let model = b.column_by_name("model_outputs").is_some().then(|| {
            (
                b.column(MODEL_COLUMNS).as_primitive::<UInt32Type>(),
                b.column(MODEL_COLUMNS + 1).as_primitive::<UInt32Type>(),
                b.column(MODEL_COLUMNS + 2).as_list::<i32>(),
            )
        });
        for i in 0..b.num_rows() {
            let features = floats(features.value(i));
            let model = model.map(|(frames, dim, values)| ModelColumns {
                frames: frames.value(i),
                dim: dim.value(i),
                values: floats(values.value(i)),
            });
            rows.push(FeatureRow {
                id: id.value(i).to_string(),
                source: source.value(i).to_string(),
                offset_s: offset.value(i),
                duration_s: duration.value(i),
                sample_rate: rate.value(i),
                num_frames: frames.value(i),
                num_bins: bins.value(i),
                features,
                model,
                sample: sample.as_ref().and_then(|s| {
                    arrow_array::Array::is_valid(s, i).then(|| s.value(i).to_string())
                }),
            });
        }
    }
    Ok((rows, metadata.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows_without_model(rows: &[FeatureRow]) -> Vec<FeatureRow> {
        rows.iter()
            .map(|r| FeatureRow {
                model: None,
                ..r.clone()
            })
            .collect()
    }

    /// Row groups encoded on several threads at once are appended in the order the rows came,
    /// more of them than may be in flight, and a bad row in a late group fails the part.
    #[test]
    fn row_groups_encoded_side_by_side_keep_their_order() {
        let dir = std::env::temp_dir().join(format!("sonograph-pq-groups-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let values_per_row = 64 * 1024; // 256 KiB a row: eight rows a row group
        let groups = 3 * default_encoders() + 2;
        let rows: Vec<FeatureRow> = (0..groups * 8)
            .map(|i| FeatureRow {
                id: format!("item{i:04}"),
                source: format!("/data/{i}.wav"),
                offset_s: 0.0,
                duration_s: 1.0,
                sample_rate: 16_000,
                num_frames: 1024,
                num_bins: 64,
                features: (0..values_per_row).map(|v| (v % 977 + i) as f32).collect(),
                model: None,
                sample: None,
            })
            .collect();
        let meta = PartMeta {
            spec_id: "abc".into(),
            spec_json: "{}".into(),
            precision: "f32".into(),
            model: None,
            bins: 64,
            sample: false,
        };
        let path = dir.join("groups.parquet");
        write_part(&path, &rows, Dtype::F32, &meta).unwrap();
        let (back, _) = read_part(&path).unwrap();
        assert_eq!(back, rows);
        let footer =
            parquet::file::reader::SerializedFileReader::new(File::open(&path).unwrap()).unwrap();
        use parquet::file::reader::FileReader;
        assert_eq!(footer.metadata().num_row_groups(), groups);

        // The last rows lack the model outputs this part's schema asks for.
        let with_model = PartMeta {
            model: Some("{}".into()),
            ..meta.clone()
        };
        let mut bad: Vec<FeatureRow> = rows
            .iter()
            .map(|r| FeatureRow {
                model: Some(ModelColumns {
                    frames: 1,
                    dim: 1,
                    values: vec![0.5],
                }),
                ..r.clone()
            })
            .collect();
        bad.last_mut().unwrap().model = None;
        let err = write_part(&dir.join("bad.parquet"), &bad, Dtype::F32, &with_model);
        assert!(
            err.as_ref()
                .unwrap_err()
                .to_string()
                .contains("has no model outputs"),
            "{err:?}"
        );
        assert!(!dir.join("bad.parquet").exists());
        // A row of other bins, and one whose values are not whole frames.
        let mut other_bins = rows[..3].to_vec();
        other_bins[2].num_bins = 32;
        other_bins[2].num_frames = 2048;
        let mut torn = rows[..3].to_vec();
        torn[1].features.pop();
        for (bad, want) in [
            (
                other_bins,
                "has frames of 32 bins, and the part's rows frames of 64",
            ),
            (torn, "has 65535 feature values, not 1024 frames of 64 bins"),
        ] {
            let err = write_part(&dir.join("bad.parquet"), &bad, Dtype::F32, &meta);
            assert!(
                err.as_ref().unwrap_err().to_string().contains(want),
                "{err:?}"
            );
            assert!(!dir.join("bad.parquet").exists());
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Every value is exact in f16 here (halves of small integers), so both dtypes read back
    /// what was written; with a model, its columns too.
    #[test]
    fn parts_round_trip_in_both_dtypes() {
        let dir = std::env::temp_dir().join(format!("sonograph-pq-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let rows: Vec<FeatureRow> = (0..3)
            .map(|i| FeatureRow {
                id: format!("item{i}"),
                source: format!("/data/item{i}.wav"),
                offset_s: i as f64 * 30.0,
                duration_s: 30.0,
                sample_rate: 16_000,
                num_frames: i,
                num_bins: 2,
                features: (0..2 * i).map(|v| v as f32 * 0.5).collect(),
                model: None,
                sample: None,
            })
            .collect();
        let with_model: Vec<FeatureRow> = rows
            .iter()
            .map(|r| FeatureRow {
                model: Some(ModelColumns {
                    frames: r.num_frames,
                    dim: 3,
                    values: (0..3 * r.num_frames).map(|v| v as f32 - 1.5).collect(),
                }),
                ..r.clone()
            })
            .collect();
        for (dtype, model) in [
            (Dtype::F32, false),
            (Dtype::F16, false),
            (Dtype::F32, true),
            (Dtype::F16, true),
        ] {
            let path = dir.join(format!("part-{dtype:?}-{model}.parquet"));
            let meta = PartMeta {
                spec_id: "abc".into(),
                spec_json: "{\"n\":1}".into(),
                precision: "f32".into(),
                model: model.then(|| "{\"path\":\"m.onnx\"}".into()),
                bins: 2,
                sample: false,
            };
            let rows = if model { &with_model } else { &rows };
            // A row without model outputs cannot go into a part with a model.
            if model {
                let bare = dir.join("bare.parquet");
                let err = write_part(&bare, &rows_without_model(rows), dtype, &meta);
                assert!(err
                    .unwrap_err()
                    .to_string()
                    .contains("has no model outputs"));
            }
            write_part(&path, rows, dtype, &meta).unwrap();
            assert!(!crate::publish::tmp_path(&path).exists());
            let (back, meta) = read_part(&path).unwrap();
            assert_eq!(&back, rows);
            // Readers see frames: a list of fixed-size lists, the Arrow schema in the footer.
            let arrow = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
                File::open(&path).unwrap(),
            )
            .unwrap();
            let columns = arrow.schema().fields();
            assert_eq!(columns[7].data_type(), &frames_list(dtype, 2).unwrap());
            if model {
                assert_eq!(columns[10].data_type(), &float_list(dtype));
            }
            assert_eq!(meta.contains_key(META_MODEL), model);
            assert_eq!(meta[META_SPEC_ID], "abc");
            assert_eq!(meta[META_SPEC], "{\"n\":1}");
            assert_eq!(meta[META_PRECISION], "f32");
            let footer =
                parquet::file::reader::SerializedFileReader::new(File::open(&path).unwrap())
                    .unwrap();
            use parquet::file::reader::FileReader;
            let kv = footer
                .metadata()
                .file_metadata()
                .key_value_metadata()
                .unwrap();
            assert!(kv
                .iter()
                .any(|k| k.key == META_SPEC_ID && k.value.as_deref() == Some("abc")));
            // The features column: split bytes (PLAIN in f16), no dictionary, no statistics.
            let column = footer.metadata().row_group(0).column(7);
            assert_eq!(column.column_path(), &frames_leaf("features"));
            let encodings: Vec<_> = column.encodings().collect();
            let split = dtype == Dtype::F32;
            assert_eq!(
                encodings.contains(&parquet::basic::Encoding::BYTE_STREAM_SPLIT),
                split,
                "{encodings:?}"
            );
            assert!(column.dictionary_page_offset().is_none());
            assert!(column.statistics().is_none());
            if model {
                let column = footer.metadata().row_group(0).column(10);
                assert_eq!(column.column_path().string(), "model_outputs.list.item");
                assert_eq!(
                    column
                        .encodings()
                        .any(|e| e == parquet::basic::Encoding::BYTE_STREAM_SPLIT),
                    split
                );
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
