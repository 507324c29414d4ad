#!/usr/bin/env bash
# The model stage on onnxruntime's CUDA provider (issue 11), on the lent GPU machine. Its image
# has CUDA 13's libraries (the nvidia-* wheels beside PyTorch) but only the CPU onnxruntime, and
# a call may carry 64 MiB in all with the working tree (about 16 MB): onnxruntime-gpu's
# libraries (186 MiB with zstd -19: the CUDA kernels hardly compress) go over in four chunks,
# one call each (2026-11-26 on an H100: bench/gpu/logs/2026-11-26-model-cuda.txt; a chunk call
# that found the machine gone, started afresh, costs about a minute of device time).
#
# Here, once:   bash bench/gpu/model_cuda.sh prepare
#   (downloads onnxruntime-gpu 1.31.1 from PyPI, packs its libraries into .ortgpu/00..03/
#   chunks of 47 MiB, builds the `cuda` test and binary, stripped, into .gpucuda/; add
#   .ortgpu/ and .gpucuda/ to .git/info/exclude)
# There, one call per chunk, each carrying only its own and copying it out of the tree (the
#   tree is laid out afresh each call; /tmp stays while the machine is warm, 30 s idle at most,
#   so make the calls back to back): `mkdir -p /tmp/ortchunks && cp .ortgpu/*/chunk-*
#   /tmp/ortchunks/` with carry [".ortgpu/00"], then [".ortgpu/01"], ...
# There, last, carrying .gpucuda (36 MB):
#   mkdir -p .ortgpu/all && cp /tmp/ortchunks/* .ortgpu/all/ && bash bench/gpu/model_cuda.sh run
#   (reassembles the library, runs the CUDA test against the CPU's outputs, then
#   `extract --model --model-device gpu:0` beside `--model-device cpu` on the same corpus)
set -euo pipefail
mode="${1:-}"
case "$mode" in
prepare)
  rm -rf /tmp/ortgpu && mkdir -p .ortgpu .gpucuda /tmp/ortgpu
  python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 -d /tmp/ortgpu onnxruntime-gpu==1.31.1
  (cd /tmp/ortgpu && rm -rf onnxruntime && unzip -q -o onnxruntime_gpu-1.31.1-cp312-*.whl \
    'onnxruntime/capi/libonnxruntime*.so*')
  rm -rf .ortgpu/*
  tar -C /tmp/ortgpu -cf - onnxruntime/capi | zstd -19 -T0 -q | split -b 47M -d -a 2 - .ortgpu/chunk-
  for f in .ortgpu/chunk-*; do n="${f##*-}"; mkdir -p ".ortgpu/$n"; mv "$f" ".ortgpu/$n/"; done
  cargo test -p sonograph-model --features cuda --release --no-run
  strip -o .gpucuda/asr-cuda "$(ls -t target/release/deps/asr-* | grep -v '\.d$' | head -1)"
  cargo build --release --features cuda --bin sonograph
  strip -o .gpucuda/sonograph-cuda target/release/sonograph
  cp "$(command -v zstd)" .gpucuda/
  mkdir -p .gpucuda/gl && cp .gl/*.deb .gpucuda/gl/  # the Vulkan loader (see run.sh)
  "${VENV:-.venv-models}/bin/python" -c "import sys; sys.path.insert(0, 'scripts'); \
import asr_reference; asr_reference.make_bench_encoder('.gpucuda/bench-encoder.onnx')"
  ls -la .ortgpu/* .gpucuda/
  ;;
run)
  set +e # one failing step must not cost the others their device time
  out=${OUT:-/tmp}
  mkdir -p /tmp/ortgpu
  # The image has no zstd: the one from here travels in .gpucuda.
  export PATH="$PWD/.gpucuda:$PATH"
  cat .ortgpu/*/chunk-* | zstd -d -q | tar -C /tmp/ortgpu -xf -
  lib=$(ls /tmp/ortgpu/onnxruntime/capi/libonnxruntime.so.*)
  # CUDA 13's libraries from the image's nvidia-* wheels.
  site=$(python3 -c 'import nvidia, os; print(os.path.dirname(nvidia.__path__[0]))')
  export LD_LIBRARY_PATH="$(ls -d "$site"/nvidia/*/lib | tr '\n' ':')${LD_LIBRARY_PATH:-}"
  export SONOGRAPH_ORT_LIB="$lib" SONOGRAPH_REQUIRE_ORT=1
  date -u; nvidia-smi --query-gpu=name,driver_version --format=csv
  # The CUDA session's outputs against the CPU's (within 1e-3), or why it did not start.
  (cd crates/model && SONOGRAPH_REQUIRE_CUDA=1 ../../.gpucuda/asr-cuda gpu_model_device --nocapture) 2>&1 | tee "$out/cuda-test.txt"
  # A job: the features on the CPU, the model on the GPU, against the model on the CPU, on the
  # 13 test files copied 64 times (832 items; the encoder is the 20 KB test model, so the times
  # say what the job costs around the model, not what a real encoder gains on the GPU).
  rm -rf /tmp/corpus && mkdir -p /tmp/corpus
  for i in $(seq -w 1 64); do mkdir /tmp/corpus/$i && cp tests/data/*.* /tmp/corpus/$i/; done
  rm -f /tmp/corpus/*/decode.json
  job() { # job NAME FEATURE-DEVICE MODEL-DEVICE PRESET MODEL: one timed job and its model report
    rm -rf "/tmp/enc-$1"
    TIMEFORMAT="$1 (--device $2 --model-device $3): %R s wall"
    { time .gpucuda/sonograph-cuda extract /tmp/corpus --out "/tmp/enc-$1" --preset "$4" \
      --device "$2" --model "$5" --model-device "$3" 2>&1 | tail -2; } 2>&1 |
      tee -a "$out/cuda-extract.txt"
    python3 -c "import json,sys; m=json.load(open(sys.argv[1]))['model']; \
print({k: m.get(k) for k in ('device','rows','batches','busy_s','starved_s','warmup_s')})" \
      "/tmp/enc-$1/__sonograph/report.json" | tee -a "$out/cuda-extract.txt"
  }
  tiny=crates/model/tests/data/asr/tdt/encoder-model.onnx
  job gpu:0 cpu gpu:0 nemo-128 $tiny
  job cpu cpu cpu nemo-128 $tiny
  # Row by row: the GPU's model outputs against the CPU's.
  python3 - <<'PY' 2>&1 | tee -a "$out/cuda-extract.txt"
