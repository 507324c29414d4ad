#!/usr/bin/env python3
"""The Loader's augmentation against the same augmentation written by hand in numpy/scipy, side
by side in one run.

A corpus of --clips generated clips (1-20 s of noise at 16 kHz), a noise folder and a room
impulse response; one epoch of NeMo log-mel-80 batches of up to 200 s from 10 duration buckets:
  (a) sonograph.Loader without augmentation;
  (b) sonograph.Loader with speed perturbation (0.9/1.0/1.1), a gain, reverberation, noise at
      5-20 dB SNR and SpecAugment (2 x 27 bands, 10 x 5 % of frames);
  (c) a multiprocessing.Pool(cores) that decodes each clip, draws the same kinds of
      augmentation with numpy's generator and applies them as lhotse does (scipy.signal's
      resample_poly and fftconvolve, numpy's mixing and masks); decoding and features are
      sonograph's (decode, features) in the worker, so that only the augmentation differs
      from (b).
Median wall time of --repeat epochs each, alternating, after a warm-up epoch of each. Prints
a table and the ratio (c)/(b); raw numbers only, no pass/fail.

  python bench/loader_augment.py [--clips 300] [--repeat 3]
(numpy and scipy, with the sonograph wheel installed: python/test.sh builds one.)
"""

import argparse
import multiprocessing
import os
import platform
import statistics
import tempfile
import time
import wave
from pathlib import Path

import numpy as np

import sonograph

RATE = 16000
AUGMENT = {
    "speed": [0.9, 1.0, 1.1],
    "volume_db": [-6.0, 6.0],
    "spec_augment": {"freq_masks": 2, "freq_width": 27, "time_masks": 10, "time_width": 0.05},
}


def write(path: Path, samples: np.ndarray) -> None:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes(np.clip(samples, -32768, 32767).astype("<i2").tobytes())


def corpus(root: Path, clips: int) -> tuple[Path, Path, Path, float]:
    rng = np.random.default_rng(0)
    items, noise, rirs = root / "items", root / "noise", root / "rirs"
    for d in (items, noise, rirs):
        d.mkdir()
    seconds = 0.0
    for k in range(clips):
        s = 1 + (k * 7) % 20
        write(items / f"{k:05d}.wav", rng.standard_normal(s * RATE) * 3000)
        seconds += s
    for k in range(4):
        write(noise / f"n{k}.wav", rng.standard_normal(10 * RATE) * 2000)
    t = np.arange(int(0.4 * RATE))
    h = rng.standard_normal(len(t)) * np.exp(-t / 1200) * 3000
    h[20] = 20000
    write(rirs / "room.wav", h)
    return items, noise, rirs, seconds


def by_hand_item(job):
    """One clip, augmented as lhotse does it, with numpy/scipy; features by sonograph."""
    from scipy.signal import fftconvolve, resample_poly
    path, seed, noise_files, rir_file = job
    rng = np.random.default_rng(seed)
    x = sonograph.decode(path, RATE).astype(np.float64)
    factor = rng.choice([0.9, 1.0, 1.1])
    if factor != 1.0:
        x = resample_poly(x, RATE, round(RATE * factor))
    x = x * 10 ** (rng.uniform(-6, 6) / 20)
    h = sonograph.decode(rir_file, RATE).astype(np.float64)
    full = fftconvolve(x, h)
    shift = int(np.argmax(h))
    y = full[shift:shift + len(x)]
    y *= np.sqrt(np.mean(x ** 2) / np.mean(y ** 2))
    n = sonograph.decode(noise_files[rng.integers(len(noise_files))], RATE).astype(np.float64)
    start = rng.integers(0, max(1, len(n) - len(y)))
    n = np.resize(n[start:], len(y))
    snr = rng.uniform(5, 20)
    y = y + np.sqrt(np.mean(y ** 2) / (np.mean(n ** 2) * 10 ** (snr / 10))) * n
    feats = sonograph.features(y.astype(np.float32), RATE, "nemo")
    frames, bins = feats.shape
    for _ in range(2):
        w = rng.integers(0, 28)
        left = rng.integers(0, bins - 27 + 1)
        feats[:, left:left + w] = 0
    tw = max(1, int(frames * 0.05))
    for _ in range(10):
        left = rng.integers(0, max(1, frames - tw) + 1)
        feats[left:left + rng.integers(0, tw + 1), :] = 0
    return feats


