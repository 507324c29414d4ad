#!/usr/bin/env python3
"""Silero VAD references for crates/model/tests/vad.rs, from silero-vad's own code.

Runs silero-vad 6.2.3's `get_speech_timestamps(audio, load_silero_vad(onnx=True), ...)` (the
ONNX model sonograph vendors, on onnxruntime 1.31.1, CPU) on committed audio and writes
crates/model/tests/data/vad/reference.json: per file, the probability of every window (as the
function computed them: the model is wrapped to record its outputs) and, per case, the
timestamps in samples at the file's rate (what the function returns). It also writes
timestamps_from_probs.json: random probability sequences (runs of speech, silence and values
between the thresholds, with values on the thresholds) with many parameter sets, through
`get_speech_timestamps_from_probs`, the state machine alone.

  python3 -m venv .venv-models && .venv-models/bin/pip install -r scripts/requirements-models.txt
  .venv-models/bin/python scripts/vad_reference.py            # references only
  .venv-models/bin/python scripts/vad_reference.py --audio    # also the audio (espeak-ng, sox)

Audio is read with soundfile as float32 (16-bit PCM / 32768, as sonograph decodes it) and
given to silero-vad at its own rate: 8 kHz as is, multiples of 16 kHz decimated by the
function itself.
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from importlib.metadata import version
from importlib.resources import files as package_files

import numpy as np
import soundfile as sf
import torch
from silero_vad import get_speech_timestamps, get_speech_timestamps_from_probs, load_silero_vad

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "crates", "model", "tests", "data", "vad")
VENDORED = os.path.join(ROOT, "crates", "model", "models", "silero_vad", "silero_vad.onnx")

SENTENCES = [
    ("en-us", 160, "The quick brown fox jumps over the lazy dog."),
    ("en-gb", 140, "Speech segments are found by a small recurrent network."),
    ("en-us+f3", 180, "Short."),
    ("en-us", 150, "Numbers like three hundred and twelve are spoken slowly."),
    ("en-gb+m3", 170, "Yes, no, maybe."),
    ("en-us", 160, "And this is the last sentence of the recording."),
]
# Pauses after each sentence, in seconds: below and above min_silence (100 ms), around
# 2 x speech_pad (60 ms), and long.
PAUSES = [0.06, 0.35, 0.12, 1.5, 0.9, 0.0]


def run(cmd):
    subprocess.run(cmd, check=True)


def espeak(voice, wpm, text, tmp, sr=16000):
    raw = os.path.join(tmp, "raw.wav")
    out = os.path.join(tmp, "out.wav")
    run(["espeak-ng", "-v", voice, "-s", str(wpm), "-w", raw, text])
    run(["sox", raw, "-r", str(sr), "-c", "1", "-b", "32", "-e", "floating-point", out])
    x, _ = sf.read(out, dtype="float32")
    return x


def write(name, x, sr):
    path = os.path.join(OUT, name)
    sf.write(path, np.clip(x, -1, 1 - 2**-15), sr, subtype="PCM_16")
    print("wrote", path, f"{len(x) / sr:.2f} s")


def make_audio():
    rng = np.random.default_rng(20240611)
    sr = 16000
    with tempfile.TemporaryDirectory() as tmp:
        parts = [np.zeros(int(0.4 * sr), np.float32)]
        for (voice, wpm, text), pause in zip(SENTENCES, PAUSES):
            parts.append(espeak(voice, wpm, text, tmp))
            parts.append(np.zeros(int(pause * sr), np.float32))
        speech = np.concatenate(parts)
        speech = 0.9 * speech / np.max(np.abs(speech))
        # A quiet noise floor, so that silence is not digital zeros.
        speech = speech + rng.normal(0, 10**(-60 / 20), len(speech)).astype(np.float32)
        write("dialogue_16000.flac", speech, sr)
        # The same at 32 kHz (silero-vad decimates by 2) and 8 kHz (the 8 kHz model), by sox.
        src = os.path.join(OUT, "dialogue_16000.flac")
        cut = os.path.join(tmp, "cut.wav")
        run(["sox", src, cut, "trim", "0", "7"])
        run(["sox", cut, "-r", "32000", os.path.join(OUT, "dialogue_32000.flac")])
        run(["sox", src, "-r", "8000", os.path.join(OUT, "dialogue_8000.flac")])

    write("silence_16000.flac", np.zeros(3 * sr, np.float32), sr)
    write("noise_16000.flac", rng.normal(0, 0.1, 3 * sr).astype(np.float32), sr)

    # Music-like: an arpeggio of harmonic notes with attack and decay over a sustained chord,
    # with vibrato: pitched, voiced-looking sound that is not speech.
    t = np.arange(6 * sr) / sr
    chord = sum(0.08 * np.sin(2 * np.pi * f * t) for f in (130.81, 164.81, 196.0))
    notes = np.zeros_like(t)
    freqs = [261.63, 329.63, 392.0, 523.25, 392.0, 329.63]
    for k in range(20):
        f = freqs[k % len(freqs)]
        start = int(k * 0.3 * sr)
        n = int(0.3 * sr)
        tt = np.arange(n) / sr
        env = np.minimum(tt / 0.01, 1) * np.exp(-tt / 0.12)
        vib = 1 + 0.004 * np.sin(2 * np.pi * 5.5 * tt)
        tone = sum(0.5 / h * np.sin(2 * np.pi * h * f * vib * tt) for h in range(1, 6))
        notes[start:start + n] += 0.35 * env * tone
    write("tones_16000.flac", (chord + notes).astype(np.float32), sr)

    # Speech in white noise at 3 dB SNR.
    x, _ = sf.read(os.path.join(OUT, "dialogue_16000.flac"), dtype="float32")
    x = x[: 8 * sr]
    noise = rng.normal(0, 1, len(x)).astype(np.float32)
    noise *= np.sqrt(np.mean(x**2) / np.mean(noise**2) / 10**(3 / 10))
    write("speech_in_noise_16000.flac", x + noise, sr)


class Recording:
    """The ONNX model, recording the probability of each call."""

    def __init__(self, model):
        self.model = model
        self.probs = []

    def reset_states(self, batch_size=1):
        self.model.reset_states(batch_size)

    def __call__(self, x, sr):
        out = self.model(x, sr)
        self.probs.append(out.item())
        return out


FILES = {
    # name: path from the repository root
    "dialogue_16000": "crates/model/tests/data/vad/dialogue_16000.flac",
    "dialogue_32000": "crates/model/tests/data/vad/dialogue_32000.flac",
    "dialogue_8000": "crates/model/tests/data/vad/dialogue_8000.flac",
    "silence_16000": "crates/model/tests/data/vad/silence_16000.flac",
    "noise_16000": "crates/model/tests/data/vad/noise_16000.flac",
    "tones_16000": "crates/model/tests/data/vad/tones_16000.flac",
    "speech_in_noise_16000": "crates/model/tests/data/vad/speech_in_noise_16000.flac",
    "espeak_16000": "tests/data/speech_16000_mono_s16.wav",
    "espeak_48000": "tests/data/speech_48000_mono_s16.wav",
    "espeak_8000": "tests/data/speech_8000_mono_s16.wav",
    "sample": "tests/data/sample.flac",
}

# Parameter sets beyond the defaults, by file.
VARIANTS = {
    "dialogue_16000": [
        dict(threshold=0.3),
        dict(threshold=0.7, neg_threshold=0.6),
        dict(min_speech_duration_ms=100, min_silence_duration_ms=50, speech_pad_ms=0),
        dict(speech_pad_ms=200),
        dict(min_silence_duration_ms=400, speech_pad_ms=45),
        dict(max_speech_duration_s=2.0),
        dict(max_speech_duration_s=2.0, use_max_poss_sil_at_max_speech=False),
        dict(max_speech_duration_s=1.0, min_silence_at_max_speech=200),
        dict(max_speech_duration_s=3.5, min_silence_duration_ms=1000),
        dict(max_speech_duration_s=3.5, min_silence_duration_ms=1000,
             use_max_poss_sil_at_max_speech=False),
    ],
    "dialogue_32000": [dict(max_speech_duration_s=1.5), dict(speech_pad_ms=100)],
    "dialogue_8000": [dict(max_speech_duration_s=2.0), dict(threshold=0.35)],
    "noise_16000": [dict(threshold=0.05, neg_threshold=0.02)],
    "tones_16000": [dict(threshold=0.1, neg_threshold=0.05)],
    "speech_in_noise_16000": [dict(threshold=0.3), dict(max_speech_duration_s=1.5)],
}


def audio_references(model):
    files, cases = {}, []
    for name, rel in FILES.items():
        x, sr = sf.read(os.path.join(ROOT, rel), dtype="float32")
        assert x.ndim == 1, f"{rel} is not mono"
        audio = torch.from_numpy(x)
        for params in [{}] + VARIANTS.get(name, []):
            rec = Recording(model)
            ts = get_speech_timestamps(audio, rec, sampling_rate=sr, **params)
            if not params:
                files[name] = {
                    "path": rel,
                    "sample_rate": sr,
                    "samples": len(x),
                    "probs": rec.probs,
                }
            cases.append({
                "file": name,
                "params": params,
                "timestamps": [[d["start"], d["end"]] for d in ts],
            })
            print(f"{name} {params}: {len(ts)} segments")
    return files, cases


def prob_sequences(rng, n_cases):
    """Runs of speech, silence, and values between the thresholds, some exactly on them."""
    for _ in range(n_cases):
        probs = []
        length = int(rng.integers(20, 400))
        while len(probs) < length:
            kind = rng.choice(["speech", "silence", "between", "edge"], p=[0.4, 0.35, 0.15, 0.1])
            run_len = int(rng.integers(1, 40 if kind != "edge" else 3))
            for _ in range(run_len):
                if kind == "speech":
                    v = rng.integers(33, 65) / 64
                elif kind == "silence":
                    v = rng.integers(0, 22) / 64
                elif kind == "between":
                    v = rng.integers(22, 33) / 64
                else:
                    v = float(rng.choice([0.5, 0.35, 0.3, 0.25]))
                # As a Python float holds the model's float32.
                probs.append(float(np.float32(v)))
        yield probs[:length]


def machine_references():
    rng = np.random.default_rng(7)
    cases = []
    for probs in prob_sequences(rng, 160):
        sr = int(rng.choice([16000, 8000]))
        step = int(rng.choice([1, 1, 2, 3])) if sr == 16000 else 1
        window = 512 if sr == 16000 else 256
        params = {}
        if rng.random() < 0.5:
            params["threshold"] = float(rng.choice([0.5, 0.3, 0.6, 0.25]))
        if rng.random() < 0.3:
            params["neg_threshold"] = float(rng.choice([0.35, 0.2, 0.3]))
        if rng.random() < 0.5:
            params["min_speech_duration_ms"] = int(rng.choice([0, 50, 250, 400]))
        if rng.random() < 0.5:
            params["min_silence_duration_ms"] = int(rng.choice([0, 32, 64, 100, 300]))
        if rng.random() < 0.6:
            params["speech_pad_ms"] = int(rng.choice([0, 16, 30, 64, 200]))
        if rng.random() < 0.6:
            params["max_speech_duration_s"] = float(rng.choice([0.3, 0.5, 1.0, 2.5]))
        if rng.random() < 0.4:
            params["min_silence_at_max_speech"] = int(rng.choice([0, 32, 98, 200]))
        if rng.random() < 0.4:
            params["use_max_poss_sil_at_max_speech"] = False
        # The audio's length: the windows, the last one partial at times.
        length = len(probs) * window - int(rng.integers(0, window))
        ts = get_speech_timestamps_from_probs(
            probs, sampling_rate=sr, audio_length_samples=length, step=step, **params)
        cases.append({
            "probs": probs, "sample_rate": sr, "step": step, "samples": length,
            "params": params, "timestamps": [[d["start"], d["end"]] for d in ts],
        })
    return cases


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--audio", action="store_true", help="regenerate the audio fixtures too")
    args = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)
    if args.audio:
        make_audio()
    model = load_silero_vad(onnx=True)
    packaged = package_files("silero_vad.data").joinpath("silero_vad.onnx").read_bytes()
    with open(VENDORED, "rb") as f:
        vendored = hashlib.sha256(f.read()).hexdigest()
    assert hashlib.sha256(packaged).hexdigest() == vendored, \
        "the vendored model is not the one load_silero_vad(onnx=True) loads"
    files, cases = audio_references(model)
    meta = {
        "generator": "scripts/vad_reference.py",
        "silero_vad": version("silero-vad"),
        "onnxruntime": version("onnxruntime"),
        "torch": version("torch"),
        "numpy": version("numpy"),
        "model_sha256": vendored,
    }
    with open(os.path.join(OUT, "reference.json"), "w") as f:
        json.dump({**meta, "files": files, "cases": cases}, f, separators=(",", ":"))
    with open(os.path.join(OUT, "timestamps_from_probs.json"), "w") as f:
        json.dump({**meta, "cases": machine_references()}, f, separators=(",", ":"))
    print("wrote", OUT)


if __name__ == "__main__":
    sys.exit(main())
