#!/usr/bin/env python3
"""sonograph.Loader against lhotse and a torch DataLoader of torchaudio, side by side in one run.

Issue 21's comparison: training batches of log-mel features with the same augmentation, from the
same FLAC corpus (generated here: --clips clips of 1-10 s at 16 kHz, at least half an hour by
default), one epoch each after a warm-up epoch, 2 workers each:
  (a) sonograph.Loader(corpus, "lhotse-fbank", max_duration=200, num_buckets=10, shuffle=True,
      workers=2, augment=speed 0.9/1.0/1.1, noise at 5-20 dB SNR, SpecAugment: lhotse's time
      warp (factor 80, its default), 2 x 27 bands and 10 time masks of up to 5 % of the frames),
      in its own precision (`auto`: f64) and in f32 (lhotse's);
  (b) lhotse: DynamicBucketingSampler(max_duration=200, num_buckets=10, shuffle=True) over a
      CutSet of the corpus, a Dataset applying PerturbSpeed([0.9, 1.1], p=2/3) and CutMix(noise
      cuts, snr=(5, 20), p=1, pad_to_longest=False: its default pads every cut of a batch with
      noise to the longest, which hides the padding the buckets leave), OnTheFlyFeatures(Fbank())
      and SpecAugment(time_warp_factor=80, 2 x 27 bands, 10 frame masks, p=1), in a torch
      DataLoader(batch_size=None, num_workers=2), as lhotse's recipes feed a model;
  (c) a torch DataLoader(num_workers=2) of soundfile decoding, the same speed perturbation
      (torchaudio.functional.resample), noise mixing at the same SNRs, torchaudio's
      MelSpectrogram(n_fft=400, hop 160, 80 mels) and log, lhotse's time warp (torch's
      interpolate: torchaudio has none) and the same masks, in shuffled batches of 32 clips padded
      to the longest.
The features are lhotse's Fbank in (a) and (b) (the `lhotse-fbank` preset is lhotse's, checked
in tests/frameworks.rs), torchaudio's in (c). Each loader's batches per second, audio seconds per
second and padding share (padded frames over all frames of its batches) are printed, with the
ratios. Torch is held to one thread in each worker.

Runs where torch, torchaudio, lhotse and soundfile are (scripts/requirements-frameworks-torch.txt
pins the versions; torch from PyPI is about 5 GB with its CUDA libraries, so it is a venv of its
own) with a sonograph wheel installed (`maturin build --release` in python/):
  python bench/loader_lhotse.py [--clips 360] [--repeat 1]
"""

import argparse
import importlib.metadata
import os
import platform
import random
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import soundfile as sf
import torch
import torchaudio

import sonograph

warnings.filterwarnings("ignore")
RATE = 16000
MAX_DURATION = 200.0
SPEEDS = [0.9, 1.0, 1.1]
SNR = (5.0, 20.0)
AUGMENT = {
    "speed": SPEEDS,
    "spec_augment": {"time_warp": 80, "freq_masks": 2, "freq_width": 27, "time_masks": 10,
                     "time_width": 0.05},
}


def corpus(root: Path, clips: int) -> tuple[Path, Path, float]:
    """`clips` FLAC clips of 1-10 s (speech-like: gliding tones with a syllable envelope over
    noise) and ten 10 s noise files; returns the folders and the corpus's seconds."""
    rng = np.random.default_rng(21)
    items, noise = root / "items", root / "noise"
    items.mkdir()
    noise.mkdir()
    seconds = 0.0
    for k in range(clips):
        n = int(rng.uniform(1, 10) * RATE)
        t = np.arange(n) / RATE
        f0 = rng.uniform(90, 250) * (1 + 0.2 * np.sin(2 * np.pi * rng.uniform(0.2, 1) * t))
        envelope = 0.5 + 0.5 * np.sin(2 * np.pi * 4 * t) ** 2
        y = 0.25 * envelope * np.sin(2 * np.pi * np.cumsum(f0) / RATE)
        y += rng.normal(0, 0.01, n)
        sf.write(items / f"clip{k:05d}.flac", y.astype(np.float32), RATE, subtype="PCM_16")
        seconds += n / RATE
    for k in range(10):
        sf.write(noise / f"noise{k}.flac", rng.normal(0, 0.1, 10 * RATE).astype(np.float32), RATE,
                 subtype="PCM_16")
    return items, noise, seconds


