//! What symphonia 0.5's Ogg reader would hand its comment parsers, checked before it does:
//! the Vorbis and Opus comment packets and the comment and picture blocks of FLAC in Ogg
//! declare lengths (u32, up to 4 GiB) that symphonia allocates before it reads them, and an
//! allocation that fails is an abort, not an error. Pages are read as its reader reads them
//! (from the probe's marker, a page's CRC checked, resynchronising as it does) and packets put
//! together per stream as its logical streams do.

use std::borrow::Cow;

use crate::declared::{check_flac_block, check_vorbis_comment};
use crate::span::Span;

/// symphonia-format-ogg's largest saved part of a packet (`LogicalStream::MAX_PACKET_LEN`):
/// a longer one is an error there that ends the reading.
const MAX_PACKET_LEN: usize = 16 << 20;

/// What a logical stream carries, from the first packet of a page that begins one.
#[derive(Clone, Copy, PartialEq)]
enum Codec {
    Vorbis,
    Opus,
    Flac,
}

/// One logical stream's state: the codec its first page named, and the packet under way.
#[derive(Default)]
struct Stream {
    codec: Option<Codec>,
    partial: Option<Vec<u8>>,
}

/// Checks the comment-bearing packets of the Ogg stream whose first page's marker is at
/// byte `marker` of `file`.
pub(crate) fn check_ogg_comments(file: &Span, marker: u64) -> Result<(), String> {
    let mut streams: std::collections::HashMap<u32, Stream> = Default::default();
    let mut pos = marker;
    while let Some(page) = next_page(file, &mut pos) {
        let stream = streams.entry(page.serial).or_default();
        let packets = page.packets();
        if page.first_of_stream {
            // A stream begins (again, in a chained file): symphonia makes a new logical stream
            // with the mapper its first packet names.
            let first = packets.first().map_or(&[][..], |p| p.0);
            let codec = if first.starts_with(b"\x01vorbis") {
                Some(Codec::Vorbis)
            } else if first.starts_with(b"OpusHead") {
                Some(Codec::Opus)
            } else if first.starts_with(b"\x7fFLAC") {
                Some(Codec::Flac)
            } else {
                None
            };
            *stream = Stream {
                codec,
                partial: None,
            };
        }
        // As symphonia's `LogicalStream::read_page`: a page that continues no packet drops
        // the one under way; a continuation page with none under way has its first fragment
        // dropped. (symphonia also drops the packet under way at a gap in the pages' sequence
        // numbers, where this joins it: checking more than it parses only refuses more.)
        let mut carried = stream.partial.take().filter(|_| page.continued);
        let skip = usize::from(page.continued && carried.is_none());
        for &(bytes, complete) in packets.iter().skip(skip) {
            let packet: Cow<[u8]> = match carried.take() {
                Some(mut partial) => {
                    partial.extend_from_slice(bytes);
                    Cow::Owned(partial)
                }
                None => Cow::Borrowed(bytes),
            };
            if complete {
                // Whatever its length: symphonia's limit is on the part it saves, and a page
                // adds up to 65,025 bytes to that when it completes the packet.
                check_packet(stream.codec, &packet)?;
            } else if packet.len() <= MAX_PACKET_LEN {
                // A longer part is an error there that ends the reading.
                stream.partial = Some(packet.into_owned());
            }
        }
        // A continuation page with no fragment (no segments) leaves the part saved as it was.
        if let Some(partial) = carried {
            stream.partial = Some(partial);
        }
    }
    // Packets the file ends inside are parsed by nobody.
    Ok(())
}

