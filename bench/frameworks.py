#!/usr/bin/env python3
"""sonograph's `whisper-hf` against transformers' own WhisperFeatureExtractor, in one process.

What a Whisper fine-tuning recipe does to every clip (`fe(y, sampling_rate=16000)`: 30 s,
80 mels, [80, 3000]) timed both ways on the same clips, one thread each (numpy and BLAS held to
one thread; sonograph.features computes on the calling thread):
  (a) transformers.WhisperFeatureExtractor()(y, sampling_rate=16000, return_tensors="np"),
      clip by clip (without torch installed: its numpy path);
  (b) sonograph.features(y, 16000, "whisper-hf"), clip by clip, transposed to [80, 3000].
Every clip's two results are compared (within 1e-4). Then on every core, as
`datasets.map(batched=True, num_proc=cores)` spreads the work:
  (c) a multiprocessing.Pool(cores) computing (a) clip by clip (what num_proc does);
  (d) sonograph.features_batch(clips as {"array", "sampling_rate"} dicts, preset="whisper-hf",
      layout="bins_frames"): transformers' input_features, computed on every core in one call.
Median of --repeat passes each, alternating, after a warm-up pass of each. Prints clips per
second and the ratios.

  python3 -m venv v && v/bin/pip install -r scripts/requirements-frameworks.txt \
      target/python-wheels/sonograph-*.whl && v/bin/python bench/frameworks.py
(python/test.sh builds the wheel into target/python-wheels.)
"""

import os

for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = "1"

import argparse  # noqa: E402
import importlib.metadata  # noqa: E402
import multiprocessing  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
from transformers import WhisperFeatureExtractor  # noqa: E402

import sonograph  # noqa: E402

RATE = 16000


def clips(n, seed=5):
    """`n` clips of 2-15 s: tones that glide over noise, each different."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        length = int(rng.uniform(2, 15) * RATE)
        t = np.arange(length) / RATE
        f = rng.uniform(100, 400) * (1 + 0.3 * np.sin(2 * np.pi * 0.5 * t))
        y = 0.3 * np.sin(2 * np.pi * np.cumsum(f) / RATE) + rng.normal(0, 0.02, length)
        out.append(y.astype(np.float32))
    return out


_FE = None


def _hf_one(y):
    """transformers' features of one clip, in a pool worker (its extractor made once)."""
    global _FE
    if _FE is None:
        _FE = WhisperFeatureExtractor()
    return _FE(y, sampling_rate=RATE, return_tensors="np")["input_features"][0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--clips", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    ys = clips(a.clips)
    audio_s = sum(len(y) for y in ys) / RATE
    fe = WhisperFeatureExtractor()

    def hf():
        return [fe(y, sampling_rate=RATE, return_tensors="np")["input_features"][0] for y in ys]

    def sg():
        return [sonograph.features(y, RATE, "whisper-hf").T for y in ys]

    worst = max(float(np.abs(a - b).max()) for a, b in zip(hf(), sg()))
    assert worst < 1e-4, f"the two differ by {worst}"
    times = {"transformers": [], "sonograph": []}
    for _ in range(a.repeat):
        for name, f in (("transformers", hf), ("sonograph", sg)):
            t = time.perf_counter()
            f()
            times[name].append(time.perf_counter() - t)
    cores = os.cpu_count() or 1
    audio = [{"array": y, "sampling_rate": RATE} for y in ys]
    with multiprocessing.Pool(cores) as pool:

        def hf_pool():
            return pool.map(_hf_one, ys, chunksize=4)

        def sg_batch():
            return sonograph.features_batch(audio, preset="whisper-hf", layout="bins_frames")

        worst = max(worst, max(float(np.abs(a - b).max()) for a, b in zip(hf_pool(), sg_batch())))
        assert worst < 1e-4, f"the two differ by {worst}"
        for name in ("transformers, Pool(cores)", "sonograph features_batch"):
            times[name] = []
        for _ in range(a.repeat):
            for name, f in (("transformers, Pool(cores)", hf_pool),
                            ("sonograph features_batch", sg_batch)):
                t = time.perf_counter()
                f()
                times[name].append(time.perf_counter() - t)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, load "
          f"{os.getloadavg()[0]:.2f}; transformers {importlib.metadata.version('transformers')}, "
          f"numpy {np.__version__}; {a.clips} clips, {audio_s:.0f} s of audio; worst difference "
          f"{worst:.1e}")
    for name, s in med.items():
        print(f"  {name:<27} median {s:7.3f} s  {a.clips / s:8.1f} clips/s  "
              f"(passes: {', '.join(f'{x:.3f}' for x in times[name])})")
    print(f"  one thread each: sonograph / transformers "
          f"{med['transformers'] / med['sonograph']:.1f}x")
    print(f"  every core ({cores}): sonograph / transformers "
          f"{med['transformers, Pool(cores)'] / med['sonograph features_batch']:.1f}x")


if __name__ == "__main__":
    main()