def sonograph_epoch(items: Path, noise: Path, epoch: int, precision: str = "auto") -> tuple[int, float, float]:
    augment = dict(AUGMENT, noise={"source": str(noise), "snr_db": list(SNR)})
    loader = sonograph.Loader(items, "lhotse-fbank", batch_size=None, max_duration=MAX_DURATION,
                              num_buckets=10, shuffle=True, seed=0, workers=2, augment=augment,
                              precision=precision)
    loader.set_epoch(epoch)
    batches, frames = 0, 0
    for _, feats, lengths in loader:
        batches += 1
        frames += int(lengths.sum())
    assert not loader.failures, loader.failures
    return batches, frames / 100.0, loader.padding


class LhotseFeatures(torch.utils.data.Dataset):
    """What lhotse's recipes do to a sampled CutSet: cut transforms, features on the fly, then
    input transforms."""

    def __init__(self, noise_cuts):
        from lhotse import Fbank, FbankConfig
        from lhotse.dataset import CutMix, OnTheFlyFeatures, PerturbSpeed, SpecAugment

        self.cut_transforms = [PerturbSpeed(factors=[0.9, 1.1], p=2 / 3),
                               CutMix(cuts=noise_cuts, snr=SNR, p=1.0, pad_to_longest=False)]
        self.features = OnTheFlyFeatures(Fbank(FbankConfig()))
        self.spec_augment = SpecAugment(time_warp_factor=80, num_feature_masks=2,
                                        features_mask_size=27, num_frame_masks=10,
                                        frames_mask_size=100, max_frames_mask_fraction=0.05, p=1.0)

    def __getitem__(self, cuts):
        torch.set_num_threads(1)
        for transform in self.cut_transforms:
            cuts = transform(cuts)
        feats, lengths = self.features(cuts)
        return self.spec_augment(feats), lengths


def lhotse_epoch(items: Path, noise: Path, epoch: int) -> tuple[int, float, float]:
    from lhotse import CutSet, Recording, RecordingSet
    from lhotse.dataset import DynamicBucketingSampler

    def cuts_of(folder):
        recordings = RecordingSet.from_recordings(
            Recording.from_file(p) for p in sorted(folder.glob("*.flac")))
        return CutSet.from_manifests(recordings=recordings)

    sampler = DynamicBucketingSampler(cuts_of(items), max_duration=MAX_DURATION, num_buckets=10,
                                      shuffle=True, seed=0)
    sampler.set_epoch(epoch)
    loader = torch.utils.data.DataLoader(LhotseFeatures(cuts_of(noise)), sampler=sampler,
                                         batch_size=None, num_workers=2)
    return padded_epoch(loader)


def padded_epoch(loader) -> tuple[int, float, float]:
    """An epoch of (features [batch, frames, bins], lengths) batches: their count, the audio
    seconds their frames hold (100 frames a second) and the share of padded frames."""
    batches, frames, slots = 0, 0, 0
    for feats, lengths in loader:
        batches += 1
        frames += int(lengths.sum())
        slots += feats.shape[0] * feats.shape[1]
    return batches, frames / 100.0, 1 - frames / slots


def time_warp(feats: torch.Tensor, factor: int, rng: random.Random) -> torch.Tensor:
    """lhotse 1.33's `time_warp` of [frames, bins] (its draws from `rng`)."""
    t = feats.shape[0]
    if t - factor <= factor + 1:
        return feats
    center = rng.randrange(factor + 1, t - factor)
    warped = rng.randrange(center - factor, center + factor + 1)
    if warped == center:
        return feats
    x = feats[None, None]
    left = torch.nn.functional.interpolate(x[:, :, :center], size=(warped, x.shape[3]),
                                           mode="bicubic", align_corners=False)
    right = torch.nn.functional.interpolate(x[:, :, center:], size=(t - warped, x.shape[3]),
                                            mode="bicubic", align_corners=False)
    return torch.cat((left, right), dim=2)[0, 0]


