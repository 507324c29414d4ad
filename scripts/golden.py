#!/usr/bin/env python3
"""Generate golden test fixtures for sonograph.

Writes
  tests/golden/audio/<signal>.wav     32-bit IEEE float mono WAV inputs
  tests/golden/ref/<case>.npy         float32 C-order [frames, bins] references
  tests/golden/cases.json             manifest of all cases
  tests/data/*                        decoding fixtures (wav/flac/mp3/ogg)
  tests/data/ref/*.npy                exact float32 per-channel sample references
  tests/data/decode.json              manifest of decoding fixtures

Requirements: the Python packages in scripts/requirements-golden.txt and the
command line tools espeak-ng, sox, lame, oggenc, ffprobe (ffmpeg).

Usage:  python scripts/golden.py            (run from anywhere; paths are
        relative to the repository root, i.e. the parent of scripts/)

All references are computed in float64 from exactly the float32 samples that
were written to (and re-read from) the WAV files, except key `kaldi-80`, which is
the real kaldi_native_fbank (float32 arithmetic).  Key `kaldi-80-f64` is a float64
numpy transcription of the same computation: knf's float32 FFT has no correct
digits on bands more than ~16 nats (70 dB) below their frame's peak, so the Rust
test compares every element with `kaldi-80-f64` and, above that depth, with knf
itself.  Output is deterministic for
fixed tool/package versions (espeak-ng output may change between espeak-ng
releases; the versions used are recorded in cases.json).
"""

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tempfile
import warnings

import numpy as np
import scipy
import scipy.signal
import soundfile as sf
import librosa
import kaldi_native_fbank as knf

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOLDEN = os.path.join(ROOT, "tests", "golden")
DATA = os.path.join(ROOT, "tests", "data")

SPEECH_TEXT = "The quick brown fox jumps over the lazy dog."
DEMO_TEXT = (
    "Sonograph turns audio into features. This short clip is used by the "
    "demo in the read me file."
)

# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------


def run(cmd):
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def tool_version(cmd):
    try:
        out = subprocess.run(cmd, capture_output=True, text=True).stdout.strip()
        return out.splitlines()[0] if out else "unknown"
    except OSError:
        return "missing"


SFC_SET_ADD_PEAK_CHUNK = 0x1050  # libsndfile command id (sndfile.h)


def sf_write(path, data, sr, subtype, fmt="WAV"):
    """soundfile.write without libsndfile's PEAK chunk (it embeds a timestamp, which
    would make float WAVs differ between runs)."""
    data = np.asarray(data)
    channels = 1 if data.ndim == 1 else data.shape[1]
    with sf.SoundFile(path, "w", sr, channels, subtype=subtype, format=fmt) as f:
        if fmt == "WAV" and subtype in ("FLOAT", "DOUBLE"):
            sf._snd.sf_command(f._file, SFC_SET_ADD_PEAK_CHUNK, sf._ffi.NULL, 0)
        f.write(data)


