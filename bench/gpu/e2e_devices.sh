#!/usr/bin/env bash
# A whole extract job on the lent GPU machine's 16 cores with the features on the CPU, on the GPU
# (Vulkan), on both (`--device all`) and as `auto` chooses by measuring: does the GPU help a real
# job, decode and Parquet included? Run by bench/gpu/run.sh (carrying .gpubench and .gl, which
# bench/gpu/prepare.sh makes), or alone:
#   bash bench/gpu/e2e_devices.sh [CLIPS] [REPEATS]
# DEVICES (default "cpu gpu all auto") picks the --device values, EXTRA_ARGS adds options to
# every extract, THREADS=1 prints each job's CPU time by thread (bench/threads.py), and
# KEEP_CORPUS=1 leaves the corpus for the next call (which reuses it).
# The corpus is made there: CLIPS 16 kHz mono 16-bit WAVs of 5-15 s (chirps over noise; the
# features cost the same whatever the sound; 1000 distinct, the rest hard links to them), in /dev/shm with the outputs, so no disk is timed.
set -u
clips=${1:-20000}
repeats=${2:-3}
bin=${BIN:-.gpubench/sonograph}
out=${OUT:-/tmp}
for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
export VK_DRIVER_FILES=${VK_DRIVER_FILES:-/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json}
date -u; nproc; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
corpus=/dev/shm/e2e-corpus
if [ "$(cat "$corpus.made" 2>/dev/null)" = "$clips" ]; then
  echo "corpus: $clips WAVs, kept from the last call"
else
rm -rf "$corpus" "$corpus.made" && mkdir -p "$corpus"
python3 - "$corpus" "$clips" <<'PY'
import os, sys, wave
import numpy as np
root, n = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(7)
sr = 16000
total = 0.0
made = []  # 1000 distinct clips, then hard links to them: making each one costs device time
for k in range(n):
    d = os.path.join(root, f"{k // 1000:03d}")
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, f"{k:06d}.wav")
    if k >= 1000:
        src, seconds = made[k % 1000]
        os.link(src, path)
        total += seconds
        continue
    seconds = rng.uniform(5, 15)
    t = np.arange(int(seconds * sr)) / sr
    f0 = rng.uniform(100, 400)
    x = 0.3 * np.sin(2 * np.pi * (f0 + 200 * t) * t) + 0.05 * rng.standard_normal(t.size)
    pcm = (np.clip(x, -1, 1) * 32767).astype("<i2")
    with wave.open(path, "wb") as w:
        w.setnchannels(1); w.setsampwidth(2); w.setframerate(sr); w.writeframes(pcm.tobytes())
    made.append((path, t.size / sr))
    total += t.size / sr
print(f"corpus: {n} WAVs ({min(n, 1000)} distinct), {total:.0f} audio-s")
PY
[ $? -eq 0 ] || { echo "the corpus could not be made"; exit 1; }
echo "$clips" >"$corpus.made"
fi
for rep in $(seq 1 "$repeats"); do
  for device in ${DEVICES:-cpu gpu all auto}; do
    dest=/dev/shm/e2e-out-$device
    rm -rf "$dest"
    # shellcheck disable=SC2086 # EXTRA_ARGS is a list of options
    ${THREADS:+python3 bench/threads.py --} "$bin" extract "$corpus" --out "$dest" --preset whisper --device "$device" --no-progress ${EXTRA_ARGS:-} \
      >/dev/null 2>"$out/e2e-$device-$rep.err" || { echo "$device: failed"; tail -3 "$out/e2e-$device-$rep.err"; continue; }
    python3 - "$dest/__sonograph/report.json" "$device" "$rep" "${EXTRA_ARGS:-}" <<'PY' | tee -a "$out/e2e-devices.txt"
import json, sys
r = json.load(open(sys.argv[1]))
devices = ", ".join(f"{d['device']}: {d['items']} items" for d in r["devices"])
print(f"run {sys.argv[3]} --device {sys.argv[2]} {sys.argv[4]}: {r['items_ok']} ok, {r['items_failed']} failed, "
      f"{r['wall_seconds']:.2f} s wall, {r['audio_seconds'] / r['wall_seconds']:,.0f} audio-s/s, "
      f"{r['items_ok'] / r['wall_seconds']:,.0f} items/s, cores {r['core_utilisation']:.2f}, "
      f"peak RSS {r['peak_rss_mb']:.0f} MiB; {devices}; "
      + ", ".join(f"{k} {v:.2f}" for k, v in r["stages"].items()))
PY
    [ -z "${THREADS:-}" ] || grep cpu_s_by_thread "$out/e2e-$device-$rep.err" | tee -a "$out/e2e-devices.txt"
    rm -rf "$dest"
  done
done
rm -rf /dev/shm/e2e-out-*
[ -n "${KEEP_CORPUS:-}" ] || rm -rf /dev/shm/e2e-corpus*
