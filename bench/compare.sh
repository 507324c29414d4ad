#!/usr/bin/env bash
# Benchmark sonograph against librosa, kaldi-native-fbank, audioflux (Whisper
# log-mel-80 extraction) and soundfile (FLAC/WAV decoding).
#
#   bench/compare.sh [--repeat N] [--clips N]     # see bench/compare.py --help
#
# Creates/reuses bench/.venv with the pins in bench/requirements.txt, builds
# target/release/sonograph, generates a speech corpus in bench/out/corpus
# (espeak-ng + sox), then prints a markdown table (also bench/out/results.md).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
venv="$here/.venv"

for tool in python3 cargo espeak-ng sox lscpu; do
  command -v "$tool" >/dev/null || { echo "missing tool: $tool" >&2; exit 1; }
done

# Virtualenv: pip runs only when requirements.txt differs from the last install.
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
stamp="$venv/.requirements.sha256"
want="$(sha256sum "$here/requirements.txt" | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  "$venv/bin/pip" install -q -r "$here/requirements.txt"
  echo "$want" >"$stamp"
fi

(cd "$root" && cargo build --release)

# OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE may be preset on some machines and slow
# numpy down; peers are timed single-threaded per process (compare.py sets the
# thread variables again before importing numpy).
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1

exec "$venv/bin/python" "$here/compare.py" \
  --bin "$root/target/release/sonograph" --out "$here/out" "$@"
