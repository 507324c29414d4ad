#!/usr/bin/env python3
"""Compare sonograph's speed with librosa, kaldi-native-fbank, audioflux and soundfile.

Run through bench/compare.sh (venv, cargo build, environment).  Steps:
  1. corpus: N clips of 30 s mono 16 kHz 16-bit speech (espeak-ng, varied voices,
     rates, pitches, texts and gains, plus white noise ~-70 dBFS) as FLAC and WAV
     in <out>/corpus; reused when the parameters match.
  2. Whisper log-mel-80 on the in-memory float32 clips: `sonograph bench` (f64 and
     f32, 1 thread and all cores) vs the peers, each timed as the median of
     --repeat passes over all clips after one warm-up pass; peers on one thread and
     with a multiprocessing Pool (one single-threaded worker per core).
  3. Decoding: `sonograph bench --decode-only --threads 1` vs soundfile.read.
  4. Markdown table with ratios and the issue's two targets -> stdout and
     <out>/results.md (raw numbers in <out>/results.json).
"""

import os

# Before numpy is imported: single-threaded BLAS/OpenMP, and none of the OpenBLAS
# overrides some machines set (they slow numpy).
for _k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
    os.environ.pop(_k, None)
for _k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_k] = "1"

import argparse  # noqa: E402
import datetime  # noqa: E402
import importlib.metadata  # noqa: E402
import json  # noqa: E402
import multiprocessing  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from functools import partial  # noqa: E402
from pathlib import Path  # noqa: E402

import audioflux as af  # noqa: E402
import kaldi_native_fbank as knf  # noqa: E402
import librosa  # noqa: E402
import numpy as np  # noqa: E402
import soundfile as sf  # noqa: E402
from audioflux.type import (  # noqa: E402
    SpectralDataType,
    SpectralFilterBankNormalType,
    SpectralFilterBankStyleType,
    WindowType,
)

SR = 16000
PEERS = ("librosa", "kaldi-native-fbank", "audioflux", "soundfile")

# ---------------------------------------------------------------- corpus

SENTENCES = [
    "The quick brown fox jumps over the lazy dog near the riverbank.",
    "Please call Stella and ask her to bring these things with her from the store.",
    "Six spoons of fresh snow peas, five thick slabs of blue cheese, and maybe a snack for her brother Bob.",
    "We also need a small plastic snake and a big toy frog for the kids.",
    "She can scoop these things into three red bags, and we will go meet her Wednesday at the train station.",
    "In nineteen sixty nine, two astronauts walked on the surface of the moon.",
    "The committee will reconvene at half past four to review the quarterly budget.",
    "Would you mind turning the music down a little? I am trying to concentrate.",
    "Rain is expected to spread from the west overnight, clearing by mid morning.",
    "Her flight number is B A two seven three, departing at eleven fifteen from gate nine.",
    "A journey of a thousand miles begins with a single step.",
    "The experiment failed twice before the engineers found the loose cable.",
    "Bread, milk, eggs, coffee, and a jar of strawberry jam, please.",
    "Is it true that octopuses have three hearts and blue blood?",
    "The library closes early on Sundays and remains shut on public holidays.",
    "Turn left at the second roundabout, then continue straight for about two miles.",
    "Thunder rolled across the valley as the hikers hurried back to the cabin.",
    "Our new model reduces the error rate by almost forty percent on noisy recordings.",
    "Why did the chicken cross the road? Nobody really knows for certain.",
    "Seven hundred and forty two people attended the concert in the park last night.",
    "Speak clearly, pause between sentences, and do not rush the final paragraph.",
    "The museum's newest exhibit features ancient pottery from the Mediterranean coast.",
    "After lunch we walked along the harbour and watched the fishing boats come in.",
    "Temperatures will fall sharply tonight, so remember to cover the tomato plants.",
]
VOICES = ["en-us", "en-gb", "en-gb-scotland", "en-gb-x-rp", "en-029", "en-gb-x-gbclan",
          "en-gb-x-gbcwmd", "en-us"]
VARIANTS = ["m1", "f2", "m3", "f4", "m7", "f1", "m5", "f3"]


