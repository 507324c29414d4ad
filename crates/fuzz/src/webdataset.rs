//! `webdataset_shard`: a WebDataset `.tar` shard as a source, through `Source` (its listing by
//! the tar headers, and each sample's text members) and `AudioReader::open_item` (each audio
//! member decoded where it lies).

use sonograph_io::decode::{AudioReader, DecodeOptions};
use sonograph_io::manifest::{Entry, Source};
use sonograph_io::webdataset::read_sample;
use sonograph_io::Roots;

use crate::harness::{assert_names, run, Scratch};

pub fn webdataset_shard(data: &[u8]) {
    run("webdataset_shard", || {
        let scratch = Scratch::new("shard");
        let path = scratch.write("s.tar", data);
        let source = Source::open(&path).expect("a shard is a source");
        let entries: Vec<Entry> = source
            .entries()
            .expect("a listed shard streams")
            .map(|e| e.expect("a listed shard streams"))
            .collect();
        assert!(!entries.is_empty(), "a shard lists an item or says why not");
        let mut ids: Vec<&str> = entries.iter().map(Entry::id).collect();
        ids.dedup();
        assert_eq!(ids.len(), entries.len(), "an id listed twice");
        let len = data.len() as u64;
        for entry in &entries {
            match entry {
                Entry::Invalid { id, reason } => {
                    assert!(id.starts_with("s.tar"), "{id}");
                    assert_names(reason, &path);
                }
                Entry::Iq { .. } => panic!("a shard listed IQ: {entry:?}"),
                Entry::Item(item) => {
                    let member = item.member.as_ref().expect("a shard's item is a member");
                    assert!(item.id.starts_with("s.tar/") && !item.id.contains('\n'));
                    assert!(item.path.starts_with(&path));
                    assert!(member.offset.saturating_add(member.size) <= len);
                    for field in &member.sample {
                        assert!(field.offset.saturating_add(field.size) <= len);
                    }
                    let archive = member.open(&Roots::anywhere()).expect("the shard opens");
                    match read_sample(&archive, member) {
                        Ok(Some(text)) => {
                            let fields: serde_json::Value =
                                serde_json::from_str(&text).expect("a sample is JSON");
                            assert!(fields.is_object());
                        }
                        Ok(None) => assert!(member.sample.is_empty()),
                        Err(e) => assert!(!e.contains('\n'), "{e}"),
                    }
                    let opts = DecodeOptions::default();
                    match AudioReader::open_item(&Roots::anywhere(), item, &opts) {
                        Ok(mut reader) => loop {
                            match reader.next_chunk() {
                                Ok(Some(chunk)) => {
                                    assert!(chunk.iter().all(|v| v.is_finite()))
                                }
                                Ok(None) => break,
                                Err(e) => {
                                    assert_names(&e.to_string(), &item.path);
                                    break;
                                }
                            }
                        },
                        Err(e) => assert_names(&e.to_string(), &item.path),
                    }
                }
            }
        }
    })
}
