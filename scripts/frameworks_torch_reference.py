#!/usr/bin/env python3
"""References of the torch-based frameworks' feature frontends, for the presets that follow them.

The companion of scripts/frameworks_reference.py (transformers' numpy extractors, no torch):
this one runs frameworks that need torch (pinned in scripts/requirements-frameworks-torch.txt;
torch from PyPI brings its CUDA libraries, about 5 GB, so it is a separate venv and these
references are committed rather than made in CI). It reads the committed signals
(tests/golden/frameworks/input/<signal>.npy, float32 mono at 16 kHz) and writes

  tests/golden/frameworks/ref/<case>.npy      float32 features, [frames, bins] (sonograph's
                                               row order: torch's [bins, frames] transposed)
  tests/golden/frameworks/cases-torch.json    the cases: signal, preset, reference, versions

How each runs:
  torchaudio, SpeechBrain, lhotse and AST's extractor in float64 throughout (torch's default dtype set to float64 before the modules
  are made, so that the window, the mel filters and the STFT are the framework's own code in
  float64). In float32, its default, torchaudio is only good to about 1.6e-3 dB against
  itself in float64 (its mel filters come from float32 linspace), eight times the golden
  tolerance, and its float32 window puts a floor near -100 dB under loud frames: not a
  definition to hold another implementation to.
  ESPnet as it runs: its Stft casts the samples to float32 whatever the module's dtype
  (`torch.stft(input.float(), ...)`), and its mel matrix is librosa's in float32, so its
  quietest bands hold float32 rounding noise, as kaldi-native-fbank's do in the golden suite.

Cases:
  torchaudio: `torchaudio.transforms.AmplitudeToDB()(torchaudio.transforms.MelSpectrogram()(y))`
  at their defaults (16 kHz, n_fft 400, hop 200, periodic Hann, centred with reflect padding,
  power 2, 128 HTK mels without norm, 10 log10(max(x, 1e-10)), no top_db): [1 + len // 200, 128].
  espnet: ESPnet2's `DefaultFrontend(fs=16000)` at its defaults (n_fft 512, hop 128, periodic
  Hann, centred with reflect padding, power, 80 librosa Slaney mels, ln(max(x, 1e-10))):
  [1 + len // 128, 80].
  speechbrain: SpeechBrain's `speechbrain.lobes.features.Fbank()` at its defaults (16 kHz,
  n_fft 400, hop 160, periodic Hamming, centred with zero padding, power, 40 filters on HTK's
  scale shaped as its own `Filterbank` shapes them, 10 log10(max(x, 1e-10)), top_db 80 over
  the item): [1 + len // 160, 40].
  lhotse-fbank / lhotse-mfcc: lhotse's `Fbank(FbankConfig())` and `Mfcc(MfccConfig())` at
  their defaults (Kaldi's fbank framed with snip_edges=False: (len + 80) // 160 frames, the
  edges mirrored with the edge sample repeated; the samples unscaled; povey window, DC
  removed, pre-emphasis 0.97, 512-point FFT, Kaldi mel from 20 Hz to Nyquist - 400 Hz, log
  floored at FLT_EPSILON; the MFCC over 23 filters, 13 coefficients, Kaldi's lifter 22):
  [frames, 80] and [frames, 13].
  ast: transformers' `ASTFeatureExtractor()(y, sampling_rate=16000)` with torchaudio installed
  (its usual path: `torchaudio.compliance.kaldi.fbank(waveform, sample_frequency=16000,
  window_type="hanning", num_mel_bins=128)`): the Kaldi fbank of 128 bins of the samples as
  they are, a symmetric Hann window, cut or completed with zero frames to 1,024, then
  (x + 4.2677393) / (2 * 4.5689974): [1024, 128]. Its own `_extract_fbank_features` and
  `normalize` in float64 (`__call__` casts the samples to float32 first; its output is checked
  to lie within 2e-3 nats of these on the bands within 14 nats of their frame's peak).

Usage: python -m venv v && v/bin/pip install --no-deps -r scripts/requirements-frameworks-torch.txt &&
       v/bin/python scripts/frameworks_torch_reference.py
(--no-deps: the file is the whole venv, and its pins need no resolving; see its header.)
"""

import importlib.metadata
import json
import os

import warnings

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "golden", "frameworks")
RATE = 16000


def signals():
    folder = os.path.join(OUT, "input")
    return {
        name[: -len(".npy")]: np.load(os.path.join(folder, name))
        for name in sorted(os.listdir(folder))
        if name.endswith(".npy")
    }


def torchaudio_mel_db(y):
    import torchaudio.transforms as T

    torch.set_default_dtype(torch.float64)
    try:
        mel, db = T.MelSpectrogram(), T.AmplitudeToDB()
        with torch.no_grad():
            out = db(mel(torch.from_numpy(y.astype(np.float64))))
    finally:
        torch.set_default_dtype(torch.float32)
    assert out.dtype == torch.float64
    return out.numpy().T


