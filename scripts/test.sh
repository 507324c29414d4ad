#!/usr/bin/env bash
# The README's test command: every test of every build that ships or that CI checks, then one
# banner with the totals and the count of skipped tests, which cannot be missed.
#
#   scripts/test.sh                       # as a developer: GPU tests skip without a Vulkan driver
#   SONOGRAPH_REQUIRE_GPU=1 scripts/test.sh   # as CI: a GPU test that would skip fails instead
#   SONOGRAPH_REQUIRE_ORT=1 scripts/test.sh   # as CI: a model test without onnxruntime fails
#
# Runs: the workspace's tests (default features: the wgpu backend); the fault-injection tests
# (`failpoints`: OOM and device loss in the GPU backend, the model runner and extract --model,
# crash points and kill -9 in `extract` and extract --vad, failing health probes, GPU faults
# raising the server's alerts); the CPU-only binary's tests (`--no-default-features`); the
# model crate with onnxruntime's CUDA provider compiled in (`cuda`: it must refuse clearly
# where the CUDA library is not loaded); the Python package (python/test.sh: built with maturin,
# its results against the CLI's).
set -uo pipefail
cd "$(dirname "$0")/.."

export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
# The Python packages the tests use (scripts/requirements-test.txt; onnxruntime's and
# silero-vad's wheels, which carry the model runtime and the VAD model the model tests load;
# PyTorch, python/requirements-torch.txt, for the Loader's torch door: 4.5 GB), in a
# venv of their own in the build directory, made once per set of pins and put first on PATH.
# Without PyPI the tests that need them say they skipped (CI sets SONOGRAPH_REQUIRE_*=1, which
# fails them instead). What needs root: `apt-get install mesa-vulkan-drivers` (lavapipe, for
# the GPU tests), chromium (the dashboard's browser test) and prometheus (promtool); .ci/run
# installs them.
target_dir=$(cargo metadata --format-version 1 --no-deps --locked |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
venv="$target_dir/test-venv"
ort_wheels=(onnxruntime==1.31.1 silero-vad==6.2.3)
pins=$(cat scripts/requirements-test.txt python/requirements-test.txt scripts/requirements-rf.txt \
  scripts/requirements-readers.txt python/requirements-torch.txt;
  echo "${ort_wheels[*]}")
if [ "$(cat "$venv/.pins" 2>/dev/null)" != "$pins" ]; then
  echo "+ python3 -m venv $venv (the tests' pinned Python packages)"
  rm -rf "$venv"
  if python3 -m venv "$venv" &&
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r scripts/requirements-test.txt &&
    "$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps "${ort_wheels[@]}" &&
    "$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps \
      -r python/requirements-torch.txt; then
    printf '%s' "$pins" >"$venv/.pins"
  else
    echo "warning: the tests' Python packages could not be installed; their tests skip" >&2
  fi
fi
[ -x "$venv/bin/python3" ] && export PATH="$venv/bin:$PATH"
# Mesa's device-select layer only reorders adapters (sonograph scores them itself) and prints
# "XDG_RUNTIME_DIR is invalid" on every headless GPU test; the CLI sets this for itself too.
export NODEVICE_SELECT=1
SONOGRAPH_SKIP_LOG="$(mktemp)"
export SONOGRAPH_SKIP_LOG
log="$(mktemp)"
failed_steps=()

# Each step says when it started (seconds into the run): where CI's time goes.
step() {
  echo "+ [${SECONDS}s] $*"
  if ! "$@" 2>&1 | tee -a "$log"; then
    failed_steps+=("$*")
  fi
}

# A step that picks tests by name must run at least one: a renamed test would otherwise leave
# its filter matching nothing, and the step passing on nothing.
named_step() {
  local before ran
  before=$(wc -l <"$log")
  step "$@"
  ran=$(tail -n "+$((before + 1))" "$log" | awk '/^test result:/ { n += $4 + $6 } END { print n + 0 }')
  if [ "$ran" -eq 0 ]; then
    failed_steps+=("$* (ran no test)")
  fi
}

step cargo test --workspace --locked --no-fail-fast
step bash python/test.sh
step cargo test --locked --no-fail-fast -p sonograph-gpu --features failpoints --test faults
step cargo test --locked --no-fail-fast -p sonograph-model --features failpoints --test faults
named_step cargo test --locked -p sonograph --features failpoints --test integration extract::killed_at_random
named_step cargo test --locked -p sonograph --features failpoints --test integration extract::a_crash_at_any_step
named_step cargo test --locked -p sonograph --features failpoints --test integration -- rf_cli::rf_features_after_a_crash_at_any_step rf_cli::synth_iq_after_a_crash_at_any_step
named_step cargo test --locked -p sonograph --features failpoints --test integration models::transcribe_after_a_crash_at_any_step
named_step cargo test --locked -p sonograph --features failpoints --test integration extract_model::
named_step cargo test --locked -p sonograph --features failpoints --test integration cli::a_device_that_fails_its_probe
named_step cargo test --locked -p sonograph --features failpoints --test integration storage::a_bucket_output_killed
named_step cargo test --locked -p sonograph --features failpoints --test integration serve::gpu_faults
named_step cargo test --locked -p sonograph --features failpoints --test integration serve::a_panicking_job
named_step cargo test --locked -p sonograph --no-default-features --test integration -- cli:: --skip rf_cli::
named_step cargo test --locked -p sonograph-model --features cuda --test asr gpu_model_device

read -r passed failed ignored < <(awk '/^test result:/ { p += $4; f += $6; i += $8 }
  END { printf "%d %d %d\n", p, f, i }' "$log")
skipped=$(wc -l < "$SONOGRAPH_SKIP_LOG")
echo
echo "=================================================================="
echo " tests: $passed passed, $failed failed, $ignored ignored, $skipped SKIPPED"
echo " in ${SECONDS}s"
if [ "$skipped" -gt 0 ]; then
  echo " skipped (no device, onnxruntime or package here; SONOGRAPH_REQUIRE_GPU=1, _ORT=1 or"
  echo " _PYTHON=1 fail them):"
  sed 's/^/   /' "$SONOGRAPH_SKIP_LOG"
fi
for s in "${failed_steps[@]}"; do echo " FAILED STEP: $s"; done
echo "=================================================================="
rm -f "$SONOGRAPH_SKIP_LOG" "$log"
[ "${#failed_steps[@]}" -eq 0 ] && [ "$failed" -eq 0 ]
