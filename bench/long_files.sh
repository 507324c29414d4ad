#!/usr/bin/env bash
# Long files through `sonograph extract` on each device: one generated file of MINUTES minutes
# (default 60) at 16 kHz, Whisper preset, three runs per device; prints the median wall time,
# audio-seconds per second, peak RSS and how many pieces each device computed.
# Usage: bench/long_files.sh [path/to/sonograph] [minutes] [devices...]
set -euo pipefail
bin=${1:-target/release/sonograph}
minutes=${2:-60}
shift $(( $# > 2 ? 2 : $# ))
devices=("${@:-cpu}")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus"
# Python's standard library only, so that it runs on a bare device machine too: one second of a
# tone plus noise, repeated.
python3 - "$work/corpus/long.wav" "$minutes" <<'PY'
import array, math, random, sys, wave
rate, seconds = 16000, int(sys.argv[2]) * 60
random.seed(7)
second = array.array("h", (int(3000 * math.sin(2 * math.pi * 300 * i / rate)
                               + random.randint(-1500, 1500)) for i in range(rate)))
with wave.open(sys.argv[1], "wb") as w:
    w.setnchannels(1)
    w.setsampwidth(2)
    w.setframerate(rate)
    data = second.tobytes()
    for _ in range(seconds):
        w.writeframes(data)
PY
echo "$(date -u +%F) $(uname -m), $(nproc) cores; $minutes min of 16 kHz audio, whisper"
for device in "${devices[@]}"; do
  for run in 1 2 3; do
    rm -rf "$work/out"
    if ! "$bin" extract "$work/corpus" --out "$work/out" --preset whisper --device "$device" \
      2>"$work/log"; then
      cat "$work/log" >&2
      exit 1
    fi
    python3 - "$work/out/__sonograph/report.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
pieces = ", ".join(f"{d['device'].split(' (')[0]}: {d['items']}" for d in r["devices"])
print(f"{r['wall_seconds']:.2f} {r['real_time_factor']:.0f} {r['peak_rss_mb']:.0f} {pieces}")
PY
  done | sort -n | sed -n 2p | awk -v d="$device" '{printf "%-6s median of 3: %6.2f s, %6d audio-s/s, peak RSS %4d MiB; pieces by device: ", d, $1, $2, $3; for (i = 4; i <= NF; i++) printf "%s ", $i; print ""}'
done
