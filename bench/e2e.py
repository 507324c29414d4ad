#!/usr/bin/env python3
"""End-to-end benchmark: FLAC files -> Parquet, sonograph vs a hand-written Python script.

Run through bench/e2e.sh (venv, cargo build, environment).  Steps:
  1. corpus: --clips FLAC clips of 5-15 s of 16 kHz mono speech (espeak-ng + sox, the voices
     and sentences of bench/compare.py) in <out>/e2e/corpus, and one 1-hour and one 3-hour
     FLAC of speech-like audio (synthesised utterances looped with varied voices, gains and
     pauses over a noise floor) in <out>/e2e/long-1h and <out>/e2e/long-3h; all reused when
     their parameters match.
  2. Throughput, --repeat times each, alternating, median wall and CPU time:
       (a) `sonograph extract CORPUS --out OUT --preset whisper --no-progress` (all cores);
           stages, core utilisation and peak RSS from OUT/__sonograph/report.json;
       (b) the script people write by hand (`e2e.py --handwritten`): multiprocessing
           Pool(cores) over the files, soundfile.read -> librosa Whisper-style log-mel ->
           rows -> pyarrow.parquet.write_table(zstd). Timed inside the script (imports and
           interpreter start-up excluded: the conservative figure) and as a whole process.
     Both outputs are read back and compared row by row.
  3. Memory: `sonograph extract` on a folder holding only the 1-hour, then only the 3-hour
     file, under /usr/bin/time -v (maximum resident set size) and report.json peak_rss_mb;
     with the default part size and again with each --long-part-mb value.
  4. Markdown tables with the machine and the issue's targets -> stdout and <out>/e2e.md
     (raw numbers in <out>/e2e.json).
"""

import os

# Before numpy is imported: single-threaded BLAS/OpenMP in every process (the Pool has one
# process per core already), and none of the OpenBLAS overrides some machines set.
for _k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
    os.environ.pop(_k, None)
for _k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_k, "1")

import argparse  # noqa: E402
import datetime  # noqa: E402
import importlib.metadata  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import re  # noqa: E402
import resource  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

SR = 16000
HERE = Path(__file__).resolve().parent
TIME = "/usr/bin/time"
# sonograph's metadata folder inside OUT (META_DIR in crates/pipeline/src/job.rs)
META_DIR = "__sonograph"


# ------------------------------------------------- (b) the hand-written script
#
# Deliberately what a user writes in an afternoon: no tuning beyond a process pool.


def _handwritten_item(path):
    import librosa
    import numpy as np
    import soundfile as sf

    y, sr = sf.read(path, dtype="float32")
    if y.ndim > 1:
        y = y.mean(axis=1)
    if sr != SR:
        y = librosa.resample(y, orig_sr=sr, target_sr=SR)
    mel = librosa.feature.melspectrogram(y=y, sr=SR, n_fft=400, hop_length=160, n_mels=80,
                                         pad_mode="reflect")  # as Whisper pads
    log = np.log10(np.maximum(mel[:, :-1], 1e-10))  # Whisper drops the last STFT frame
    log = np.maximum(log, log.max() - 8.0)
    log = (log + 4.0) / 4.0
    return {
        "id": os.path.basename(path),
        "source": path,
        "duration_s": len(y) / SR,
        "num_frames": log.shape[1],
        "features": log.T.astype(np.float32).ravel(),
    }


def _cpu(who):
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def handwritten(corpus, out, procs):
    """Returns the seconds from the first file read to the Parquet file closed, and the CPU
    seconds this process and its workers used in that time."""
    import multiprocessing

    import librosa
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    import soundfile  # noqa: F401

    # Imports and librosa's first-call set-up (numba) happen before the clock starts and
    # before the Pool forks, so the workers inherit them: this favours Python.
    librosa.feature.melspectrogram(y=np.zeros(SR, np.float32), sr=SR, n_fft=400,
                                   hop_length=160, n_mels=80)
    t0 = time.perf_counter()
    cpu0 = _cpu(resource.RUSAGE_SELF) + _cpu(resource.RUSAGE_CHILDREN)
    files = sorted(str(p) for p in Path(corpus).rglob("*.flac"))
    with multiprocessing.Pool(procs) as pool:
        rows = pool.map(_handwritten_item, files)
    table = pa.table({
        "id": [r["id"] for r in rows],
        "source": [r["source"] for r in rows],
        "duration_s": [r["duration_s"] for r in rows],
        "num_frames": pa.array([r["num_frames"] for r in rows], pa.uint32()),
        # sonograph's layout: a list of frames of 80 values each
        "features": pa.ListArray.from_arrays(
            np.cumsum([0] + [r["num_frames"] for r in rows], dtype=np.int32),
            pa.FixedSizeListArray.from_arrays(
                np.concatenate([r["features"] for r in rows]), 80)),
    })
    pq.write_table(table, out, compression="zstd")
    # the Pool's workers were joined when the `with` block closed it: they are in CHILDREN
    cpu = _cpu(resource.RUSAGE_SELF) + _cpu(resource.RUSAGE_CHILDREN) - cpu0
    return time.perf_counter() - t0, cpu


