//! WebDataset shards (`.tar` files of samples) as a source: one item per audio member, its
//! sample keyed as WebDataset keys it (the member's path up to the first dot of its file name:
//! `a/utt1.flac` and `a/utt1.json` are the sample `a/utt1`), read where it lies in the shard.

use std::path::Path;

use crate::item::{is_audio, ArchiveMember, Entry, SampleMember, SourceItem};
use crate::roots::Roots;
use crate::span::{Blob, Span};
use crate::tar_index::{plain_member_name, tar_members, TarListError, TarMember};

/// Whether `path` names a tar shard.
pub(crate) fn is_shard(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("tar"))
}

/// `name` split as WebDataset splits a member's name: the sample's key (its folders and its
/// file name up to the first dot) and the extension after that dot; `None` for a name that has
/// no dot in its file name, or starts with one (webdataset's `base_plus_ext` gives no key).
pub(crate) fn key_and_extension(name: &str) -> Option<(&str, &str)> {
    let file_start = name.rfind('/').map_or(0, |i| i + 1);
    let dot = file_start + name[file_start..].find('.')?;
    (dot > file_start).then(|| (&name[..dot], &name[dot + 1..]))
}

/// The fields webdataset's basic handlers decode as text, integers or JSON (`txt`, `cls`,
/// `json`, ...; `autodecode.basichandlers`): the members of a sample carried into the output.
const TEXT_FIELDS: &[&str] = &[
    "txt",
    "text",
    "transcript",
    "cls",
    "cls2",
    "class",
    "count",
    "index",
    "inx",
    "id",
    "json",
    "jsn",
];

/// The most text a sample's members hold together, in bytes: a sample's labels and metadata,
/// not its data (every row of the item carries it).
pub const MAX_SAMPLE_BYTES: u64 = 1 << 20;

fn is_text_field(extension: &str) -> bool {
    let last = extension.rsplit('.').next().unwrap_or(extension);
    TEXT_FIELDS.contains(&last.to_ascii_lowercase().as_str())
}

/// The items of the shard `tar` (opened beneath `roots`), with ids `shard_id/key`, or
/// `shard_id/key.extension` where a sample has more than one audio member. A shard that
/// cannot be listed is one invalid entry, `shard_id`, with why; a member whose name cannot
/// be an id (a control character, `..`) one invalid entry of its own.
pub fn shard_entries(roots: &Roots, tar: &Path, shard_id: &str) -> Vec<Entry> {
    let listed = roots
        .open_blob(tar)
        .map_err(|e| format!("cannot open: {e}"))
        .and_then(|f| {
            let members = tar_members(&f).map_err(|e| match e {
                TarListError::Bad(reason) => reason,
                TarListError::Truncated(reason) => format!("truncated: {reason}"),
            })?;
            check_end(&f, &members)?;
            Ok((members, f.listed()))
        });
    let (members, listed) = match listed {
        Ok(listing) => listing,
        Err(reason) => {
            return vec![Entry::Invalid {
                id: shard_id.to_string(),
                reason: format!("{}: {reason}", tar.display()),
            }]
        }
    };
    // The samples in the order of their first member; a key met again later joins its sample
    // (webdataset would start a new sample of the same key, two items of one id).
    let mut samples: Vec<(&str, Vec<&TarMember>)> = Vec::new();
    let mut index = std::collections::HashMap::new();
    let mut texts: std::collections::HashMap<&str, Vec<SampleMember>> = Default::default();
    // A name stored twice (`tar -r`) is its last copy, as tar extracts it.
    let last: std::collections::HashMap<&str, usize> = members
        .iter()
        .enumerate()
        .map(|(i, m)| (m.name.as_str(), i))
        .collect();
    for (i, member) in members.iter().enumerate() {
        if last[member.name.as_str()] != i {
            continue;
        }
        let Some((key, extension)) = key_and_extension(&member.name) else {
            continue;
        };
        if is_text_field(extension) {
            texts.entry(key).or_default().push(SampleMember {
                extension: extension.to_ascii_lowercase(),
                offset: member.offset,
                size: member.size,
            });
            continue;
        }
        if !is_audio(Path::new(&member.name)) {
            continue;
        }
        let at = *index.entry(key).or_insert_with(|| {
            samples.push((key, Vec::new()));
            samples.len() - 1
        });
        samples[at].1.push(member);
    }
    if samples.is_empty() {
        // As an archive without a recording: a shard that gives nothing is said, not skipped.
        return vec![Entry::Invalid {
            id: shard_id.to_string(),
            reason: format!(
                "{}: the shard holds no audio member ({})",
                tar.display(),
                crate::item::AUDIO_EXTENSIONS.join(", ")
            ),
        }];
    }
    let mut entries = Vec::new();
    for (key, audio) in samples {
        let sample = texts.remove(key).unwrap_or_default();
        for member in &audio {
            let id = if audio.len() == 1 {
                format!("{shard_id}/{key}")
            } else {
                format!("{shard_id}/{}", member.name)
            };
            if !plain_member_name(&member.name) {
                entries.push(Entry::Invalid {
                    id: crate::tar_index::escape_controls(&id),
                    reason: format!(
                        "{}: member at byte {} is named {:?}: a member's name must be a relative \
                         path without `..` or control characters",
                        tar.display(),
                        member.header_at(),
                        member.name
                    ),
                });
                continue;
            }
            entries.push(Entry::Item(SourceItem {
                id,
                path: tar.join(&member.name),
                offset_s: 0.0,
                duration_s: None,
                member: Some(ArchiveMember {
                    archive: tar.to_path_buf(),
                    offset: member.offset,
                    size: member.size,
                    sample: sample.clone(),
                    listed: listed.clone(),
                }),
            }));
        }
    }
    entries
}

