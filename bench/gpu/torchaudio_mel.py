"""Peer for the GPU benchmark: torchaudio's MelSpectrogram + Whisper's log steps on one GPU.

Usage: python3 bench/gpu/torchaudio_mel.py --clips 64 --seconds 30 --repeat 20
Prints one JSON line: audio_seconds_per_second (median over repeats, CUDA events, audio
already on the GPU) and host_to_host_audio_seconds_per_second (upload and download included).
"""
import argparse
import json
import time

import torch
import torchaudio


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--clips", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--repeat", type=int, default=20)
    a = ap.parse_args()
    dev = torch.device("cuda")
    n = int(a.seconds * 16000)
    g = torch.Generator(device="cpu").manual_seed(0)
    audio = (0.1 * torch.randn(a.clips, n, generator=g)).to(dev)
    mel = torchaudio.transforms.MelSpectrogram(
        sample_rate=16000, n_fft=400, hop_length=160, n_mels=80, power=2.0,
        norm="slaney", mel_scale="slaney", center=True, pad_mode="reflect",
    ).to(dev)

    def whisper(x):
        spec = mel(x)[..., :-1]
        log = torch.clamp(spec, min=1e-10).log10()
        log = torch.maximum(log, log.amax(dim=(-2, -1), keepdim=True) - 8.0)
        return (log + 4.0) / 4.0

    for _ in range(3):
        whisper(audio)
    torch.cuda.synchronize()
    times = []
    for _ in range(a.repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        out = whisper(audio)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1000.0)
    times.sort()
    median = times[len(times) // 2]
    # The same work from host memory to host memory, as sonograph's bench measures it: the
    # clips uploaded from a pageable CPU tensor, the features copied back.
    host_audio = audio.cpu()
    host_times = []
    for i in range(a.repeat + 2):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        whisper(host_audio.to(dev)).cpu()
        torch.cuda.synchronize()
        if i >= 2:
            host_times.append(time.perf_counter() - t0)
    host_times.sort()
    host_median = host_times[len(host_times) // 2]
    print(json.dumps({
        "tool": "torchaudio", "device": torch.cuda.get_device_name(0),
        "clips": a.clips, "seconds": a.seconds, "shape": list(out.shape),
        "median_seconds": median, "audio_seconds_per_second": a.clips * a.seconds / median,
        "host_to_host_median_seconds": host_median,
        "host_to_host_audio_seconds_per_second": a.clips * a.seconds / host_median,
        "copy_bandwidth_bytes_per_second": copy_bandwidth(dev),
    }))


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
