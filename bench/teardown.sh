#!/usr/bin/env bash
# How often a process that probed a GPU dies at exit (bench/RESULTS-reliability.md, 2026-12-04).
#
#   bench/teardown.sh BIN [RUNS]   # BIN built with `--features failpoints`; RUNS a loop (1500)
#
# Two loops at once run `BIN bench --device all` with the GPU's health probe failing (the
# probe thread then ends while the main thread exits) and count the runs that died of a signal.
set -u
bin="${1:?usage: bench/teardown.sh BIN [RUNS]}"
runs="${2:-1500}"
loop() {
  local died=0
  for _ in $(seq 1 "$runs"); do
    FAILPOINTS=gpu::probe_fails=return "$bin" bench --device all --clips 1 --seconds 1 \
      --repeat 1 >/dev/null 2>&1
    [ $? -gt 128 ] && died=$((died + 1))
  done
  echo "$died"
}
ulimit -c 0
loop >"/tmp/teardown-a.$$" &
loop >"/tmp/teardown-b.$$"
wait
died=$(($(cat "/tmp/teardown-a.$$") + $(cat "/tmp/teardown-b.$$")))
rm -f "/tmp/teardown-a.$$" "/tmp/teardown-b.$$"
echo "$bin: $died of $((2 * runs)) runs died of a signal (load after: $(cut -d' ' -f1-3 /proc/loadavg))"