def by_hand(files, noise, rir, procs, batches):
    frames = 0
    jobs = [(str(f), k, [str(n) for n in noise], str(rir)) for k, f in enumerate(files)]
    with multiprocessing.Pool(procs) as pool:
        results = pool.map(by_hand_item, jobs, chunksize=4)
    for batch in batches:
        rows = [results[i] for i in batch]
        longest = max(len(r) for r in rows)
        padded = np.zeros((len(rows), longest, 80), np.float32)
        for k, r in enumerate(rows):
            padded[k, :len(r)] = r
        frames += sum(len(r) for r in rows)
    return frames


def with_loader(items, augment, procs):
    loader = sonograph.Loader(items, "nemo", batch_size=None, max_duration=200.0, num_buckets=10,
                              shuffle=True, seed=0, workers=procs, augment=augment)
    frames = 0
    batches = []
    for ids, _, lengths in loader:
        frames += int(lengths.sum())
        batches.append([int(i[:5]) for i in ids])
    return frames, batches


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--clips", type=int, default=300)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    procs = os.cpu_count() or 1
    with tempfile.TemporaryDirectory() as tmp:
        items, noise, rirs, seconds = corpus(Path(tmp), args.clips)
        files = sorted(items.iterdir())
        full = dict(AUGMENT, noise={"source": str(noise), "snr_db": [5.0, 20.0]},
                    reverb={"source": str(rirs)})
        _, batches = with_loader(items, None, procs)
        runs: dict[str, list[float]] = {"Loader, no augmentation": [], "Loader, augmented": [],
                                        "Pool + numpy/scipy augmentation": []}
        for rep in range(args.repeat + 1):
            for name, run in (
                ("Loader, no augmentation", lambda: with_loader(items, None, procs)),
                ("Loader, augmented", lambda: with_loader(items, full, procs)),
                ("Pool + numpy/scipy augmentation",
                 lambda: by_hand(files, sorted(noise.iterdir()), rirs / "room.wav", procs, batches)),
            ):
                t0 = time.perf_counter()
                run()
                if rep:
                    runs[name].append(time.perf_counter() - t0)
        load = os.getloadavg()
        print(f"## Loader augmentation: {args.clips} clips, {seconds / 60:.1f} min of audio, NeMo "
              f"log-mel-80, batches of <= 200 s from 10 buckets, {procs} workers each; median of "
              f"{args.repeat} epochs after a warm-up")
        print(f"machine: {platform.processor() or platform.machine()}, {procs} CPUs, load average "
              f"{load[0]:.2f}; sonograph {sonograph.__version__}")
        print("| loader | wall s (median) | audio-s per s | all runs |")
        print("|---|---:|---:|---|")
        for name, times in runs.items():
            m = statistics.median(times)
            print(f"| {name} | {m:.2f} | {seconds / m:,.0f} | {', '.join(f'{t:.2f}' for t in times)} |")
        ratio = (statistics.median(runs["Pool + numpy/scipy augmentation"])
                 / statistics.median(runs["Loader, augmented"]))
        cost = (statistics.median(runs["Loader, augmented"])
                / statistics.median(runs["Loader, no augmentation"]))
        print(f"augmented Loader / hand-written augmentation: **{ratio:.2f}x** faster; "
              f"augmentation costs the Loader {cost:.2f}x its plain time")


if __name__ == "__main__":
    main()
