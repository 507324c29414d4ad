#!/usr/bin/env python3
"""Tiny random-weight NeMo-style ASR models and their references, for crates/model/tests/asr.rs.

No registry ships real Parakeet weights, so these test the plumbing, not accuracy: models with
the real input and output names and shapes of NeMo's FastConformer exports, in the folder
layout onnx-asr 0.12.0 reads, built with `onnx.helper` from seeded random weights:

- ctc/       model.onnx: audio_signal [B, 80, T] f32, length [B] int64 -> logprobs [B, T', V]
- ctc-fp16/  the same in float16 end to end (audio_signal and logprobs f16)
- tdt/       encoder-model.onnx: audio_signal [B, 128, T], length -> outputs [B, D, T'],
             encoded_lengths; decoder_joint-model.onnx: encoder_outputs [1, D, 1], targets
             [1, 1] int32, target_length [1] int32, input_states_1/2 [1, 1, H] -> outputs
             [1, 1, 1, V + 5] (tokens, then the durations 0..4), output_states_1/2

with T' = (T - 1) // 8 + 1. The encoder masks by `length` (a mean over the valid frames feeds
every output frame, and each output frame reads input frame 8t), so padding a batch must not
change an item's outputs, and a wrong length changes them all.

Features are the test's input: `sonograph features --preset nemo | nemo-128` of cuts of the
committed speech (the script runs the release binary: build it first), written as .npy. The
references are Python onnxruntime's outputs on them (each item alone, and all padded in one
batch) and onnx-asr's own decoding (`_encode`, `_decoding`, `_decode_tokens` of its
NemoConformerCtc / NemoConformerTdt, the batch padded as its recognize_batch pads).

  .venv-models/bin/python scripts/asr_reference.py [--models]   # --models: rebuild the models
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
from importlib.metadata import version

import numpy as np
import onnx
import onnxruntime as ort
import soundfile as sf
from onnx import TensorProto, helper, numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "crates", "model", "tests", "data", "asr")
# The binary that computes the features (SONOGRAPH_BIN, else the release build).
BIN = os.environ.get("SONOGRAPH_BIN", os.path.join(ROOT, "target", "release", "sonograph"))
OPSET = 17
SUB = 8
VOCAB = ["<unk>", "\u2581the", "\u2581a", "s", "ing", "\u2581c", "at", "\u2581s", "t", "e",
         "\u2581to", "o", "d", "\u2581and", "\u2581w", "n", "y", "'", "\u2581I", "er", ",",
         "\u2581is", ".", "\u2581mod", "el", "?", "\u2581", "ly", "<blk>"]
V = len(VOCAB)
DURATIONS = 5

# Items: (source, start s, duration s); cut from committed speech so the features are speech.
ITEMS = [
    ("crates/model/tests/data/vad/dialogue_16000.flac", 0.40, 0.31),
    ("crates/model/tests/data/vad/dialogue_16000.flac", 2.0, 0.777),
    ("tests/data/speech_16000_mono_s16.wav", 0.0, 2.0),
    ("crates/model/tests/data/vad/dialogue_16000.flac", 5.1, 3.05),
    ("crates/model/tests/data/vad/dialogue_16000.flac", 9.0, 1.23),
]


def w(rng, name, *shape, scale=1.0, dtype=np.float32):
    a = (rng.standard_normal(shape) * scale / np.sqrt(shape[0])).astype(dtype)
    return numpy_helper.from_array(a, name)


def encoder_graph(rng, n_mels, hidden, head, dtype):
    """audio_signal, length -> hidden states [B, T', H] (masked), and encoded lengths."""
    elem = TensorProto.FLOAT16 if dtype == np.float16 else TensorProto.FLOAT
    inits = [
        w(rng, "W1", n_mels, hidden, scale=1.5, dtype=dtype),
        w(rng, "W2", hidden, hidden, dtype=dtype),
        w(rng, "W3", hidden, hidden, dtype=dtype),
        numpy_helper.from_array(np.array([0], np.int64), "zero"),
        numpy_helper.from_array(np.array([1], np.int64), "one1"),
        numpy_helper.from_array(np.array(1, np.int64), "one"),
        numpy_helper.from_array(np.array(SUB, np.int64), "sub"),
        numpy_helper.from_array(np.array([2], np.int64), "axis_t"),
        numpy_helper.from_array(np.array([SUB], np.int64), "steps"),
        numpy_helper.from_array(np.array([2**62], np.int64), "big"),
    ]
    n = helper.make_node
    nodes = [
        # h1 = tanh(x^T W1): [B, T, H]
        n("Transpose", ["audio_signal"], ["xt"], perm=[0, 2, 1]),
        n("MatMul", ["xt", "W1"], ["h1p"]),
        n("Tanh", ["h1p"], ["h1"]),
        # mask over input frames: t < length -> [B, T, 1]
        n("Shape", ["audio_signal"], ["xs"]),
        n("Gather", ["xs", "axis_t"], ["tlen"], axis=0),
        n("Squeeze", ["tlen"], ["tlen0"]),
        n("Range", ["zero_s", "tlen0", "one"], ["trange"]),
        n("Unsqueeze", ["length", "one1"], ["len2"]),
        n("Less", ["trange", "len2"], ["maskb"]),
        n("Cast", ["maskb"], ["mask"], to=elem),
        n("Unsqueeze", ["mask", "minus1"], ["mask3"]),
        n("Mul", ["h1", "mask3"], ["h1m"]),
        # g = sum over valid frames / length: [B, H]
        n("ReduceSum", ["h1m", "one1"], ["gsum"], keepdims=0),
        n("Cast", ["length"], ["lenf"], to=elem),
        n("Unsqueeze", ["lenf", "one1"], ["lenf2"]),
        n("Div", ["gsum", "lenf2"], ["g"]),
        # every 8th frame: [B, T', H]
        n("Slice", ["h1", "zero", "big", "one1", "steps"], ["hs"]),
        n("MatMul", ["hs", "W2"], ["a"]),
        n("MatMul", ["g", "W3"], ["b2"]),
        n("Unsqueeze", ["b2", "one1"], ["b3"]),
        n("Add", ["a", "b3"], ["hp"]),
        n("Tanh", ["hp"], ["h"]),
        # encoded lengths and their mask
        n("Sub", ["length", "one"], ["lm1"]),
        n("Div", ["lm1", "sub"], ["ld"]),
        n("Add", ["ld", "one"], ["encoded_lengths"]),
        n("Shape", ["h"], ["hsh"]),
        n("Gather", ["hsh", "one1"], ["tout"], axis=0),
        n("Squeeze", ["tout"], ["tout0"]),
        n("Range", ["zero_s", "tout0", "one"], ["orange"]),
        n("Unsqueeze", ["encoded_lengths", "one1"], ["el2"]),
        n("Less", ["orange", "el2"], ["omaskb"]),
        n("Cast", ["omaskb"], ["omask"], to=elem),
        n("Unsqueeze", ["omask", "minus1"], ["omask3"]),
        n("Mul", ["h", "omask3"], [head]),
    ]
    inits += [
        numpy_helper.from_array(np.array(0, np.int64), "zero_s"),
        numpy_helper.from_array(np.array([-1], np.int64), "minus1"),
    ]
    inputs = [
        helper.make_tensor_value_info("audio_signal", elem, ["B", n_mels, "T"]),
        helper.make_tensor_value_info("length", TensorProto.INT64, ["B"]),
    ]
    return nodes, inits, inputs, elem


def make_ctc(rng, n_mels, dtype, path):
    nodes, inits, inputs, elem = encoder_graph(rng, n_mels, 24, "hmask", dtype)
    inits.append(w(rng, "Wc", 24, V, scale=4.0, dtype=dtype))
    # A blank bias so that blanks and tokens both occur.
    bias = np.zeros(V, dtype)
    bias[V - 1] = 1.0
    inits.append(numpy_helper.from_array(bias, "bc"))
    nodes += [
        helper.make_node("MatMul", ["hmask", "Wc"], ["lg0"]),
        helper.make_node("Add", ["lg0", "bc"], ["lg"]),
        helper.make_node("LogSoftmax", ["lg"], ["logprobs"], axis=-1),
    ]
    outputs = [helper.make_tensor_value_info("logprobs", elem, ["B", "T'", V])]
    save(nodes, inits, inputs, outputs, path)


def make_tdt_encoder(rng, n_mels, dim, path, hidden=24, scale=2.0):
    nodes, inits, inputs, elem = encoder_graph(rng, n_mels, hidden, "hmask", np.float32)
    inits.append(w(rng, "We", hidden, dim, scale=scale))
    nodes += [
        helper.make_node("MatMul", ["hmask", "We"], ["eo"]),
        helper.make_node("Transpose", ["eo"], ["outputs"], perm=[0, 2, 1]),
    ]
    outputs = [
        helper.make_tensor_value_info("outputs", elem, ["B", dim, "T'"]),
        helper.make_tensor_value_info("encoded_lengths", TensorProto.INT64, ["B"]),
    ]
    save(nodes, inits, inputs, outputs, path)


def make_decoder_joint(rng, dim, hidden, path):
    n = helper.make_node
    inits = [
        w(rng, "E", V, hidden, scale=3.0),
        w(rng, "A", hidden, hidden),
        w(rng, "Bm", hidden, hidden),
        w(rng, "C", hidden, hidden),
        w(rng, "Dm", hidden, hidden),
        w(rng, "Je", dim, hidden, scale=2.0),
        w(rng, "Jd", hidden, hidden, scale=2.0),
        w(rng, "Jo", hidden, V + DURATIONS, scale=4.0),
        numpy_helper.from_array(np.array([1, hidden], np.int64), "flat"),
        numpy_helper.from_array(np.array([1, 1, hidden], np.int64), "st"),
        numpy_helper.from_array(np.array([1, 1, 1, V + DURATIONS], np.int64), "oshape"),
    ]
    bias = np.zeros(V + DURATIONS, np.float32)
    bias[V - 1] = 1.5  # blank
    inits.append(numpy_helper.from_array(bias, "bj"))
    nodes = [
        n("Gather", ["E", "targets"], ["emb3"], axis=0),  # [1, 1, H]
        n("Reshape", ["emb3", "flat"], ["emb"]),
        n("Reshape", ["input_states_1", "flat"], ["s1in"]),
        n("Reshape", ["input_states_2", "flat"], ["s2in"]),
        n("MatMul", ["emb", "A"], ["x1"]),
        n("MatMul", ["s1in", "Bm"], ["y1"]),
        n("Add", ["x1", "y1"], ["z1"]),
        n("Tanh", ["z1"], ["s1"]),
        # target_length (always 1) scales the state, so the graph reads every input.
        n("Cast", ["target_length"], ["tlf"], to=TensorProto.FLOAT),
        n("Mul", ["s1", "tlf"], ["s1t"]),
        n("MatMul", ["s1t", "C"], ["x2"]),
        n("MatMul", ["s2in", "Dm"], ["y2"]),
        n("Add", ["x2", "y2"], ["z2"]),
        n("Tanh", ["z2"], ["s2"]),
        n("Reshape", ["s1t", "st"], ["output_states_1"]),
        n("Reshape", ["s2", "st"], ["output_states_2"]),
        n("Reshape", ["encoder_outputs", "flatd"], ["enc"]),
        n("MatMul", ["enc", "Je"], ["je"]),
        n("MatMul", ["s2", "Jd"], ["jd"]),
        n("Add", ["je", "jd"], ["jz"]),
        n("Tanh", ["jz"], ["jh"]),
        n("MatMul", ["jh", "Jo"], ["jo"]),
        n("Add", ["jo", "bj"], ["jb"]),
        n("Reshape", ["jb", "oshape"], ["outputs"]),
    ]
    inits.append(numpy_helper.from_array(np.array([1, dim], np.int64), "flatd"))
    inputs = [
        helper.make_tensor_value_info("encoder_outputs", TensorProto.FLOAT, [1, dim, 1]),
        helper.make_tensor_value_info("targets", TensorProto.INT32, [1, 1]),
        helper.make_tensor_value_info("target_length", TensorProto.INT32, [1]),
        helper.make_tensor_value_info("input_states_1", TensorProto.FLOAT, [1, 1, hidden]),
        helper.make_tensor_value_info("input_states_2", TensorProto.FLOAT, [1, 1, hidden]),
    ]
    outputs = [
        helper.make_tensor_value_info("outputs", TensorProto.FLOAT, [1, 1, 1, V + DURATIONS]),
        helper.make_tensor_value_info("output_states_1", TensorProto.FLOAT, [1, 1, hidden]),
        helper.make_tensor_value_info("output_states_2", TensorProto.FLOAT, [1, 1, hidden]),
    ]
    save(nodes, inits, inputs, outputs, path)


def save(nodes, inits, inputs, outputs, path):
    graph = helper.make_graph(nodes, "tiny", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="sonograph scripts/asr_reference.py")
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, path)
    print("wrote", path, os.path.getsize(path), "bytes")


