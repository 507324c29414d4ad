"""WebDataset shards as a source, against webdataset itself: `extract` over a shard gives one
row per audio member whose id is the shard's name and webdataset's `__key__`, and whose
`sample` column holds the sample's text fields as webdataset's default decoding gives them."""

import io
import json
import os
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq  # type: ignore[import-untyped]  # pyarrow ships no stubs

import required

BIN = os.environ.get("SONOGRAPH_BIN", "sonograph")
DATA = Path(__file__).resolve().parents[2] / "tests" / "data"
AUDIO = {"flac", "wav", "mp3", "ogg"}


def make_shard(path: Path) -> None:
    """Samples of one audio member each, a key with a dot in its folder and one in its file
    name's extension, text fields of each kind webdataset's basic handlers decode, and members
    that belong to no sample."""
    flac = (DATA / "speech_16000_mono_s16.flac").read_bytes()
    wav = (DATA / "speech_44100_stereo_s16.wav").read_bytes()
    members = [
        ("utt1.flac", flac),
        ("utt1.json", json.dumps({"text": "hello", "speaker": 7}).encode()),
        ("a.b/utt2.seg.wav", wav),
        ("a.b/utt2.seg.txt", "two words".encode()),
        ("a.b/utt2.seg.cls", b"4\n"),
        ("utt3.wav", wav),
        ("utt3.transcript", "transcript of three".encode()),
        ("utt3.jsn", b"[1, 2]"),
        ("README", b"no key"),
        ("utt4.txt", b"text without audio"),
    ]
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_ids_and_samples_are_webdatasets(tmp_path: Path) -> None:
    webdataset = required.module("webdataset")
    shards = tmp_path / "shards"
    shards.mkdir()
    shard = shards / "train-000.tar"
    make_shard(shard)
    want: dict[str, dict[str, Any]] = {}
    for sample in webdataset.WebDataset(str(shard), shardshuffle=False).decode():
        audio = [k for k in sample if k.rsplit(".", 1)[-1] in AUDIO]
        if not audio:
            continue
        assert len(audio) == 1, sample.keys()
        fields = {k: v for k, v in sample.items() if not k.startswith("__") and k not in audio}
        want[f"train-000.tar/{sample['__key__']}"] = fields
    assert len(want) == 3
    out = tmp_path / "out"
    done = subprocess.run([BIN, "extract", str(shards), "--out", str(out), "--preset", "whisper", "--no-progress"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    table = pq.read_table(out, columns=["id", "sample", "num_frames"])
    got = {row["id"]: json.loads(row["sample"]) for row in table.to_pylist()}
    assert got == want, (got, want)
    assert all(n > 0 for n in table.column("num_frames").to_pylist())


def test_webdataset_parts_hold_the_parquet_rows(tmp_path: Path) -> None:
    """`--part-format webdataset` writes each row as a sample webdataset reads: KEY.npy is the
    row's [frames, bins] features, KEY.json its other columns, as the Parquet parts hold them."""
    webdataset = required.module("webdataset")
    np = required.module("numpy")
    outs = {}
    for part_format in ["parquet", "webdataset"]:
        out = tmp_path / part_format
        done = subprocess.run([BIN, "extract", str(DATA), "--out", str(out), "--preset", "whisper", "--dtype", "f16",
                               "--part-format", part_format, "--no-progress"],
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        outs[part_format] = out
    rows = {(r["id"], r["offset_s"]): r for r in pq.read_table(outs["parquet"]).to_pylist()}
    shards = sorted(str(p) for p in outs["webdataset"].glob("part-*.tar"))
    assert shards and not list(outs["webdataset"].glob("*.parquet"))
    seen = 0
    for sample in webdataset.WebDataset(shards, shardshuffle=False).decode():
        columns = sample["json"]
        row = rows[(columns["id"], columns["offset_s"])]
        assert set(columns) == set(row) - {"features"}
        assert {k: row[k] for k in columns} == columns
        features = sample["npy"]
        assert features.dtype == np.float16 and features.shape == (row["num_frames"], row["num_bins"])
        assert np.array_equal(features, np.asarray(row["features"], dtype=np.float16))
        seen += 1
    assert seen == len(rows) > 0
