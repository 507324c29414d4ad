#!/usr/bin/env python3
"""References of the frameworks' own feature frontends, for the presets that follow them.

Runs the framework itself (pinned in scripts/requirements-frameworks.txt) on deterministic
signals and writes

  tests/golden/frameworks/input/<signal>.npy   float32 mono samples at 16 kHz
  tests/golden/frameworks/ref/<case>.npy       float32 features, [frames, bins] (sonograph's
                                                row order: transformers' [bins, frames] transposed)
  tests/golden/frameworks/cases.json           the cases: signal, preset, reference, versions

Cases:
  whisper-hf-80 / whisper-hf-128: transformers' WhisperFeatureExtractor(feature_size=80 or 128)
  called as the fine-tuning recipes call it, `fe(y, sampling_rate=16000)`: the audio zero-padded
  or cut to 30 s (padding="max_length", truncation=True), then its log-mel: [bins, 3000].
  Without torch installed, transformers computes it with numpy (_np_extract_fbank_features);
  with torch, with torch.stft (its docstring: the same within 1e-5).

Usage: python -m venv v && v/bin/pip install -r scripts/requirements-frameworks.txt &&
       v/bin/python scripts/frameworks_reference.py
"""

import importlib.metadata
import json
import os
import wave

import numpy as np
from transformers import WhisperFeatureExtractor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "golden", "frameworks")
RATE = 16000


def signals():
    t3 = np.arange(3 * RATE) / RATE
    # A chirp that ends loud: transformers' zero padding and a reflection at the audio's end
    # differ most in the last frames here (0.74 in the measurement).
    chirp = np.sin(2 * np.pi * (100 * t3 + (6900 / 6) * t3**2)) * np.linspace(0.05, 0.9, t3.size)
    t5 = np.arange(5 * RATE) / RATE
    square = 0.5 * np.sign(np.sin(2 * np.pi * 440 * t5))
    # Longer than 30 s: transformers keeps the first 30 s.
    noise = np.random.default_rng(23).normal(0.0, 0.1, 31 * RATE)
    with wave.open(os.path.join(ROOT, "tests", "data", "speech_16000_mono_s16.wav")) as w:
        assert w.getframerate() == RATE and w.getnchannels() == 1 and w.getsampwidth() == 2
        speech = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2") / 32768.0
    tiny = 0.3 * np.sin(2 * np.pi * 1000 * np.arange(800) / RATE)
    return {
        "chirp_loud_3s": chirp,
        "square_5s": square,
        "noise_31s": noise,
        "speech_2s": speech,
        "tiny_800": tiny,
    }


def main():
    os.makedirs(os.path.join(OUT, "input"), exist_ok=True)
    os.makedirs(os.path.join(OUT, "ref"), exist_ok=True)
    extractors = {bins: WhisperFeatureExtractor(feature_size=bins) for bins in (80, 128)}
    cases = []
    for name, y in signals().items():
        y = np.asarray(y, dtype=np.float32)
        np.save(os.path.join(OUT, "input", f"{name}.npy"), y)
        for bins in (80, 128) if name in ("chirp_loud_3s", "speech_2s") else (80,):
            features = extractors[bins](y, sampling_rate=RATE, return_tensors="np")
            ref = np.ascontiguousarray(features["input_features"][0].T, dtype=np.float32)
            assert ref.shape == (3000, bins), ref.shape
            case = f"{name}.whisper-hf-{bins}"
            np.save(os.path.join(OUT, "ref", f"{case}.npy"), ref)
            cases.append(
                {
                    "case": case,
                    "signal": name,
                    "preset": "whisper-hf" if bins == 80 else "whisper-hf-128",
                    "reference": f"transformers.WhisperFeatureExtractor(feature_size={bins})"
                    "(y, sampling_rate=16000)",
                }
            )
    versions = {p: importlib.metadata.version(p) for p in ("transformers", "numpy")}
    try:
        versions["torch"] = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        versions["torch"] = None
    with open(os.path.join(OUT, "cases.json"), "w") as f:
        json.dump({"versions": versions, "cases": cases}, f, indent=1)
        f.write("\n")
    print(f"{len(cases)} cases in {OUT}; {versions}")


if __name__ == "__main__":
    main()