def write_folder(name, model_type, n_mels):
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "vocab.txt"), "w", encoding="utf-8") as f:
        for i, t in enumerate(VOCAB):
            f.write(f"{t} {i}\n")
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump({"model_type": model_type, "features_size": n_mels,
                   "subsampling_factor": SUB, "max_tokens_per_step": 10}, f, indent=1)
    return d


def make_bench_encoder(path, n_mels=80, hidden=512, dim=512):
    """A larger encoder of the same graph, for bench/models.py: enough arithmetic per frame for
    onnxruntime's kernels, not the runner's plumbing, to dominate."""
    make_tdt_encoder(np.random.default_rng(99), n_mels, dim, path, hidden=hidden, scale=1.0)


def make_models():
    rng = np.random.default_rng(1234)
    d = write_folder("ctc", "nemo-conformer-ctc", 80)
    make_ctc(rng, 80, np.float32, os.path.join(d, "model.onnx"))
    d = write_folder("ctc-fp16", "nemo-conformer-ctc", 80)
    make_ctc(np.random.default_rng(1234), 80, np.float16, os.path.join(d, "model.onnx"))
    d = write_folder("tdt", "nemo-conformer-tdt", 128)
    make_tdt_encoder(rng, 128, 16, os.path.join(d, "encoder-model.onnx"))
    make_decoder_joint(rng, 16, 12, os.path.join(d, "decoder_joint-model.onnx"))


