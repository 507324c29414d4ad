#!/usr/bin/env python3
"""Writes the binary and text seeds of fuzz/corpus/ from the repository's own test files.

    python3 fuzz/seeds.py          # (re)writes the seeds below; standard library only

audio: short pieces of tests/data (WAV cut to a few hundred frames with their header fixed;
FLAC, MP3 and Ogg cut at frame or page boundaries with their headers fixed, so that they
decode cleanly), and WAV encodings the test files lack (A-law, mu-law, IMA and MS ADPCM,
float64, WAVE_FORMAT_EXTENSIBLE). IQ: small SigMF pairs and archives in each datatype, and
pieces of tests/rf. Manifests and job requests are written here too. The spec and alert-rule
seeds are `sonograph presets NAME` and the default rules (see fuzz/README.md), not written
here.
"""

import io
import json
import math
import os
import struct
import tarfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "fuzz", "corpus")
DATA = os.path.join(ROOT, "tests", "data")


def put(target, name, data):
    folder = os.path.join(CORPUS, target)
    os.makedirs(folder, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data)


# ---------------------------------------------------------------- WAV


def wav_chunks(data):
    assert data[:4] == b"RIFF" and data[8:12] == b"WAVE"
    pos, out = 12, []
    while pos + 8 <= len(data):
        cid, size = data[pos : pos + 4], struct.unpack("<I", data[pos + 4 : pos + 8])[0]
        out.append((cid, data[pos + 8 : pos + 8 + size]))
        pos += 8 + size + (size & 1)
    return out


def riff(chunks):
    body = b"WAVE"
    for cid, payload in chunks:
        body += cid + struct.pack("<I", len(payload)) + payload
        if len(payload) & 1:
            body += b"\0"
    return b"RIFF" + struct.pack("<I", len(body)) + body


def cut_wav(name, start, frames):
    """Frames start..start+frames of a test WAV, every other chunk kept."""
    chunks = wav_chunks(open(os.path.join(DATA, name), "rb").read())
    fmt = dict(chunks)[b"fmt "]
    align = struct.unpack("<H", fmt[12:14])[0]
    out = []
    for cid, payload in chunks:
        if cid == b"data":
            payload = payload[start * align : (start + frames) * align]
        elif cid == b"fact":
            payload = struct.pack("<I", frames)
        out.append((cid, payload))
    return riff(out)


def fmt_chunk(tag, channels, rate, bits, align, extra=None):
    chunk = struct.pack("<HHIIHH", tag, channels, rate, rate * align, align, bits)
    if extra is not None:
        chunk += struct.pack("<H", len(extra)) + extra
    return chunk


def speech(n, rate=16000):
    """A voiced-sounding test signal in [-0.8, 0.8] (no randomness: the seeds are stable)."""
    return [
        0.8 * math.sin(2 * math.pi * 180 * i / rate) * (0.5 + 0.5 * math.sin(2 * math.pi * 3 * i / rate))
        + 0.1 * math.sin(2 * math.pi * 2400 * i / rate)
        for i in range(n)
    ]


def alaw(x):
    """G.711 A-law of a sample in [-1, 1] (Sun's g711.c)."""
    pcm = max(-32768, min(32767, int(x * 32767))) >> 3
    if pcm >= 0:
        mask = 0xD5
    else:
        mask, pcm = 0x55, -pcm - 1
    ends = [0x1F, 0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF]
    seg = next((i for i, e in enumerate(ends) if pcm <= e), 8)
    if seg >= 8:
        return 0x7F ^ mask
    return ((seg << 4) | ((pcm >> (1 if seg < 2 else seg)) & 0xF)) ^ mask


def mulaw(x):
    """G.711 mu-law of a sample in [-1, 1] (Sun's g711.c)."""
    pcm = max(-32768, min(32767, int(x * 32767))) >> 2
    if pcm < 0:
        mask, pcm = 0x7F, -pcm
    else:
        mask = 0xFF
    pcm = min(pcm, 8159) + (0x84 >> 2)
    ends = [0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF, 0x1FFF]
    seg = next((i for i, e in enumerate(ends) if pcm <= e), 8)
    if seg >= 8:
        return 0x7F ^ mask
    return ((seg << 4) | ((pcm >> (seg + 1)) & 0xF)) ^ mask


