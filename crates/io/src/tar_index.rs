//! The members of a tar archive, from its headers alone (ustar, PAX and GNU long names,
//! base-256 sizes of members over 8 GiB, through the `tar` crate), each one's place checked
//! against the archive's real length before anything is read. Shared by `.sigmf` archives and
//! WebDataset shards.

use std::path::Path;

use crate::span::{Blob, Span};

/// One member of a tar archive: its name, the offset of its bytes, and their count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TarMember {
    pub name: String,
    pub offset: u64,
    pub size: u64,
}

impl TarMember {
    /// The byte where its header starts (for messages; PAX or GNU long-name headers may come
    /// before it).
    pub(crate) fn header_at(&self) -> u64 {
        self.offset.saturating_sub(512)
    }
}

/// Why an archive cannot be listed.
#[derive(Debug)]
pub(crate) enum TarListError {
    /// A header that cannot be read or makes no sense.
    Bad(String),
    /// A member that claims more bytes than the archive has.
    Truncated(String),
}

/// The regular files of the archive `f` (a local file or an object), in their order.
pub(crate) fn tar_members(f: &Blob) -> Result<Vec<TarMember>, TarListError> {
    // The tar crate's messages quote the header's bytes, line breaks included (the fuzzer's
    // `numeric field was not a number: 2.0",\n   when getting cksum`): escaped, so that the
    // error stays one line.
    let bad = |reason: String| TarListError::Bad(escape_controls(&reason));
    let span = Span::whole(f.clone()).map_err(|e| bad(format!("cannot read the archive: {e}")))?;
    let total = span.len();
    let mut archive = tar::Archive::new(span);
    let entries = archive
        .entries_with_seek()
        .map_err(|e| bad(format!("cannot read the tar headers: {e}")))?;
    let mut members = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| bad(format!("a tar header cannot be read: {e}")))?;
        let start = entry.raw_file_position();
        let size = entry
            .header()
            .entry_size()
            .map_err(|e| {
                bad(format!(
                    "tar header at byte {} has no valid size: {e}",
                    start.saturating_sub(512)
                ))
            })?
            .max(entry.size());
        if size > total.saturating_sub(start) {
            return Err(TarListError::Truncated(format!(
                "archive member at byte {} claims {size} bytes, the archive has {} left",
                start.saturating_sub(512),
                total.saturating_sub(start)
            )));
        }
        if !entry.header().entry_type().is_file() {
            continue;
        }
        members.push(TarMember {
            name: String::from_utf8_lossy(&entry.path_bytes()).into_owned(),
            offset: start,
            size,
        });
    }
    Ok(members)
}

/// A member name that names a file under the archive: relative, no `..`, no control
/// characters (a newline would split the messages that name it).
pub(crate) fn plain_member_name(name: &str) -> bool {
    use std::path::Component;
    !name.is_empty()
        && !name.chars().any(char::is_control)
        && Path::new(name)
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
}

/// `text` with its control characters (line breaks, tabs, NUL) escaped as `\n`, `\t`,
/// `\u{0}`.
pub(crate) fn escape_controls(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}
