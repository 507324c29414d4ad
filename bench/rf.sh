#!/usr/bin/env bash
# RF benchmark: sonograph against a numpy/scipy peer (bench/rf_peer.py) and, when it installs,
# TorchSig, in one run on the same machine.
#
#   bench/rf.sh [COUNT]     # COUNT recordings end to end (default 1000)
#
# CARGO_TARGET_DIR is honoured (the build and criterion's results live there);
# TORCHSIG=0 leaves TorchSig out (its environment pulls in PyTorch, several GB).
#
# One recording is one second of QPSK at 200 kHz (RRC 0.35, 8 samples per symbol, 10 dB).
# Prints: per-recording medians on one core (criterion for sonograph, the peer's own timer),
# the wall time of COUNT recordings generated and featurised on all cores (sonograph through
# SigMF files on /dev/shm, the peer in memory with one process per core), and the ratios.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
count="${1:-1000}"
venv="$here/.venv-rf"
cores="$(nproc)"
target="${CARGO_TARGET_DIR:-$root/target}"

[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
stamp="$venv/.requirements.sha256"
want="$(sha256sum "$root/scripts/requirements-rf.txt" | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  "$venv/bin/pip" install -q -r "$root/scripts/requirements-rf.txt"
  echo "$want" >"$stamp"
fi
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1

echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $cores cores; load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
(cd "$root" && cargo build --release -q && cargo bench -q -p sonograph-rf --bench rf -- \
  --warm-up-time 1 --measurement-time 5 "generate/qpsk$|features/all|pipeline" >/dev/null 2>&1)
median_ms() {
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["median"]["point_estimate"] / 1e6)' \
    "$target/criterion/$1/new/estimates.json"
}
gen="$(median_ms generate_qpsk)"
feat="$(median_ms features_all)"
pipe_s="$(python3 -c "print($(median_ms "pipeline_1000-recordings-$cores-threads") / 1e3)")"

peer="$("$venv/bin/python" "$here/rf_peer.py" per-sample --repeat 20)"
pgen="$(echo "$peer" | python3 -c 'import json,sys; print(json.load(sys.stdin)["generate_ms"])')"
pfeat="$(echo "$peer" | python3 -c 'import json,sys; print(json.load(sys.stdin)["features_ms"])')"

out="/dev/shm/sonograph-rf-bench-$$"
trap 'rm -rf "$out" "$out.features"' EXIT
bin="$target/release/sonograph"
t0="$(date +%s.%N)"
"$bin" synth-iq --count "$count" --samples 200000 --modulation qpsk --snr-db 10 \
  --seed 1 --workers "$cores" --out "$out" 2>/dev/null
t1="$(date +%s.%N)"
"$bin" rf-features "$out" --workers "$cores" --out "$out.features" 2>/dev/null
t2="$(date +%s.%N)"
synth_s="$(echo "$t1 - $t0" | bc -l)"
feat_s="$(echo "$t2 - $t1" | bc -l)"
pbatch="$("$venv/bin/python" "$here/rf_peer.py" batch --count "$count" --workers "$cores")"
pbatch_s="$(echo "$pbatch" | python3 -c 'import json,sys; print(json.load(sys.stdin)["seconds"])')"

# TorchSig: in its own environment (it pulls in PyTorch, several GB), when pip can install it.
ts="$here/.venv-torchsig"
if [ "${TORCHSIG:-1}" = 0 ]; then
  tsline="left out (TORCHSIG=0)"
else
  if [ ! -x "$ts/bin/python" ]; then
    python3 -m venv "$ts" && "$ts/bin/pip" install -q -r "$here/requirements-torchsig.txt" >/dev/null 2>&1 || true
  fi
  tsline="$("$ts/bin/python" "$here/rf_peer.py" torchsig --repeat 20 2>&1 | tail -1 || true)"
fi

python3 - "$gen" "$feat" "$pgen" "$pfeat" "$synth_s" "$feat_s" "$pbatch_s" "$count" "$cores" "$tsline" "$pipe_s" <<'PY'
import json, sys
gen, feat, pgen, pfeat, synth_s, feat_s, pbatch_s = map(float, sys.argv[1:8])
count, cores, ts, pipe_s = int(sys.argv[8]), int(sys.argv[9]), sys.argv[10], float(sys.argv[11])
print()
print("| one recording, one core (median) | sonograph | numpy/scipy | ratio | target |")
print("|---|---|---|---|---|")
print(f"| generation | {gen:.2f} ms | {pgen:.1f} ms | {pgen/gen:.1f}x | <= 2 ms |")
print(f"| full feature vector | {feat:.2f} ms | {pfeat:.1f} ms | {pfeat/feat:.1f}x | <= 5 ms |")
total = synth_s + feat_s
print()
print(f"| {count} recordings, {cores} cores (wall) | sonograph | numpy/scipy | ratio | target |")
print("|---|---|---|---|---|")
print(f"| generated + featurised, in memory (1000 recordings, criterion median) | {pipe_s:.2f} s | {pbatch_s * 1000 / count:.1f} s | {pbatch_s * 1000 / count / pipe_s:.1f}x | < 6.2 s |")
print(f"| the same through the commands: synth-iq (SigMF with SHA-512, /dev/shm), then rf-features | {total:.2f} s (synth-iq {synth_s:.2f} s + rf-features {feat_s:.2f} s) | | | |")
print()
try:
    t = json.loads(ts)
    if "error" in t:
        print("TorchSig:", t["error"])
    else:
        tg = t["generate_ms"]
        print(f"TorchSig {t['version']} generation (its QPSK modulator + AWGN, one core): {tg:.1f} ms per recording; sonograph {tg / gen:.1f}x faster")
except Exception:
    print("TorchSig:", ts or "not installed")
PY
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
