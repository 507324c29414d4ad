#!/usr/bin/env bash
# The service's load target (issue 10): 200 concurrent clients for 10 s against /metrics,
# /api/v1/status and /api/v1/jobs cost the running job less than 10 % of its throughput.
# Runs tests/load.rs (release build) RUNS times and prints each run's figures and the median
# drop against the target. Usage: bench/load.sh [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
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
