//! NeMo's tarred audio datasets: a manifest line with a `shard_id` names a member of
//! `audio_{shard_id}.tar` beside the manifest, not a file (the layout NeMo's
//! `scripts/speech_recognition/convert_to_tarred_audio_dataset.py` writes:
//! `tarred_audio_manifest.json` and `audio_0.tar`, `audio_1.tar`, ... in one folder).

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use crate::item::{ArchiveMember, SourceItem};
use crate::roots::Roots;
use crate::span::ObjectVersion;
use crate::tar_index::{tar_members, TarListError, TarMember};
use crate::webdataset::check_end;

/// Shards listed at once: a manifest's lines come shard after shard, as NeMo writes them (one
/// out of order costs a listing of its shard's headers again, not a wrong item).
const SHARDS_KEPT: usize = 4;

/// A shard's members by name and the shard as listed, or why it cannot be listed.
type Listing = Rc<Result<(HashMap<String, TarMember>, Option<ObjectVersion>), String>>;

/// The shards of a tarred manifest, each listed (its headers alone) when a line first names it.
pub(crate) struct TarredShards {
    roots: Roots,
    folder: PathBuf,
    listed: VecDeque<(u64, Listing)>,
}

impl TarredShards {
    /// The shards beside a manifest in `folder`, opened beneath `roots`.
    pub fn new(roots: Roots, folder: PathBuf) -> Self {
        TarredShards {
            roots,
            folder,
            listed: VecDeque::new(),
        }
    }

    /// The item of manifest line `id` whose audio is member `name` of shard `shard_id`, or why
    /// there is none.
    pub fn item(
        &mut self,
        id: String,
        shard_id: u64,
        name: &str,
        offset_s: f64,
        duration_s: Option<f64>,
    ) -> Result<SourceItem, String> {
        let tar = self.folder.join(format!("audio_{shard_id}.tar"));
        let members = self.members(shard_id, &tar);
        let (members, listed) = members.as_ref().as_ref().map_err(Clone::clone)?;
        // NeMo names a file's second and later entries `name-subN.ext` and writes its audio
        // once, as `name.ext`.
        let member = members
            .get(name)
            .or_else(|| without_sub(name).and_then(|n| members.get(&n)))
            .ok_or_else(|| format!("{}: no member named {name:?}", tar.display()))?;
        Ok(SourceItem {
            id,
            path: tar.join(name),
            offset_s,
            duration_s,
            member: Some(ArchiveMember {
                archive: tar,
                offset: member.offset,
                size: member.size,
                sample: Vec::new(),
                listed: listed.clone(),
            }),
        })
    }

    fn members(&mut self, shard_id: u64, tar: &Path) -> Listing {
        if let Some((_, listed)) = self.listed.iter().find(|(id, _)| *id == shard_id) {
            return listed.clone();
        }
        let listed = self
            .roots
            .open_blob(tar)
            .map_err(|e| format!("{}: cannot open: {e}", tar.display()))
            .and_then(|f| {
                let members = tar_members(&f).map_err(|e| match e {
                    TarListError::Bad(reason) => format!("{}: {reason}", tar.display()),
                    TarListError::Truncated(reason) => {
                        format!("{}: truncated: {reason}", tar.display())
                    }
                })?;
                check_end(&f, &members).map_err(|reason| format!("{}: {reason}", tar.display()))?;
                Ok((members, f.listed()))
            })
            .map(|(members, listed)| {
                let by_name = members.into_iter().map(|m| (m.name.clone(), m));
                (by_name.collect::<HashMap<_, _>>(), listed)
            });
        let listed = Rc::new(listed);
        if self.listed.len() == SHARDS_KEPT {
            self.listed.pop_front();
        }
        self.listed.push_back((shard_id, listed.clone()));
        listed
    }
}

/// `name` without NeMo's `-subN` before its extension, where it has one.
fn without_sub(name: &str) -> Option<String> {
    let (stem, extension) = name.rsplit_once('.').unwrap_or((name, ""));
    let (base, n) = stem.rsplit_once("-sub")?;
    if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(if extension.is_empty() {
        base.to_string()
    } else {
        format!("{base}.{extension}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sub_entries_name_their_file() {
        assert_eq!(without_sub("a_b-sub2.wav").as_deref(), Some("a_b.wav"));
        assert_eq!(without_sub("a-sub10"), Some("a".into()));
        assert_eq!(without_sub("a-subx.wav"), None);
        assert_eq!(without_sub("a.wav"), None);
    }
}
