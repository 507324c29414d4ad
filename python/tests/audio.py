"""Test audio: 16-bit mono WAVs written with the standard library's `wave`."""

import wave
from pathlib import Path
from typing import Sequence

import numpy as np

RATE = 16000


def write_wav(path: Path, samples: np.ndarray, rate: int = RATE) -> None:
    """`samples` (already at 16-bit scale) as a mono 16-bit WAV."""
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(np.asarray(samples).astype("<i2").tobytes())


def noise_clips(folder: Path, seconds: Sequence[float], seed: int, scale: float) -> Path:
    """`clip00.wav`, `clip01.wav`, ...: white noise of `scale` (16-bit units) lasting each of
    `seconds`, from one seeded generator."""
    rng = np.random.default_rng(seed)
    for k, s in enumerate(seconds):
        write_wav(folder / f"clip{k:02d}.wav", rng.standard_normal(int(s * RATE)) * scale)
    return folder