def write_float_wav(path, y, sr):
    """Write mono float32 WAV and return the float32 samples read back."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    sf_write(path, np.asarray(y, dtype=np.float32), sr, "FLOAT")
    back, sr2 = sf.read(path, dtype="float32", always_2d=False)
    assert sr2 == sr
    assert np.array_equal(back, np.asarray(y, dtype=np.float32))
    return back


def save_ref(path, arr):
    arr = np.ascontiguousarray(np.asarray(arr, dtype=np.float32))
    assert arr.ndim == 2
    np.save(path, arr)
    return arr.shape


def espeak_to_rate(text, sr, out_path, tmpdir, extra_sox=()):
    """espeak-ng (200 wpm, ~2.5 s for SPEECH_TEXT) -> sox float32 mono at `sr`."""
    raw = os.path.join(tmpdir, "espeak_raw.wav")
    run(["espeak-ng", "-v", "en-us", "-s", "200", "-w", raw, text])
    run(["sox", "-D", raw, "-r", str(sr), "-e", "floating-point", "-b", "32", "-c", "1",
         out_path, *extra_sox])


# --------------------------------------------------------------------------
# signals
# --------------------------------------------------------------------------


def make_signals(sr, tmpdir):
    """Return an ordered dict name -> float64 signal (pre-quantisation)."""
    sigs = {}
    seed_base = 1000 + sr  # distinct seeds per rate

    # speech: espeak-ng -> sox -> peak normalise to 0.9
    p = os.path.join(tmpdir, f"speech_{sr}.wav")
    espeak_to_rate(SPEECH_TEXT, sr, p, tmpdir)
    y, sr2 = sf.read(p, dtype="float64", always_2d=False)
    assert sr2 == sr
    y = y / np.max(np.abs(y)) * 0.9
    sigs["speech"] = y

    rng = np.random.default_rng(seed_base)
    sigs["noise"] = rng.normal(0.0, 0.1, size=sr)

    sigs["silence"] = np.zeros(sr // 2)

    n = sr // 2
    imp = np.zeros(n)
    for frac in (0.013, 0.171, 0.38, 0.5003, 0.777, 0.9431):
        imp[int(frac * n)] = 1.0
    sigs["impulses"] = imp

    t = np.arange(sr) / sr
    sigs["chirp"] = 0.5 * scipy.signal.chirp(t, f0=50.0, t1=1.0, f1=0.9 * sr / 2, method="linear")

    t = np.arange(sr // 2) / sr
    sigs["square"] = scipy.signal.square(2 * np.pi * 440.0 * t).astype(np.float64)

    sigs["dc"] = np.full(sr // 2, 0.5)

    lengths = (1, 160, 201, 399, 400, 401, 560) if sr == 16000 else (1, 1023, 1024, 2047, 2048, 2049)
    for L in lengths:
        rng = np.random.default_rng(seed_base * 10 + L)
        sigs[f"short{L}"] = rng.normal(0.0, 0.1, size=L)
    return sigs


# --------------------------------------------------------------------------
# references
# --------------------------------------------------------------------------


def ref_whisper(y, n_mels):
    """Transcription of openai-whisper audio.log_mel_spectrogram(padding=0).

    whisper:  window = torch.hann_window(400)  (periodic)
              stft = torch.stft(audio, 400, 160, window=window, return_complex=True)
                 (center=True, pad_mode='reflect' are torch defaults)
              magnitudes = stft[..., :-1].abs() ** 2
              mel_spec = filters @ magnitudes   (filters: librosa.filters.mel(16000, 400, n_mels),
                                                 stored in mel_filters.npz as float32)
              log_spec = clamp(mel_spec, 1e-10).log10()
              log_spec = max(log_spec, log_spec.max() - 8.0)
              log_spec = (log_spec + 4.0) / 4.0
    """
    n_fft, hop = 400, 160
    if len(y) <= n_fft // 2:
        raise ValueError("torch reflect padding needs len > 200")
    n = np.arange(n_fft)
    window = 0.5 - 0.5 * np.cos(2 * np.pi * n / n_fft)
    xp = np.pad(y, n_fft // 2, mode="reflect")
    n_frames = 1 + len(y) // hop
    idx = np.arange(n_fft)[None, :] + hop * np.arange(n_frames)[:, None]
    frames = xp[idx] * window[None, :]
    spec = np.fft.rfft(frames, n=n_fft, axis=1)  # [T, 201]
    power = (spec.real ** 2 + spec.imag ** 2)[:-1]  # drop last frame
    filters = librosa.filters.mel(sr=16000, n_fft=n_fft, n_mels=n_mels, dtype=np.float64)
    mel = filters @ power.T  # [n_mels, T-1]
    log_spec = np.log10(np.maximum(mel, 1e-10))
    log_spec = np.maximum(log_spec, log_spec.max() - 8.0)
    return ((log_spec + 4.0) / 4.0).T


def knf_options_dict():
    opts = kaldi_options()
    return str(opts)


def kaldi_options():
    opts = knf.FbankOptions()
    opts.frame_opts.dither = 0.0
    opts.frame_opts.samp_freq = 16000
    opts.mel_opts.num_bins = 80
    return opts


def ref_kaldi(y):
    """Real kaldi_native_fbank on int16-scaled samples (as compute-fbank-feats reads wav)."""
    fb = knf.OnlineFbank(kaldi_options())
    fb.accept_waveform(16000, (y * 32768.0).tolist())
    fb.input_finished()
    n = fb.num_frames_ready
    if n == 0:
        return np.zeros((0, 80))
    return np.stack([np.asarray(fb.get_frame(i), dtype=np.float64) for i in range(n)])


FLT_EPSILON = float(np.finfo(np.float32).eps)  # 1.1920929e-07


def kaldi_mel_banks_f64(num_bins=80, sample_rate=16000, n_padded=512, low_freq=20.0):
    """Kaldi MelBanks (knf InitKaldiMelBanks, vtln_warp 1, htk_mode false) in float64.

    mel(f) = 1127 ln(1 + f/700); high_freq 0 -> Nyquist; num_bins + 1 equal mel steps
    between mel(low_freq) and mel(high_freq); fft bin i (i < n_padded/2, so the Nyquist bin
    is never used) at freq i * sr / n_padded gets the mel-domain triangle weight, nonzero
    only where left_mel < mel < right_mel.  Returns [num_bins, n_padded // 2].
    """
    num_fft_bins = n_padded // 2
    high_freq = 0.5 * sample_rate

    def mel(f):
        return 1127.0 * np.log(1.0 + np.asarray(f, dtype=np.float64) / 700.0)

    mel_low, mel_high = mel(low_freq), mel(high_freq)
    delta = (mel_high - mel_low) / (num_bins + 1)
    fft_mel = mel(np.arange(num_fft_bins) * (sample_rate / n_padded))
    banks = np.zeros((num_bins, num_fft_bins))
    for b in range(num_bins):
        left = mel_low + b * delta
        center = mel_low + (b + 1) * delta
        right = mel_low + (b + 2) * delta
        inside = (fft_mel > left) & (fft_mel < right)
        up = (fft_mel - left) / (center - left)
        down = (right - fft_mel) / (right - center)
        banks[b] = np.where(inside, np.where(fft_mel <= center, up, down), 0.0)
    return banks


def ref_kaldi_f64(y):
    """float64 numpy transcription of kaldi_native_fbank with kaldi_options():
    samples * 32768; snip_edges frames of 400 every 160 (only whole frames); per frame:
    subtract the mean; pre-emphasis 0.97 as knf's Preemphasize (for i = n-1..1:
    w[i] -= c*w[i-1]; then w[0] -= c*w[0]); povey window (0.5 - 0.5 cos(2 pi i/(N-1)))^0.85;
    zero-pad to 512; rfft; power |X|^2; Kaldi mel banks on bins 0..255 (kaldi_mel_banks_f64);
    log(max(energy, FLT_EPSILON)).  knf does all of this in float32 (options, window and
    weights included); here everything is float64 with the nominal constants.
    """
    win, hop, n_fft, preemph, num_bins = 400, 160, 512, 0.97, 80
    x = np.asarray(y, dtype=np.float64) * 32768.0
    if len(x) < win:
        return np.zeros((0, num_bins))
    n_frames = 1 + (len(x) - win) // hop
    idx = np.arange(win)[None, :] + hop * np.arange(n_frames)[:, None]
    frames = x[idx]
    frames = frames - frames.mean(axis=1, keepdims=True)
    frames = np.concatenate([frames[:, :1] - preemph * frames[:, :1],
                             frames[:, 1:] - preemph * frames[:, :-1]], axis=1)
    i = np.arange(win)
    window = (0.5 - 0.5 * np.cos(2.0 * np.pi * i / (win - 1))) ** 0.85
    spec = np.fft.rfft(frames * window[None, :], n=n_fft, axis=1)
    power = (spec.real ** 2 + spec.imag ** 2)[:, : n_fft // 2]
    mel = power @ kaldi_mel_banks_f64(num_bins).T
    return np.log(np.maximum(mel, FLT_EPSILON))


NEMO_VERSIONS = {
    False: "NeMo >= 2.5 (features.py at v2.5.0rc0, unchanged on main at 8cfedd7, 2025-09-20)",
    True: "NeMo <= 2.4 (features.py at v2.4.0)",
}


def ref_nemo(y, n_mels, legacy):
    """numpy transcription of NeMo's FilterbankFeatures.forward (eval mode, one item, CPU)
    with the FastConformer / Parakeet AudioToMelSpectrogramPreprocessor configuration:
    sample_rate 16000, window_size 0.025 (400), window_stride 0.01 (160), window hann,
    n_fft 512, features n_mels, normalize per_feature, log true, dither 0 (NeMo dithers only
    in training mode), pad_to 0, preemph 0.97, log_zero_guard add 2**-24, mag_power 2,
    lowfreq 0, highfreq None (-> 8000), mel_norm slaney, exact_pad False, frame_splicing 1.

    Read from nemo/collections/asr/parts/preprocessing/features.py at both versions.  Both:
      * window: torch.hann_window(400, periodic=False), zero-padded by torch.stft to 512,
        centred (56 zeros each side);
      * preemphasis: x = cat(x[:, :1], x[:, 1:] - 0.97 * x[:, :-1]);
      * magnitude sqrt(re^2 + im^2) (guard 0 in eval), then pow(2);
      * fb = librosa.filters.mel(sr, n_fft=512, n_mels, fmin=0, fmax=8000, norm='slaney');
      * log(x + 2**-24);
      * normalize_batch per_feature over the first seq_len frames: mean, and std with an
        (n - 1) denominator, + 1e-5;
      * frames at or past seq_len masked to pad_value 0 (they are not features).
    v2.4.0 (legacy=True):
      * torch.stft(center=True) without pad_mode: torch's default, reflect padding by
        n_fft // 2 = 256, which torch refuses for inputs of 256 samples or fewer;
      * get_seq_len: (len + 2 * 256 - 512) // 160 + 1 = len // 160 + 1: every STFT frame.
    v2.5.0rc0 (legacy=False; commit 0fd4de5, "Improve ASR models' invariance to
    padding/batch size", July 2025):
      * torch.stft(..., pad_mode="constant"): zero padding;
      * get_seq_len lost its + 1: len // 160 valid frames; the last STFT frame is masked;
      * normalize_batch: x_std.masked_fill(x_std.isnan(), 0.0), so a single valid frame
        normalises to 0 / 1e-5 = 0 (normalize_batch raises ValueError for a length of 1
        only when torch.cuda.is_available(); this is the CPU behaviour);
      * inputs shorter than one hop have 0 valid frames.
    NeMo computes in float32; this transcription computes in float64.
    """
    sr, n_fft, win, hop = 16000, 512, 400, 160
    if legacy and len(y) <= n_fft // 2:
        raise ValueError("torch's reflect padding needs more than n_fft/2 = 256 samples")
    x = np.concatenate([y[:1], y[1:] - 0.97 * y[:-1]])
    xp = np.pad(x, n_fft // 2, mode="reflect" if legacy else "constant")
    n = np.arange(win)
    w = 0.5 - 0.5 * np.cos(2 * np.pi * n / (win - 1))  # symmetric Hann
    window = np.zeros(n_fft)
    left = (n_fft - win) // 2
    window[left:left + win] = w
    stft_frames = 1 + len(y) // hop
    valid = stft_frames if legacy else len(y) // hop
    idx = np.arange(n_fft)[None, :] + hop * np.arange(stft_frames)[:, None]
    frames = xp[idx] * window[None, :]
    spec = np.fft.rfft(frames, n=n_fft, axis=1)
    mag = np.sqrt(spec.real ** 2 + spec.imag ** 2)
    power = mag ** 2  # [T, 257]
    filters = librosa.filters.mel(sr=sr, n_fft=n_fft, n_mels=n_mels, fmin=0.0, fmax=8000.0,
                                  norm="slaney", dtype=np.float64)
    logmel = np.log(filters @ power.T + 2.0 ** -24)[:, :valid]  # [n_mels, valid]
    if valid == 0:
        return np.zeros((0, n_mels))
    mean = logmel.mean(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        std = np.sqrt(np.sum((logmel - mean) ** 2, axis=1, keepdims=True) / (valid - 1))
    if not legacy:
        std = np.where(np.isnan(std), 0.0, std)
    std = std + 1e-5
    return ((logmel - mean) / std).T


def ref_librosa_mel(y):
    S = librosa.feature.melspectrogram(y=y, sr=22050)
    return librosa.power_to_db(S, ref=1.0, amin=1e-10, top_db=80.0).T


def ref_librosa_mfcc(y):
    return librosa.feature.mfcc(y=y, sr=22050).T


def ref_power(y):
    if len(y) < 257:
        raise ValueError("reflect padding undefined for len <= 256")
    D = librosa.stft(y, n_fft=512, hop_length=160, win_length=400, window="hann",
                     center=True, pad_mode="reflect")
    return (np.abs(D) ** 2).T


def ref_psd(y):
    if len(y) < 256:
        raise ValueError("welch needs len >= nperseg=256")
    _, p = scipy.signal.welch(y, fs=16000, nperseg=256)
    return p[None, :]


KEYS_16K = {
    "whisper-80": (lambda y: ref_whisper(y, 80), "log_abs"),
    "whisper-128": (lambda y: ref_whisper(y, 128), "log_abs"),
    "kaldi-80": (ref_kaldi, "log_abs"),
    "kaldi-80-f64": (ref_kaldi_f64, "log_abs"),
    "nemo-80": (lambda y: ref_nemo(y, 80, legacy=False), "log_abs"),
    "nemo-128": (lambda y: ref_nemo(y, 128, legacy=False), "log_abs"),
    "nemo-legacy-80": (lambda y: ref_nemo(y, 80, legacy=True), "log_abs"),
    "nemo-legacy-128": (lambda y: ref_nemo(y, 128, legacy=True), "log_abs"),
    "power-512": (ref_power, "linear_rel"),
    "psd-welch": (ref_psd, "linear_rel"),
}
KEYS_22K = {
    "librosa-mel": (ref_librosa_mel, "log_abs"),
    "librosa-mfcc": (ref_librosa_mfcc, "log_abs"),
}


def refusal(key, n):
    """Inputs the matched code itself refuses, and so sonograph refuses too (tested as such)."""
    if key.startswith("nemo-legacy") and n <= 256:
        return ("NeMo <= 2.4 pads with torch's reflect padding, which needs more than "
                "n_fft/2 = 256 samples")
    return None


def applicable(key, name, n):
    """Length rules from the fixture spec (checked before running the reference)."""
    if key.startswith("whisper"):
        return n > 200, "whisper: torch reflect padding needs len > 200"
    if key == "power-512":
        return n >= 257, "power-512: reflect padding needs len >= 257"
    if key == "psd-welch":
        return n >= 256, "psd-welch: needs len >= nperseg 256"
    return True, ""


# --------------------------------------------------------------------------
# golden cases
# --------------------------------------------------------------------------


def reference_case(cases, skipped, refused, name, sr, y64, key, fn, compare):
    """Runs one reference on one signal and records its case, skip or refusal."""
    why = refusal(key, len(y64))
    if why is not None:
        refused.append({"name": f"{name}.{key}", "audio": f"audio/{name}.wav", "key": key,
                        "samples": int(len(y64)), "reason": why})
        return
    ok, why = applicable(key, name.rsplit("_", 1)[0], len(y64))
    if not ok:
        skipped.append((f"{name}.{key}", why))
        return
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = fn(y64)
    except Exception as e:  # noqa: BLE001
        skipped.append((f"{name}.{key}", f"reference raised {type(e).__name__}: {e}"))
        print(f"SKIP {name}.{key}: {type(e).__name__}: {e}")
        return
    if not np.all(np.isfinite(out)):
        skipped.append((f"{name}.{key}", "non-finite reference"))
        print(f"SKIP {name}.{key}: non-finite values")
        return
    rel = f"ref/{name}.{key}.npy"
    shape = save_ref(os.path.join(GOLDEN, rel), out)
    case = {
        "name": f"{name}.{key}",
        "audio": f"audio/{name}.wav",
        "key": key,
        "reference": rel,
        "sample_rate": sr,
        "samples": int(len(y64)),
        "frames": int(shape[0]),
        "bins": int(shape[1]),
        "compare": compare,
    }
    if key.startswith("nemo"):
        case["reference_code"] = NEMO_VERSIONS[key.startswith("nemo-legacy")]
    if key.startswith("nemo") and shape[0] == 1:
        case["note"] = ("one valid frame: NeMo >= 2.5 on a CPU gives zeros (NaN std -> 0, "
                        "+1e-5); with CUDA available normalize_batch raises ValueError")
    if key.startswith("nemo") and shape[0] == 0:
        case["note"] = "shorter than one hop: NeMo >= 2.5 has no valid frame"
    cases.append(case)


def update_keys(keys):
    """Recomputes the references of `keys` from the committed audio (tests/golden/audio),
    leaving every other case, the audio and tests/data as they are."""
    path = os.path.join(GOLDEN, "cases.json")
    manifest = json.load(open(path))
    all_keys = {**{k: (v, 16000) for k, v in KEYS_16K.items()},
                **{k: (v, 22050) for k, v in KEYS_22K.items()}}
    unknown = [k for k in keys if k not in all_keys]
    if unknown:
        sys.exit(f"unknown keys {unknown}; known: {list(all_keys)}")
    audio_order = []
    for c in manifest["cases"]:
        if c["audio"] not in audio_order:
            audio_order.append(c["audio"])
    for a in sorted(os.listdir(os.path.join(GOLDEN, "audio"))):
        if f"audio/{a}" not in audio_order:
            audio_order.append(f"audio/{a}")
    key_order = list(all_keys)
    for c in manifest["cases"]:
        if c["key"] in keys:
            os.remove(os.path.join(GOLDEN, c["reference"]))
    cases = [c for c in manifest["cases"] if c["key"] not in keys]
    skipped = [(s["name"], s["reason"]) for s in manifest["skipped"]
               if s["name"].rsplit(".", 1)[1] not in keys]
    refused = [r for r in manifest.get("refused", []) if r["key"] not in keys]
    for audio in audio_order:
        name = os.path.basename(audio)[:-len(".wav")]
        y32, sr = sf.read(os.path.join(GOLDEN, audio), dtype="float32", always_2d=False)
        for key in keys:
            (fn, compare), rate = all_keys[key]
            if rate == sr:
                reference_case(cases, skipped, refused, name, sr, y32.astype(np.float64), key,
                               fn, compare)
    cases.sort(key=lambda c: (audio_order.index(c["audio"]), key_order.index(c["key"])))
    manifest["cases"] = cases
    manifest["skipped"] = [{"name": n, "reason": r} for n, r in skipped]
    manifest["refused"] = refused
    manifest["versions"]["updated_keys"] = {k: current_versions() for k in keys}
    with open(path, "w") as f:
        json.dump(manifest, f, indent=2)
        f.write("\n")
    for k in keys:
        n = sum(c["key"] == k for c in cases)
        r = sum(x["key"] == k for x in refused)
        print(f"{k}: {n} cases, {r} refusals")


def build_golden(tmpdir):
    audio_dir = os.path.join(GOLDEN, "audio")
    ref_dir = os.path.join(GOLDEN, "ref")
    for d in (audio_dir, ref_dir):
        if os.path.isdir(d):
            shutil.rmtree(d)
        os.makedirs(d)

    cases, skipped, refused = [], [], []
    signals16 = None
    for sr, keys in ((16000, KEYS_16K), (22050, KEYS_22K)):
        sigs = make_signals(sr, tmpdir)
        if sr == 16000:
            signals16 = sigs
        for sname, y in sigs.items():
            name = f"{sname}_{sr}"
            apath = os.path.join(audio_dir, f"{name}.wav")
            y32 = write_float_wav(apath, y, sr)
            y64 = y32.astype(np.float64)
            for key, (fn, compare) in keys.items():
                reference_case(cases, skipped, refused, name, sr, y64, key, fn, compare)
    return cases, skipped, refused, signals16


# --------------------------------------------------------------------------
# decoding fixtures
# --------------------------------------------------------------------------


def quantise16(y):
    """Round to the int16 grid (k / 32768) so every >=16-bit lossless encoding decodes
    to exactly the same float values."""
    return np.clip(np.round(np.asarray(y, np.float64) * 32768.0), -32768, 32767).astype(np.int16)


def write_pcm(path, ints16, sr, subtype, fmt="WAV"):
    """Write int16-grid samples at the requested bit depth, bit-exactly.

    libsndfile scales float->int asymmetrically, so we always hand it integers:
    int16 arrays for PCM_16 / PCM_U8 (U8 keeps the top byte), int32 arrays
    (k << 16) for PCM_24 / PCM_32.
    """
    if subtype in ("PCM_24", "PCM_32"):
        data = ints16.astype(np.int32) << 16
    elif subtype == "FLOAT":
        data = ints16.astype(np.float32) / np.float32(32768.0)
    else:
        data = ints16
    sf_write(path, data, sr, subtype, fmt)


def sf_frames(path):
    info = sf.info(path)
    return info.frames, info.samplerate, info.channels, info.subtype


def ffprobe(path):
    out = subprocess.run(
        ["ffprobe", "-v", "error", "-select_streams", "a:0", "-show_entries",
         "stream=sample_rate,channels,duration_ts,codec_name,time_base", "-of", "json", path],
        capture_output=True, text=True, check=True).stdout
    return json.loads(out)["streams"][0]


def ffmpeg_decoded_frames(path, channels):
    raw = subprocess.run(["ffmpeg", "-v", "error", "-i", path, "-f", "f32le", "-"],
                         capture_output=True, check=True).stdout
    return len(raw) // (4 * channels)


def mp3_info(path):
    """MPEG frame count and LAME tag encoder delay / padding."""
    out = subprocess.run(["ffprobe", "-v", "error", "-count_packets", "-select_streams", "a:0",
                          "-show_entries", "stream=nb_read_packets", "-of", "json", path],
                         capture_output=True, text=True, check=True).stdout
    n = int(json.loads(out)["streams"][0]["nb_read_packets"])
    info = {"mp3_audio_frames": n, "samples_without_gapless": n * 1152}
    d = open(path, "rb").read(4096)
    i = d.find(b"LAME")
    if i >= 0:
        b = d[i + 21:i + 24]
        info["lame_encoder_delay"] = (b[0] << 4) | (b[1] >> 4)
        info["lame_padding"] = ((b[1] & 0xF) << 8) | b[2]
    return info


def resample_with_sox(y, sr_in, sr_out, tmpdir, tag):
    pin = os.path.join(tmpdir, f"rs_in_{tag}.wav")
    pout = os.path.join(tmpdir, f"rs_out_{tag}.wav")
    sf.write(pin, np.asarray(y, np.float32), sr_in, subtype="FLOAT")
    run(["sox", "-D", pin, "-r", str(sr_out), "-e", "floating-point", "-b", "32", pout])
    out, sr2 = sf.read(pout, dtype="float64", always_2d=False)
    assert sr2 == sr_out
    return out


def build_decode(speech16, tmpdir):
    if os.path.isdir(DATA):
        shutil.rmtree(DATA)
    ref_dir = os.path.join(DATA, "ref")
    os.makedirs(ref_dir)

    clip_s = 2.0
    clip16 = speech16[: int(clip_s * 16000)]
    if len(clip16) < int(clip_s * 16000):
        clip16 = np.pad(clip16, (0, int(clip_s * 16000) - len(clip16)))

    files = []

    def add(path, rate, channels, frames, lossless, encoding, refs=None, atol=None, **extra):
        entry = {"path": os.path.relpath(path, DATA), "rate": rate, "channels": channels,
                 "frames": int(frames), "lossless": lossless, "encoding": encoding}
        if refs is not None:
            entry["reference"] = refs
            entry["atol"] = atol
        entry.update(extra)
        files.append(entry)

    # --- 44.1 kHz stereo --------------------------------------------------
    y44 = resample_with_sox(clip16, 16000, 44100, tmpdir, "44")
    n44 = int(clip_s * 44100)
    y44 = np.pad(y44, (0, max(0, n44 - len(y44))))[:n44]
    left = quantise16(y44)
    right = quantise16(y44 * 0.5)
    st = np.stack([left, right], axis=1)  # [frames, 2] int16
    lref = os.path.join(ref_dir, "speech_44100_left.npy")
    rref = os.path.join(ref_dir, "speech_44100_right.npy")
    np.save(lref, (left.astype(np.float32) / np.float32(32768.0)))
    np.save(rref, (right.astype(np.float32) / np.float32(32768.0)))
    refs44 = ["ref/speech_44100_left.npy", "ref/speech_44100_right.npy"]
    ref_f = np.stack([np.load(lref), np.load(rref)], axis=1)

    base = os.path.join(DATA, "speech_44100_stereo")
    for suffix, subtype, enc, atol in (
        ("f32", "FLOAT", "wav float32", 0.0),
        ("s16", "PCM_16", "wav pcm s16le", 0.0),
        ("s24", "PCM_24", "wav pcm s24le", 0.0),
        ("s32", "PCM_32", "wav pcm s32le", 0.0),
        ("u8", "PCM_U8", "wav pcm u8", 1.0 / 128.0),
    ):
        p = f"{base}_{suffix}.wav"
        write_pcm(p, st, 44100, subtype)
        back, _ = sf.read(p, dtype="float32")
        err = float(np.max(np.abs(back.astype(np.float64) - ref_f)))
        assert err <= atol, (p, err)
        fr, sr_, ch, _ = sf_frames(p)
        extra = {}
        if suffix == "u8":
            extra["note"] = ("8-bit unsigned PCM holds the top byte of the int16 value "
                             "(truncation, (k >> 8)); decodes as (u - 128) / 128; "
                             f"max |err| vs reference = {err:.6g}")
        add(p, sr_, ch, fr, True, enc, refs44, atol, **extra)

    p = f"{base}.flac"
    write_pcm(p, st, 44100, "PCM_16", fmt="FLAC")
    back, _ = sf.read(p, dtype="float32")
    assert np.array_equal(back.astype(np.float64), ref_f)
    fr, sr_, ch, _ = sf_frames(p)
    add(p, sr_, ch, fr, True, "flac 16-bit", refs44, 0.0)

    s16 = f"{base}_s16.wav"
    p = f"{base}.mp3"
    run(["lame", "--quiet", "-b", "128", s16, p])
    pr = ffprobe(p)
    add(p, int(pr["sample_rate"]), int(pr["channels"]), ffmpeg_decoded_frames(p, 2), False,
        "mp3 (lame 3.100 CBR 128k)", source_frames=n44,
        ffprobe_duration_ts=int(pr.get("duration_ts", 0)), ffprobe_time_base=pr.get("time_base"),
        **mp3_info(p),
        note="frames = samples decoded by ffmpeg (honours the LAME gapless header); "
             "source_frames = frames of the encoded PCM; a decoder that ignores the "
             "LAME/Info header yields mp3_audio_frames * 1152 samples")
    p = f"{base}.ogg"
    run(["oggenc", "--quiet", "-q", "5", "--serial", "1", "-o", p, s16])
    pr = ffprobe(p)
    fr_sf = sf.info(p).frames
    add(p, int(pr["sample_rate"]), int(pr["channels"]), fr_sf, False, "ogg vorbis (oggenc q5)",
        source_frames=n44, ffmpeg_decoded_frames=ffmpeg_decoded_frames(p, 2),
        ffprobe_duration_ts=int(pr.get("duration_ts", 0)), ffprobe_time_base=pr.get("time_base"))

    # --- mono 16 / 48 / 8 kHz -------------------------------------------------
    q16 = quantise16(clip16)
    np.save(os.path.join(ref_dir, "speech_16000_mono.npy"), q16.astype(np.float32) / np.float32(32768.0))
    p = os.path.join(DATA, "speech_16000_mono_s16.wav")
    write_pcm(p, q16, 16000, "PCM_16")
    fr, sr_, ch, _ = sf_frames(p)
    add(p, sr_, ch, fr, True, "wav pcm s16le", ["ref/speech_16000_mono.npy"], 0.0)
    p = os.path.join(DATA, "speech_16000_mono_s16.flac")
    write_pcm(p, q16, 16000, "PCM_16", fmt="FLAC")
    fr, sr_, ch, _ = sf_frames(p)
    add(p, sr_, ch, fr, True, "flac 16-bit", ["ref/speech_16000_mono.npy"], 0.0)

    for rate in (48000, 8000):
        yr = resample_with_sox(clip16, 16000, rate, tmpdir, str(rate))
        qr = quantise16(yr)
        refname = f"ref/speech_{rate}_mono.npy"
        np.save(os.path.join(DATA, refname), qr.astype(np.float32) / np.float32(32768.0))
        p = os.path.join(DATA, f"speech_{rate}_mono_s16.wav")
        write_pcm(p, qr, rate, "PCM_16")
        fr, sr_, ch, _ = sf_frames(p)
        add(p, sr_, ch, fr, True, "wav pcm s16le", [refname], 0.0)

    # verify all lossless references round-trip exactly
    for e in files:
        if e["lossless"] and e["atol"] == 0.0:
            back, _ = sf.read(os.path.join(DATA, e["path"]), dtype="float32", always_2d=True)
            for c, r in enumerate(e["reference"]):
                assert np.array_equal(back[:, c], np.load(os.path.join(DATA, r))), e["path"]

    # --- README demo ----------------------------------------------------------
    p = os.path.join(DATA, "sample.flac")
    raw = os.path.join(tmpdir, "demo_raw.wav")
    run(["espeak-ng", "-v", "en-us", "-s", "150", "-w", raw, DEMO_TEXT])
    run(["sox", "-D", raw, "-r", "16000", "-b", "16", "-c", "1", p, "gain", "-n", "-1"])
    fr, sr_, ch, _ = sf_frames(p)
    add(p, sr_, ch, fr, True, "flac 16-bit", note="README demo clip (espeak-ng speech); no reference")

    manifest = {
        "generated_by": "scripts/golden.py",
        "note": ("All lossless files with atol 0 decode (int / 2^(bits-1), float as-is) to exactly "
                 "the float32 reference arrays (samples lie on the int16 grid k/32768). "
                 "right channel = round(0.5 * left_float * 32768) / 32768."),
        "files": files,
    }
    with open(os.path.join(DATA, "decode.json"), "w") as f:
        json.dump(manifest, f, indent=2)
        f.write("\n")
    return files


# --------------------------------------------------------------------------


def dir_size(d):
    total = 0
    for root, _, fs in os.walk(d):
        for f in fs:
            total += os.path.getsize(os.path.join(root, f))
    return total


def current_versions():
    return {
        "librosa": librosa.__version__,
        "kaldi_native_fbank": importlib.metadata.version("kaldi_native_fbank"),
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "soundfile": sf.__version__,
        "libsndfile": sf.__libsndfile_version__,
    }


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--only":
        update_keys(sys.argv[2].split(","))
        return
    if len(sys.argv) != 1:
        sys.exit("usage: golden.py            regenerate every fixture\n"
                 "       golden.py --only K1,K2  recompute these reference keys from the "
                 "committed audio")
    for tool in ("espeak-ng", "sox", "lame", "oggenc", "ffprobe", "ffmpeg"):
        if shutil.which(tool) is None:
            sys.exit(f"missing required tool: {tool}")
    with tempfile.TemporaryDirectory() as tmpdir:
        cases, skipped, refused, sig16 = build_golden(tmpdir)
        versions = {
            **current_versions(),
            "espeak-ng": tool_version(["espeak-ng", "--version"]),
            "sox": tool_version(["sox", "--version"]),
        }
        manifest = {
            "generated_by": "scripts/golden.py",
            "versions": versions,
            "kaldi_options": knf_options_dict(),
            "skipped": [{"name": n, "reason": r} for n, r in skipped],
            "refused": refused,
            "cases": cases,
        }
        with open(os.path.join(GOLDEN, "cases.json"), "w") as f:
            json.dump(manifest, f, indent=2)
            f.write("\n")
        files = build_decode(sig16["speech"], tmpdir)

    counts = {}
    for c in cases:
        counts[c["key"]] = counts.get(c["key"], 0) + 1
    print("cases per key:")
    for k in list(KEYS_16K) + list(KEYS_22K):
        print(f"  {k:16s} {counts.get(k, 0)}")
    print(f"total cases: {len(cases)}; skipped: {len(skipped)}; refused: {len(refused)}")
    for n, r in skipped:
        print(f"  skipped {n}: {r}")
    print(f"decode fixtures: {len(files)}")
    g, d = dir_size(GOLDEN), dir_size(DATA)
    print(f"size tests/golden: {g / 1e6:.2f} MB, tests/data: {d / 1e6:.2f} MB, total {(g + d) / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
