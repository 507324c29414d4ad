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
.gpubench/sonograph devices --json | tee -a "$out/results.txt"
SONOGRAPH_GOLDEN_DIR=$PWD/tests/golden .gpubench/parity --nocapture >"$out/parity.txt" 2>&1
grep -E "^test |panicked|assert|left|right|test result" "$out/parity.txt" | grep -v " ok$" | head -40
batch="--preset whisper --clips 64 --seconds 30 --repeat 5"
for p in f32 f64; do
  .gpubench/sonograph bench --device gpu $batch --precision $p | tee -a "$out/results.txt"
done
.gpubench/sonograph bench --device cpu $batch | tee -a "$out/results.txt"
# Where a GPU batch's time goes (host framing, upload, device run and readback, host finishing),
# at three batch sizes.
for clips in 8 64 256; do
  NO_COLOR=1 SONOGRAPH_LOG=sonograph_gpu::extractor=debug .gpubench/sonograph bench --device gpu \
    --preset whisper --clips $clips --seconds 30 --repeat 3 2>&1 | sed 's/\x1b\[[0-9;]*m//g' |
    sed -E 's/^[^ ]+ +DEBUG //; s/"batcher".*"median_seconds"/"median_seconds"/' |
    tee -a "$out/phases.txt" | tail -4
done
python3 bench/gpu/torchaudio_mel.py --clips 64 --seconds 30 | tee -a "$out/results.txt"
# Long files: pieces of a 60-minute file on the GPU against the CPU's streaming.
bash bench/long_files.sh .gpubench/sonograph 60 cpu gpu | tee -a "$out/results.txt"
# RF: the same dataset generated on the CPU and on the GPU must be bit-identical (issue 12); wall
# time of each on this machine's cores.
for device in cpu gpu; do
  rm -rf /dev/shm/iq-$device
  TIMEFORMAT="synth-iq $device: %R s wall, ${RF_COUNT:-4000} recordings of 1 s at 200 kHz"
  { time .gpubench/sonograph synth-iq --count ${RF_COUNT:-4000} --modulation qpsk --snr-db 10 \
    --seed 3 --out /dev/shm/iq-$device --device $device >/dev/null; } 2>&1 | tee -a "$out/results.txt"
done
(cd /dev/shm/iq-cpu && find . -name '*.sigmf-data' | sort | xargs cat | sha256sum) | tee -a "$out/results.txt"
(cd /dev/shm/iq-gpu && find . -name '*.sigmf-data' | sort | xargs cat | sha256sum) | tee -a "$out/results.txt"
# The model stage's CUDA execution provider needs onnxruntime-gpu; say what this image has.
python3 -c "import onnxruntime as o; print('onnxruntime', o.__version__, o.get_available_providers())" 2>&1 | tee -a "$out/results.txt"