def espnet_frontend(y):
    from espnet2.asr.frontend.default import DefaultFrontend

    frontend = DefaultFrontend(fs=RATE).eval()
    x = torch.from_numpy(y).unsqueeze(0)
    with torch.no_grad():
        feats, lengths = frontend(x, torch.tensor([len(y)]))
    assert int(lengths[0]) == feats.shape[1]
    return feats[0].numpy()


def speechbrain_fbank(y):
    from speechbrain.lobes.features import Fbank

    torch.set_default_dtype(torch.float64)
    try:
        fbank = Fbank().eval()
        with torch.no_grad():
            out = fbank(torch.from_numpy(y.astype(np.float64)).unsqueeze(0))
    finally:
        torch.set_default_dtype(torch.float32)
    assert out.dtype == torch.float64
    return out[0].numpy()


def lhotse_features(kind):
    def run(y):
        from lhotse.features import Fbank, FbankConfig, Mfcc, MfccConfig

        torch.set_default_dtype(torch.float64)
        try:
            extractor = Fbank(FbankConfig()) if kind == "fbank" else Mfcc(MfccConfig())
            out = extractor.extract(y.astype(np.float64), sampling_rate=RATE)
        finally:
            torch.set_default_dtype(torch.float32)
        assert out.dtype == np.float64
        return out

    return run


def transformers_ast(y):
    from transformers import ASTFeatureExtractor

    fe = ASTFeatureExtractor()
    # __call__ casts the samples to float32, and torchaudio's Kaldi fbank then builds its mel
    # filters in float32 too: 3.9e-4 nats from the float64 definition in a chirp's loud band.
    # The extractor's own two steps, given the float64 samples with torch's default dtype at
    # float64, are that definition; __call__ is held to them within float32's distance.
    as_called = fe(y, sampling_rate=RATE, return_tensors="np")["input_values"][0]
    torch.set_default_dtype(torch.float64)
    try:
        fbank = fe._extract_fbank_features(y.astype(np.float64), max_length=fe.max_length)
        out = fe.normalize(fbank)
    finally:
        torch.set_default_dtype(torch.float32)
    assert out.dtype == np.float64
    # In nats, on the bands within 14 of their frame's peak (deeper ones hold float32 noise).
    deep = fbank < fbank.max(axis=1, keepdims=True) - 14.0
    gap = np.where(deep, 0.0, np.abs(as_called - out)).max() * 2 * fe.std
    assert gap < 2e-3, gap
    return out


CASES = {
    "torchaudio": (
        torchaudio_mel_db,
        lambda n: (1 + n // 200, 128),
        "torchaudio.transforms.AmplitudeToDB()(torchaudio.transforms.MelSpectrogram()(y))",
    ),
    "espnet": (
        espnet_frontend,
        lambda n: (1 + n // 128, 80),
        "espnet2.asr.frontend.default.DefaultFrontend(fs=16000)(y, [len(y)])",
    ),
    "speechbrain": (
        speechbrain_fbank,
        lambda n: (1 + n // 160, 40),
        "speechbrain.lobes.features.Fbank()(y[None])",
    ),
    # Kaldi's snip_edges=False: (len + 80) // 160 frames.
    "lhotse-fbank": (
        lhotse_features("fbank"),
        lambda n: ((n + 80) // 160, 80),
        "lhotse.features.Fbank(FbankConfig()).extract(y, sampling_rate=16000)",
    ),
    "lhotse-mfcc": (
        lhotse_features("mfcc"),
        lambda n: ((n + 80) // 160, 13),
        "lhotse.features.Mfcc(MfccConfig()).extract(y, sampling_rate=16000)",
    ),
    # 1,024 frames whatever the item: cut, or completed with zero frames before normalising.
    "ast": (
        transformers_ast,
        lambda n: (1024, 128),
        "transformers.ASTFeatureExtractor()(y, sampling_rate=16000) (torchaudio installed)",
    ),
}


def main():
    # torchaudio's default 128 HTK mels over 201 bins leave the lowest filters empty, and it
    # says so for every signal; the preset gives those bands the floor, as it does.
    warnings.filterwarnings("ignore", message="At least one mel filterbank has all zero values")
    cases = []
    for preset, (run, shape, reference) in CASES.items():
        for name, y in signals().items():
            ref = np.ascontiguousarray(run(y), dtype=np.float32)
            assert ref.shape == shape(len(y)), (preset, name, ref.shape)
            assert np.isfinite(ref).all(), (preset, name)
            case = f"{name}.{preset}"
            np.save(os.path.join(OUT, "ref", f"{case}.npy"), ref)
            cases.append({"case": case, "signal": name, "preset": preset, "reference": reference,
                          "precision": "float32" if preset == "espnet" else "float64"})
    versions = {p: importlib.metadata.version(p) for p in ("torch", "torchaudio", "espnet", "speechbrain", "lhotse", "transformers", "numpy")}
    with open(os.path.join(OUT, "cases-torch.json"), "w") as f:
        json.dump({"versions": versions, "cases": cases}, f, indent=1)
        f.write("\n")
    print(f"{len(cases)} cases in {OUT}; {versions}")


if __name__ == "__main__":
    main()