def wav_encoded():
    x = speech(800, 8000)
    out = {}
    out["wav_alaw_8k.wav"] = riff([(b"fmt ", fmt_chunk(6, 1, 8000, 8, 1, b"")),
                                   (b"fact", struct.pack("<I", len(x))),
                                   (b"data", bytes(alaw(v) for v in x))])
    out["wav_mulaw_8k.wav"] = riff([(b"fmt ", fmt_chunk(7, 1, 8000, 8, 1, b"")),
                                    (b"fact", struct.pack("<I", len(x))),
                                    (b"data", bytes(mulaw(v) for v in x))])
    y = speech(300, 22050)
    out["wav_f64_mono_22k.wav"] = riff([(b"fmt ", fmt_chunk(3, 1, 22050, 64, 8)),
                                        (b"data", b"".join(struct.pack("<d", v) for v in y))])
    # WAVE_FORMAT_EXTENSIBLE, 5.1 (mask 0x3F), 24-bit in 32-bit containers, PCM subformat.
    guid = struct.pack("<IHH", 1, 0x0000, 0x0010) + bytes([0x80, 0x00, 0x00, 0xAA, 0x00, 0x38, 0x9B, 0x71])
    ext = struct.pack("<HI", 24, 0x3F) + guid
    z = speech(200, 48000)
    frames = b"".join(
        b"".join(struct.pack("<i", int(v * (c + 1) / 6 * 8388607) << 8) for c in range(6)) for v in z
    )
    out["wav_extensible_6ch_48k.wav"] = riff([(b"fmt ", fmt_chunk(0xFFFE, 6, 48000, 32, 24, ext)),
                                              (b"data", frames)])
    # IMA ADPCM (mono, 256-byte blocks of 505 samples): block header then nibbles.
    blocks = b""
    for b in range(3):
        header = struct.pack("<hBB", (b * 3001) % 20000 - 10000, 20 + 9 * b, 0)
        blocks += header + bytes((i * 7 + b * 13) & 0xFF for i in range(252))
    out["wav_ima_adpcm_8k.wav"] = riff([(b"fmt ", fmt_chunk(0x11, 1, 8000, 4, 256, struct.pack("<H", 505))),
                                        (b"fact", struct.pack("<I", 3 * 505)),
                                        (b"data", blocks)])
    # MS ADPCM (mono, 256-byte blocks of 500 samples) with the standard coefficient table.
    coefs = [(256, 0), (512, -256), (0, 0), (192, 64), (240, 0), (460, -208), (392, -232)]
    extra = struct.pack("<HH", 500, len(coefs)) + b"".join(struct.pack("<hh", *c) for c in coefs)
    blocks = b""
    for b in range(3):
        header = struct.pack("<Bhhh", b % 7, 16 + 40 * b, 1000 * b - 900, 500 - 300 * b)
        blocks += header + bytes((i * 11 + b * 5) & 0xFF for i in range(256 - 7))
    out["wav_ms_adpcm_8k.wav"] = riff([(b"fmt ", fmt_chunk(2, 1, 8000, 4, 256, extra)),
                                       (b"fact", struct.pack("<I", 3 * 500)),
                                       (b"data", blocks)])
    return out


# ---------------------------------------------------------------- FLAC


def crc8(data):
    crc = 0
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = ((crc << 1) ^ 0x07) & 0xFF if crc & 0x80 else (crc << 1) & 0xFF
    return crc


def flac_header_len(d, pos):
    """Length of the frame header at pos (CRC-8 included) if it is one, else None."""
    if d[pos] != 0xFF or d[pos + 1] not in (0xF8, 0xF9):
        return None
    bs, sr = d[pos + 2] >> 4, d[pos + 2] & 0xF
    p = pos + 4
    first = d[p]
    n = 1 if first < 0x80 else (2 if first >> 5 == 6 else 3 if first >> 4 == 14 else 4 if first >> 3 == 30 else 5 if first >> 2 == 62 else 6 if first >> 1 == 126 else 7)
    p += n
    p += {6: 1, 7: 2}.get(bs, 0)
    p += {12: 1, 13: 2, 14: 2}.get(sr, 0)
    if p >= len(d) or crc8(d[pos:p]) != d[p]:
        return None
    return p + 1 - pos


