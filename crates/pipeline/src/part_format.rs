//! What a job's parts are: Parquet or WebDataset tar shards.

/// What a job's parts are.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum PartFormat {
    /// Parquet parts, a row per item or piece (docs/reading.md).
    #[default]
    Parquet,
    /// WebDataset tar shards, a sample per row: KEY.npy ([frames, bins]) and KEY.json (the
    /// other columns), for loaders that read WebDataset.
    Webdataset,
}

impl PartFormat {
    /// Its name, as the options give it.
    pub fn name(self) -> &'static str {
        match self {
            PartFormat::Parquet => "parquet",
            PartFormat::Webdataset => "webdataset",
        }
    }

    /// Its parts' file extension.
    pub fn extension(self) -> &'static str {
        match self {
            PartFormat::Parquet => "parquet",
            PartFormat::Webdataset => "tar",
        }
    }
}
