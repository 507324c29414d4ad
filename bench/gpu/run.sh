#!/usr/bin/env bash
# The one call on a lent GPU machine (issue 18; see bench/RESULTS-gpu.md). Prepare here first:
# bash bench/gpu/prepare.sh; then run with carry [".gpubench", ".gl"] and timeout_s 420:
#   bash bench/gpu/run.sh
# and at once after it (the wheel does not fit in the same call's 64 MiB), with carry
# [".gpuwheel", ".gl"] and timeout_s 240, the Loader's data GPU alone:
#   bash bench/gpu/run.sh loader
# Every step has its own timeout and the script goes on past a failed one; about 4-5 minutes.
# Raw output lands in $OUT (results.txt, parity.txt, phases.txt): commit it under
# bench/gpu/logs/ and the table in bench/RESULTS-gpu.md.
set -u
for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
export VK_DRIVER_FILES=${VK_DRIVER_FILES:-/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json}
export NODEVICE_SELECT=1
out=${OUT:-/tmp}
# prepare.sh sends the binaries xz-compressed.
python3 - <<'PY'
import glob, lzma, os, shutil
for packed in glob.glob(".gpubench/*.xz"):
    with lzma.open(packed) as src, open(packed[:-3], "wb") as dst:
        shutil.copyfileobj(src, dst)
    os.chmod(packed[:-3], 0o755)
PY
bin=.gpubench/sonograph
log() { tee -a "$out/results.txt"; }
step() { echo "== $*" | log; }

step "machine"
date -u | log
nvidia-smi --query-gpu=name,memory.total,driver_version,pcie.link.gen.current,pcie.link.width.current --format=csv | log
nproc | log
# The adapter's memory heaps: is there a host-visible device-local heap (resizable BAR), which
# would let mapped storage buffers skip staging?
timeout 20 vulkaninfo 2>/dev/null | sed -n '/VkPhysicalDeviceMemoryProperties/,/memoryTypes/p' | grep -E "heap|size|flags|DEVICE_LOCAL|HOST" | head -30 | log
[ -x $bin ] && timeout 60 $bin devices --json | log

loader() {
  step "Loader: a data GPU against every core (issue 21: NeMo log-mel with SpecAugment, one epoch)"
  local wheel
  wheel=$(ls .gpuwheel/sonograph-*.whl 2>/dev/null | head -1)
  if [ -z "$wheel" ]; then
    echo "no wheel carried: the Loader runs in a call of its own (bash bench/gpu/run.sh loader, carrying .gpuwheel and .gl)" | log
    return
  fi
  # A wheel is a zip: unpacked here, no pip needed.
  python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall("/tmp/sgpy")' "$wheel"
  PYTHONPATH=/tmp/sgpy NODEVICE_SELECT=1 timeout 150 python3 bench/gpu/loader_gpu.py --clips 3000 2>&1 | tail -3 | log
}
if [ "${1:-}" = loader ]; then
  loader
  ls "$out"
  exit 0
fi