def cut_flac(name, frames):
    """The first `frames` frames of a test FLAC, its STREAMINFO saying so (MD5 cleared)."""
    d = open(os.path.join(DATA, name), "rb").read()
    pos, blocks = 4, []
    while True:
        h, size = d[pos], int.from_bytes(d[pos + 1 : pos + 4], "big")
        blocks.append([h & 0x7F, bytearray(d[pos + 4 : pos + 4 + size])])
        pos += 4 + size
        if h & 0x80:
            break
    starts = [p for p in range(pos, len(d) - 16) if flac_header_len(d, p)]
    end = starts[frames] if frames < len(starts) else len(d)
    info = blocks[0][1]
    block = int.from_bytes(info[0:2], "big")
    total = frames * block
    packed = int.from_bytes(info[10:18], "big")
    packed = (packed & ~((1 << 36) - 1)) | total
    info[10:18] = packed.to_bytes(8, "big")
    info[18:34] = bytes(16)
    meta = b""
    for i, (t, payload) in enumerate(blocks):
        last = 0x80 if i == len(blocks) - 1 else 0
        meta += bytes([t | last]) + len(payload).to_bytes(3, "big") + bytes(payload)
    return b"fLaC" + meta + d[pos:end]


# ---------------------------------------------------------------- MP3, Ogg


def cut_mp3(name, frames):
    d = open(os.path.join(DATA, name), "rb").read()
    rates = [0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320]
    srs = [44100, 48000, 32000]
    pos = 0
    for _ in range(frames):
        h = int.from_bytes(d[pos : pos + 4], "big")
        assert h >> 21 == 0x7FF and (h >> 19) & 3 == 3 and (h >> 17) & 3 == 1, hex(h)
        bitrate, sr, pad = rates[(h >> 12) & 0xF] * 1000, srs[(h >> 10) & 3], (h >> 9) & 1
        pos += 144 * bitrate // sr + pad
    return d[:pos]


def ogg_crc(page):
    crc = 0
    for b in page:
        crc ^= b << 24
        for _ in range(8):
            crc = ((crc << 1) ^ 0x04C11DB7) & 0xFFFFFFFF if crc & 0x80000000 else (crc << 1) & 0xFFFFFFFF
    return crc


def cut_ogg(name, pages):
    """The first `pages` pages of a test Ogg file, the last one marked end of stream."""
    d = open(os.path.join(DATA, name), "rb").read()
    pos, out = 0, []
    for _ in range(pages):
        nseg = d[pos + 26]
        size = 27 + nseg + sum(d[pos + 27 : pos + 27 + nseg])
        out.append(bytearray(d[pos : pos + size]))
        pos += size
    last = out[-1]
    last[5] |= 4
    last[22:26] = bytes(4)
    last[22:26] = struct.pack("<I", ogg_crc(bytes(last)))
    return b"".join(bytes(p) for p in out)


def audio():
    put("audio", "wav_s16_mono_16k.wav", cut_wav("speech_16000_mono_s16.wav", 8000, 1600))
    put("audio", "wav_s16_mono_8k.wav", cut_wav("speech_8000_mono_s16.wav", 4000, 800))
    put("audio", "wav_s16_mono_48k.wav", cut_wav("speech_48000_mono_s16.wav", 24000, 1200))
    for kind in ["s16", "s24", "s32", "f32", "u8"]:
        put("audio", f"wav_{kind}_stereo_44k.wav", cut_wav(f"speech_44100_stereo_{kind}.wav", 22050, 700))
    for name, data in wav_encoded().items():
        put("audio", name, data)
    put("audio", "flac_mono_16k.flac", cut_flac("speech_16000_mono_s16.flac", 3))
    put("audio", "flac_seektable_16k.flac", cut_flac("sample.flac", 2))
    put("audio", "flac_stereo_44k.flac", cut_flac("speech_44100_stereo.flac", 2))
    put("audio", "mp3_stereo_44k.mp3", cut_mp3("speech_44100_stereo.mp3", 8))
    put("audio", "ogg_vorbis_stereo_44k.ogg", cut_ogg("speech_44100_stereo.ogg", 3))


# ---------------------------------------------------------------- IQ


def iq_values(n, kind):
    vals = []
    for i in range(n):
        a = 0.7 * math.cos(0.05 * i) + 0.05 * math.sin(1.3 * i)
        b = -0.6 * math.sin(0.05 * i) + 0.05 * math.cos(0.7 * i)
        vals += [a, b]
    if kind == "cf32_le":
        return b"".join(struct.pack("<f", v) for v in vals)
    if kind == "cf64_le":
        return b"".join(struct.pack("<d", v) for v in vals)
    if kind == "ci16_le":
        return b"".join(struct.pack("<h", round(v * 32767)) for v in vals)
    if kind == "ci8":
        return bytes(round(v * 127) & 0xFF for v in vals)
    if kind == "cu8":
        return bytes(round(v * 127) + 128 for v in vals)
    raise ValueError(kind)


