#!/usr/bin/env python3
"""sonograph-model against the Python references, side by side on the same inputs and machine.

1. VAD: silero-vad 6.2.3's get_speech_timestamps(audio, load_silero_vad(onnx=True)) against
   sonograph's streaming VadSegmenter (crates/model/examples/vad_bench.rs), both on the same
   float32 samples in memory (10 minutes of the committed dialogue, looped), both on one
   onnxruntime thread (silero-vad's OnnxWrapper sets one). Decoding is not timed on either side.
2. Encoder on the CPU: Python onnxruntime's InferenceSession.run against sonograph's
   ModelRunner::run_batch (crates/model/examples/encoder_bench.rs) on the same padded batch of
   sonograph nemo features (8 segments of 2-10 s) through an encoder of NeMo's input/output
   names with random weights (512 hidden; scripts/asr_reference.py make_bench_encoder), with the
   same thread count. ModelRunner's time includes its padding and transposes; Python's is the
   run alone, on a batch padded beforehand.

3. The model inside a dataset job: `sonograph extract --vad --model` (whole process) on the VAD
   file written to a WAV, through the encoder of 2., beside `sonograph vad` and
   `sonograph extract --vad` alone on the same file; from the job's report, the model side's
   busy time, its wait for the first batch, the time it was starved of rows after that, and
   the mean depth of its input queue (is the data side keeping the model fed?).

Medians of --repeats runs; the machine and its load average go with the figures. Run through
bench/models.sh, which builds the examples and the binary in release first.
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import time

import numpy as np
import onnxruntime as ort
import soundfile as sf
import torch
from silero_vad import get_speech_timestamps, load_silero_vad

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "bench", "out", "models")
EXAMPLES = os.path.join(ROOT, "target", "release", "examples")
sys.path.insert(0, os.path.join(ROOT, "scripts"))


def median_time(f, repeats):
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def bench_vad(minutes, repeats):
    x, sr = sf.read(os.path.join(ROOT, "crates/model/tests/data/vad/dialogue_16000.flac"),
                    dtype="float32")
    n = int(minutes * 60 * sr)
    audio = np.resize(x, n).astype(np.float32)
    raw = os.path.join(OUT, "vad.f32")
    audio.tofile(raw)
    model = load_silero_vad(onnx=True)
    t = torch.from_numpy(audio)
    py_segments = len(get_speech_timestamps(t, model))
    py = median_time(lambda: get_speech_timestamps(t, model), repeats)
    out = subprocess.run([os.path.join(EXAMPLES, "vad_bench"), raw, str(sr), str(repeats)],
                         check=True, capture_output=True, text=True).stdout
    rs = json.loads(out)
    assert rs["segments"] == py_segments, (rs, py_segments)
    audio_s = n / sr
    return {"audio_s": audio_s, "segments": py_segments,
            "python_s": py, "python_rtf": audio_s / py,
            "sonograph_s": rs["median_s"], "sonograph_rtf": rs["rtf"],
            "speedup": py / rs["median_s"]}


def bench_encoder(threads, repeats):
    import asr_reference
    model = os.path.join(OUT, "bench-encoder.onnx")
    asr_reference.make_bench_encoder(model)
    rng = np.random.default_rng(5)
    frames = [int(f) for f in rng.integers(200, 1000, 8)]
    feats = [rng.standard_normal((f, 80)).astype(np.float32) for f in frames]
    raw = os.path.join(OUT, "rows.f32")
    np.concatenate([f.ravel() for f in feats]).tofile(raw)
    x, lens = asr_reference.padded(feats)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
    feed = {"audio_signal": x, "length": lens}
    sess.run(None, feed)
    py = median_time(lambda: sess.run(None, feed), repeats)
    out = subprocess.run(
        [os.path.join(EXAMPLES, "encoder_bench"), model, "80", str(threads), str(repeats), raw]
        + [str(f) for f in frames], check=True, capture_output=True, text=True).stdout
    rs = json.loads(out)
    audio_s = sum(frames) / 100
    return {"rows": len(frames), "frames": sum(frames), "audio_s": audio_s, "threads": threads,
            "python_s": py, "sonograph_s": rs["median_s"], "ratio": rs["median_s"] / py}


def bench_extract(minutes, repeats, model):
    sonograph = os.path.join(ROOT, "target", "release", "sonograph")
    x, sr = sf.read(os.path.join(ROOT, "crates/model/tests/data/vad/dialogue_16000.flac"),
                    dtype="float32")
    corpus = os.path.join(OUT, "extract-corpus")
    os.makedirs(corpus, exist_ok=True)
    sf.write(os.path.join(corpus, "long.wav"), np.resize(x, int(minutes * 60 * sr)), sr,
             subtype="PCM_16")
    audio_s = minutes * 60

    def job(extra, out):
        def run():
            subprocess.run(["rm", "-rf", out], check=True)
            subprocess.run([sonograph, "extract", corpus, "--out", out, "--preset", "nemo",
                            "--device", "cpu", "--vad"] + extra, check=True,
                           capture_output=True)
        return run

    vad_out = os.path.join(OUT, "vad.jsonl")
    vad = median_time(lambda: subprocess.run(
        [sonograph, "vad", os.path.join(corpus, "long.wav"), "--out", vad_out], check=True,
        capture_output=True), repeats)
    plain_out = os.path.join(OUT, "extract-vad")
    plain = median_time(job([], plain_out), repeats)
    model_out = os.path.join(OUT, "extract-vad-model")
    with_model = median_time(job(["--model", model, "--model-batch", "8"], model_out), repeats)
    with open(os.path.join(model_out, "__sonograph", "report.json")) as f:
        report = json.load(f)
    m = report["model"]
    depths = [d["depth"] for d in m["queue_depth"]]
    return {"audio_s": audio_s, "rows": m["rows"], "vad_s": vad, "extract_vad_s": plain,
            "extract_vad_model_s": with_model, "model_busy_s": m["busy_s"],
            "model_warmup_s": m["warmup_s"], "model_starved_s": m["starved_s"],
            "queue_capacity": m["queue_capacity"],
            "queue_depth_mean": float(np.mean(depths)) if depths else 0.0,
            "last_wall_s": report["wall_seconds"]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)
    load = os.getloadavg()
    vad = bench_vad(args.minutes, args.repeats)
    enc = bench_encoder(args.threads, args.repeats)
    job = bench_extract(args.minutes, args.repeats, os.path.join(OUT, "bench-encoder.onnx"))
    result = {"machine": f"{cpu_name()}, {os.cpu_count()} cores",
              "load_before": load, "load_after": os.getloadavg(),
              "onnxruntime": ort.__version__, "vad": vad, "encoder": enc, "extract": job}
    print(json.dumps(result, indent=1))
    print(f"VAD, {vad['audio_s']:.0f} s of audio, {vad['segments']} segments, one thread:")
    print(f"  silero-vad (Python) {vad['python_s']:.2f} s (RTF {vad['python_rtf']:.0f}x real time)")
    print(f"  sonograph           {vad['sonograph_s']:.2f} s (RTF {vad['sonograph_rtf']:.0f}x real time)"
          f"  -> {vad['speedup']:.2f}x faster")
    print(f"Encoder, {enc['rows']} rows, {enc['frames']} frames, {enc['threads']} threads:")
    print(f"  Python onnxruntime {enc['python_s'] * 1000:.1f} ms;  sonograph ModelRunner "
          f"{enc['sonograph_s'] * 1000:.1f} ms  -> ratio {enc['ratio']:.2f}")
    print(f"A job, {job['audio_s']:.0f} s of audio, {job['rows']} speech segments (whole process):")
    print(f"  sonograph vad                  {job['vad_s']:.2f} s")
    print(f"  sonograph extract --vad        {job['extract_vad_s']:.2f} s")
    print(f"  ... --model (encoder, batch 8) {job['extract_vad_model_s']:.2f} s; the model side "
          f"busy {job['model_busy_s']:.2f} s, waited {job['model_warmup_s']:.2f} s for its first "
          f"batch and {job['model_starved_s']:.2f} s for rows after; queue depth mean "
          f"{job['queue_depth_mean']:.1f} of {job['queue_capacity']}")


if __name__ == "__main__":
    main()