step "parity (150 s at most; every thread's stack dumped if it hangs)"
SONOGRAPH_GOLDEN_DIR=$PWD/tests/golden .gpubench/parity --nocapture >"$out/parity.txt" 2>&1 &
pid=$!
for _ in $(seq 150); do kill -0 $pid 2>/dev/null || break; sleep 1; done
if kill -0 $pid 2>/dev/null; then
  echo "parity HUNG after 150 s: stacks in parity-hang.txt" | log
  { for t in /proc/$pid/task/*; do echo "--- thread $(cat "$t/comm") $(basename "$t")"; cat "$t/wchan" 2>/dev/null; echo; cat "$t/stack" 2>/dev/null; done
    command -v gdb >/dev/null && timeout 60 gdb -p $pid -batch -ex "thread apply all bt" 2>&1; } >"$out/parity-hang.txt"
  kill -9 $pid
fi
wait $pid 2>/dev/null
grep -E "^test |panicked|test result" "$out/parity.txt" | grep -v " ok$" | head -30 | log
timeout 120 .gpubench/transfer --nocapture 2>&1 | grep -E "test result|panicked" | log

step "host to host and resident, sonograph (gpu f32/f64, cpu on all cores) and torchaudio (pageable, pinned, resident)"
for preset in whisper nemo; do
  for clips in 8 64 256; do
    size="--preset $preset --clips $clips --seconds 30 --repeat 5"
    for p in f32 f64; do
      timeout 90 $bin bench --device gpu $size --precision $p 2>/dev/null | python3 -c '
import json, sys
for l in sys.stdin:
    r = json.loads(l); t = r.get("transfer") or {}
    print(json.dumps({"sonograph": r["device"], "preset": sys.argv[1], "clips": r["items"],
        "host_to_host": round(r["audio_seconds_per_second"]), "median_s": r["median_seconds"],
        "kernel_resident": t.get("kernel_audio_seconds_per_second"),
        "chunks_per_run": t.get("chunks_per_run"), "filled_while_busy": t.get("chunks_filled_while_busy"),
        "staging_allocations": t.get("staging_allocations_during_runs"),
        "host_ms_per_run": {k: round(1e3 * t[f"{k}_seconds_per_run"], 2) for k in ("fill", "wait", "finish")
                            if f"{k}_seconds_per_run" in t}}))' "$preset" | log
    done
    timeout 90 $bin bench --device cpu $size 2>/dev/null | python3 -c '
import json, sys
for l in sys.stdin:
    r = json.loads(l)
    print(json.dumps({"sonograph": r["device"], "preset": sys.argv[1], "clips": r["items"],
        "host_to_host": round(r["audio_seconds_per_second"]), "median_s": r["median_seconds"]}))' "$preset" | log
    timeout 120 python3 bench/gpu/torchaudio_mel.py --preset "$preset" --clips "$clips" --seconds 30 --repeat 10 2>&1 | tail -1 | log
  done
done
# 16-bit clips (a 16-bit WAV corpus): sent to the device as 16-bit samples (NeMo's too, now
# that the kernels pre-emphasise its signal; in f64, where its normalisation runs on the
# device). Beside torchaudio's pinned int16 figure above.
for run in "whisper f32 64" "whisper f32 256" "nemo f64 64"; do
  set -- $run
  timeout 90 $bin bench --device gpu --preset $1 --clips $3 --seconds 30 --repeat 5 \
    --precision $2 --pcm16 2>/dev/null | python3 -c '
import json, sys
r = json.loads(sys.stdin.readline()); t = r.get("transfer") or {}
print(json.dumps({"sonograph_pcm16": r["device"], "preset": sys.argv[1], "clips": r["items"],
    "host_to_host": round(r["audio_seconds_per_second"]),
    "sample_mb_per_run": round(t.get("sample_bytes_per_run", 0) / 2**20, 1),
    "pcm16_chunks_per_run": t.get("pcm16_chunks_per_run"), "chunks_per_run": t.get("chunks_per_run"),
    "host_ms_per_run": {k: round(1e3 * t[f"{k}_seconds_per_run"], 2) for k in ("fill", "wait", "finish")}}))' "$1" | log
done
# The last session's binary, where one was carried (.gpubench/sonograph-before): the same
# batches on the same machine, so that a change's gain is not machine-to-machine noise.
if [ -x .gpubench/sonograph-before ]; then
  for preset in whisper nemo; do
    timeout 60 .gpubench/sonograph-before bench --device gpu --preset $preset --clips 64 --seconds 30 \
      --repeat 5 --precision f32 2>/dev/null | python3 -c '
import json, sys
r = json.loads(sys.stdin.readline()); t = r.get("transfer") or {}
print(json.dumps({"before": r["device"], "preset": sys.argv[1], "clips": r["items"],
    "host_to_host": round(r["audio_seconds_per_second"]),
    "kernel_resident": t.get("kernel_audio_seconds_per_second")}))' "$preset" | log
  done
fi
# The chunk size (32 MiB by default): smaller chunks overlap more of a batch's filling and
# finishing (a batch's first two fills and last two finishes overlap nothing) but give each
# step fewer items to finish side by side; larger ones the reverse. And mimalloc keeping freed
# memory committed: do the rows' fresh allocations fault pages in every run?
for mb in 8 16 64; do
  SONOGRAPH_GPU_CHUNK_MB=$mb timeout 60 $bin bench --device gpu --preset whisper --clips 64 \
    --seconds 30 --repeat 5 --precision f32 2>/dev/null | python3 -c '
import json, sys
r = json.loads(sys.stdin.readline()); t = r.get("transfer") or {}
print(json.dumps({"chunk_mb": int(sys.argv[1]), "host_to_host": round(r["audio_seconds_per_second"]),
    "chunks_per_run": t.get("chunks_per_run"),
    "host_ms_per_run": {k: round(1e3 * t[f"{k}_seconds_per_run"], 2) for k in ("fill", "wait", "finish")}}))' "$mb" | log
done
# The whole-row steps (Whisper's max - 8 clamp and (x + 4) / 4 from 16-bit clips; NeMo's
# per-feature normalisation, in f64) on the host, as before they ran on the device: what the
# device's steps save of the host's finishing.
for run in "whisper f32 --pcm16" "nemo f64"; do
  set -- $run
  for steps in host device; do
    SONOGRAPH_GPU_ITEM_STEPS=$steps timeout 60 $bin bench --device gpu --preset $1 --clips 64 \
      --seconds 30 --repeat 5 --precision $2 ${3:-} 2>/dev/null | python3 -c '
import json, sys
r = json.loads(sys.stdin.readline()); t = r.get("transfer") or {}
print(json.dumps({"item_steps_on": sys.argv[1], "preset": sys.argv[2], "precision": sys.argv[3],
    "host_to_host": round(r["audio_seconds_per_second"]),
    "host_ms_per_run": {k: round(1e3 * t[f"{k}_seconds_per_run"], 2) for k in ("fill", "wait", "finish")}}))' "$steps" "$1" "$2" | log
  done
done
# The rows back as f16 for a job that stores f16 (`--dtype f16`): half the 58 MiB of rows of a
# 64-clip Whisper batch (16-bit clips, the steps on the device), beside the same as f32.
for dtype in f32 f16; do
  timeout 60 $bin bench --device gpu --preset whisper --clips 64 --seconds 30 --repeat 5 \
    --precision f32 --pcm16 --dtype $dtype 2>/dev/null | python3 -c '
import json, sys
r = json.loads(sys.stdin.readline()); t = r.get("transfer") or {}
print(json.dumps({"rows_as": sys.argv[1], "host_to_host": round(r["audio_seconds_per_second"]),
    "row_mb_per_run": round(t.get("row_bytes_per_run", 0) / 2**20, 1),
    "f16_chunks_per_run": t.get("f16_chunks_per_run"), "chunks_per_run": t.get("chunks_per_run"),
    "host_ms_per_run": {k: round(1e3 * t[f"{k}_seconds_per_run"], 2) for k in ("fill", "wait", "finish")}}))' "$dtype" | log
done
MIMALLOC_PURGE_DELAY=-1 timeout 60 $bin bench --device gpu --preset whisper --clips 64 \
  --seconds 30 --repeat 5 --precision f32 2>/dev/null | python3 -c '
import json, sys
r = json.loads(sys.stdin.readline())
print(json.dumps({"mimalloc_purge_delay": -1, "host_to_host": round(r["audio_seconds_per_second"])}))' | log
# Where a 64-clip batch's time goes, chunk by chunk (fill, encode and submit) and batch by batch.
NO_COLOR=1 SONOGRAPH_LOG=sonograph_gpu::extractor=debug timeout 60 $bin bench --device gpu \
  --preset whisper --clips 64 --seconds 30 --repeat 2 2>&1 | sed 's/\x1b\[[0-9;]*m//g' |
  grep -E "gpu (chunk sent|batch)" | tail -12 >"$out/phases.txt"
grep "gpu batch" "$out/phases.txt" | tail -1 | sed 's/.*gpu batch/last 64-clip batch:/' | log

step "auto by measurement (features and a job): what it measured and chose"
rm -rf /tmp/sonograph-cache
SONOGRAPH_CACHE_DIR=/tmp/sonograph-cache timeout 60 $bin bench --device auto --preset whisper --clips 16 --seconds 30 --repeat 2 2>&1 | grep -E "auto chose|audio_seconds_per_second" | cut -c1-300 | log

step "a whole extract job, 8000 WAVs, on cpu, gpu, all and auto"
# gpu first and again after cpu: the first process on a fresh machine compiles the kernels for
# the driver (its shader cache); the second shows a warm start, as every later job has.
THREADS=1 DEVICES="gpu cpu gpu all auto" timeout 240 bash bench/gpu/e2e_devices.sh 8000 2 2>&1 | tail -23 | log
# (`--part-mb 1024` and MIMALLOC_PURGE_DELAY=-1 for the CPU job were measured in runs 3-5 of
# 2026-11-27: within the run-to-run spread; dropped to keep the call short.)

step "RF: synth-iq on cpu, gpu and auto (bit-identical)"
for device in cpu gpu auto; do
  rm -rf /dev/shm/iq-$device
  TIMEFORMAT="synth-iq $device: %R s wall, ${RF_COUNT:-4000} recordings of 1 s at 200 kHz"
  { time timeout 60 $bin synth-iq --count ${RF_COUNT:-4000} --modulation qpsk --snr-db 10 \
    --seed 3 --out /dev/shm/iq-$device --device $device >/dev/null; } 2>&1 | log
done
for device in cpu gpu auto; do
  (cd /dev/shm/iq-$device 2>/dev/null && find . -name '*.sigmf-data' | sort | xargs cat | sha256sum) | log
done

step "RF: rf-features --psd over synth-iq's recordings on cpu and gpu (the Welch PSD on the device)"
for device in cpu gpu; do
  rm -rf /dev/shm/rff-$device
  TIMEFORMAT="rf-features --psd --device $device: %R s wall"
  { time timeout 60 $bin rf-features /dev/shm/iq-cpu --out /dev/shm/rff-$device --psd \
    --device $device --no-progress >/dev/null 2>"$out/rff-$device.err"; } 2>&1 | log
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print("  ", sys.argv[2], r["items_ok"], "ok,", r["items_failed"], "failed")' \
    /dev/shm/rff-$device/__sonograph/report.json $device 2>&1 | log
done
rm -rf /dev/shm/iq-* /dev/shm/rff-*

loader

# At most 8 files come back from $OUT: the jobs' stderr go into one.
for f in "$out"/*.err; do [ -e "$f" ] && { echo "--- $(basename "$f")"; tail -20 "$f"; rm -f "$f"; }; done >"$out/stderr.txt"
ls "$out"
