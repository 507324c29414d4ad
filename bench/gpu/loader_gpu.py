#!/usr/bin/env python3
"""sonograph.Loader on a data GPU against the same Loader on every CPU core (issue 21's
target: device="gpu:0" with SpecAugment >= 3x the CPU Loader on all the machine's cores), side
by side in one run: one epoch each of --clips generated clips (1-20 s of noise, 16 kHz WAVs in
a temporary folder), batches of up to --max-duration seconds from 10 duration buckets, NeMo's
log-mel-80, SpecAugment (2 frequency masks of 27, 10 time masks of 5 %), a gain and speed
perturbation. Prints one JSON line per loader (batches/s, audio-s/s, and stats(): which side
waited) and the ratio, after a warm-up epoch of each.

  python3 bench/gpu/loader_gpu.py [--clips 2000] [--max-duration 400]
(needs numpy and the sonograph wheel; bench/gpu/run.sh installs the one prepare.sh built.)
"""

import argparse
import json
import os
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


def corpus(folder: Path, clips: int) -> float:
    """`clips` WAVs of 1-20 s (hard links to 20 distinct files); their total seconds."""
    rng = np.random.default_rng(0)
    lengths = [1 + (k % 20) for k in range(clips)]
    for s in range(1, 21):
        samples = (rng.standard_normal(s * RATE) * 3000).astype("<i2")
        with wave.open(str(folder / f"base{s:02d}.wav"), "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(RATE)
            w.writeframes(samples.tobytes())
    items = folder / "items"
    items.mkdir()
    for k, s in enumerate(lengths):
        os.link(folder / f"base{s:02d}.wav", items / f"{k:06d}.wav")
    return float(sum(lengths))


def one_epoch(loader) -> tuple[float, int]:
    start = time.perf_counter()
    batches = sum(1 for _ in loader)
    return time.perf_counter() - start, batches


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clips", type=int, default=2000)
    parser.add_argument("--max-duration", type=float, default=400.0)
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory() as tmp:
        seconds = corpus(Path(tmp), args.clips)
        results = {}
        for device in ("cpu", "gpu"):
            try:
                loader = sonograph.Loader(Path(tmp) / "items", "nemo", batch_size=None,
                                          max_duration=args.max_duration, num_buckets=10,
                                          shuffle=True, seed=0, workers=cores, augment=AUGMENT,
                                          device=device)
            except sonograph.Error as e:
                print(json.dumps({"device": device, "error": str(e)}))
                continue
            one_epoch(loader)  # warm-up: kernels, page cache
            before = loader.stats()
            wall, batches = one_epoch(loader)
            after = loader.stats()
            # The timed epoch's share of the counters.
            stats = {k: (round(v - before[k], 3) if isinstance(v, (int, float)) else v)
                     for k, v in after.items()}
            results[device] = seconds / wall
            print(json.dumps({"loader": device, "cores": cores, "clips": args.clips,
                              "batches": batches, "wall_s": round(wall, 3),
                              "batches_per_s": round(batches / wall, 1),
                              "audio_s_per_s": round(seconds / wall), "stats": stats}))
        if len(results) == 2:
            print(json.dumps({"gpu_over_cpu": round(results["gpu"] / results["cpu"], 2)}))


if __name__ == "__main__":
    main()
