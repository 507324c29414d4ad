#!/usr/bin/env bash
# Regenerate tests/golden/ and tests/data/ (golden feature references and
# decoding fixtures).  Creates/uses a virtualenv with the pinned versions from
# scripts/requirements-golden.txt; needs espeak-ng, sox, lame, oggenc, ffmpeg
# (Debian: apt-get install espeak-ng sox flac lame vorbis-tools ffmpeg).
#
#   scripts/make_test_audio.sh            # uses $VENV, else ./.venv (git-ignored)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
venv="${VENV:-$root/.venv}"

for tool in espeak-ng sox lame oggenc ffmpeg ffprobe; do
  command -v "$tool" >/dev/null || { echo "missing tool: $tool" >&2; exit 1; }
done

if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q -r "$here/requirements-golden.txt"
fi

# 90 s of digital silence (2 KB): tests/extract.rs rewrites its STREAMINFO to claim 10 s.
sox -D -n -r 8000 -c 1 -b 16 "$root/tests/fixtures/silence_8000_mono_90s.flac" trim 0 90

exec "$venv/bin/python" "$here/golden.py" "$@"