def synth(text, voice, speed, pitch, tmp):
    """espeak-ng -> sox -> float32 mono samples at SR."""
    wav = os.path.join(tmp, "utt.wav")
    subprocess.run(["espeak-ng", "-v", voice, "-s", str(speed), "-p", str(pitch), "-w", wav, text],
                   check=True)
    raw = subprocess.run(["sox", wav, "-t", "f32", "-r", str(SR), "-c", "1", "-"],
                         check=True, capture_output=True).stdout
    return np.frombuffer(raw, dtype=np.float32)


def make_corpus(out, n_clips, seconds):
    """Returns (flac paths, wav paths); regenerates only when the parameters change."""
    cdir = out / "corpus"
    flacs = [cdir / f"clip{i:02d}.flac" for i in range(n_clips)]
    wavs = [p.with_suffix(".wav") for p in flacs]
    manifest = cdir / "manifest.json"
    params = {"clips": n_clips, "seconds": seconds, "sr": SR, "version": 1,
              "espeak-ng": subprocess.run(["espeak-ng", "--version"], capture_output=True,
                                          text=True).stdout.strip()}
    if manifest.exists() and json.loads(manifest.read_text()) == params \
            and all(p.exists() for p in flacs + wavs):
        return flacs, wavs
    cdir.mkdir(parents=True, exist_ok=True)
    n = seconds * SR
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(n_clips):
            rng = np.random.default_rng(1000 + i)
            voice = f"{VOICES[i % len(VOICES)]}+{VARIANTS[(i * 3) % len(VARIANTS)]}"
            speed, pitch = int(rng.integers(130, 210)), int(rng.integers(25, 75))
            parts, have = [], 0
            while have < n:  # shuffled sentences, separated by short pauses, until 30 s
                text = " ".join(rng.permutation(SENTENCES)[:6])
                y = synth(text, voice, speed, pitch, tmp)
                parts += [y, np.zeros(int(rng.integers(SR // 10, SR // 2)), np.float32)]
                have += len(y) + len(parts[-1])
            y = np.concatenate(parts)[:n].astype(np.float64)
            y *= 10 ** (rng.uniform(-14, -2) / 20) / max(np.abs(y).max(), 1e-9)
            y += rng.standard_normal(n) * 10 ** (-70 / 20)
            pcm = np.clip(np.round(y * 32768), -32768, 32767).astype(np.int16)
            sf.write(flacs[i], pcm, SR, subtype="PCM_16", format="FLAC")
            sf.write(wavs[i], pcm, SR, subtype="PCM_16", format="WAV")
    manifest.write_text(json.dumps(params))
    return flacs, wavs


# ---------------------------------------------------------------- peers


def whisper_log(mel):
    """openai-whisper's log steps on a [80, T] power mel."""
    log = np.log10(np.maximum(mel, 1e-10))
    log = np.maximum(log, log.max() - 8.0)
    return (log + 4.0) / 4.0


def librosa_whisper(y):
    mel = librosa.feature.melspectrogram(y=y, sr=SR, n_fft=400, hop_length=160, n_mels=80,
                                         pad_mode="reflect")
    return whisper_log(mel[:, :-1])  # whisper drops the last STFT frame


def knf_fbank(y):
    opts = knf.FbankOptions()  # Kaldi fbank: povey window, pre-emphasis, 512-point FFT, ln
    opts.frame_opts.dither = 0.0
    opts.frame_opts.samp_freq = SR
    opts.mel_opts.num_bins = 80
    fb = knf.OnlineFbank(opts)
    fb.accept_waveform(SR, y * 32768.0)
    fb.input_finished()
    return np.stack([np.asarray(fb.get_frame(i)) for i in range(fb.num_frames_ready)])


_AF_MEL = None


def audioflux_whisper(y):
    # audioflux's FFT size is 2**radix2_exp: 512, not 400; it does not centre-pad.
    global _AF_MEL
    if _AF_MEL is None:  # built once per process, like a reused extractor
        _AF_MEL = af.MelSpectrogram(
            num=80, samplate=SR, low_fre=0.0, high_fre=SR / 2, radix2_exp=9,
            window_type=WindowType.HANN, slide_length=160, data_type=SpectralDataType.POWER,
            style_type=SpectralFilterBankStyleType.SLANEY,
            normal_type=SpectralFilterBankNormalType.AREA)
    return whisper_log(_AF_MEL.spectrogram(y))


FEATURES = {
    "librosa": (librosa_whisper, "melspectrogram n_fft 400 + whisper log (exact)"),
    "kaldi-native-fbank": (knf_fbank, "OnlineFbank 80, dither 0 (Kaldi fbank, n_fft 512)"),
    "audioflux": (audioflux_whisper, "MelSpectrogram 80 slaney, **n_fft 512**, + whisper log"),
}

CLIPS = []  # float32 clips; set before the Pool forks so workers inherit them


def _work(name, i):
    return len(FEATURES[name][0](CLIPS[i]))


def timed(fn, repeat):
    """Median seconds of `repeat` calls after one warm-up call."""
    fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


# ---------------------------------------------------------------- sonograph


def sonograph(bin_, paths, *args):
    out = subprocess.run([str(bin_), "bench", *map(str, paths), *args],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


# ---------------------------------------------------------------- report


def sh(*cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True).stdout.strip()
    except OSError:
        return "?"


def machine_info(bin_, ncores):
    model = next((ln.split(":", 1)[1].strip() for ln in sh("lscpu").splitlines()
                  if ln.startswith("Model name")), "?")
    vers = {p: importlib.metadata.version(p) for p in PEERS}
    vers["numpy"] = np.__version__
    try:
        from threadpoolctl import threadpool_info
        blas = "; ".join(f"{d['prefix']} ({d['internal_api']} {d.get('version') or '?'}, "
                         f"{d['num_threads']} thread(s))" for d in threadpool_info())
    except ImportError:
        blas = "threadpoolctl not installed"
    git = sh("git", "-C", str(Path(__file__).resolve().parent), "describe", "--always", "--dirty")
    return [
        f"- date: {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}",
        f"- CPU: {model}; {ncores} of {os.cpu_count()} logical CPUs usable; "
        f"1-min load average at start {os.getloadavg()[0]:.2f} (shared machines: noisy)",
        f"- {sh(str(bin_), '--version')} (git {git}); {sh('rustc', '--version')}",
        f"- Python {platform.python_version()}; "
        + ", ".join(f"{k} {v}" for k, v in vers.items()),
        f"- BLAS/OpenMP seen by threadpoolctl: {blas or 'none loaded'}",
        "- env: OMP/OPENBLAS/MKL_NUM_THREADS=1, OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset",
    ]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--bin", type=Path, required=True, help="target/release/sonograph")
    ap.add_argument("--out", type=Path, required=True, help="output folder (bench/out)")
    ap.add_argument("--clips", type=int, default=16)
    ap.add_argument("--seconds", type=int, default=30)
    ap.add_argument("--repeat", type=int, default=7)
    a = ap.parse_args()
    ncores = len(os.sched_getaffinity(0))
    rep = str(a.repeat)

    print(f"corpus: {a.clips} x {a.seconds} s ...", file=sys.stderr)
    flacs, wavs = make_corpus(a.out, a.clips, a.seconds)
    CLIPS.extend(sf.read(p, dtype="float32")[0] for p in wavs)
    audio_s = sum(len(c) for c in CLIPS) / SR
    lines = ["## Machine", ""] + machine_info(a.bin, ncores)
    rows = []  # (tool, config, threads, audio-s/s)

    # Sanity: the librosa peer computes the same features as sonograph's whisper preset.
    with tempfile.TemporaryDirectory() as tmp:
        npy = os.path.join(tmp, "f.npy")
        subprocess.run([str(a.bin), "features", str(flacs[0]), "--preset", "whisper",
                        "--out", npy], check=True)
        ours, ref = np.load(npy), librosa_whisper(CLIPS[0]).T
        parity = (f"sonograph `features --preset whisper` vs the librosa peer on clip00: shapes "
                  f"{ours.shape} / {ref.shape}, max |diff| "
                  f"{np.abs(ours - ref).max() if ours.shape == ref.shape else float('nan'):.2e}")

    print("sonograph extraction ...", file=sys.stderr)
    son = {}  # (precision, "1" or "all") -> audio-s/s
    for prec in ("f64", "f32"):
        for threads in (1, 0):
            r = sonograph(a.bin, flacs, "--preset", "whisper", "--threads", str(threads),
                          "--repeat", rep, "--precision", prec)
            son[prec, "1" if threads == 1 else "all"] = r["audio_seconds_per_second"]
            rows.append(("sonograph", f"whisper, --precision {prec}"
                         + (" (default)" if prec == "f64" else ""), r["threads"],
                         r["audio_seconds_per_second"]))

    for name, (fn, desc) in FEATURES.items():
        print(f"{name} ...", file=sys.stderr)
        t1 = timed(lambda: [fn(c) for c in CLIPS], a.repeat)
        rows.append((name, desc, 1, audio_s / t1))
    with multiprocessing.get_context("fork").Pool(ncores) as pool:
        for name, (fn, desc) in FEATURES.items():
            print(f"{name} x{ncores} processes ...", file=sys.stderr)
            tn = timed(lambda: pool.map(partial(_work, name), range(len(CLIPS)), chunksize=1),
                       a.repeat)
            rows.append((name, desc + ", Pool", ncores, audio_s / tn))

    print("decoding ...", file=sys.stderr)
    dec = []  # (tool, format, audio-s/s)
    for fmt, paths in (("FLAC", flacs), ("WAV", wavs)):
        r = sonograph(a.bin, paths, "--decode-only", "--threads", "1", "--repeat", rep)
        dec.append(("sonograph", fmt, r["audio_seconds_per_second"]))
        t = timed(lambda: [sf.read(p, dtype="float32") for p in paths], a.repeat)
        dec.append(("soundfile", fmt, audio_s / t))

    # ---- tables
    lines += ["", f"## Whisper log-mel-80 extraction ({a.clips} clips x {a.seconds} s = "
              f"{audio_s:.0f} s of audio, in memory; median of {a.repeat} after a warm-up)", "",
              "| tool | config | threads | audio-s per s (x realtime) | sonograph f64 / this "
              "| sonograph f32 / this |", "|---|---|---:|---:|---:|---:|"]
    for tool, desc, t, v in rows:
        k = "1" if t == 1 else "all"
        lines.append(f"| {tool} | {desc} | {t} | {v:,.0f} | {son[('f64', k)] / v:.2f} "
                     f"| {son[('f32', k)] / v:.2f} |")
    lines += ["", f"## Decoding (1 thread, median of {a.repeat})", "",
              "| tool | format | audio-s per s (x realtime) | sonograph / this |",
              "|---|---|---:|---:|"]
    for tool, fmt, v in dec:
        ours = next(x for t_, f, x in dec if t_ == "sonograph" and f == fmt)
        lines.append(f"| {tool} | {fmt} | {v:,.0f} | {ours / v:.2f} |")

    peers1 = {tool: v for tool, _, t, v in rows if tool != "sonograph" and t == 1}
    fastest = max(peers1, key=peers1.get)
    dec_d = {(t_, f): v for t_, f, v in dec}
    targets = [
        ("Whisper log-mel-80 on one thread >= 3x the fastest peer (default f64)",
         son["f64", "1"], fastest, peers1[fastest], 3.0),
        ("(same with --precision f32, for information)",
         son["f32", "1"], fastest, peers1[fastest], 3.0),
        ("FLAC decoding >= soundfile (1 thread)",
         dec_d[("sonograph", "FLAC")], "soundfile", dec_d[("soundfile", "FLAC")], 1.0),
    ]
    lines += ["", "## Targets", "", "| target | sonograph | peer | ratio | result |",
              "|---|---:|---:|---:|---|"]
    for label, ours, peer, pv, need in targets:
        ratio = ours / pv
        lines.append(f"| {label} | {ours:,.0f} | {peer} {pv:,.0f} | {ratio:.2f} "
                     f"| {'PASS' if ratio >= need else 'MISS'} |")
    lines += ["", "Notes:", "",
              f"- 1-min load average at the end: {os.getloadavg()[0]:.2f}.",
              f"- {parity}.",
              "- sonograph decodes the FLACs before timing; peers get the same samples (read "
              "from the WAVs as float32). Pool rows: one single-threaded worker per core, each "
              "clip a task, pool warmed first; only frame counts are sent back.",
              "- kaldi-native-fbank computes a Kaldi fbank (its closest feature), not Whisper's; "
              "audioflux cannot do a 400-point FFT (radix-2 only), so it runs n_fft 512 "
              "without centre padding."]

    md = "\n".join(lines) + "\n"
    print(md)
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "results.md").write_text(md)
    (a.out / "results.json").write_text(json.dumps(
        {"extraction": rows, "decoding": dec, "audio_seconds": audio_s}, indent=1))


if __name__ == "__main__":
    main()
