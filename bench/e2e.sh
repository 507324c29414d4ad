#!/usr/bin/env bash
# End-to-end benchmark: FLAC files -> Parquet with `sonograph extract` against the Python
# script people write by hand (multiprocessing Pool + soundfile + librosa + pyarrow), and
# sonograph's peak memory on a 1-hour and a 3-hour FLAC.
#
#   bench/e2e.sh [--repeat N] [--clips N] [--long-hours 1,3] [--long-part-mb 16,256]
#                                                  # see bench/e2e.py --help
#
# Creates/reuses bench/.venv (bench/requirements.txt + bench/requirements-e2e.txt), builds
# target/release/sonograph, generates the corpus and the long files in bench/out/e2e
# (espeak-ng + sox; reused), then prints markdown tables (also bench/out/e2e.md).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
venv="$here/.venv"

for tool in python3 cargo espeak-ng sox lscpu; do
  command -v "$tool" >/dev/null || { echo "missing tool: $tool" >&2; exit 1; }
done
[ -x /usr/bin/time ] || echo "note: /usr/bin/time is missing (apt-get install -y time);" \
  "max RSS will come from report.json only" >&2

# Virtualenv: pip runs only when a requirements file differs from its last install (the
# first stamp is the one bench/compare.sh keeps, so the two scripts share the venv).
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
for req in requirements.txt requirements-e2e.txt; do
  stamp="$venv/.${req%.txt}.sha256"
  want="$(sha256sum "$here/$req" | cut -d' ' -f1)"
  if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    "$venv/bin/pip" install -q -r "$here/$req"
    echo "$want" >"$stamp"
  fi
done

(cd "$root" && cargo build --release)

# One single-threaded worker process per core for Python (e2e.py sets these again before
# importing numpy); OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE slow numpy down on some machines.
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1

exec "$venv/bin/python" "$here/e2e.py" \
  --bin "$root/target/release/sonograph" --out "$here/out" "$@"