def features(preset):
    """sonograph's features of each item (frames x n_mels), through the release binary."""
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for k, (src, start, dur) in enumerate(ITEMS):
            x, sr = sf.read(os.path.join(ROOT, src), dtype="float32")
            assert sr == 16000
            cut = x[int(start * sr): int(start * sr) + int(dur * sr)]
            wav = os.path.join(tmp, f"{k}.wav")
            sf.write(wav, cut, sr, subtype="FLOAT")
            npy = os.path.join(tmp, f"{k}.npy")
            subprocess.run([BIN, "features", wav, "--preset", preset, "--out", npy], check=True)
            out.append(np.load(npy))
    return out


def padded(feats):
    """[B, n_mels, T] zero-padded and the lengths, as onnx-asr's preprocessors give them."""
    t = max(f.shape[0] for f in feats)
    x = np.zeros((len(feats), feats[0].shape[1], t), np.float32)
    for i, f in enumerate(feats):
        x[i, :, : f.shape[0]] = f.T
    return x, np.array([f.shape[0] for f in feats], np.int64)


def onnx_asr_decode(model_type, folder, feats):
    import onnx_asr
    asr = onnx_asr.load_model(model_type, folder, providers=["CPUExecutionProvider"]).asr
    x, lens = padded(feats)
    enc, enc_lens = asr._encode(x, lens)
    results = map(asr._decode_tokens, *zip(*asr._decoding(enc, enc_lens), strict=False))
    return [{"text": r.text, "tokens": r.tokens, "timestamps": r.timestamps} for r in results]


