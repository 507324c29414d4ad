#!/usr/bin/env bash
# One call on the device machine (see bench/RESULTS-gpu.md). Build here first, stripped (the
# carried tree may hold 64 MiB; the binaries are about 20 MB each without debug info):
#   cargo build --release && cargo test -p sonograph-gpu --release --no-run
#   mkdir -p .gpubench && strip -o .gpubench/sonograph target/release/sonograph &&
#   strip -o .gpubench/parity "$(ls -t target/release/deps/parity-* | grep -v '\.d$' | head -1)"
# and the Vulkan loader debs into .gl (the device README says how); add .gl/ and .gpubench/ to
# .git/info/exclude, carry both, and run: bash bench/gpu/run.sh
set -u
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=${VK_DRIVER_FILES:-/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json}
out=${OUT:-/tmp}
date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
.gpubench/sonograph devices --json | tee "$out/devices.json"
SONOGRAPH_GOLDEN_DIR=$PWD/tests/golden .gpubench/parity --nocapture 2>&1 | grep -v XDG | tail -60 | tee "$out/parity.txt"
batch="--preset whisper --clips 64 --seconds 30 --repeat 5"
for p in f32 f64; do
  .gpubench/sonograph bench --device gpu $batch --precision $p | tee "$out/bench-gpu-$p.json"
done
.gpubench/sonograph bench --device cpu $batch | tee "$out/bench-cpu.json"
python3 bench/gpu/torchaudio_mel.py --clips 64 --seconds 30 | tee "$out/torchaudio.json"
# Long files: pieces of a 60-minute file on the GPU against the CPU's streaming.
bash bench/long_files.sh .gpubench/sonograph 60 cpu gpu | tee "$out/long-files.txt"
