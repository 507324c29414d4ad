#!/usr/bin/env python3
"""Per-core comparison on one long file, in one run: sonograph against librosa and audioflux,
Whisper log-mel-80 of a single 16 kHz WAV of about 7.5 minutes, everything on one core.

    bench/.venv/bin/python bench/percore.py --bin target/release/sonograph --out bench/out

Measured, median of --repeat after a warm-up, alternating between tools:
  - sonograph `bench FILE --threads 1`: the features of the decoded file, in the process
    (decoding done once before the clock starts), as the issue's `bench --threads 1`;
  - sonograph `bench FILE --threads 1 --decode-only`: decoding alone;
  - sonograph `features FILE --out X.npy` as a whole process (start, decode, features on a
    second thread, write), pinned to one core with taskset, and on both cores;
  - librosa: soundfile.read + melspectrogram(n_fft 400) + Whisper's log, in the process;
  - audioflux: soundfile.read + MelSpectrogram (its FFT is 512) + Whisper's log.
The WAV is the compare.py corpus's clips joined (bench/compare.sh makes them), or, without
them, espeak-ng speech generated here. Prints a markdown table with ratios.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

for _k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_k] = "1"

import numpy as np  # noqa: E402
import soundfile as sf  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import compare  # noqa: E402  (the peers' exact feature code, shared with compare.py)


def long_wav(out: Path, minutes: float) -> Path:
    path = out / f"percore-{minutes:g}min.wav"
    if path.exists():
        return path
    corpus = sorted((out / "e2e" / "corpus").glob("*.flac")) or sorted(
        (out / "corpus").glob("*.flac"))
    if not corpus:
        sys.exit("no corpus: run bench/e2e.sh or bench/compare.sh first")
    parts, total = [], 0
    for p in corpus:
        y, sr = sf.read(p, dtype="float32")
        assert sr == compare.SR
        parts.append(y)
        total += len(y)
        if total >= minutes * 60 * sr:
            break
    sf.write(path, np.concatenate(parts), compare.SR, subtype="PCM_16")
    return path


def sonograph_json(bin_: Path, *args) -> dict:
    import json
    r = subprocess.run([str(bin_), *args], check=True, capture_output=True, text=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


def whole_process(cmd, repeat: int) -> float:
    times = []
    for _ in range(repeat + 1):
        t = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        times.append(time.perf_counter() - t)
    return statistics.median(times[1:])


def in_process(fn, repeat: int) -> float:
    fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--minutes", type=float, default=7.5)
    ap.add_argument("--repeat", type=int, default=7)
    a = ap.parse_args()
    all_cpus = os.sched_getaffinity(0)
    wav = long_wav(a.out, a.minutes)
    seconds = sf.info(wav).duration
    load = os.getloadavg()
    rep = str(a.repeat)
    son = {}
    for prec in ("auto", "f32", "f64"):
        r = sonograph_json(a.bin, "bench", str(wav), "--preset", "whisper", "--threads", "1",
                           "--precision", prec, "--repeat", rep)
        son[prec] = r["audio_seconds_per_second"]
    dec = sonograph_json(a.bin, "bench", str(wav), "--decode-only", "--threads", "1",
                         "--repeat", rep)["audio_seconds_per_second"]
    with tempfile.TemporaryDirectory() as tmp:
        npy = str(Path(tmp) / "x.npy")
        feats = [str(a.bin), "features", str(wav), "--preset", "whisper", "--out", npy]
        first = str(min(all_cpus))
        one_core = seconds / whole_process(["taskset", "-c", first] + feats, a.repeat)
        all_cores = seconds / whole_process(feats, a.repeat)

    def librosa_run():
        y, _ = sf.read(wav, dtype="float32")
        return compare.librosa_whisper(y)

    def audioflux_run():
        y, _ = sf.read(wav, dtype="float32")
        return compare.audioflux_whisper(y)

    os.sched_setaffinity(0, {min(all_cpus)})  # the peers, in this process: one core
    lib = seconds / in_process(librosa_run, a.repeat)
    aflux = seconds / in_process(audioflux_run, a.repeat)
    os.sched_setaffinity(0, all_cpus)
    best = max(lib, aflux)
    best_name = "librosa" if lib >= aflux else "audioflux"
    print(f"One {seconds / 60:.1f}-minute 16 kHz WAV, Whisper log-mel-80, one core; "
          f"{os.cpu_count()} cores, load average {load[0]:.2f} at the start, "
          f"{os.getloadavg()[0]:.2f} at the end; median of {a.repeat}.")
    print()
    print("| tool | what is timed | x realtime | / faster peer |")
    print("|---|---|---:|---:|")
    rows = [
        ("sonograph", "`bench --threads 1` (auto: f32 for Whisper): features of the decoded "
         "file", son["auto"]),
        ("sonograph", "the same, `--precision f64`", son["f64"]),
        ("sonograph", "`bench --threads 1 --decode-only`: decoding alone", dec),
        ("sonograph", "`features` whole process, pinned to one core", one_core),
        ("sonograph", "`features` whole process, both cores (decoding on its own thread)",
         all_cores),
        ("librosa", "soundfile.read + melspectrogram + Whisper log, in the process", lib),
        ("audioflux", "soundfile.read + MelSpectrogram (n_fft 512) + log, in the process",
         aflux),
    ]
    for tool, what, x in rows:
        print(f"| {tool} | {what} | {x:,.0f} | {x / best:.2f} |")
    print()
    print(f"Targets: `bench --threads 1` >= 3x the faster peer ({best_name}): "
          f"{son['auto'] / best:.2f}x; `features` whole process >= 2x: {one_core / best:.2f}x "
          f"on one core, {all_cores / best:.2f}x on two.")


if __name__ == "__main__":
    main()