def run_alone_and_batched(path, feats, names, dtype=np.float32):
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    alone = []
    for f in feats:
        x, lens = padded([f])
        outs = sess.run(names, {"audio_signal": x.astype(dtype), "length": lens})
        alone.append(outs)
    x, lens = padded(feats)
    batched = sess.run(names, {"audio_signal": x.astype(dtype), "length": lens})
    return alone, batched


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", action="store_true", help="rebuild the tiny models")
    args = ap.parse_args()
    if args.models:
        make_models()
    meta = {"generator": "scripts/asr_reference.py", "onnxruntime": version("onnxruntime"),
            "onnx_asr": version("onnx-asr"), "onnx": version("onnx"), "numpy": version("numpy"),
            "items": [{"source": s, "start_s": a, "duration_s": d} for s, a, d in ITEMS]}
    for preset, n_mels in (("nemo", 80), ("nemo-128", 128)):
        feats = features(preset)
        for k, f in enumerate(feats):
            assert f.shape[1] == n_mels
            np.save(os.path.join(OUT, f"features_{n_mels}_{k}.npy"), f.astype(np.float32))
        meta[f"frames_{n_mels}"] = [f.shape[0] for f in feats]

    f80 = [np.load(os.path.join(OUT, f"features_80_{k}.npy")) for k in range(len(ITEMS))]
    f128 = [np.load(os.path.join(OUT, f"features_128_{k}.npy")) for k in range(len(ITEMS))]
    ref = dict(meta)
    # CTC, f32 and f16: logprobs of each item alone and in the padded batch.
    for name, dtype in (("ctc", np.float32), ("ctc-fp16", np.float16)):
        alone, batched = run_alone_and_batched(
            os.path.join(OUT, name, "model.onnx"), f80, ["logprobs"], dtype)
        lens = [(f.shape[0] - 1) // SUB + 1 for f in f80]
        ref[name] = {
            "alone": [a[0][0, :n].astype(np.float32).ravel().tolist() for a, n in zip(alone, lens)],
            "batched": [batched[0][i, :n].astype(np.float32).ravel().tolist()
                        for i, n in enumerate(lens)],
            "dim": V,
            "frames": lens,
        }
    ref["ctc"]["transcripts"] = onnx_asr_decode("nemo-conformer-ctc", os.path.join(OUT, "ctc"), f80)
    # The f16 model decoded by onnx-asr's CTC code on its logprobs widened to f32 (onnx-asr
    # asserts float32 outputs, so it cannot run an f16 export itself).
    import onnx_asr
    asr = onnx_asr.load_model("nemo-conformer-ctc", os.path.join(OUT, "ctc"),
                              providers=["CPUExecutionProvider"]).asr
    x, lens = padded(f80)
    lp16 = ort.InferenceSession(os.path.join(OUT, "ctc-fp16", "model.onnx")).run(
        ["logprobs"], {"audio_signal": x.astype(np.float16), "length": lens})[0].astype(np.float32)
    enc_lens = (lens - 1) // SUB + 1
    ref["ctc-fp16"]["transcripts"] = [
        {"text": r.text, "tokens": r.tokens, "timestamps": r.timestamps}
        for r in map(asr._decode_tokens, *zip(*asr._decoding(lp16, enc_lens), strict=False))]
    # TDT: encoder outputs (time-major, valid frames) alone and batched, and transcripts.
    alone, batched = run_alone_and_batched(
        os.path.join(OUT, "tdt", "encoder-model.onnx"), f128, ["outputs", "encoded_lengths"])
    ref["tdt"] = {
        "alone": [a[0][0, :, : int(a[1][0])].T.ravel().tolist() for a in alone],
        "batched": [batched[0][i, :, : int(batched[1][i])].T.ravel().tolist()
                    for i in range(len(f128))],
        "dim": int(batched[0].shape[1]),
        "frames": [int(n) for n in batched[1]],
        "transcripts": onnx_asr_decode("nemo-conformer-tdt", os.path.join(OUT, "tdt"), f128),
    }
    for name in ("ctc", "ctc-fp16", "tdt"):
        for t in ref[name]["transcripts"]:
            print(name, repr(t["text"]), len(t["tokens"]))
    with open(os.path.join(OUT, "reference.json"), "w") as f:
        json.dump(ref, f, separators=(",", ":"))
    print("wrote", os.path.join(OUT, "reference.json"))


if __name__ == "__main__":
    sys.exit(main())
