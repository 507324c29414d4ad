"""Peer for the GPU benchmark: torchaudio's MelSpectrogram with a preset's log steps on one GPU,
by the three paths a torchaudio user has:

- resident: the audio already on the GPU, CUDA events around the transform alone;
- pageable: from a pageable CPU tensor and back (`.to(dev)`, `.cpu()`), what a plain loop does;
- pinned: from pinned host memory with non-blocking copies and back into pinned memory, the
  best host-to-host path torchaudio offers;
- pinned int16: the same from the clips' 16-bit samples (what a 16-bit WAV holds; torchaudio
  loads them with `normalize=False`), converted on the GPU: the peer of sonograph's
  `bench --pcm16`;

and the host-to-device bandwidth from pageable and from pinned memory. Prints one JSON line.

Usage: python3 bench/gpu/torchaudio_mel.py --preset whisper|nemo --clips 64 --seconds 30
"""
import argparse
import json
import time

import torch
import torchaudio

# (n_fft, win_length, hop, n_mels, mel norm/scale, log) of sonograph's presets of those names.
PRESETS = {
    "whisper": dict(n_fft=400, win=400, hop=160, mels=80, norm="slaney", scale="slaney"),
    "nemo": dict(n_fft=512, win=400, hop=160, mels=80, norm="slaney", scale="slaney"),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="whisper", choices=sorted(PRESETS))
    ap.add_argument("--clips", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--precision", default="f32", choices=["f32", "f64"])
    a = ap.parse_args()
    p = PRESETS[a.preset]
    dtype = torch.float32 if a.precision == "f32" else torch.float64
    dev = torch.device("cuda")
    n = int(a.seconds * 16000)
    g = torch.Generator(device="cpu").manual_seed(0)
    host = (0.1 * torch.randn(a.clips, n, generator=g)).to(dtype)
    audio = host.to(dev)
    mel = torchaudio.transforms.MelSpectrogram(
        sample_rate=16000, n_fft=p["n_fft"], win_length=p["win"], hop_length=p["hop"],
        n_mels=p["mels"], power=2.0, norm=p["norm"], mel_scale=p["scale"], center=True,
        pad_mode="reflect",
    ).to(dev).to(dtype)

    def features(x):
        spec = mel(x)
        if a.preset == "whisper":
            log = torch.clamp(spec[..., :-1], min=1e-10).log10()
            log = torch.maximum(log, log.amax(dim=(-2, -1), keepdim=True) - 8.0)
            return (log + 4.0) / 4.0
        # NeMo: natural log with its guard, then per-feature normalisation over time.
        log = torch.log(spec + 2 ** -24)
        mean = log.mean(dim=-1, keepdim=True)
        std = log.std(dim=-1, keepdim=True)
        return (log - mean) / (std + 1e-5)

    def median(f, warm=2):
        times = []
        for i in range(a.repeat + warm):
            t = f()
            if i >= warm:
                times.append(t)
        times.sort()
        return times[len(times) // 2]

    def resident():
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        features(audio)
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / 1000.0

    def pageable():
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        features(host.to(dev)).cpu()
        torch.cuda.synchronize()
        return time.perf_counter() - t0

    pinned_in = host.pin_memory()
    shape = features(audio).shape
    pinned_out = torch.empty(shape, dtype=dtype, pin_memory=True)

    def pinned():
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = features(pinned_in.to(dev, non_blocking=True))
        pinned_out.copy_(out, non_blocking=True)
        torch.cuda.synchronize()
        return time.perf_counter() - t0

    pinned_int16 = (host * 32768).round().clamp(-32768, 32767).to(torch.int16).pin_memory()

    def pinned_16():
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        x = pinned_int16.to(dev, non_blocking=True).to(dtype) / 32768
        pinned_out.copy_(features(x), non_blocking=True)
        torch.cuda.synchronize()
        return time.perf_counter() - t0

    audio_seconds = a.clips * a.seconds
    r, pg, pn, p16 = median(resident), median(pageable), median(pinned), median(pinned_16)
    print(json.dumps({
        "tool": "torchaudio " + torchaudio.__version__, "torch": torch.__version__,
        "device": torch.cuda.get_device_name(0), "preset": a.preset, "precision": a.precision,
        "clips": a.clips, "seconds": a.seconds, "shape": list(shape),
        "resident_audio_seconds_per_second": audio_seconds / r,
        "pageable_audio_seconds_per_second": audio_seconds / pg,
        "pinned_audio_seconds_per_second": audio_seconds / pn,
        "pinned_int16_audio_seconds_per_second": audio_seconds / p16,
        "resident_median_seconds": r, "pageable_median_seconds": pg, "pinned_median_seconds": pn,
        "h2d_pageable_bytes_per_second": h2d(dev, pinned=False),
        "h2d_pinned_bytes_per_second": h2d(dev, pinned=True),
        "d2d_copy_bytes_per_second": copy_bandwidth(dev),
    }))


def h2d(dev, pinned):
    """Host-to-device bandwidth of a 256 MiB copy, median of 5."""
    src = torch.empty(1 << 26, dtype=torch.float32, pin_memory=pinned)
    times = []
    for i in range(7):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        src.to(dev, non_blocking=pinned)
        torch.cuda.synchronize()
        if i >= 2:
            times.append(time.perf_counter() - t0)
    times.sort()
    return src.numel() * 4 / times[len(times) // 2]


def copy_bandwidth(dev):
    """Device memory bandwidth for the floor: a 1 GiB device-to-device copy (read + write),
    median of 10, CUDA events."""
    src = torch.empty(1 << 28, dtype=torch.float32, device=dev)
    dst = torch.empty_like(src)
    times = []
    for i in range(12):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        torch.cuda.synchronize()
        if i >= 2:
            times.append(start.elapsed_time(end) / 1000.0)
    times.sort()
    return 2 * src.numel() * 4 / times[len(times) // 2]


if __name__ == "__main__":
    main()