def meta(datatype, rate, samples, extra_global=None, annotations=None, captures=None):
    g = {"core:datatype": datatype, "core:version": "1.2.0", "core:sample_rate": rate,
         "core:num_channels": 1, "core:recorder": "fuzz/seeds.py"}
    g.update(extra_global or {})
    return json.dumps({
        "global": g,
        "captures": captures if captures is not None else [{"core:sample_start": 0, "core:frequency": 915e6}],
        "annotations": annotations if annotations is not None else [
            {"core:sample_start": 0, "core:sample_count": samples, "core:label": "qpsk"}],
    }, indent=2)


def tar_of(members, fmt=tarfile.USTAR_FORMAT):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = 1700000000
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def iq():
    types = ["cf32_le", "ci16_le", "cu8", "ci8", "cf64_le"]
    for t in types:
        put("sigmf_meta", f"{t}.sigmf-meta", meta(t, 1e6, 64))
    put("sigmf_meta", "sonograph_synth.sigmf-meta", meta(
        "cf32_le", 2.5e5, 128,
        extra_global={"core:extensions": [{"name": "sonograph", "version": "0.1.0", "optional": True}],
                      "core:description": "synthetic", "core:sha512": "ab" * 64},
        annotations=[{"core:sample_start": 0, "core:sample_count": 128, "core:label": "bpsk",
                      "sonograph:snr_db": 12.5, "sonograph:modulation": {"kind": "psk", "order": 2},
                      "core:freq_lower_edge": -1e4, "core:freq_upper_edge": 1e4, "core:comment": "x"}],
        captures=[{"core:sample_start": 0, "core:datetime": "2024-01-01T00:00:00Z"},
                  {"core:sample_start": 32, "core:frequency": 2.4e9}]))
    put("sigmf_meta", "minimal.sigmf-meta", '{"global": {"core:datatype": "ci16_le", "core:version": "1.2.0", "core:sample_rate": 48000}}')

    put("sigmf_archive", "one_cf32.sigmf", tar_of([
        ("rec.sigmf-meta", meta("cf32_le", 1e6, 64).encode()),
        ("rec.sigmf-data", iq_values(64, "cf32_le"))]))
    put("sigmf_archive", "two_ci16_prefixed.sigmf", tar_of([
        ("dataset/a.sigmf-meta", meta("ci16_le", 2e6, 32).encode()),
        ("dataset/a.sigmf-data", iq_values(32, "ci16_le")),
        ("dataset/b.sigmf-meta", meta("cu8", 1e5, 16).encode()),
        ("dataset/b.sigmf-data", iq_values(16, "cu8"))]))
    put("sigmf_archive", "pax_ci8.sigmf", tar_of([
        ("pax/" + "long-name-" * 12 + ".sigmf-meta", meta("ci8", 1e6, 40).encode()),
        ("pax/" + "long-name-" * 12 + ".sigmf-data", iq_values(40, "ci8"))], fmt=tarfile.PAX_FORMAT))
    put("sigmf_archive", "meta_without_data.sigmf", tar_of([
        ("lonely.sigmf-meta", meta("cf64_le", 1e6, 0).encode())]))

    rf = os.path.join(ROOT, "tests", "rf")
    put("raw_iq", "qpsk_rect_512.cf32", open(os.path.join(rf, "qpsk_rect.cf32"), "rb").read()[:4096])
    put("raw_iq", "noise_tone_dc_256.cf32", open(os.path.join(rf, "noise_tone_dc.cf32"), "rb").read()[:2048])
    put("raw_iq", "tone_300.ci16", iq_values(300, "ci16_le"))
    put("raw_iq", "tone_500.cu8", iq_values(500, "cu8"))
    put("raw_iq", "tone_odd.ci8", iq_values(77, "ci8")[:-1])


# ---------------------------------------------------------------- manifests, job requests


