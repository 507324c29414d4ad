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
And, where the `datasets` package is installed, the real thing: a `datasets.Dataset` of the
clips (an "array" column and a "sampling_rate" column, numpy format) through
`.map(extract, batched=True, batch_size=16, keep_in_memory=True)` with num_proc=1 and
num_proc=cores, extract being (e) transformers' extractor on the batch's list of arrays or (f)
sonograph.features_batch on it; the mapped input_features compared too.
Median of --repeat passes each, alternating, after a warm-up pass of each. Prints clips per
second and the ratios. --seconds S makes every clip S seconds long (the issue's target is on
30 s clips, where no frame is padding); by default they are 2-15 s.

  python3 -m venv v && v/bin/pip install -r scripts/requirements-frameworks.txt datasets \
      target/python-wheels/sonograph-*.whl && v/bin/python bench/frameworks.py [--seconds 30]
(datasets 5.2.0 in the committed run; without it the datasets.map passes are left out, saying so.)
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


def clips(n, seconds=None, seed=5):
    """`n` clips of 2-15 s (or `seconds` each): tones that glide over noise, each different."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        length = int((seconds or rng.uniform(2, 15)) * RATE)
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


def _hf_map(batch):
    """transformers' extractor as a `datasets.map(batched=True)` function."""
    global _FE
    if _FE is None:
        _FE = WhisperFeatureExtractor()
    out = _FE(list(batch["array"]), sampling_rate=RATE, return_tensors="np")
    return {"input_features": out["input_features"]}


def _sg_map(batch):
    """sonograph's drop-in for it."""
    audio = [{"array": a, "sampling_rate": int(r)}
             for a, r in zip(batch["array"], batch["sampling_rate"])]
    return {"input_features": sonograph.features_batch(audio, preset="whisper-hf",
                                                       layout="bins_frames")}


def dataset_map_passes(ys, repeat, cores):
    """The datasets.map passes: {name: [seconds]}, and the worst difference of their outputs;
    None without the datasets package."""
    try:
        import datasets
    except ImportError:
        return None
    datasets.disable_progress_bars()
    ds = datasets.Dataset.from_dict(
        {"array": ys, "sampling_rate": [RATE] * len(ys)}).with_format("numpy")

    def run(fn, procs):
        return ds.map(fn, batched=True, batch_size=16, num_proc=None if procs == 1 else procs,
                      keep_in_memory=True, load_from_cache_file=False,
                      remove_columns=["array", "sampling_rate"])

    hf, sg = run(_hf_map, 1), run(_sg_map, 1)
    worst = max(float(np.abs(a - b).max())
                for a, b in zip(hf["input_features"], sg["input_features"]))
    times = {}
    for procs in (1, cores):
        for name, fn in ((f"datasets.map transformers, num_proc={procs}", _hf_map),
                         (f"datasets.map sonograph, num_proc={procs}", _sg_map)):
            times[name] = []
        for _ in range(repeat):
            for name, fn in ((f"datasets.map transformers, num_proc={procs}", _hf_map),
                             (f"datasets.map sonograph, num_proc={procs}", _sg_map)):
                t = time.perf_counter()
                run(fn, procs)
                times[name].append(time.perf_counter() - t)
    return times, worst, datasets.__version__


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--clips", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=None)
    a = ap.parse_args()
    ys = clips(a.clips, a.seconds)
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
    mapped = dataset_map_passes(ys, a.repeat, cores)
    datasets_version = "not installed (no datasets.map passes)"
    if mapped is not None:
        map_times, map_worst, datasets_version = mapped
        assert map_worst < 1e-4, f"the mapped features differ by {map_worst}"
        worst = max(worst, map_worst)
        times.update(map_times)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, load "
          f"{os.getloadavg()[0]:.2f}; transformers {importlib.metadata.version('transformers')}, "
          f"numpy {np.__version__}, datasets {datasets_version}; {a.clips} clips, "
          f"{audio_s:.0f} s of audio; worst difference {worst:.1e}")
    for name, s in med.items():
        print(f"  {name:<45} median {s:7.3f} s  {a.clips / s:8.1f} clips/s  "
              f"(passes: {', '.join(f'{x:.3f}' for x in times[name])})")
    print(f"  one thread each: sonograph / transformers "
          f"{med['transformers'] / med['sonograph']:.1f}x")
    print(f"  every core ({cores}): sonograph / transformers "
          f"{med['transformers, Pool(cores)'] / med['sonograph features_batch']:.1f}x")
    if mapped is not None:
        for procs in (1, cores):
            print(f"  datasets.map(batched=True, num_proc={procs}): sonograph / transformers "
                  f"{med[f'datasets.map transformers, num_proc={procs}'] / med[f'datasets.map sonograph, num_proc={procs}']:.1f}x")


if __name__ == "__main__":
    main()
