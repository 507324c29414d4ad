"""A corpus for python/examples/train.py: `tone-*.wav` (a few harmonics of a drifting pitch)
and `noise-*.wav` (coloured noise), 16 kHz, 0.5 to 3 s, in scattered lengths, so that batches
by duration and their buckets have something to do. Deterministic (seeded).

    python python/examples/toy_corpus.py /tmp/toy --clips 64
"""

import argparse
import wave
from pathlib import Path

import numpy as np

RATE = 16000


def clip(kind: str, seconds: float, rng: np.random.Generator) -> np.ndarray:
    t = np.arange(int(seconds * RATE)) / RATE
    if kind == "tone":
        pitch = rng.uniform(150, 400) * (1 + 0.05 * np.sin(2 * np.pi * rng.uniform(0.5, 3) * t))
        phase = 2 * np.pi * np.cumsum(pitch) / RATE
        x = sum(np.sin(k * phase) / k for k in range(1, 5))
    else:
        white = rng.standard_normal(t.size)
        x = np.convolve(white, np.ones(rng.integers(1, 6)), mode="same")
    x = x / np.abs(x).max() * rng.uniform(0.1, 0.6)
    return (x * 32767).astype("<i2")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", type=Path)
    p.add_argument("--clips", type=int, default=64)
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(2026)
    for k in range(args.clips):
        kind = ("tone", "noise")[k % 2]
        seconds = 0.5 + ((k * 7) % 26) * 0.1
        with wave.open(str(args.out / f"{kind}-{k:03d}.wav"), "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(RATE)
            w.writeframes(clip(kind, seconds, rng).tobytes())


if __name__ == "__main__":
    main()
