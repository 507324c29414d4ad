#!/usr/bin/env bash
# synth-iq then rf-features through the files (1,000 one-second 200 kHz QPSK recordings on
# /dev/shm) with each binary given, alternating, ROUNDS times (default 3): wall and CPU time of
# each command, and a SHA-256 over every .sigmf-meta written (their core:sha512 included), which
# must be the same for binaries that write the same bits.
#
#   ROUNDS=3 [OUT_DIR=/dev/shm] bench/rf_ab.sh OLD_BINARY NEW_BINARY
#
# OUT_DIR (default /dev/shm) is where the recordings go: a folder on a disk times the disk too.
set -euo pipefail
rounds="${ROUNDS:-3}"
dir="${OUT_DIR:-/dev/shm}"
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; load before: $(cut -d' ' -f1-3 /proc/loadavg); recordings in $dir"
for r in $(seq 1 "$rounds"); do
  for bin in "$@"; do
    out="$dir/rfab-$$"
    rm -rf "$out" "$out.features"
    t0=$(date +%s.%N)
    /usr/bin/time -f "%U %S" -o /tmp/rfab-synth.time "$bin" synth-iq --count 1000 --samples 200000 --modulation qpsk --snr-db 10 --seed 1 --workers "$(nproc)" --out "$out" 2>/dev/null
    t1=$(date +%s.%N)
    /usr/bin/time -f "%U %S" -o /tmp/rfab-feat.time "$bin" rf-features "$out" --workers "$(nproc)" --out "$out.features" 2>/dev/null
    t2=$(date +%s.%N)
    sha=$(cat "$out"/*.sigmf-meta | sha256sum | cut -c1-12)
    printf "round %s %-40s synth %.2f s (cpu %s) features %.2f s (cpu %s) total %.2f s meta-sha %s\n" "$r" "$bin" "$(echo "$t1-$t0" | bc -l)" "$(tr ' ' '+' </tmp/rfab-synth.time)" "$(echo "$t2-$t1" | bc -l)" "$(tr ' ' '+' </tmp/rfab-feat.time)" "$(echo "$t2-$t0" | bc -l)" "$sha"
    rm -rf "$out" "$out.features"
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
