#!/usr/bin/env bash
# sonograph-model against silero-vad and Python onnxruntime, side by side (bench/models.py).
# Needs the Python packages of scripts/requirements-models.txt ($VENV, else ./.venv-models).
#
#   bench/models.sh [--minutes 10] [--repeats 5] [--threads 2]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
venv="${VENV:-$root/.venv-models}"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q -r "$root/scripts/requirements-models.txt"
fi
cargo build --release --locked -p sonograph-model --examples --manifest-path "$root/Cargo.toml"
cargo build --release --locked --bin sonograph --manifest-path "$root/Cargo.toml"
# The examples find onnxruntime in the venv's package unless SONOGRAPH_ORT_LIB says otherwise.
export SONOGRAPH_ORT_LIB="${SONOGRAPH_ORT_LIB:-$("$venv/bin/python" -c 'import onnxruntime, os; print(os.path.join(os.path.dirname(onnxruntime.__file__), "capi"))')}"
exec "$venv/bin/python" "$here/models.py" "$@"