/// The text members of `member`'s sample (read from its `archive`, as `ArchiveMember::open`
/// opens it) as a JSON object by field: `json` members parsed, integer fields (`cls`,
/// `index`, ...) as numbers where they are, the others as text; `None` for a sample without
/// any. Members over [`MAX_SAMPLE_BYTES`] together, or one that cannot be read, are the
/// item's failure.
pub fn read_sample(archive: &Blob, member: &ArchiveMember) -> Result<Option<String>, String> {
    if member.sample.is_empty() {
        return Ok(None);
    }
    let total: u64 = member.sample.iter().map(|f| f.size).sum();
    if total > MAX_SAMPLE_BYTES {
        return Err(format!(
            "the sample's text members hold {total} bytes; a sample carries up to \
             {MAX_SAMPLE_BYTES}"
        ));
    }
    let mut fields = serde_json::Map::new();
    for field in &member.sample {
        let bytes = Span::range(archive.clone(), field.offset, field.size)
            .and_then(|span| span.try_read_at(0, field.size as usize))
            .map_err(|e| format!("the sample's .{} member: {e}", field.extension))?;
        if bytes.len() as u64 != field.size {
            return Err(format!(
                "the sample's .{} member: {} of its {} bytes could be read",
                field.extension,
                bytes.len(),
                field.size
            ));
        }
        let text = String::from_utf8_lossy(&bytes);
        let last = field.extension.rsplit('.').next().unwrap_or_default();
        let value = match last {
            "json" | "jsn" => serde_json::from_str(&text).unwrap_or_else(|_| text.as_ref().into()),
            "txt" | "text" | "transcript" => text.as_ref().into(),
            _ => text
                .trim()
                .parse::<i64>()
                .map_or_else(|_| text.as_ref().into(), serde_json::Value::from),
        };
        fields.insert(field.extension.clone(), value);
    }
    Ok(Some(serde_json::Value::Object(fields).to_string()))
}

