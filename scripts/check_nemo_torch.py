#!/usr/bin/env python3
"""Checks the committed NeMo golden references (tests/golden, made by scripts/golden.py's
numpy transcriptions) against NeMo's own FilterbankFeatures running in torch.

NeMo's package is too heavy to install here, and its features.py needs only torch, librosa
and three small nemo imports; so this script loads features.py from a NeMo checkout at a
given tag, with those three imports stubbed, and runs the real class on the committed audio.

    git -C NeMo show v2.4.0:nemo/collections/asr/parts/preprocessing/features.py > /tmp/f24.py
    git -C NeMo show v2.5.0rc0:nemo/collections/asr/parts/preprocessing/features.py > /tmp/f25.py
    python scripts/check_nemo_torch.py /tmp/f24.py nemo-legacy-80 nemo-legacy-128
    python scripts/check_nemo_torch.py /tmp/f25.py nemo-80 nemo-128

Needs torch (any 2.x; 2.8.0 was used) besides scripts/requirements-golden.txt. NeMo computes
in float32 and the references in float64, so agreement is to float32 rounding (its size is
printed), while a different padding or frame count shows as errors of 0.1 to 20.
Not run by CI: it needs a NeMo checkout and torch; docs/presets.md records its output.
"""

import json
import os
import sys
import types

import numpy as np
import soundfile as sf
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOLDEN = os.path.join(ROOT, "tests", "golden")


def load_nemo_features(path):
    """Executes NeMo's features.py with its nemo imports stubbed; returns the module."""
    stubs = {
        "nemo": types.ModuleType("nemo"),
        "nemo.collections.asr.parts.preprocessing.perturb": types.ModuleType("perturb"),
        "nemo.collections.asr.parts.preprocessing.segment": types.ModuleType("segment"),
        "nemo.utils": types.ModuleType("utils"),
    }
    stubs["nemo.collections.asr.parts.preprocessing.perturb"].AudioAugmentor = object
    stubs["nemo.collections.asr.parts.preprocessing.segment"].AudioSegment = object

    class Log:
        def __getattr__(self, _):
            return lambda *a, **k: None

    stubs["nemo.utils"].logging = Log()
    sys.modules.update(stubs)
    module = types.ModuleType("nemo_features")
    with open(path) as f:
        exec(compile(f.read(), path, "exec"), module.__dict__)
    return module


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    features_py, keys = sys.argv[1], sys.argv[2:]
    module = load_nemo_features(features_py)
    manifest = json.load(open(os.path.join(GOLDEN, "cases.json")))
    worst_all = 0.0
    for key in keys:
        n_mels = 128 if key.endswith("128") else 80
        # AudioToMelSpectrogramPreprocessor's FastConformer / Parakeet configuration.
        fb = module.FilterbankFeatures(
            sample_rate=16000, n_window_size=400, n_window_stride=160, window="hann",
            normalize="per_feature", n_fft=512, preemph=0.97, nfilt=n_mels, lowfreq=0,
            highfreq=None, log=True, log_zero_guard_type="add", log_zero_guard_value=2**-24,
            dither=0.0, pad_to=0, frame_splicing=1, exact_pad=False, pad_value=0,
            mag_power=2.0, mel_norm="slaney",
        ).eval()
        cases = [c for c in manifest["cases"] if c["key"] == key]
        refused = [r for r in manifest.get("refused", []) if r["key"] == key]
        worst = 0.0
        for c in cases:
            y, sr = sf.read(os.path.join(GOLDEN, c["audio"]), dtype="float32")
            x = torch.from_numpy(np.asarray(y, np.float32))[None, :]
            out, length = fb(x, torch.tensor([x.shape[1]]))
            got = out[0, :, : int(length[0])].T.numpy().astype(np.float64)
            ref = np.load(os.path.join(GOLDEN, c["reference"])).astype(np.float64)
            if got.shape != ref.shape:
                print(f"MISMATCH {c['name']}: NeMo {got.shape} vs reference {ref.shape}")
                worst = float("inf")
                continue
            err = float(np.max(np.abs(got - ref))) if got.size else 0.0
            worst = max(worst, err)
            print(f"  {c['name']:34s} {str(got.shape):10s} max |NeMo - ref| = {err:.2e}")
        for r in refused:
            y, sr = sf.read(os.path.join(GOLDEN, r["audio"]), dtype="float32")
            x = torch.from_numpy(np.asarray(y, np.float32))[None, :]
            try:
                fb(x, torch.tensor([x.shape[1]]))
                print(f"NOT REFUSED {r['name']}: NeMo computed it")
                worst = float("inf")
            except RuntimeError as e:
                print(f"  {r['name']:34s} refused by NeMo too: {str(e).splitlines()[0][:80]}")
        print(f"{key}: {len(cases)} cases, {len(refused)} refusals, worst {worst:.2e}")
        worst_all = max(worst_all, worst)
    print(f"torch {torch.__version__}; worst over all keys {worst_all:.2e}")


if __name__ == "__main__":
    main()
