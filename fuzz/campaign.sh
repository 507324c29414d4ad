#!/usr/bin/env bash
# A fuzzing campaign: every target (or those named) in turn, SECONDS each, one worker, at the
# lowest CPU priority so that builds and tests run first. See fuzz/README.md.
#
#   fuzz/campaign.sh [SECONDS] [TARGET...]        # default: 3600 s, every target
#   nohup setsid fuzz/campaign.sh 3600 > /dev/null 2>&1 &     # in the background, detached
#
# It builds the targets first (cargo +nightly fuzz build -a: debug assertions and overflow
# checks on, AddressSanitizer), then runs the built binaries, so that an edit to the tree
# during the campaign changes nothing under way.
#
# Where things go (everything but fuzz/logs/ is git-ignored):
#   fuzz/logs/campaign-STAMP.log   the summary, committed: per target its final libFuzzer
#                                  stats (execs, exec/s, cov, ft, corpus, peak RSS) and the
#                                  crashes; its last line is "campaign done ..." when it ends
#   fuzz/campaign/STATUS           what runs now ("running TARGET since ...", then "done ...")
#   fuzz/campaign/PID              the campaign's process id while it runs
#   fuzz/campaign/TARGET/corpus/   the grown corpus (the seeds in fuzz/corpus/ stay as they are)
#   fuzz/campaign/TARGET/run-N.log libFuzzer's whole output of each run
#   fuzz/artifacts/TARGET/         crash-*, timeout-*, oom-*, leak-* inputs
#
# After a crash the target is started again on the time it has left (its corpus kept), at most
# MAX_RESTARTS times; minimise a crash and make it a regression as fuzz/README.md says.
set -uo pipefail

cd "$(dirname "$0")"
FUZZ_DIR=$(pwd)
SECONDS_EACH=${1:-3600}
shift || true
if [ $# -gt 0 ]; then
    TARGETS=("$@")
else
    TARGETS=()
    for f in fuzz_targets/*.rs; do TARGETS+=("$(basename "$f" .rs)"); done
fi
MAX_RESTARTS=${MAX_RESTARTS:-3}
BIN_DIR=$FUZZ_DIR/target/x86_64-unknown-linux-gnu/release
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
LOG=$FUZZ_DIR/logs/campaign-$STAMP.log
STATUS=$FUZZ_DIR/campaign/STATUS
mkdir -p logs campaign
echo $$ > campaign/PID
# nice alone does not hold back a campaign started with setsid, as above: the kernel shares
# the CPU between sessions' autogroups first (sched_autogroup_enabled), whatever the nice
# values inside them. The autogroup's own nice does (it took builds and benches from 2.2 s
# to 8.5 s of wall time for 5.3 s of CPU on the 2-core machine).
# Only a campaign that leads its own session (started with setsid) owns its autogroup: run
# from a shell, it would lower that whole session's priority for as long as the session lasts.
if [ "$(ps -o sid= -p $$ | tr -d ' ')" = "$$" ] && [ -w /proc/self/autogroup ]; then
    echo 19 > /proc/self/autogroup 2>/dev/null
fi
# The targets' temporary files (one small folder per input) go to memory where it exists.
if [ -d /dev/shm ]; then
    export TMPDIR=/dev/shm/sonograph-fuzz
    mkdir -p "$TMPDIR"
fi

say() { echo "$*" >> "$LOG"; }
status() { echo "$*" > "$STATUS"; }

say "# sonograph fuzz campaign $STAMP: ${SECONDS_EACH} s per target, 1 worker, nice 19"
say "# commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)'), $(rustc +nightly --version 2>/dev/null)"
say "# targets: ${TARGETS[*]}"

status "building since $(date -u +%FT%TZ)"
if ! nice -n 19 cargo +nightly fuzz build -a > "campaign/build-$STAMP.log" 2>&1; then
    # The tree may be half-way through someone's edit: fall back on the binaries already
    # built, if every target has one, and say so.
    missing=0
    for t in "${TARGETS[@]}"; do [ -x "$BIN_DIR/$t" ] || missing=1; done
    if [ "$missing" = 1 ]; then
        say "build failed (fuzz/campaign/build-$STAMP.log) and some targets have no binary"
        say "campaign done $(date -u +%FT%TZ): build failed"
        status "done $(date -u +%FT%TZ): build failed"
        rm -f campaign/PID
        exit 1
    fi
    say "# build failed (fuzz/campaign/build-$STAMP.log): running the binaries built $(date -u -r "$BIN_DIR/${TARGETS[0]}" +%FT%TZ)"
fi

for t in "${TARGETS[@]}"; do
    mkdir -p "campaign/$t/corpus" "artifacts/$t"
    if [ ! -x "$BIN_DIR/$t" ]; then
        say "## $t: no binary at $BIN_DIR/$t"
        continue
    fi
    start=$(date +%s)
    runs=0
    crashes=()
    say "## $t (started $(date -u +%FT%TZ))"
    while :; do
        left=$((SECONDS_EACH - ($(date +%s) - start)))
        [ "$left" -ge 10 ] || break
        runs=$((runs + 1))
        status "running $t (run $runs, ${left} s left) since $(date -u +%FT%TZ)"
        out=campaign/$t/run-$runs.log
        nice -n 19 "$BIN_DIR/$t" "campaign/$t/corpus" "corpus/$t" \
            -max_total_time="$left" -timeout=30 -print_final_stats=1 \
            -artifact_prefix="artifacts/$t/" > "$out" 2>&1
        code=$?
        # The final status line and stats of this run.
        done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$out" | tail -n 1)
        [ -n "$done_line" ] || done_line=$(grep -E '^#[0-9]+[[:space:]]+(NEW|REDUCE|pulse|INITED)' "$out" | tail -n 1)
        say "run $runs: exit $code; ${done_line:-no status line}"
        grep -E '^stat::' "$out" | sed 's/^/    /' >> "$LOG"
        crash=$(grep -oE 'Test unit written to [^ ]+' "$out" | sed 's/Test unit written to //' | tail -n 1)
        if [ -n "$crash" ]; then
            crashes+=("$crash")
            what=$(grep -m1 -E 'sonograph-fuzz .*: panic at|ERROR: (AddressSanitizer|libFuzzer)' "$out" | cut -c1-300)
            say "    crash: fuzz/$crash: $what"
            [ ${#crashes[@]} -le "$MAX_RESTARTS" ] || { say "    $MAX_RESTARTS restarts used: next target"; break; }
            continue
        fi
        break
    done
    say "$t: $(ls "campaign/$t/corpus" | wc -l) inputs in the grown corpus; ${#crashes[@]} crashes; $(( $(date +%s) - start )) s"
done

say "campaign done $(date -u +%FT%TZ)"
status "done $(date -u +%FT%TZ): see fuzz/logs/campaign-$STAMP.log"
rm -f campaign/PID
