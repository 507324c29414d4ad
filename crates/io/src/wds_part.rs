//! WebDataset parts (`extract --part-format webdataset`): a part's rows as a tar shard of
//! samples, each the row's features as `KEY.npy` (`[frames, bins]` in the part's dtype), its
//! other columns as `KEY.json`, and a model's outputs as `KEY.model.npy`; written under a
//! temporary name, synced and renamed when complete, as Parquet parts are.

use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};

use crate::error::WriteError;
use crate::npy::encode_npy;
use crate::parquet::{io_error, other_error, ClosedPart, Dtype, FeatureRow};
use crate::publish::Draft;

/// A WebDataset part being written.
pub struct TarPartWriter {
    path: PathBuf,
    draft: Draft,
    builder: tar::Builder<BufWriter<File>>,
    dtype: Dtype,
    rows: usize,
}

/// A sample's key: unique in its part (the row's place in it), readable (its id, with the
/// characters webdataset splits keys on, `/` and `.`, as `_`).
fn key(index: usize, id: &str) -> String {
    let squashed: String = id
        .chars()
        .map(|c| {
            if c == '/' || c == '.' || c.is_control() {
                '_'
            } else {
                c
            }
        })
        .collect();
    format!("{index:06}_{squashed}")
}

impl TarPartWriter {
    /// Starts `path` (as `path.tmp`, replacing any leftover of a crashed run).
    pub fn create(path: &Path, dtype: Dtype) -> Result<Self, WriteError> {
        let (draft, file) = Draft::create(path).map_err(io_error(path))?;
        let mut builder = tar::Builder::new(BufWriter::new(file));
        builder.mode(tar::HeaderMode::Deterministic);
        Ok(TarPartWriter {
            path: path.to_path_buf(),
            draft,
            builder,
            dtype,
            rows: 0,
        })
    }

    /// Appends `row` as a sample.
    pub fn push(&mut self, row: FeatureRow) -> Result<(), WriteError> {
        let key = key(self.rows, &row.id);
        let frames = row.num_frames as usize;
        let bins = row.num_bins as usize;
        if row.features.len() != frames * bins {
            return Err(other_error(&self.path)(format!(
                "row {:?} has {} feature values, not {frames} frames of {bins} bins",
                row.id,
                row.features.len()
            )));
        }
        let mut columns = serde_json::json!({
            "id": row.id,
            "source": row.source,
            "offset_s": row.offset_s,
            "duration_s": row.duration_s,
            "sample_rate": row.sample_rate,
            "num_frames": row.num_frames,
            "num_bins": row.num_bins,
        });
        if let Some(sample) = &row.sample {
            columns["sample"] =
                serde_json::from_str(sample).unwrap_or_else(|_| sample.as_str().into());
        }
        let mut npy = Vec::new();
        encode_npy(&[frames, bins], &row.features, self.dtype, &mut npy)
            .map_err(io_error(&self.path))?;
        self.append(&format!("{key}.npy"), &npy)?;
        if let Some(m) = &row.model {
            columns["model_frames"] = m.frames.into();
            columns["model_dim"] = m.dim.into();
            let mut npy = Vec::new();
            encode_npy(
                &[m.frames as usize, m.dim as usize],
                &m.values,
                self.dtype,
                &mut npy,
            )
            .map_err(io_error(&self.path))?;
            self.append(&format!("{key}.model.npy"), &npy)?;
        }
        self.append(&format!("{key}.json"), columns.to_string().as_bytes())?;
        self.rows += 1;
        Ok(())
    }

    fn append(&mut self, name: &str, bytes: &[u8]) -> Result<(), WriteError> {
        let mut header = tar::Header::new_ustar();
        header.set_size(bytes.len() as u64);
        header.set_mode(0o644);
        self.builder
            .append_data(&mut header, name, bytes)
            .map_err(io_error(&self.path))
    }

    /// Ends the archive (its two zero blocks) and syncs the temporary file.
    pub fn close(self) -> Result<ClosedPart, WriteError> {
        let path = self.path;
        let file = self
            .builder
            .into_inner()
            .and_then(|w| w.into_inner().map_err(|e| e.into_error()))
            .map_err(io_error(&path))?;
        ClosedPart::sync(self.draft, file, &path, self.rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A part's samples, read back: the features as written, the columns beside them, each
    /// key once.
    #[test]
    fn a_part_holds_a_sample_per_row() {
        let dir = std::env::temp_dir().join(format!("sonograph-wds-part-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("part-00000-00000.tar");
        let mut part = TarPartWriter::create(&path, Dtype::F32).unwrap();
        for (i, id) in ["a.wav", "x/a.wav"].into_iter().enumerate() {
            part.push(FeatureRow {
                id: id.into(),
                source: format!("/data/{id}"),
                offset_s: 0.0,
                duration_s: 1.0,
                sample_rate: 16_000,
                num_frames: 2,
                num_bins: 3,
                features: (0..6).map(|v| (v + 10 * i) as f32).collect(),
                model: None,
                sample: (i == 1).then(|| "{\"txt\":\"hi\"}".into()),
            })
            .unwrap();
        }
        let closed = part.close().unwrap();
        assert!(!path.exists());
        assert_eq!(
            (closed.rows, closed.publish().unwrap()),
            (2, std::fs::metadata(&path).unwrap().len())
        );
        let mut archive = tar::Archive::new(File::open(&path).unwrap());
        let mut members = Vec::new();
        for entry in archive.entries().unwrap() {
            let mut entry = entry.unwrap();
            let name = entry.path().unwrap().display().to_string();
            let mut bytes = Vec::new();
            std::io::Read::read_to_end(&mut entry, &mut bytes).unwrap();
            members.push((name, bytes));
        }
        let names: Vec<&str> = members.iter().map(|m| m.0.as_str()).collect();
        assert_eq!(
            names,
            [
                "000000_a_wav.npy",
                "000000_a_wav.json",
                "000001_x_a_wav.npy",
                "000001_x_a_wav.json"
            ]
        );
        let mut want = Vec::new();
        encode_npy(
            &[2, 3],
            &[10.0, 11.0, 12.0, 13.0, 14.0, 15.0],
            Dtype::F32,
            &mut want,
        )
        .unwrap();
        assert_eq!(members[2].1, want);
        let columns: serde_json::Value = serde_json::from_slice(&members[3].1).unwrap();
        assert_eq!(columns["id"], "x/a.wav");
        assert_eq!(columns["sample"]["txt"], "hi");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