/// A shard cut short within its headers reads as one that ends there (the tar crate stops at
/// the end of the file): a whole archive ends with two zero blocks after its last member
/// (POSIX; GNU tar and Python's tarfile write them), so one without them lost members.
pub(crate) fn check_end(f: &Blob, members: &[TarMember]) -> Result<(), String> {
    let len = f.size().map_err(|e| format!("cannot read: {e}"))?;
    let data_end = members
        .last()
        .map_or(0, |m| (m.offset + m.size).div_ceil(512) * 512);
    if len < data_end + 1024 {
        return Err(format!(
            "truncated: the archive ends at byte {len}, before its end-of-archive blocks \
             (members up to byte {data_end}, then 1024 zero bytes)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A shard of samples: one audio member, two, none, a name that cannot be an id; every
    /// item's member points at its bytes.
    #[test]
    fn a_shard_lists_its_audio_members_by_key() {
        let dir = std::env::temp_dir().join(format!("sonograph-wds-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let tar = dir.join("s.tar");
        let members: [(&str, &[u8]); 9] = [
            ("utt1.flac", b"flac bytes"),
            ("utt1.json", b"{}"),
            ("d/utt2.seg.wav", b"wav bytes"),
            ("utt3.wav", b"three wav"),
            ("utt3.FLAC", b"three flac"),
            ("README", b"no key"),
            ("utt4.txt", b"text only"),
            ("bad\nname.wav", b"x"),
            // Stored again (`tar -r`): its last copy is the member.
            ("d/utt2.seg.wav", b"wav again"),
        ];
        let mut builder = tar::Builder::new(std::fs::File::create(&tar).unwrap());
        for (name, bytes) in members {
            let mut header = tar::Header::new_gnu();
            header.set_size(bytes.len() as u64);
            header.set_mode(0o644);
            header.set_cksum();
            builder.append_data(&mut header, name, bytes).unwrap();
        }
        builder.into_inner().unwrap();
        let entries = shard_entries(&Roots::anywhere(), &tar, "shards/s.tar");
        let ids: Vec<&str> = entries.iter().map(Entry::id).collect();
        assert_eq!(
            ids,
            [
                "shards/s.tar/utt1",
                "shards/s.tar/utt3.wav",
                "shards/s.tar/utt3.FLAC",
                "shards/s.tar/bad\\nname",
                "shards/s.tar/d/utt2",
            ]
        );
        let whole = std::fs::read(&tar).unwrap();
        let items = entries.iter().filter(|e| matches!(e, Entry::Item(_)));
        for (entry, want) in items.zip([
            &b"flac bytes"[..],
            b"three wav",
            b"three flac",
            b"wav again",
        ]) {
            let Entry::Item(item) = entry else {
                panic!("{entry:?}")
            };
            let m = item.member.as_ref().unwrap();
            assert_eq!(
                &whole[m.offset as usize..(m.offset + m.size) as usize],
                want
            );
            assert_eq!(m.archive, tar);
            assert!(item.path.starts_with(&tar));
        }
        let Entry::Invalid { reason, .. } = &entries[3] else {
            panic!("{:?}", entries[3])
        };
        assert!(
            reason.contains("must be a relative path") && !reason.contains('\n'),
            "{reason}"
        );
        // The sample's text members, read; one over the bound fails the item.
        let Entry::Item(first) = &entries[0] else {
            panic!()
        };
        let member = first.member.as_ref().unwrap();
        assert_eq!(member.listed, None, "a local shard");
        let archive = member.open(&Roots::anywhere()).unwrap();
        assert_eq!(
            read_sample(&archive, member).unwrap().as_deref(),
            Some("{\"json\":{}}")
        );
        let mut big = member.clone();
        big.sample[0].size = MAX_SAMPLE_BYTES + 1;
        let err = read_sample(&archive, &big).unwrap_err();
        assert!(err.contains("hold 1048577 bytes"), "{err}");
        // A shard of no audio is one invalid entry, the shard's (the fuzzer's first find: an
        // empty listing, silent).
        let text_only = dir.join("text.tar");
        let mut builder = tar::Builder::new(std::fs::File::create(&text_only).unwrap());
        let mut header = tar::Header::new_gnu();
        header.set_size(2);
        header.set_cksum();
        builder
            .append_data(&mut header, "a.json", &b"{}"[..])
            .unwrap();
        builder.into_inner().unwrap();
        let entries = shard_entries(&Roots::anywhere(), &text_only, "text.tar");
        assert!(
            matches!(&entries[..], [Entry::Invalid { id, reason }] if id == "text.tar" && reason.contains("no audio member")),
            "{entries:?}"
        );
        // A shard cut short is one invalid entry, the shard's.
        std::fs::write(&tar, &whole[..700]).unwrap();
        let entries = shard_entries(&Roots::anywhere(), &tar, "s.tar");
        assert!(
            matches!(&entries[..], [Entry::Invalid { id, reason }] if id == "s.tar" && reason.contains("s.tar")),
            "{entries:?}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// As webdataset's `base_plus_ext` (`^((?:.*/|)[^.]+)[.]([^/]*)$`).
    #[test]
    fn keys_are_webdatasets() {
        assert_eq!(key_and_extension("utt1.flac"), Some(("utt1", "flac")));
        assert_eq!(
            key_and_extension("a/b.c/utt1.seg.flac"),
            Some(("a/b.c/utt1", "seg.flac"))
        );
        assert_eq!(key_and_extension("a/.hidden"), None);
        assert_eq!(key_and_extension("README"), None);
        assert_eq!(key_and_extension("a.b/README"), None);
    }
}
