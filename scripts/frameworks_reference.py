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
  speech2text: transformers' Speech2TextFeatureExtractor() (S2T, and the Kaldi-style fbank
  that SeamlessM4T's and AST's extractors share), `fe(y, sampling_rate=16000)`: 80 Kaldi fbank
  bins of the samples times 2^15 (povey window, pre-emphasis 0.97, DC removed, mel from 20 Hz,
  log floored at FLT_EPSILON, frames as snip_edges), then utterance CMVN (each bin minus its
  mean, divided by its population standard deviation): [frames, 80]. Without torch (as here),
  transformers computes it with numpy's `spectrogram`; with torchaudio, with
  torchaudio.compliance.kaldi.fbank.
  seamless-m4t: transformers' SeamlessM4TFeatureExtractor() (numpy only), `fe(y,
  sampling_rate=16000)`: the same Kaldi fbank, each bin normalised over the frames (mean,
  variance with ddof=1, + 1e-7 under the root), padded with zero frames to a multiple of 2 and
  reshaped to rows of two frames: [ceil(frames / 2), 160].
  wav2vec2: transformers' Wav2Vec2FeatureExtractor() (numpy only), `fe(y, sampling_rate=16000)`:
  the samples in float32, minus their mean, divided by sqrt(var + 1e-7) (`do_normalize`, the
  population variance): [samples, 1].

Usage: python -m venv v && v/bin/pip install -r scripts/requirements-frameworks.txt &&
       v/bin/python scripts/frameworks_reference.py
"""

import importlib.metadata
import json
import os
import wave

import numpy as np
from transformers import (
    SeamlessM4TFeatureExtractor,
    Speech2TextFeatureExtractor,
    Wav2Vec2FeatureExtractor,
    WhisperFeatureExtractor,
)

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
    # 99 Kaldi frames: an odd count, so that SeamlessM4T's last row holds a frame and zeros.
    t_odd = np.arange(RATE + 160) / RATE
    two_tones = 0.3 * np.sin(2 * np.pi * 440 * t_odd) + 0.05 * np.sin(2 * np.pi * 3000 * t_odd)
    return {
        "chirp_loud_3s": chirp,
        "square_5s": square,
        "noise_31s": noise,
        "speech_2s": speech,
        "tiny_800": tiny,
        "two_tones_99_frames": two_tones,
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
    s2t = Speech2TextFeatureExtractor()
    for name, y in signals().items():
        if name == "tiny_800":
            # Three frames of a tone: bins that hold the log floor in every frame have no
            # variance, and transformers divides by it (0/0, NaN), as the preset does.
            continue
        y = np.asarray(y, dtype=np.float32)
        ref = np.ascontiguousarray(s2t(y, sampling_rate=RATE, return_tensors="np")["input_features"][0],
                                   dtype=np.float32)
        frames = 1 + (len(y) - 400) // 160
        assert ref.shape == (frames, 80), ref.shape
        case = f"{name}.speech2text"
        np.save(os.path.join(OUT, "ref", f"{case}.npy"), ref)
        cases.append({"case": case, "signal": name, "preset": "speech2text",
                      "reference": "transformers.Speech2TextFeatureExtractor()(y, sampling_rate=16000)"})
    m4t = SeamlessM4TFeatureExtractor()
    for name, y in signals().items():
        if name == "tiny_800":
            continue  # as for speech2text: floored bins have no variance
        y = np.asarray(y, dtype=np.float32)
        ref = np.ascontiguousarray(m4t(y, sampling_rate=RATE, return_tensors="np")["input_features"][0],
                                   dtype=np.float32)
        frames = 1 + (len(y) - 400) // 160
        assert ref.shape == ((frames + 1) // 2, 160), ref.shape
        case = f"{name}.seamless-m4t"
        np.save(os.path.join(OUT, "ref", f"{case}.npy"), ref)
        cases.append({"case": case, "signal": name, "preset": "seamless-m4t",
                      "reference": "transformers.SeamlessM4TFeatureExtractor()(y, sampling_rate=16000)"})
    w2v = Wav2Vec2FeatureExtractor()
    for name, y in signals().items():
        if name == "noise_31s":
            continue  # 2 MB of reference that shows nothing the others do not
        y = np.asarray(y, dtype=np.float32)
        ref = w2v(y, sampling_rate=RATE, return_tensors="np")["input_values"][0]
        assert ref.shape == y.shape and ref.dtype == np.float32, (ref.shape, ref.dtype)
        case = f"{name}.wav2vec2"
        # One sample a row, as sonograph's waveform rows are: [samples, 1].
        np.save(os.path.join(OUT, "ref", f"{case}.npy"), np.ascontiguousarray(ref[:, None]))
        cases.append({"case": case, "signal": name, "preset": "wav2vec2",
                      "reference": "transformers.Wav2Vec2FeatureExtractor()(y, sampling_rate=16000)"})
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
