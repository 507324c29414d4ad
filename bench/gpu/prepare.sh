#!/usr/bin/env bash
# Prepares the one call of bench/gpu/run.sh on a lent GPU machine (bench/RESULTS-gpu.md): the
# release binary and the GPU test binaries built here, stripped, into .gpubench/, and the Vulkan
# loader (with vulkaninfo) as Debian packages into .gl/ (the device README says why), and the
# Python wheel into .gpuwheel/. All three are git-ignored through .git/info/exclude. A call
# carries at most 64 MiB with the working tree (42 MB of it tracked files, the golden
# references mostly), so the wheel goes in a second call, right after the first (the machine
# is still warm):
#   bash bench/gpu/prepare.sh
#   device run: carry [".gpubench", ".gl"], command "bash bench/gpu/run.sh", timeout_s 420
#   device run: carry [".gpuwheel", ".gl"], command "bash bench/gpu/run.sh loader", timeout_s 240
# It ends by checking that each call fits.
set -euo pipefail
cd "$(dirname "$0")/../.."
grep -qx '/.gpubench/' .git/info/exclude 2>/dev/null || echo /.gpubench/ >>.git/info/exclude
grep -qx '/.gl/' .git/info/exclude 2>/dev/null || echo /.gl/ >>.git/info/exclude
grep -qx '/.gpuwheel/' .git/info/exclude 2>/dev/null || echo /.gpuwheel/ >>.git/info/exclude
target=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
cargo build --release --locked --bin sonograph
cargo test --release --locked -p sonograph-gpu --no-run --test parity --test transfer
mkdir -p .gpubench
strip -o .gpubench/sonograph "$target/release/sonograph"
for t in parity transfer; do
  strip -o ".gpubench/$t" "$(ls -t "$target"/release/deps/$t-* | grep -v '\.d$' | head -1)"
done
# Compressed, they travel in a third of the room; run.sh unpacks them. (A copy of the last
# session's binary as .gpubench/sonograph-before.xz, which run.sh benches beside the new one,
# fits only where the check below leaves room for it: about 12 MB.)
xz -T0 -6 -f .gpubench/sonograph .gpubench/parity .gpubench/transfer
# The Python wheel, for the Loader's data-GPU bench (bench/gpu/loader_gpu.py), stripped (with
# the release profile's debug info it is 62 MB): maturin from the tests' venv (scripts/test.sh
# makes it in the same target folder), else from a venv of its own with the tests' pinned
# maturin (a session whose tests ran under another CARGO_TARGET_DIR has no test venv here).
python=$target/test-venv/bin/python3
if ! { [ -x "$python" ] && "$python" -c 'import maturin' 2>/dev/null; }; then
  pin=$(grep '^maturin==' python/requirements-test.txt) ||
    { echo "error: python/requirements-test.txt pins no maturin" >&2; exit 1; }
  venv=$target/gpu-prepare-venv
  python=$venv/bin/python3
  # A venv left half-made (python3 -m venv without ensurepip) is made again.
  "$python" -m pip --version >/dev/null 2>&1 || { rm -rf "$venv" && python3 -m venv "$venv"; }
  "$python" -m pip install -q "$pin"
fi
rm -rf .gpubench/sonograph-*.whl .gpuwheel
(cd python && "$python" -m maturin build --release --strip --locked --out ../.gpuwheel)
mkdir -p .gl /tmp/amd64/partial
o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
apt-get $o update -qq
(cd .gl && apt-get $o download -qq libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2 vulkan-tools)
# What each call carries: the working tree (tracked and untracked files that git does not
# ignore) and its carried folders, against the device tool's 64 MiB.
tree=$(git ls-files -z --cached --others --exclude-standard | xargs -0 stat -c %s 2>/dev/null |
  awk '{ n += $1 } END { print n + 0 }')
fits=true
for carried in ".gpubench .gl" ".gpuwheel .gl"; do
  # shellcheck disable=SC2086 # the folders' names, split on purpose
  bytes=$((tree + $(du -sb $carried | awk '{ n += $1 } END { print n }')))
  echo "a call carrying $carried: $((bytes >> 20)) MiB of 64 (the tree $((tree >> 20)) MiB)"
  [ "$bytes" -le $((64 << 20)) ] || fits=false
done
$fits || { echo "error: a call would carry more than 64 MiB; the device tool refuses it" >&2; exit 1; }