/// Checks one packet as the mapper of its stream's codec would parse it.
fn check_packet(codec: Option<Codec>, packet: &[u8]) -> Result<(), String> {
    if let Some(codec) = codec {
        match codec {
            Codec::Vorbis if packet.starts_with(b"\x03vorbis") => {
                check_vorbis_comment(&packet[7..])?
            }
            Codec::Opus if packet.starts_with(b"OpusTags") => check_vorbis_comment(&packet[8..])?,
            // Every packet but audio (0xff) and the invalid 0x00 and 0x80 is a metadata block
            // (a 4-byte header, its length not honoured).
            Codec::Flac if !matches!(packet.first(), None | Some(0x00 | 0x80 | 0xff)) => {
                if let Some(block) = packet.get(4..) {
                    check_flac_block(packet[0] & 0x7f, block)?;
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// A page as symphonia's reader accepts it.
struct Page {
    serial: u32,
    continued: bool,
    first_of_stream: bool,
    lacing: Vec<u8>,
    body: Vec<u8>,
}

impl Page {
    /// Its packets' fragments in order, each with whether it ends its packet (a lacing value
    /// under 255 ends one; the page's last fragment may run on into the next page).
    fn packets(&self) -> Vec<(&[u8], bool)> {
        let mut out = Vec::new();
        let (mut start, mut len) = (0usize, 0usize);
        for &lace in &self.lacing {
            len += usize::from(lace);
            if lace < 255 {
                out.push((&self.body[start..start + len], true));
                start += len;
                len = 0;
            }
        }
        if len > 0 {
            out.push((&self.body[start..start + len], false));
        }
        out
    }
}

/// The next page symphonia's `PageReader::next_page` would accept at or after `*pos`, and
/// `*pos` moved past it; `None` at the end of the file. Like it: a page starts at the next
/// `OggS`; a header with another version or unknown flags is skipped whole (27 bytes); a page
/// whose CRC is wrong is skipped from just after its marker.
fn next_page(file: &Span, pos: &mut u64) -> Option<Page> {
    const CHUNK: usize = 1 << 16;
    loop {
        // The next capture pattern: where the last page ended, in a well-formed file.
        let start = if file.read_at(*pos, 4) == b"OggS" {
            *pos
        } else {
            loop {
                let window = file.read_at(*pos, CHUNK);
                if window.len() < 4 {
                    return None;
                }
                match window.windows(4).position(|w| w == b"OggS") {
                    Some(i) => break *pos + i as u64,
                    None => *pos += (window.len() - 3) as u64,
                }
            }
        };
        let header = file.read_at(start, 27);
        if header.len() < 27 {
            return None;
        }
        if header[4] != 0 || header[5] & 0xf8 != 0 {
            *pos = start + 27;
            continue;
        }
        let n_segments = usize::from(header[26]);
        let lacing = file.read_at(start + 27, n_segments);
        if lacing.len() < n_segments {
            return None;
        }
        let body_len: usize = lacing.iter().map(|&l| usize::from(l)).sum();
        let body = file.read_at(start + 27 + n_segments as u64, body_len);
        if body.len() < body_len {
            return None;
        }
        let mut zeroed = header.clone();
        zeroed[22..26].fill(0);
        let crc = ogg_crc(ogg_crc(ogg_crc(0, &zeroed), &lacing), &body);
        if crc.to_le_bytes() != header[22..26] {
            *pos = start + 4;
            continue;
        }
        *pos = start + 27 + (n_segments + body_len) as u64;
        return Some(Page {
            serial: u32::from_le_bytes(header[14..18].try_into().expect("4 bytes")),
            continued: header[5] & 0x01 != 0,
            first_of_stream: header[5] & 0x02 != 0,
            lacing,
            body,
        });
    }
}

/// Ogg's CRC-32 (polynomial 0x04c11db7, not reflected, no final XOR), continued from `crc`.
fn ogg_crc(crc: u32, bytes: &[u8]) -> u32 {
    const TABLE: [u32; 256] = {
        let mut table = [0u32; 256];
        let mut i = 0;
        while i < 256 {
            let mut r = (i as u32) << 24;
            let mut bit = 0;
            while bit < 8 {
                r = if r & 0x8000_0000 != 0 {
                    (r << 1) ^ 0x04c1_1db7
                } else {
                    r << 1
                };
                bit += 1;
            }
            table[i] = r;
            i += 1;
        }
        table
    };
    bytes.iter().fold(crc, |crc, &b| {
        (crc << 8) ^ TABLE[((crc >> 24) as u8 ^ b) as usize]
    })
}

#[cfg(test)]
mod tests {
    use super::{check_ogg_comments, ogg_crc};

    /// An Ogg page: `lacing` gives its segments, `flags` 1 continues a packet, 2 begins a
    /// stream; the CRC right unless `bad_crc`.
    fn page(
        serial: u32,
        seq: u32,
        flags: u8,
        lacing: &[u8],
        body: &[u8],
        bad_crc: bool,
    ) -> Vec<u8> {
        let mut p = b"OggS".to_vec();
        p.extend_from_slice(&[0, flags]);
        p.extend_from_slice(&0u64.to_le_bytes());
        p.extend_from_slice(&serial.to_le_bytes());
        p.extend_from_slice(&seq.to_le_bytes());
        p.extend_from_slice(&[0; 4]);
        p.push(lacing.len() as u8);
        p.extend_from_slice(lacing);
        p.extend_from_slice(body);
        let crc = ogg_crc(0, &p) ^ u32::from(bad_crc);
        p[22..26].copy_from_slice(&crc.to_le_bytes());
        p
    }

    /// A Vorbis comment packet with one comment of `len` bytes declared and `real` given.
    fn comment_packet(len: u32, real: usize) -> Vec<u8> {
        let mut p = b"\x03vorbis".to_vec();
        p.extend_from_slice(&0u32.to_le_bytes());
        p.extend_from_slice(&1u32.to_le_bytes());
        p.extend_from_slice(&len.to_le_bytes());
        p.extend(std::iter::repeat_n(b'x', real));
        p
    }

    /// The packet in pages of `per_page` bytes (whole segments), after a Vorbis first page.
    fn stream(packet: &[u8], per_page: usize, corrupt_page: Option<usize>) -> Vec<u8> {
        let mut file = page(7, 0, 2, &[7], b"\x01vorbis", false);
        let pieces: Vec<&[u8]> = packet.chunks(per_page).collect();
        for (i, piece) in pieces.iter().enumerate() {
            let last = i + 1 == pieces.len();
            let mut lacing = vec![255u8; piece.len() / 255];
            if last {
                lacing.push((piece.len() % 255) as u8);
            } else {
                assert_eq!(piece.len() % 255, 0);
            }
            let flags = u8::from(i > 0);
            let seq = i as u32 + 1;
            file.extend(page(7, seq, flags, &lacing, piece, corrupt_page == Some(i)));
        }
        file
    }

    fn check(bytes: &[u8]) -> Result<(), String> {
        let dir = std::env::temp_dir().join(format!("sonograph-ogg-guard-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{}.ogg", ogg_crc(0, bytes)));
        std::fs::write(&path, bytes).unwrap();
        let result = check_ogg_comments(
            &crate::span::Span::whole(std::fs::File::open(&path).unwrap()).unwrap(),
            0,
        );
        std::fs::remove_file(&path).unwrap();
        result
    }

    #[test]
    fn a_comment_is_checked_against_its_packet_put_together_across_pages() {
        // 70,000 bytes of comment over pages of 255 × 40 bytes: as declared, it fits.
        let fits = comment_packet(70_000, 70_000);
        assert_eq!(check(&stream(&fits, 255 * 40, None)), Ok(()));
        // One byte more declared than the packet holds, the length in the first page.
        let over = comment_packet(70_001, 70_000);
        let err = check(&stream(&over, 255 * 40, None)).unwrap_err();
        assert!(err.contains("70001"), "{err}");
        // A second comment's length in a later page: the vendor string pushes it there.
        let mut late = b"\x03vorbis".to_vec();
        late.extend_from_slice(&20_000u32.to_le_bytes());
        late.extend(std::iter::repeat_n(b'v', 20_000));
        late.extend_from_slice(&2u32.to_le_bytes());
        late.extend_from_slice(&3u32.to_le_bytes());
        late.extend_from_slice(b"a=b");
        late.extend_from_slice(&0xFFFF_FFF0u32.to_le_bytes());
        assert!(check(&stream(&late, 255 * 8, None)).is_err());
    }

    #[test]
    fn pages_the_reader_drops_drop_their_packets_here_too() {
        let over = comment_packet(0xFFFF_FFF0, 100);
        // A bad CRC: symphonia skips the page, and so the packet that starts in it.
        assert_eq!(check(&stream(&over, 255 * 40, Some(0))), Ok(()));
        // A packet the file ends inside is never parsed.
        let mut cut = stream(&comment_packet(0xFFFF_FFF0, 600), 255, None);
        let last_page = cut.len() - (27 + 1 + 600 + 19 - 2 * 255);
        cut.truncate(last_page);
        assert_eq!(check(&cut), Ok(()));
        // A page whose CRC is wrong before the stream: the check resynchronises just after
        // its marker, as the reader does past its first page, and finds the stream (the
        // reader refuses a file whose first page is bad: checking it all refuses no more).
        let mut junk = page(9, 0, 0, &[], &[], true);
        junk.extend(stream(&over, 255 * 40, None));
        assert!(check(&junk).is_err());
        // A marker whose header is not version 0 is skipped with its 27 bytes, here the
        // stream's first page with them: the stream is never begun (the reader refuses the
        // file), its comments never read.
        let mut skipped = b"OggSjunk".to_vec();
        skipped.extend(stream(&over, 255 * 40, None));
        assert_eq!(check(&skipped), Ok(()));
    }

    /// The first page of a Vorbis stream.
    fn vorbis_start() -> Vec<u8> {
        page(7, 0, 2, &[7], b"\x01vorbis", false)
    }

    #[test]
    fn an_empty_continuation_page_keeps_the_packet_under_way() {
        // symphonia keeps the saved part across a continuation page with no segments and
        // completes the packet on the next page (found by review, 2026-11-27).
        let mut start = comment_packet(0xFFFF_FFF0, 0);
        start.resize(255, b'x');
        let mut file = vorbis_start();
        file.extend(page(7, 1, 0, &[255], &start, false));
        file.extend(page(7, 2, 1, &[], &[], false));
        file.extend(page(7, 3, 1, &[10], &[b'y'; 10], false));
        assert!(check(&file).is_err());
    }

    #[test]
    fn a_packet_completed_past_16_mib_is_checked() {
        // The limit is on the part symphonia saves; the page that completes the packet adds
        // to it unchecked: 16 MiB of vendor string, then the comment's length.
        let whole = 258 * 65_025 + 1000;
        let mut packet = b"\x03vorbis".to_vec();
        packet.extend_from_slice(&((whole - 19) as u32).to_le_bytes());
        packet.resize(whole - 8, b'v');
        packet.extend_from_slice(&1u32.to_le_bytes());
        packet.extend_from_slice(&0xFFFF_FFF0u32.to_le_bytes());
        let mut file = vorbis_start();
        for (i, piece) in packet.chunks(65_025).enumerate() {
            let mut lacing = vec![255u8; piece.len() / 255];
            if piece.len() < 65_025 {
                lacing.push((piece.len() % 255) as u8);
            }
            file.extend(page(
                7,
                i as u32 + 1,
                u8::from(i > 0),
                &lacing,
                piece,
                false,
            ));
        }
        assert!(check(&file).is_err());
    }

    #[test]
    fn a_comment_that_ends_inside_a_length_is_symphonias_to_skip() {
        // symphonia's Ogg reader skips a comment packet it cannot parse, with a warning, and
        // allocates nothing for it: the file decodes, so it is not refused here.
        let mut truncated = b"\x03vorbis".to_vec();
        truncated.extend_from_slice(&0u32.to_le_bytes());
        truncated.extend_from_slice(&2u32.to_le_bytes());
        truncated.extend_from_slice(&1u32.to_le_bytes());
        truncated.extend_from_slice(b"x\x01\x00");
        let mut file = vorbis_start();
        file.extend(page(7, 1, 0, &[truncated.len() as u8], &truncated, false));
        assert_eq!(check(&file), Ok(()));
    }

    #[test]
    fn a_vorbis_audio_packet_is_not_read_as_a_flac_block() {
        // 0x04 then a huge "length": a FLAC comment block's type, but this stream is Vorbis.
        let mut audio = vec![0x04, 0, 0, 8];
        audio.extend_from_slice(&0u32.to_le_bytes());
        audio.extend_from_slice(&1u32.to_le_bytes());
        audio.extend_from_slice(&0xFFFF_FFF0u32.to_le_bytes());
        assert_eq!(check(&stream(&audio, 255, None)), Ok(()));
    }
}
