//! A Parquet table of named columns (zstd, written under a temporary name and renamed), for
//! outputs whose columns are not the feature parts' fixed schema: RF features and IQ rows.

use std::collections::HashMap;
use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float32Type, Float64Type, UInt64Type};
use arrow_array::{
    Array, ArrayRef, Float32Array, Float64Array, ListArray, RecordBatch, StringArray, UInt64Array,
};
use arrow_schema::{DataType, Field, Schema};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

use crate::error::WriteError;
use crate::parquet::list_offsets;
use crate::publish::{Draft, Synced};

/// One column's values.
#[derive(Debug, Clone, PartialEq)]
pub enum Column {
    Utf8(Vec<String>),
    F64(Vec<f64>),
    U64(Vec<u64>),
    /// A list of float32 per row (IQ interleaved, a PSD).
    ListF32(Vec<Vec<f32>>),
}

impl Column {
    pub fn len(&self) -> usize {
        match self {
            Column::Utf8(v) => v.len(),
            Column::F64(v) => v.len(),
            Column::U64(v) => v.len(),
            Column::ListF32(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn field(&self, name: &str) -> Field {
        let dt = match self {
            Column::Utf8(_) => DataType::Utf8,
            Column::F64(_) => DataType::Float64,
            Column::U64(_) => DataType::UInt64,
            Column::ListF32(_) => {
                DataType::List(Arc::new(Field::new("item", DataType::Float32, false)))
            }
        };
        Field::new(name, dt, false)
    }

    fn array(&self) -> Result<ArrayRef, String> {
        Ok(match self {
            Column::Utf8(v) => Arc::new(StringArray::from_iter_values(v)),
            Column::F64(v) => Arc::new(Float64Array::from(v.clone())),
            Column::U64(v) => Arc::new(UInt64Array::from(v.clone())),
            Column::ListF32(v) => {
                let offsets = list_offsets(v.iter().map(|r| r.len()))?;
                let values = Float32Array::from_iter_values(v.iter().flatten().copied());
                let field = Arc::new(Field::new("item", DataType::Float32, false));
                Arc::new(
                    ListArray::try_new(field, offsets, Arc::new(values), None)
                        .map_err(|e| e.to_string())?,
                )
            }
        })
    }
}

/// Writes `columns` (all of one length) as `path`, with `metadata` in the schema and the
/// footer; returns the file's size.
pub fn write_table(
    path: &Path,
    columns: &[(String, Column)],
    metadata: &[(String, String)],
) -> Result<u64, WriteError> {
    let other = |e: String| WriteError::Io {
        path: path.to_path_buf(),
        source: std::io::Error::other(e),
    };
    let rows = columns.first().map_or(0, |c| c.1.len());
    if let Some((name, _)) = columns.iter().find(|c| c.1.len() != rows) {
        return Err(other(format!("column {name} has a different length")));
    }
    let fields: Vec<Field> = columns.iter().map(|(n, c)| c.field(n)).collect();
    let meta: HashMap<String, String> = metadata.iter().cloned().collect();
    let schema = Arc::new(Schema::new_with_metadata(fields, meta));
    let arrays = columns
        .iter()
        .map(|(_, c)| c.array())
        .collect::<Result<Vec<_>, _>>()
        .map_err(other)?;
    let batch = RecordBatch::try_new(schema.clone(), arrays).map_err(|e| other(e.to_string()))?;
    let io = |source| WriteError::Io {
        path: path.to_path_buf(),
        source,
    };
    let (draft, file) = Draft::create(path).map_err(io)?;
    let zstd = ZstdLevel::try_new(3).map_err(|e| other(e.to_string()))?;
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(zstd))
        .set_key_value_metadata(Some(
            metadata
                .iter()
                .map(|(k, v)| parquet::file::metadata::KeyValue::new(k.clone(), v.clone()))
                .collect(),
        ))
        .build();
    let mut writer =
        ArrowWriter::try_new(file, schema, Some(props)).map_err(|e| other(e.to_string()))?;
    writer.write(&batch).map_err(|e| other(e.to_string()))?;
    let file = writer.into_inner().map_err(|e| other(e.to_string()))?;
    let bytes = file.metadata().map(|m| m.len()).unwrap_or(0);
    draft.sync(file).and_then(Synced::publish).map_err(io)?;
    Ok(bytes)
}

/// Named columns and the file's metadata.
pub type Table = (Vec<(String, Column)>, HashMap<String, String>);

/// Reads a table written by [`write_table`] (for tests and tools).
pub fn read_table(path: &Path) -> Result<Table, String> {
    let file = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let builder = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
        .map_err(|e| e.to_string())?;
    let metadata = builder.schema().metadata().clone();
    let schema = builder.schema().clone();
    let mut columns: Vec<(String, Column)> = schema
        .fields()
        .iter()
        .map(|f| {
            let c = match f.data_type() {
                DataType::Utf8 => Column::Utf8(Vec::new()),
                DataType::Float64 => Column::F64(Vec::new()),
                DataType::UInt64 => Column::U64(Vec::new()),
                _ => Column::ListF32(Vec::new()),
            };
            (f.name().clone(), c)
        })
        .collect();
    for batch in builder.build().map_err(|e| e.to_string())? {
        let b = batch.map_err(|e| e.to_string())?;
        for (i, (_, col)) in columns.iter_mut().enumerate() {
            let a = b.column(i);
            match col {
                Column::Utf8(v) => v.extend(
                    a.as_string::<i32>()
                        .iter()
                        .map(|s| s.unwrap_or("").to_string()),
                ),
                Column::F64(v) => v.extend(a.as_primitive::<Float64Type>().values().iter()),
                Column::U64(v) => v.extend(a.as_primitive::<UInt64Type>().values().iter()),
                Column::ListF32(v) => {
                    let l = a.as_list::<i32>();
                    for r in 0..l.len() {
                        v.push(l.value(r).as_primitive::<Float32Type>().values().to_vec());
                    }
                }
            }
        }
    }
    Ok((columns, metadata.into_iter().collect()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_round_trip() {
        let dir = std::env::temp_dir().join(format!("sonograph-table-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.parquet");
        let cols = vec![
            ("id".to_string(), Column::Utf8(vec!["a".into(), "b".into()])),
            ("x".to_string(), Column::F64(vec![1.5, f64::NAN])),
            ("n".to_string(), Column::U64(vec![3, 4])),
            (
                "v".to_string(),
                Column::ListF32(vec![vec![1.0, 2.0], vec![]]),
            ),
        ];
        write_table(&path, &cols, &[("k".into(), "v".into())]).unwrap();
        let (back, meta) = read_table(&path).unwrap();
        assert_eq!(meta["k"], "v");
        assert_eq!(back[0], cols[0]);
        assert_eq!(back[2], cols[2]);
        assert_eq!(back[3], cols[3]);
        let Column::F64(x) = &back[1].1 else { panic!() };
        assert!(x[0] == 1.5 && x[1].is_nan());
        let bad = vec![
            ("a".to_string(), Column::U64(vec![1])),
            ("b".to_string(), Column::U64(vec![])),
        ];
        assert!(write_table(&dir.join("bad.parquet"), &bad, &[]).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