# ---------------------------------------------------------------- corpus


def _params_match(path, params):
    try:
        return json.loads(path.read_text()) == params
    except (OSError, ValueError):
        return False


def _espeak_version():
    return subprocess.run(["espeak-ng", "--version"], capture_output=True,
                          text=True).stdout.strip()


def make_corpus(root, n_clips):
    """n_clips FLACs of 5-15 s in root/corpus (nothing else in that folder)."""
    import numpy as np
    import soundfile as sf
    from compare import SENTENCES, VARIANTS, VOICES, synth

    cdir = root / "corpus"
    stamp = root / "corpus.json"
    params = {"clips": n_clips, "seconds": [5, 15], "sr": SR, "version": 1,
              "espeak-ng": _espeak_version()}
    flacs = [cdir / f"utt{i:04d}.flac" for i in range(n_clips)]
    if _params_match(stamp, params) and all(p.exists() for p in flacs):
        return flacs
    shutil.rmtree(cdir, ignore_errors=True)
    cdir.mkdir(parents=True)
    with tempfile.TemporaryDirectory() as tmp:
        for i, path in enumerate(flacs):
            rng = np.random.default_rng(5000 + i)
            voice = f"{VOICES[i % len(VOICES)]}+{VARIANTS[(i * 5) % len(VARIANTS)]}"
            speed, pitch = int(rng.integers(130, 210)), int(rng.integers(25, 75))
            n = int(rng.uniform(5.0, 15.0) * SR)
            parts, have = [np.zeros(int(rng.integers(SR // 20, SR // 4)), np.float32)], 0
            while have < n:
                text = " ".join(rng.permutation(SENTENCES)[:2])
                parts += [synth(text, voice, speed, pitch, tmp),
                          np.zeros(int(rng.integers(SR // 10, SR // 2)), np.float32)]
                have = sum(len(p) for p in parts)
            y = np.concatenate(parts)[:n].astype(np.float64)
            y *= 10 ** (rng.uniform(-14, -2) / 20) / max(np.abs(y).max(), 1e-9)
            y += rng.standard_normal(n) * 10 ** (-70 / 20)
            pcm = np.clip(np.round(y * 32768), -32768, 32767).astype(np.int16)
            sf.write(path, pcm, SR, subtype="PCM_16", format="FLAC")
    stamp.write_text(json.dumps(params))
    return flacs


def make_long(root, hours):
    """One FLAC of `hours` of speech-like audio, alone in root/long-{hours}h; streamed to disk
    in blocks, so generating it needs little memory either."""
    import numpy as np
    import soundfile as sf
    from compare import SENTENCES, VARIANTS, VOICES, synth

    ldir = root / f"long-{hours}h"
    path = ldir / f"speech-{hours}h.flac"
    stamp = root / f"long-{hours}h.json"
    params = {"hours": hours, "sr": SR, "version": 1, "espeak-ng": _espeak_version()}
    if _params_match(stamp, params) and path.exists():
        return path
    shutil.rmtree(ldir, ignore_errors=True)
    ldir.mkdir(parents=True)
    rng = np.random.default_rng(77)
    bank = []  # 48 utterances: every voice, several rates and pitches
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(48):
            voice = f"{VOICES[k % len(VOICES)]}+{VARIANTS[(k * 3) % len(VARIANTS)]}"
            text = " ".join(rng.permutation(SENTENCES)[:3])
            y = synth(text, voice, int(rng.integers(120, 220)), int(rng.integers(20, 80)), tmp)
            bank.append(y.astype(np.float64) / max(np.abs(y).max(), 1e-9))
    total, done = int(hours * 3600 * SR), 0
    with sf.SoundFile(path, "w", SR, 1, subtype="PCM_16", format="FLAC") as f:
        while done < total:
            parts = []
            for _ in range(20):  # ~1 minute per block
                y = bank[int(rng.integers(len(bank)))]
                if rng.random() < 0.3:  # some variation in rate: a cheap resample
                    r = rng.uniform(0.85, 1.15)
                    y = np.interp(np.arange(0, len(y) - 1, r), np.arange(len(y)), y)
                parts += [y * 10 ** (rng.uniform(-20, -3) / 20),
                          np.zeros(int(rng.uniform(0.1, 1.5) * SR))]
            y = np.concatenate(parts)[: total - done]
            y += rng.standard_normal(len(y)) * 10 ** (-65 / 20)
            f.write(np.clip(np.round(y * 32768), -32768, 32767).astype(np.int16))
            done += len(y)
    stamp.write_text(json.dumps(params))
    return path


# ---------------------------------------------------------------- runs


def run_sonograph(bin_, src, out, *extra):
    """One `sonograph extract` into a fresh `out`; returns wall s, max RSS (MiB) and the report."""
    shutil.rmtree(out, ignore_errors=True)
    cmd = [str(bin_), "extract", str(src), "--out", str(out), "--preset", "whisper",
           "--no-progress", *extra]
    timed = os.access(TIME, os.X_OK)
    if timed:
        cmd = [TIME, "-v", *cmd]
    cpu0 = _cpu(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t
    cpu = _cpu(resource.RUSAGE_CHILDREN) - cpu0
    if p.returncode != 0:
        sys.exit(f"sonograph extract failed ({p.returncode}):\n{p.stderr}")
    rss = None
    if timed:
        m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr)
        rss = int(m.group(1)) / 1024 if m else None
    report = json.loads((Path(out) / META_DIR / "report.json").read_text())
    return {"wall_s": wall, "cpu_s": cpu, "max_rss_mb": rss, "report": report}


def run_handwritten(corpus, out, procs):
    """The hand-written script in a fresh interpreter; returns (its own timing, whole process)."""
    if os.path.exists(out):
        os.remove(out)
    t = time.perf_counter()
    p = subprocess.run([sys.executable, __file__, "--handwritten", str(corpus), str(out),
                        str(procs)], capture_output=True, text=True)
    whole = time.perf_counter() - t
    if p.returncode != 0:
        sys.exit(f"the hand-written script failed:\n{p.stderr}")
    inner = json.loads(p.stdout.strip().splitlines()[-1])
    return {"inner_s": inner["seconds"], "cpu_s": inner["cpu_s"], "whole_s": whole}


def compare_outputs(son_dir, py_file):
    """Row-by-row comparison of the two datasets: ids, frame counts, max |diff|."""
    import numpy as np
    import pyarrow.compute as pc
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    a = ds.dataset(str(son_dir), format="parquet").to_table().sort_by("id")
    b = pq.read_table(py_file).sort_by("id")
    same_ids = a["id"].to_pylist() == b["id"].to_pylist()
    same_frames = a["num_frames"].to_pylist() == b["num_frames"].to_pylist()
    diff = 0.0
    if same_ids and same_frames:
        fa = pc.list_flatten(pc.list_flatten(a["features"])).to_numpy()
        fb = pc.list_flatten(pc.list_flatten(b["features"])).to_numpy()
        diff = float(np.abs(fa - fb).max()) if len(fa) == len(fb) else float("nan")
    return {"rows": (a.num_rows, b.num_rows), "same_ids": same_ids,
            "same_frames": same_frames, "max_abs_diff": diff}


# ---------------------------------------------------------------- report


def sh(*cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True).stdout.strip()
    except OSError:
        return "?"


def machine_info(bin_, ncores, load_start):
    import numpy as np

    model = next((ln.split(":", 1)[1].strip() for ln in sh("lscpu").splitlines()
                  if ln.startswith("Model name")), "?")
    mem = next((ln.split()[1] for ln in sh("free", "-m").splitlines()
                if ln.startswith("Mem:")), "?")
    vers = {p: importlib.metadata.version(p) for p in ("librosa", "soundfile", "pyarrow")}
    vers["numpy"] = np.__version__
    git = sh("git", "-C", str(HERE), "describe", "--always", "--dirty")
    flac = sh("flac", "--version") or "?"
    return [
        f"- date: {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}",
        f"- CPU: {model}; {ncores} of {os.cpu_count()} logical CPUs usable; {mem} MiB RAM; "
        f"{platform.system()} {platform.release()}",
        f"- load average (1/5/15 min) at start: {' / '.join(f'{x:.2f}' for x in load_start)} "
        "(shared machines: noisy)",
        f"- {sh(str(bin_), '--version')} (git {git}); {sh('rustc', '--version')}",
        f"- Python {platform.python_version()}; "
        + ", ".join(f"{k} {v}" for k, v in vers.items())
        + f"; {flac}; {_espeak_version().split(' Data')[0]}",
        "- env: OMP/OPENBLAS/MKL_NUM_THREADS=1 (one process per core), OPENBLAS_CORETYPE and "
        "OPENBLAS_L2_SIZE unset",
    ]


def verdict(ok):
    return "PASS" if ok else "MISS"


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "--handwritten":
        secs, cpu = handwritten(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        print(json.dumps({"seconds": secs, "cpu_s": cpu}))
        return

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--bin", type=Path, required=True, help="target/release/sonograph")
    ap.add_argument("--out", type=Path, required=True, help="output folder (bench/out)")
    ap.add_argument("--clips", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--long-hours", default="1,3", help="lengths of the long files, in hours")
    ap.add_argument("--long-part-mb", default="16,256",
                    help="also run the long files with these --part-mb values (comma-separated)")
    a = ap.parse_args()
    sys.path.insert(0, str(HERE))  # for compare.py's corpus helpers
    ncores = len(os.sched_getaffinity(0))
    load_start = os.getloadavg()
    root = a.out / "e2e"
    root.mkdir(parents=True, exist_ok=True)

    print(f"corpus: {a.clips} clips of 5-15 s ...", file=sys.stderr)
    flacs = make_corpus(root, a.clips)
    import soundfile as sf
    audio_s = sum(sf.info(str(p)).frames for p in flacs) / SR
    hours = [int(h) for h in a.long_hours.split(",") if h]
    longs = {}
    for h in hours:
        print(f"long file: {h} h ...", file=sys.stderr)
        longs[h] = make_long(root, h)
    if not os.access(TIME, os.X_OK):
        print(f"{TIME} is missing (apt-get install -y time): max RSS from report.json only",
              file=sys.stderr)

    corpus, work = root / "corpus", root / "work"
    work.mkdir(exist_ok=True)
    son_out, py_out = work / "sonograph", work / "handwritten.parquet"
    son, son32, py = [], [], []
    print("warm-up (page cache) ...", file=sys.stderr)
    run_sonograph(a.bin, corpus, son_out)
    for i in range(a.repeat):
        print(f"pass {i + 1}/{a.repeat}: sonograph, sonograph --precision f64, Python ...",
              file=sys.stderr)
        son.append(run_sonograph(a.bin, corpus, son_out))
        son32.append(run_sonograph(a.bin, corpus, son_out, "--precision", "f64"))
        py.append(run_handwritten(corpus, py_out, ncores))
    # the last f64 run is in son_out: rerun the default once for the comparison
    run_sonograph(a.bin, corpus, son_out)
    check = compare_outputs(son_out, py_out)

    med = lambda xs: statistics.median(xs)  # noqa: E731
    son_wall = med([r["wall_s"] for r in son])
    son32_wall = med([r["wall_s"] for r in son32])
    py_inner = med([r["inner_s"] for r in py])
    py_whole = med([r["whole_s"] for r in py])
    son_cpu = med([r["cpu_s"] for r in son])
    son32_cpu = med([r["cpu_s"] for r in son32])
    py_cpu = med([r["cpu_s"] for r in py])
    rep = sorted(son, key=lambda r: r["wall_s"])[len(son) // 2]  # the median run's report
    r = rep["report"]

    print("long files ...", file=sys.stderr)
    part_mbs = [None] + [int(x) for x in a.long_part_mb.split(",") if x]  # None: the default
    long_runs = {
        (h, mb): run_sonograph(a.bin, longs[h].parent, work / f"long-{h}h",
                               *([] if mb is None else ["--part-mb", str(mb)]))
        for mb in part_mbs for h in hours}
    for h in hours:  # hundreds of MB of features: not worth keeping
        shutil.rmtree(work / f"long-{h}h", ignore_errors=True)

    rates = {
        "son": audio_s / son_wall, "son32": audio_s / son32_wall,
        "py": audio_s / py_inner, "py_whole": audio_s / py_whole,
    }
    per_cpu = {"son": audio_s / son_cpu, "son32": audio_s / son32_cpu, "py": audio_s / py_cpu}
    lines = ["## Machine", ""] + machine_info(a.bin, ncores, load_start)
    lines += [
        "", f"## End to end: {len(flacs)} FLAC clips (5-15 s, 16 kHz mono speech, "
        f"{audio_s / 60:.1f} min of audio) -> Parquet (zstd), Whisper log-mel-80; "
        f"median of {a.repeat} after a warm-up", "",
        "| tool | how | wall s (median) | audio-s per s (x realtime) | sonograph / this "
        "| CPU s (median) | audio-s per CPU-s | sonograph / this |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
        f"| sonograph | `extract CORPUS --out OUT --preset whisper --no-progress` ({ncores} "
        f"workers, default precision: auto, f32 for Whisper), whole process | {son_wall:.2f} | {rates['son']:,.0f} | 1.00 "
        f"| {son_cpu:.2f} | {per_cpu['son']:,.0f} | 1.00 |",
        f"| sonograph | the same with `--precision f64` | {son32_wall:.2f} | "
        f"{rates['son32']:,.0f} | {rates['son'] / rates['son32']:.2f} | {son32_cpu:.2f} "
        f"| {per_cpu['son32']:,.0f} | {per_cpu['son'] / per_cpu['son32']:.2f} |",
        f"| Python by hand | Pool({ncores}): soundfile + librosa + pyarrow; from the first read "
        f"to the file closed (imports excluded) | {py_inner:.2f} | {rates['py']:,.0f} | "
        f"{rates['son'] / rates['py']:.2f} | {py_cpu:.2f} | {per_cpu['py']:,.0f} "
        f"| {per_cpu['son'] / per_cpu['py']:.2f} |",
        f"| Python by hand | the same, whole process (interpreter start and imports "
        f"included) | {py_whole:.2f} | {rates['py_whole']:,.0f} | "
        f"{rates['son'] / rates['py_whole']:.2f} | | | |",
        "", "All runs (wall s): sonograph " + ", ".join(f"{x['wall_s']:.2f}" for x in son)
        + "; f32 " + ", ".join(f"{x['wall_s']:.2f}" for x in son32)
        + "; Python (inner) " + ", ".join(f"{x['inner_s']:.2f}" for x in py) + ". CPU s = "
        "user + system time of the process and its children (Python: parent and Pool workers "
        "from the first read on): unlike wall time it hardly depends on what else the machine "
        "runs, so its ratio is the one to trust on a busy machine.",
        "", "### sonograph's report.json (the median run)", "",
        "| items ok / failed | rows / parts | audio s | wall s | real-time factor | decode s | "
        "queue wait s | compute s | write s | core utilisation | peak RSS MiB |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        f"| {r['items_ok']} / {r['items_failed']} | {r['rows']} / {r['parts']} "
        f"| {r['audio_seconds']:.0f} | {r['wall_seconds']:.2f} | {r['real_time_factor']:,.0f} "
        f"| {r['stages']['decode_s']:.2f} | {r['stages']['queue_wait_s']:.2f} "
        f"| {r['stages']['compute_s']:.2f} | {r['stages']['write_s']:.2f} "
        f"| {r['core_utilisation']:.2f} | {r['peak_rss_mb']:.0f} |",
        "", "Stage times are busy seconds summed over threads; core utilisation = (decode + "
        f"compute) / (wall x {ncores} cores). The writer (Parquet encoding + zstd + ledger) is "
        "one more thread and is not counted in it.",
        "", "## Memory: one long FLAC, streamed in 30 s pieces", "",
        "| file | audio | `--part-mb` | rows / parts | wall s | x realtime "
        "| max RSS MiB (/usr/bin/time -v) | peak_rss_mb (report.json) |",
        "|---|---:|---|---|---:|---:|---:|---:|",
    ]
    for (h, mb), lr in long_runs.items():
        rr = lr["report"]
        rss = f"{lr['max_rss_mb']:.0f}" if lr["max_rss_mb"] is not None else "n/a"
        lines.append(f"| {longs[h].name} ({longs[h].stat().st_size / 2**20:.0f} MiB) | {h} h | "
                     f"{'64 (default)' if mb is None else mb} | "
                     f"{rr['rows']} / {rr['parts']} | {lr['wall_s']:.1f} | "
                     f"{rr['real_time_factor']:,.0f} | {rss} | {rr['peak_rss_mb']:.0f} |")
    lines += ["", "Parts are written as they fill, in row groups of about 2 MiB of features, so "
              "the peak should depend neither on the file's length nor on `--part-mb`."]

    def rss_of(h, mb=None):
        lr = long_runs[h, mb]
        return lr["max_rss_mb"] if lr["max_rss_mb"] is not None else lr["report"]["peak_rss_mb"]

    targets = [
        ("End to end FLAC -> Parquet >= 5x the hand-written Pool script (imports excluded)",
         f"{rates['son']:,.0f} vs {rates['py']:,.0f} x realtime",
         f"{rates['son'] / rates['py']:.2f}x", rates["son"] / rates["py"] >= 5.0),
        ("(the same per CPU-second, for information: load-independent)",
         f"{per_cpu['son']:,.0f} vs {per_cpu['py']:,.0f} audio-s per CPU-s",
         f"{per_cpu['son'] / per_cpu['py']:.2f}x", per_cpu["son"] / per_cpu["py"] >= 5.0),
        ("the job keeps >= 90% of the cores busy (report.json core_utilisation: its CPU time)",
         f"{r['core_utilisation']:.2f}", "", r["core_utilisation"] >= 0.9),
    ]
    if hours:
        hmax, hmin = max(hours), min(hours)
        targets.append((f"peak RSS for a {hmax}-hour FLAC < 200 MB", f"{rss_of(hmax):.0f} MiB",
                        "", rss_of(hmax) * 2**20 < 200e6))
        if hmax != hmin:
            growth = rss_of(hmax) / rss_of(hmin)
            targets.append((f"flat in length: RSS {hmax} h / {hmin} h <= 1.10",
                            f"{rss_of(hmax):.0f} / {rss_of(hmin):.0f} MiB", f"{growth:.2f}",
                            growth <= 1.10))
        for mb in part_mbs[1:]:
            targets.append((f"(peak RSS for the {hmax}-hour FLAC with --part-mb {mb}, for "
                            "information)", f"{rss_of(hmax, mb):.0f} MiB", "",
                            rss_of(hmax, mb) * 2**20 < 200e6))
    lines += ["", "## Targets", "", "| target | measured | ratio | result |", "|---|---|---:|---|"]
    lines += [f"| {t} | {m} | {x} | {verdict(ok)} |" for t, m, x, ok in targets]
    load_end = os.getloadavg()
    lines += [
        "", "Notes:", "",
        f"- load average (1/5/15 min) at the end: {' / '.join(f'{x:.2f}' for x in load_end)}.",
        f"- Output check (sonograph vs the hand-written script): rows {check['rows'][0]} / "
        f"{check['rows'][1]}, same ids {check['same_ids']}, same frame counts "
        f"{check['same_frames']}, max |diff| of the features {check['max_abs_diff']:.2e}.",
        "- Every run starts from an empty output folder; the corpus is in the page cache (one "
        "warm-up run first). sonograph is timed as a whole process (start-up, directory walk, "
        "ledger and report included); the Python figure used for the target leaves out "
        "interpreter start and imports, which favours Python.",
        "- The Python script: `multiprocessing.Pool(cores).map` over the sorted files "
        "(default chunksize), each worker soundfile.read -> librosa.feature.melspectrogram "
        "(n_fft 400, hop 160, 80 mels, reflect padding as Whisper) -> log10 clamp 1e-10, "
        "max - 8, (x + 4) / 4 -> float32 rows back to the parent -> one pyarrow table -> "
        "write_table(compression='zstd'). See `handwritten()` in bench/e2e.py.",
    ]
    md = "\n".join(lines) + "\n"
    print(md)
    (a.out / "e2e.md").write_text(md)
    (a.out / "e2e.json").write_text(json.dumps({
        "audio_seconds": audio_s, "clips": len(flacs), "sonograph": son, "sonograph_f32": son32,
        "handwritten": py, "check": check,
        "long": {f"{h}h part-mb {mb or 'default'}": v for (h, mb), v in long_runs.items()},
        "load_start": load_start, "load_end": load_end}, indent=1))


if __name__ == "__main__":
    main()
