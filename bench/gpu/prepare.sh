#!/usr/bin/env bash
# Prepares the one call of bench/gpu/run.sh on a lent GPU machine (bench/RESULTS-gpu.md): the
# release binary and the GPU test binaries built here, stripped, into .gpubench/, and the Vulkan
# loader (with vulkaninfo) as Debian packages into .gl/ (the device README says why). Both are
# git-ignored through .git/info/exclude and carried by the call:
#   bash bench/gpu/prepare.sh
#   device run: carry [".gpubench", ".gl"], command "bash bench/gpu/run.sh", timeout_s 420
set -euo pipefail
cd "$(dirname "$0")/../.."
grep -qx '/.gpubench/' .git/info/exclude 2>/dev/null || echo /.gpubench/ >>.git/info/exclude
grep -qx '/.gl/' .git/info/exclude 2>/dev/null || echo /.gl/ >>.git/info/exclude
target=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
cargo build --release --locked --bin sonograph
cargo test --release --locked -p sonograph-gpu --no-run --test parity --test transfer
mkdir -p .gpubench
strip -o .gpubench/sonograph "$target/release/sonograph"
for t in parity transfer; do
  strip -o ".gpubench/$t" "$(ls -t "$target"/release/deps/$t-* | grep -v '\.d$' | head -1)"
done
# Compressed, they travel in a third of the room (the working tree's limit is 64 MiB, with room
# for a second binary: a copy of the last one as .gpubench/sonograph-before.xz, which run.sh
# benches beside the new one); run.sh unpacks them.
xz -T0 -6 -f .gpubench/sonograph .gpubench/parity .gpubench/transfer
# The Python wheel, for the Loader's data-GPU bench (bench/gpu/loader_gpu.py): maturin from the
# tests' venv (scripts/test.sh makes it) or the PATH.
python=$target/test-venv/bin/python3
[ -x "$python" ] || python=python3
rm -f .gpubench/sonograph-*.whl
(cd python && "$python" -m maturin build --release --locked --out ../.gpubench)
mkdir -p .gl /tmp/amd64/partial
o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
apt-get $o update -qq
(cd .gl && apt-get $o download -qq libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2 vulkan-tools)
du -sh .gpubench .gl
