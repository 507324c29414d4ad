#!/usr/bin/env bash
# The service's load target (issue 10): 200 concurrent clients for 10 s against /metrics,
# /api/v1/status and /api/v1/jobs cost the running job less than 10 % of its throughput.
# Runs tests/load.rs (release build) RUNS times and prints each run's figures and the median
# drop against the target. Usage: bench/load.sh [RUNS]
#
# bench/load.sh soak [MINUTES] [soak.py options...]: the soak (issue 20), default 30 minutes:
# bench/soak.py against the release binary with jobs submitted and cancelled, scrapes and an
# event stream open throughout, the server killed (-9, now and then SIGTERM) and restarted at
# random; every job's rows checked, fds/threads/RSS per server lifetime. The summary
# goes to bench/logs/DATE-soak.txt, the samples to DATE-soak-samples.jsonl (results in
# bench/RESULTS-reliability.md).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = soak ]; then
  shift
  minutes="${1:-30}"
  if [ $# -gt 0 ]; then shift; fi
  venv=bench/.venv-soak
  if [ ! -x "$venv/bin/python" ] || ! cmp -s bench/requirements-soak.txt "$venv/.requirements"; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q -r bench/requirements-soak.txt
    cp bench/requirements-soak.txt "$venv/.requirements"
  fi
  # SOAK_BINARY=PATH soaks that binary instead of building the release one.
  binary="${SOAK_BINARY:-target/release/sonograph}"
  [ -n "${SOAK_BINARY:-}" ] || cargo build --release --bin sonograph
  echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
  exec nice -n 5 "$venv/bin/python" bench/soak.py --minutes "$minutes" \
    --binary "$binary" --summary "bench/logs/$(date +%F)-soak.txt" \
    --samples "bench/logs/$(date +%F)-soak-samples.jsonl" "$@"
fi
runs="${1:-5}"
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
cargo test --release -q --test load --no-run >/dev/null 2>&1
drops=()
for i in $(seq "$runs"); do
  line="$(cargo test --release -q --test load -- --nocapture 2>&1 | grep '^load:')"
  echo "$line"
  drops+=("$(echo "$line" | sed -E 's/.*: ([+-][0-9.]+) % change$/\1/')")
done
printf '%s\n' "${drops[@]}" | python3 -c '
import statistics, sys
changes = [float(x) for x in sys.stdin.read().split()]
median = statistics.median(changes)
verdict = "met" if -median < 10 else "MISSED"
print(f"median change of the job throughput under load: {median:+.1f} % over {len(changes)} runs "
      f"(target: a drop under 10 %): {verdict}")'
