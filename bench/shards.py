"""The same corpus through `extract` as files in a folder and as WebDataset shards: what reading
members where they lie in a tar costs against reading files (issue 22).

    python3 bench/shards.py --bin target/release/sonograph [--clips 2000] [--shards 8] [--runs 3]

Makes `--clips` copies of tests/data/speech_16000_mono_s16.flac (each with a .json beside it)
as files and as `--shards` tar shards, then runs `extract --preset whisper` over each, runs
alternating, and prints the median wall time of each and their ratio, with the machine and its
load.
"""

import argparse
import io
import json
import os
import shutil
import statistics
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def make_corpus(root: Path, clips: int, shards: int) -> tuple[Path, Path]:
    audio = (ROOT / "tests" / "data" / "speech_16000_mono_s16.flac").read_bytes()
    files, tars = root / "files", root / "shards"
    files.mkdir()
    tars.mkdir()
    per_shard = (clips + shards - 1) // shards
    for s in range(shards):
        with tarfile.open(tars / f"train-{s:03}.tar", "w") as tar:
            for i in range(s * per_shard, min(clips, (s + 1) * per_shard)):
                key = f"clip{i:06}"
                meta = json.dumps({"text": f"clip {i}"}).encode()
                (files / f"{key}.flac").write_bytes(audio)
                (files / f"{key}.json").write_bytes(meta)
                for name, data in [(f"{key}.flac", audio), (f"{key}.json", meta)]:
                    info = tarfile.TarInfo(name)
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
    return files, tars


def run(binary: str, source: Path, out: Path) -> float:
    shutil.rmtree(out, ignore_errors=True)
    start = time.perf_counter()
    subprocess.run([binary, "extract", str(source), "--out", str(out), "--preset", "whisper", "--no-progress"],
                   check=True, capture_output=True)
    wall = time.perf_counter() - start
    report = json.loads((out / "__sonograph" / "report.json").read_text())
    assert report["items_failed"] == 0 and report["items_ok"] > 0, report
    return wall


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=str(ROOT / "target" / "release" / "sonograph"))
    ap.add_argument("--clips", type=int, default=2000)
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="sonograph-shards-") as tmp:
        root = Path(tmp)
        files, tars = make_corpus(root, a.clips, a.shards)
        walls: dict[str, list[float]] = {"files": [], "shards": []}
        for _ in range(a.runs):
            walls["files"].append(run(a.bin, files, root / "out-files"))
            walls["shards"].append(run(a.bin, tars, root / "out-shards"))
        median = {k: statistics.median(v) for k, v in walls.items()}
        print(f"machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}; "
              f"{a.clips} clips of 2 s (FLAC) with a .json each, {a.shards} shards; {a.runs} runs")
        for k, v in walls.items():
            print(f"{k:7} median {median[k]:.2f} s  runs {', '.join(f'{x:.2f}' for x in v)}")
        print(f"shards / files: {median['shards'] / median['files']:.2f}")


if __name__ == "__main__":
    main()