def manifests():
    put("nemo_manifest", "nemo.jsonl", "\n".join([
        json.dumps({"audio_filepath": "clips/a.wav", "duration": 2.5, "text": "hello there"}),
        "",
        json.dumps({"audio_filepath": "/abs/b.flac", "offset": 1.5, "duration": 1.0, "text": "über"}),
        "not json",
        json.dumps({"audio_filepath": "c.wav", "offset": -1}),
        json.dumps({"audio_filepath": "d.mp3", "duration": 0}),
        json.dumps({"audio_filepath": "e.ogg", "offset": 0.25, "lang": "en", "extra": [1, {"x": None}]}),
        "   ",
        json.dumps({"text": "no path"}),
    ]) + "\n")
    put("nemo_manifest", "crlf_no_final_newline.jsonl",
        '{"audio_filepath": "x.wav", "duration": 1e-3}\r\n{"audio_filepath": "y.wav", "offset": 1e308}\r\n'
        '{"audio_filepath": "z.wav", "duration": null, "offset": null}')
    put("nemo_manifest", "not_utf8.jsonl", b'{"audio_filepath": "a.wav"}\n\xff\xfe bad\n{"audio_filepath": "b\\u00e9.wav"}\n')

    put("csv_manifest", "full.csv",
        'id,path,offset,duration\nx,"dir, with comma/x.wav",0.5,\ny,y.wav,,2\nz,,1,1\nw,w.wav,abc,1\n'
        'v,/abs/v.flac,inf,1\nu,u.wav,0,-3\n"q ""quoted""",q.wav, 1 , 2 \n')
    put("csv_manifest", "minimal.csv", "id,path\na,a.wav\nb,sub/b.flac\n")
    put("csv_manifest", "reordered_crlf.csv", "duration,text,path,id,offset\r\n1.5,hi,p.wav,p1,0\r\n,,,p2,\r\n3,x,r.wav,r,1e-9\r\n")
    put("csv_manifest", "ragged.csv", "id,path\na,a.wav,extra,fields\nb\n\n\"unterminated,b.wav\n")
    put("csv_manifest", "bad_header.csv", "name,file\na,a.wav\n")

    jobs = {
        "minimal.json": {"source": "sub", "out": "out"},
        "preset.json": {"source": "a.wav", "out": "out/run1", "preset": "whisper", "device": "cpu",
                        "workers": 2, "prefetch": 4, "batch-items": 8, "max-seconds": 60, "chunk-seconds": 30,
                        "dtype": "f16", "part-mb": 64, "precision": "f32", "n-mels": 128},
        "spec.json": {"source": "inside/deeper", "out": "new/out", "device": "cpu",
                      "spec": {"sample_rate": 8000, "n_fft": 256, "win_length": 200, "hop_length": 80,
                               "window": "hamming", "periodic": False, "framing": "snip_edges",
                               "pad_mode": "constant", "input_scale": 32768.0, "dither": 0.0, "dither_seed": 0,
                               "remove_dc": True, "preemphasis": 0.97, "preemphasis_scope": "frame", "power": 2.0,
                               "mel_scale": "kaldi", "mel_norm": "none", "n_mels": 23, "fmin": 20.0, "fmax": -400.0,
                               "log": "ln", "log_guard": {"kind": "clamp", "value": 1.1920929e-07},
                               "dynamic_range": None, "affine": None, "normalize": "none", "drop_last_frame": False,
                               "drop_nyquist": True, "n_mfcc": 13, "lifter": 22.0, "output": "mfcc"}},
        "shards_limits.json": {"source": "a.wav", "out": "out", "shard-index": 3, "shard-count": 4,
                               "max-duration": 600, "max-channels": 2, "max-sample-rate": 48000, "channel": 1},
        "vad.json": {"source": "a.wav", "out": "out", "preset": "nemo", "vad": True, "threshold": 0.5,
                     "neg-threshold": 0.35, "min-speech-ms": 250, "max-speech-s": 20, "min-silence-ms": 100,
                     "speech-pad-ms": 30, "min-silence-at-max-speech-ms": 98,
                     "use-max-poss-sil-at-max-speech": True, "max-seconds": 30},
        "model.json": {"source": "a.wav", "out": "out", "model": "sub/model.onnx", "model-device": "cpu",
                       "model-batch": 16, "model-threads": 2, "gpu-memory": "80%"},
        "escapes.json": {"source": "up/outside/secret.csv", "out": "to-slash/tmp/x", "model": "dangling/m.onnx"},
        "escapes2.json": {"source": "../outside", "out": "outside/new", "model": "/etc/hostname"},
        "refused.json": {"source": "a.wav", "out": "out", "workers": 0, "bogus": 1},
        "iq.json": {"source": "sub", "out": "out", "preset": "iq-spectrogram", "sample-rate": 1000000,
                    "format": "ci16", "max-samples": 1000000, "device": "cpu"},
        "spec_file.json": {"source": "a.wav", "out": "out", "spec": "sub/spec.toml"},
    }
    for name, body in jobs.items():
        put("job_request", name, json.dumps(body))


if __name__ == "__main__":
    audio()
    iq()
    manifests()