import glob, numpy as np, pyarrow.parquet as pq
def rows(d):
    out = {}
    for f in glob.glob(d + "/**/*.parquet", recursive=True):
        t = pq.read_table(f, columns=["id", "model_outputs"]).to_pydict()
        out.update(zip(t["id"], t["model_outputs"]))
    return out
g, c = rows("/tmp/enc-gpu:0"), rows("/tmp/enc-cpu")
assert g.keys() == c.keys() and g, (len(g), len(c))
worst = max(float(np.max(np.abs(np.array(g[k]) - np.array(c[k])) / np.maximum(1, np.abs(np.array(c[k])))))
            for k in c)
print(f"model outputs, gpu:0 against cpu: {len(c)} rows, worst relative difference {worst:.2e}")
PY
  # One GPU for both sides: the features through Vulkan, the model through CUDA, on the same
  # H100 (the .gl loader debs travel in .gpucuda/gl).
  for f in .gpucuda/gl/*.deb; do dpkg -x "$f" /; done; ldconfig
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
  job shared gpu gpu:0 nemo-128 $tiny
  # The bench encoder of bench/models.py (scripts/asr_reference.py make_bench_encoder: 80 mels,
  # 512 wide, 3.3 MB; still small beside a real FastConformer): its busy time on each device.
  if [ -f .gpucuda/bench-encoder.onnx ]; then
    job bench-gpu cpu gpu:0 nemo .gpucuda/bench-encoder.onnx
    job bench-cpu cpu cpu nemo .gpucuda/bench-encoder.onnx
  fi
  ;;
*)
  echo "usage: bench/gpu/model_cuda.sh prepare|run" >&2
  exit 2
  ;;
esac
