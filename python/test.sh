#!/usr/bin/env bash
# The Python package's tests (a step of scripts/test.sh): builds the wheel with maturin (the dev
# profile, so the workspace's test build is reused), installs it into python3, and runs
# python/tests with pytest against the CLI built beside it. Prints a cargo-style
# "test result:" line for scripts/test.sh's totals. Without maturin, numpy or pytest it skips,
# saying so (recorded in $SONOGRAPH_SKIP_LOG); under SONOGRAPH_REQUIRE_PYTHON=1 (CI) it fails.
set -uo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
# What cannot run here: skipped, saying why (recorded for scripts/test.sh's banner), or a failure
# under SONOGRAPH_REQUIRE_PYTHON=1; then the script ends with status $2.
cannot_run() {
  if [ "${SONOGRAPH_REQUIRE_PYTHON:-}" = 1 ]; then
    echo "FAILED: $1, and SONOGRAPH_REQUIRE_PYTHON=1"
    exit 1
  fi
  echo "SKIPPED: $1"
  [ -n "${SONOGRAPH_SKIP_LOG:-}" ] && echo "$1" >>"$SONOGRAPH_SKIP_LOG"
  exit "$2"
}
missing=()
for module in maturin numpy pytest mypy; do
  "$python" -c "import $module" 2>/dev/null || missing+=("$module")
done
if [ "${#missing[@]}" -gt 0 ]; then
  cannot_run "python/tests: $python lacks ${missing[*]} (pip install -r python/requirements-test.txt)" 0
fi
cargo build --locked --bin sonograph || exit 1
# The build directory may be anywhere (CARGO_TARGET_DIR): ask cargo where it is.
target=$(cargo metadata --format-version 1 --no-deps --locked | "$python" -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])') || exit 1
wheels=$target/python-wheels
rm -rf "$wheels"
(cd python && "$python" -m maturin build --locked --profile dev --out "$wheels") || exit 1
"$python" -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps \
  "$wheels"/sonograph-*.whl || exit 1
report=$(mktemp)
SONOGRAPH_BIN=$target/debug/sonograph "$python" -m pytest -q -p no:cacheprovider \
  --junitxml="$report" python/tests
status=$?
# The totals as cargo prints them, from pytest's own report.
"$python" - "$report" <<'PY'
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
suite = root if root.tag == "testsuite" else root.find("testsuite")
tests, failures, errors, skipped = (int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped"))
passed = tests - failures - errors - skipped
print(f"test result: {'ok' if failures + errors == 0 else 'FAILED'}. {passed} passed; "
      f"{failures + errors} failed; {skipped} ignored; 0 measured; 0 filtered out")
PY
rm -f "$report"
# The types (python/sonograph/__init__.pyi for the compiled module, sonograph/torch.py's own
# annotations; shipped in the wheel with py.typed): against the package as built (mypy's
# stubtest: every name, signature and class), and the tests against them.
# Each counts as a test in the totals. Both read sonograph.torch, so they need PyTorch (the tests'
# venv has it): without it they skip, saying so, or fail under SONOGRAPH_REQUIRE_PYTHON=1.
if ! "$python" -c "import torch" 2>/dev/null; then
  cannot_run "python/test.sh: stubtest and mypy read sonograph.torch and $python lacks torch (pip install --no-deps -r python/requirements-torch.txt)" "$status"
fi
for check in "stubtest" "mypy"; do
  case $check in
    stubtest) (cd "$(mktemp -d)" && "$python" -m mypy.stubtest sonograph) ;;
    mypy) "$python" -m mypy --check-untyped-defs --no-incremental python/tests python/examples ;;
  esac
  if [ $? -eq 0 ]; then
    echo "test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out ($check)"
  else
    echo "test result: FAILED. 0 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out ($check)"
    status=1
  fi
done
exit $status