class TorchaudioFeatures(torch.utils.data.Dataset):
    """A hand-written loader: soundfile, torchaudio's resampling, mixing and masks."""

    def __init__(self, files, noise_files, seed):
        self.files, self.noise_files, self.seed = files, noise_files, seed
        self.mel = torchaudio.transforms.MelSpectrogram(RATE, n_fft=400, hop_length=160, n_mels=80)
        self.freq_mask = torchaudio.transforms.FrequencyMasking(27)
        self.noise = [torch.from_numpy(sf.read(p, dtype="float32")[0]) for p in noise_files]

    def __len__(self):
        return len(self.files)

    def item(self, index, rng):
        torch.set_num_threads(1)
        y = torch.from_numpy(sf.read(self.files[index], dtype="float32")[0])
        speed = rng.choice(SPEEDS)
        if speed != 1.0:
            y = torchaudio.functional.resample(y, round(RATE * speed), RATE)
        noise = self.noise[rng.randrange(len(self.noise))]
        start = rng.randrange(max(1, noise.numel() - y.numel()))
        n = noise[start:start + y.numel()]
        n = torch.nn.functional.pad(n, (0, y.numel() - n.numel()))
        snr = rng.uniform(*SNR)
        scale = torch.sqrt(y.pow(2).mean() / (n.pow(2).mean() * 10 ** (snr / 10) + 1e-20))
        feats = torch.log(self.mel(y + scale * n) + 1e-6)
        feats = time_warp(feats.T, 80, rng).T
        feats = self.freq_mask(self.freq_mask(feats))
        frames = feats.shape[1]
        for _ in range(10):
            width = rng.randrange(max(1, int(0.05 * frames)) + 1)
            t0 = rng.randrange(max(1, frames - width))
            feats[:, t0:t0 + width] = 0.0
        return feats.T

    def __getitem__(self, batch):
        epoch, indices = batch
        rows = [self.item(i, random.Random(hash((self.seed, epoch, i)))) for i in indices]
        lengths = torch.tensor([r.shape[0] for r in rows])
        return torch.nn.utils.rnn.pad_sequence(rows, batch_first=True), lengths


def torchaudio_epoch(items: Path, noise: Path, epoch: int) -> tuple[int, float, float]:
    files = sorted(items.glob("*.flac"))
    order = list(range(len(files)))
    random.Random(epoch).shuffle(order)
    batches = [(epoch, order[i:i + 32]) for i in range(0, len(order), 32)]
    dataset = TorchaudioFeatures(files, sorted(noise.glob("*.flac")), seed=0)
    loader = torch.utils.data.DataLoader(dataset, sampler=batches, batch_size=None, num_workers=2)
    return padded_epoch(loader)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--clips", type=int, default=360)
    ap.add_argument("--repeat", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        items, noise, seconds = corpus(Path(tmp), a.clips)
        runs = {"sonograph.Loader": sonograph_epoch,
                "sonograph.Loader f32": lambda i, n, e: sonograph_epoch(i, n, e, "f32"),
                "lhotse": lhotse_epoch,
                "torch DataLoader + torchaudio": torchaudio_epoch}
        times = {name: [] for name in runs}
        shape = {}
        for name, run in runs.items():
            run(items, noise, 0)  # warm-up: caches, page cache, worker start
        for epoch in range(1, a.repeat + 1):
            for name, run in runs.items():
                t = time.perf_counter()
                shape[name] = run(items, noise, epoch)
                times[name].append(time.perf_counter() - t)
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, load "
          f"{os.getloadavg()[0]:.2f}; sonograph {importlib.metadata.version('sonograph')}, lhotse "
          f"{importlib.metadata.version('lhotse')}, torch {torch.__version__}, torchaudio "
          f"{torchaudio.__version__}; {a.clips} FLAC clips, {seconds / 60:.1f} min; median of "
          f"{a.repeat} epoch(s) after a warm-up")
    med = {name: statistics.median(t) for name, t in times.items()}
    for name in runs:
        batches, audio_s, padding = shape[name]
        print(f"  {name:<30} {med[name]:7.2f} s  {batches:4d} batches  "
              f"{batches / med[name]:6.2f} batches/s  {audio_s / med[name]:8.0f} audio-s/s  "
              f"padding {100 * padding:5.1f} %  (epochs: "
              f"{', '.join(f'{x:.2f}' for x in times[name])})")
    lh = shape["lhotse"]
    ta = shape["torch DataLoader + torchaudio"]
    for ours in ("sonograph.Loader", "sonograph.Loader f32"):
        sg = shape[ours]
        print(f"  {ours} / lhotse: {(sg[0] / med[ours]) / (lh[0] / med['lhotse']):.1f}x the batches "
              f"per second, {(sg[1] / med[ours]) / (lh[1] / med['lhotse']):.1f}x the audio seconds "
              f"per second, padding {100 * sg[2]:.1f} % against {100 * lh[2]:.1f} %")
        print(f"  {ours} / torch DataLoader + torchaudio: "
              f"{(sg[1] / med[ours]) / (ta[1] / med['torch DataLoader + torchaudio']):.1f}x "
              f"the audio seconds per second")


if __name__ == "__main__":
    main()
