#!/usr/bin/env python3
"""sonograph.Loader against the loader people write by hand, side by side in one run.

Both iterate a corpus once in batches of Whisper log-mel-80 features, padded, as a training
loop would take them:
  (a) sonograph.Loader(corpus, "whisper", batch_size=B) (worker threads in Rust);
  (b) a multiprocessing.Pool(cores).imap over the files (soundfile + librosa, as bench/e2e.py's
      hand-written script computes Whisper's features), batched and zero-padded in the parent.
Median wall time of --repeat passes each, alternating, after a warm-up pass of each (page
cache, librosa's numba set-up before the pool forks: this favours Python). Prints the figures
and their ratio.

  bench/.venv/bin/python bench/loader.py [--corpus bench/out/e2e/corpus] [--batch 16]
(bench/e2e.sh makes the corpus; the sonograph wheel must be installed in the same Python:
python/test.sh builds one into target/python-wheels.)
"""

import argparse
import multiprocessing
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import numpy as np  # noqa: E402

import sonograph  # noqa: E402
from e2e import _handwritten_item  # noqa: E402  (the same per-item code as the e2e bench)


def pad(rows):
    longest = max(len(r) for r in rows)
    out = np.zeros((len(rows), longest, rows[0].shape[1]), np.float32)
    for k, r in enumerate(rows):
        out[k, : len(r)] = r
    return out, np.array([len(r) for r in rows])


def by_hand(files, batch, procs):
    frames = 0
    with multiprocessing.Pool(procs) as pool:
        rows, ids = [], []
        for item in pool.imap(_handwritten_item, files, chunksize=1):
            ids.append(item["id"])
            rows.append(item["features"].reshape(-1, 80))
            if len(rows) == batch:
                feats, lengths = pad(rows)
                frames += int(lengths.sum())
                rows, ids = [], []
        if rows:
            frames += int(pad(rows)[1].sum())
    return frames


def with_sonograph(corpus, batch, procs):
    frames = 0
    for _, feats, lengths in sonograph.Loader(corpus, "whisper", batch_size=batch, workers=procs):
        frames += int(lengths.sum())
    return frames


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    root = Path(__file__).resolve().parent
    ap.add_argument("--corpus", type=Path, default=root / "out" / "e2e" / "corpus")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    files = sorted(str(p) for p in args.corpus.rglob("*.flac"))
    procs = os.cpu_count()
    import librosa
    librosa.feature.melspectrogram(y=np.zeros(16000, np.float32), sr=16000, n_fft=400,
                                   hop_length=160, n_mels=80)
    audio_s = sum(len(sonograph.decode(f, 16000)) for f in files) / 16000
    runs = {"sonograph.Loader": [], "Pool + librosa": []}
    frames = {}
    for rep in range(args.repeat + 1):
        for name, run in (("sonograph.Loader", lambda: with_sonograph(args.corpus, args.batch, procs)),
                          ("Pool + librosa", lambda: by_hand(files, args.batch, procs))):
            t0 = time.perf_counter()
            frames[name] = run()
            if rep:  # the first pass of each is the warm-up
                runs[name].append(time.perf_counter() - t0)
    load = os.getloadavg()
    print(f"## Loader: {len(files)} FLAC clips, {audio_s / 60:.1f} min of audio, Whisper log-mel-80, "
          f"batches of {args.batch}, {procs} workers each; median of {args.repeat} after a warm-up")
    print(f"machine: {platform.processor() or platform.machine()}, {procs} CPUs, load average "
          f"{load[0]:.2f}; sonograph {sonograph.__version__}, librosa {librosa.__version__}")
    print("| loader | wall s (median) | audio-s per s | all runs |")
    print("|---|---:|---:|---|")
    for name, times in runs.items():
        m = statistics.median(times)
        print(f"| {name} | {m:.2f} | {audio_s / m:,.0f} | {', '.join(f'{t:.2f}' for t in times)} |")
    ratio = statistics.median(runs["Pool + librosa"]) / statistics.median(runs["sonograph.Loader"])
    print(f"sonograph.Loader / hand-written: **{ratio:.2f}x** faster; frames "
          f"{frames['sonograph.Loader']} vs {frames['Pool + librosa']}")


if __name__ == "__main__":
    main()
