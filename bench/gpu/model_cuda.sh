#!/usr/bin/env bash
# The model stage on onnxruntime's CUDA provider (issue 11), on the lent GPU machine. Its image
# has CUDA 13's libraries (the nvidia-* wheels beside PyTorch) but only the CPU onnxruntime, and
# a call may carry 64 MiB in all with the working tree (about 16 MB): onnxruntime-gpu's
# libraries (186 MiB with zstd -19: the CUDA kernels hardly compress) go over in five chunks,
# one call each, and stay there while the machine is warm (not checked yet: if a later call
# finds an earlier chunk gone, they must go in one warm stretch or not at all).
#
# Here, once:   bash bench/gpu/model_cuda.sh prepare
#   (downloads onnxruntime-gpu 1.31.1 from PyPI, packs its libraries into .ortgpu/00..04/
#   chunks of 40 MiB, builds the `cuda` test and binary, stripped, into .gpucuda/; add
#   .ortgpu/ and .gpucuda/ to .git/info/exclude)
# There, one call per chunk, each carrying only its own: run `ls .ortgpu` with carry
#   [".ortgpu/00"], then [".ortgpu/01"], ...
# There, last, carrying .gpucuda (36 MB):   bash bench/gpu/model_cuda.sh run
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
  tar -C /tmp/ortgpu -cf - onnxruntime/capi | zstd -19 -T0 -q | split -b 40M -d -a 2 - .ortgpu/chunk-
  for f in .ortgpu/chunk-*; do n="${f##*-}"; mkdir -p ".ortgpu/$n"; mv "$f" ".ortgpu/$n/"; done
  cargo test -p sonograph-model --features cuda --release --no-run
  strip -o .gpucuda/asr-cuda "$(ls -t target/release/deps/asr-* | grep -v '\.d$' | head -1)"
  cargo build --release --features cuda --bin sonograph
  strip -o .gpucuda/sonograph-cuda target/release/sonograph
  ls -la .ortgpu/* .gpucuda/
  ;;
run)
  out=${OUT:-/tmp}
  mkdir -p /tmp/ortgpu
  cat .ortgpu/*/chunk-* | zstd -d -q | tar -C /tmp/ortgpu -xf -
  lib=$(ls /tmp/ortgpu/onnxruntime/capi/libonnxruntime.so.*)
  # CUDA 13's libraries from the image's nvidia-* wheels.
  site=$(python3 -c 'import nvidia, os; print(os.path.dirname(nvidia.__path__[0]))')
  export LD_LIBRARY_PATH="$(ls -d "$site"/nvidia/*/lib | tr '\n' ':')${LD_LIBRARY_PATH:-}"
  export SONOGRAPH_ORT_LIB="$lib" SONOGRAPH_REQUIRE_ORT=1
  date -u; nvidia-smi --query-gpu=name,driver_version --format=csv
  # The CUDA session's outputs against the CPU's (within 1e-3), or why it did not start.
  (cd crates/model && ../../.gpucuda/asr-cuda gpu_model_device --nocapture) 2>&1 | tee "$out/cuda-test.txt"
  # A job: the features on the CPU, the model on the GPU, against the model on the CPU.
  for device in gpu:0 cpu; do
    rm -rf "/tmp/enc-$device"
    .gpucuda/sonograph-cuda extract tests/data --out "/tmp/enc-$device" --preset nemo-128 \
      --device cpu --model crates/model/tests/data/asr/tdt/encoder-model.onnx \
      --model-device "$device" 2>&1 | tail -2 | tee -a "$out/cuda-extract.txt"
    python3 -c "import json,sys; m=json.load(open(sys.argv[1]))['model']; \
print({k: m[k] for k in ('device','rows','batches','busy_s','starved_s','warmup_s')})" \
      "/tmp/enc-$device/__sonograph/report.json" | tee -a "$out/cuda-extract.txt"
  done
  ;;
*)
  echo "usage: bench/gpu/model_cuda.sh prepare|run" >&2
  exit 2
  ;;
esac
