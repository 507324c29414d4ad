//! Items of a source: a file, a span of one, or a member of a tar archive; an IQ recording;
//! or a line of a manifest that could not be used.

use std::path::PathBuf;

use crate::remote::FIRST_READ_WHOLE;
use crate::roots::Roots;
use crate::sigmf::IqSource;
use crate::span::{Blob, ObjectVersion};

/// File extensions treated as audio when walking a directory.
pub const AUDIO_EXTENSIONS: &[&str] = &["wav", "wave", "flac", "mp3", "ogg", "oga"];

/// Whether `path` names audio, by its extension (any case).
pub fn is_audio(path: &std::path::Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| AUDIO_EXTENSIONS.contains(&e.to_ascii_lowercase().as_str()))
}

/// One unit of work: a file, or a span of it.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceItem {
    /// Stable identifier: the path relative to the walked directory, the CSV `id`, the NeMo
    /// `audio_filepath` (with `@offset` when an offset is given; `audio_N.tar/` before it in a
    /// tarred manifest), or a WebDataset shard's path and the sample's key.
    pub id: String,
    pub path: PathBuf,
    pub offset_s: f64,
    pub duration_s: Option<f64>,
    /// Where its bytes are when they are a member of a tar archive (a WebDataset shard, or a
    /// NeMo tarred dataset's) and not a file of their own; `path` is then the archive's path joined with the member's
    /// name.
    pub member: Option<ArchiveMember>,
}

/// An item's bytes in a tar archive.
#[derive(Debug, Clone, PartialEq)]
pub struct ArchiveMember {
    pub archive: PathBuf,
    pub offset: u64,
    pub size: u64,
    /// The text members of its WebDataset sample (`.json`, `.txt`, ...), whose contents the
    /// output carries in its `sample` column.
    pub sample: Vec<SampleMember>,
    /// The archive as its listing opened it, where it is an object (its size and ETag): the
    /// member is read without asking for them again, and from that version only.
    pub listed: Option<ObjectVersion>,
}

impl ArchiveMember {
    /// Opens its archive beneath `roots` (as listed: no HEAD) for reading this item. A
    /// sample that an object holds in one run of at most [`FIRST_READ_WHOLE`] bytes (its audio
    /// and text members side by side, as WebDataset writes them) is fetched at once, as a clip
    /// of its own is opened by one read: whichever member is read first, the others come with
    /// it. A larger sample, or one whose members lie apart, is read as its reader goes.
    pub fn open(&self, roots: &Roots) -> std::io::Result<Blob> {
        let archive = roots.open_listed(&self.archive, self.listed.as_ref())?;
        let members = || {
            self.sample
                .iter()
                .map(|m| (m.offset, m.size))
                .chain([(self.offset, self.size)])
        };
        let (start, end) = members().fold((u64::MAX, 0), |(start, end), (offset, size)| {
            (start.min(offset), end.max(offset.saturating_add(size)))
        });
        // Side by side: nothing between them but their headers (a PAX header is a few
        // blocks) and padding to whole blocks.
        let held: u64 = members()
            .map(|(_, size)| size.next_multiple_of(512) + 2048)
            .sum();
        if end - start <= FIRST_READ_WHOLE.min(held) {
            archive.prefetch(start..end)?;
        }
        Ok(archive)
    }
}

/// A text member of a WebDataset sample: its extension (as webdataset names the field, after
/// the first dot of the file name) and where its bytes are in the archive.
#[derive(Debug, Clone, PartialEq)]
pub struct SampleMember {
    pub extension: String,
    pub offset: u64,
    pub size: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Entry {
    Item(SourceItem),
    /// An IQ recording (a SigMF pair, an archive member or a raw file), with its id.
    Iq {
        id: String,
        source: IqSource,
    },
    /// A manifest line that could not be used, with its id (`manifest:LINE`) and reason.
    Invalid {
        id: String,
        reason: String,
    },
}

impl Entry {
    pub fn id(&self) -> &str {
        match self {
            Entry::Item(i) => &i.id,
            Entry::Iq { id, .. } | Entry::Invalid { id, .. } => id,
        }
    }
}
