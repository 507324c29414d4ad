#!/usr/bin/env python3
"""Writes the Ogg regressions of fuzz/regressions/audio/ (issue 20): Ogg files whose comment
headers declare a comment of about 4 GiB, which symphonia 0.5 allocates before it reads it
(symphonia-metadata 0.5.5 `read_comment_no_framing`, symphonia-utils-xiph's FLAC comment and
picture readers). Each is otherwise well formed (CRCs right, headers symphonia's mappers
accept), so only the guard in crates/io/src/ogg_guard.rs stands between them and the
allocation. Run from anywhere: python3 fuzz/regressions/make_ogg.py
"""
import os
import struct

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "audio")


def crc(data: bytes) -> int:
    """Ogg's CRC-32: polynomial 0x04c11db7, not reflected, initial 0, no final XOR."""
    value = 0
    for byte in data:
        value ^= byte << 24
        for _ in range(8):
            value = ((value << 1) ^ 0x04C11DB7) if value & 0x80000000 else value << 1
            value &= 0xFFFFFFFF
    return value


def page(serial: int, sequence: int, body: bytes, lacing: list, flags: int = 0) -> bytes:
    assert sum(lacing) == len(body)
    header = b"OggS" + bytes([0, flags]) + struct.pack("<qIII", 0, serial, sequence, 0)
    header += bytes([len(lacing)]) + bytes(lacing)
    whole = header + body
    return whole[:22] + struct.pack("<I", crc(whole)) + whole[26:]


def lacing_of(packet_len: int, complete: bool = True) -> list:
    laces = [255] * (packet_len // 255)
    rest = packet_len % 255
    if complete:
        laces.append(rest)
    else:
        assert rest == 0, "an unfinished packet fills its segments"
    return laces


# A comment structure: no vendor string (or `vendor` bytes of one), one comment that says it
# is 0xFFFFFFF0 bytes long, then a few bytes.
def comments(vendor: int = 0) -> bytes:
    return struct.pack("<I", vendor) + b"v" * vendor + struct.pack("<II", 1, 0xFFFFFFF0) + b"ARTIST=x"


def vorbis() -> bytes:
    ident = b"\x01vorbis" + struct.pack("<IBIiiiBB", 0, 1, 16000, 0, 0, 0, 0xB8, 1)
    comment = b"\x03vorbis" + comments() + b"\x01"
    return page(0x5EED, 0, ident, lacing_of(len(ident)), flags=0x02) + page(
        0x5EED, 1, comment, lacing_of(len(comment))
    )


def opus_split() -> bytes:
    # The tags packet spans two pages: its first 510 bytes (two full segments) end the first,
    # the 4 GiB length is in the second, a continuation page.
    head = b"OpusHead" + struct.pack("<BBHIhB", 1, 1, 312, 16000, 0, 0)
    tags = b"OpusTags" + comments(vendor=506)
    first, rest = tags[:510], tags[510:]
    return (
        page(0x0B05, 0, head, lacing_of(len(head)), flags=0x02)
        + page(0x0B05, 1, first, lacing_of(len(first), complete=False))
        + page(0x0B05, 2, rest, lacing_of(len(rest)), flags=0x01)
    )


def flac_in_ogg() -> bytes:
    # STREAMINFO: 4096-sample blocks, 16 kHz, mono, 16-bit, 16000 samples, no MD5.
    info = struct.pack(">HH", 4096, 4096) + b"\0\0\0" + b"\0\0\0"
    packed = (16000 << 44) | (0 << 41) | (15 << 36) | 16000
    info += packed.to_bytes(8, "big") + b"\0" * 16
    ident = b"\x7fFLAC" + bytes([1, 0]) + struct.pack(">H", 1) + b"fLaC"
    ident += bytes([0x00]) + len(info).to_bytes(3, "big") + info
    body = comments()
    block = bytes([0x84]) + len(body).to_bytes(3, "big") + body
    return page(0xF1AC, 0, ident, lacing_of(len(ident)), flags=0x02) + page(
        0xF1AC, 1, block, lacing_of(len(block))
    )


for name, data in [
    ("ogg-vorbis-comment-4gib.ogg", vorbis()),
    ("ogg-opus-tags-across-pages-4gib.opus", opus_split()),
    ("ogg-flac-comment-4gib.oga", flac_in_ogg()),
]:
    with open(os.path.join(HERE, name), "wb") as f:
        f.write(data)
    print(name, len(data), "bytes")
