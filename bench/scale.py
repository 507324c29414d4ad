#!/usr/bin/env python3
"""Scale benchmark: a CSV manifest of N clips of 0.1 s at offsets into one 10-minute WAV.

    python3 bench/scale.py --bin target/release/sonograph --out bench/out [--items 20000,200000]

For each N: `sonograph extract MANIFEST --preset whisper` from scratch (items per second,
wall time, peak RSS from /usr/bin/time -v and report.json); then, for the largest N, a run
killed with SIGKILL halfway (by item count in the ledger) and resumed: the time from the
resumed run's start to its first new committed part. Standard library only (the WAV is
written with `wave`), so it runs on a bare machine. Prints a markdown table.
"""

import argparse
import json
import math
import os
import random
import signal
import sqlite3
import statistics
import struct
import subprocess
import sys
import time
import wave
from pathlib import Path

RATE = 16000
TIME = "/usr/bin/time"


def make_wav(path: Path, seconds: int) -> None:
    if path.exists():
        return
    rng = random.Random(7)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        chunk = []
        for i in range(seconds * RATE):
            t = i / RATE
            v = 0.3 * math.sin(2 * math.pi * (200 + 50 * math.sin(0.1 * t)) * t)
            v += 0.05 * (rng.random() - 0.5)
            chunk.append(int(v * 32767))
            if len(chunk) == 1 << 16:
                w.writeframes(struct.pack(f"<{len(chunk)}h", *chunk))
                chunk.clear()
        w.writeframes(struct.pack(f"<{len(chunk)}h", *chunk))


def make_manifest(path: Path, wav: Path, n: int, seconds: int) -> None:
    if path.exists():
        return
    rng = random.Random(n)
    with open(path, "w") as f:
        f.write("id,path,offset,duration\n")
        for i in range(n):
            offset = rng.randrange(0, (seconds - 1) * 1000) / 1000
            f.write(f"clip{i:07d},{wav},{offset},0.1\n")


def done_items(ledger: Path) -> int:
    try:
        con = sqlite3.connect(f"file:{ledger}?mode=ro", uri=True, timeout=1)
        n = con.execute("SELECT COUNT(*) FROM pieces WHERE last = 1").fetchone()[0]
        con.close()
        return n
    except sqlite3.Error:
        return 0


def committed_parts(ledger: Path) -> int:
    try:
        con = sqlite3.connect(f"file:{ledger}?mode=ro", uri=True, timeout=1)
        n = con.execute("SELECT COUNT(*) FROM parts WHERE state = 'committed'").fetchone()[0]
        con.close()
        return n
    except sqlite3.Error:
        return 0


def run(bin_: Path, manifest: Path, out: Path) -> dict:
    subprocess.run(["rm", "-rf", str(out)], check=True)
    cmd = [str(bin_), "extract", str(manifest), "--out", str(out), "--preset", "whisper",
           "--no-progress", "--device", "cpu"]
    timed = [TIME, "-v"] + cmd if os.access(TIME, os.X_OK) else cmd
    t = time.perf_counter()
    p = subprocess.run(timed, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if p.returncode not in (0, 3):
        sys.exit(f"extract failed ({p.returncode}): {p.stderr[-2000:]}")
    rss = None
    for line in p.stderr.splitlines():
        if "Maximum resident set size" in line:
            rss = int(line.split()[-1]) / 1024
    report = json.loads((out / "__sonograph" / "report.json").read_text())
    return {"wall_s": wall, "rss_mb": rss, "report": report}


def kill_and_resume(bin_: Path, manifest: Path, out: Path, n: int) -> dict:
    subprocess.run(["rm", "-rf", str(out)], check=True)
    # Parts of 2 MiB (about 650 clips): the ledger shows progress as the run goes, so the
    # kill lands at half the items.
    cmd = [str(bin_), "extract", str(manifest), "--out", str(out), "--preset", "whisper",
           "--no-progress", "--device", "cpu", "--part-mb", "2"]
    ledger = out / "__sonograph" / "ledger.sqlite"
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while p.poll() is None and done_items(ledger) < n // 2:
        time.sleep(0.05)
    if p.poll() is not None:
        sys.exit("the run ended before it was half done")
    p.send_signal(signal.SIGKILL)
    p.wait()
    done_at_kill = done_items(ledger)
    parts_at_kill = committed_parts(ledger)
    # The killed run's unfinished part is removed when the resumed run opens the ledger; the
    # resumed run's first row opens a new part file (its first row written), and the part is
    # committed to the ledger when it is full or the run ends.
    for tmp in out.glob(".part-*.tmp"):
        tmp.unlink()
    t = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    first_row_s = first_part_s = None
    while p.poll() is None and first_part_s is None:
        now = time.perf_counter() - t
        if first_row_s is None and any(out.glob(".part-*.tmp")):
            first_row_s = now
        if committed_parts(ledger) > parts_at_kill:
            first_part_s = now
        time.sleep(0.005)
    p.wait()
    end = time.perf_counter() - t
    return {"done_at_kill": done_at_kill, "first_row_s": first_row_s,
            "first_part_s": first_part_s if first_part_s is not None else end,
            "resumed_total_s": end, "done": done_items(ledger)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--items", default="20000,200000")
    ap.add_argument("--seconds", type=int, default=600, help="length of the WAV")
    ap.add_argument("--repeat", type=int, default=1)
    a = ap.parse_args()
    root = a.out / "scale"
    root.mkdir(parents=True, exist_ok=True)
    wav = root / f"long-{a.seconds}s.wav"
    make_wav(wav, a.seconds)
    sizes = [int(x) for x in a.items.split(",")]
    load = os.getloadavg()
    rows = []
    for n in sizes:
        manifest = root / f"clips-{n}.csv"
        make_manifest(manifest, wav.resolve(), n, a.seconds)
        runs = [run(a.bin, manifest, root / f"out-{n}") for _ in range(a.repeat)]
        wall = statistics.median(r["wall_s"] for r in runs)
        rep = runs[0]["report"]
        rss = statistics.median(r["rss_mb"] or rep["peak_rss_mb"] for r in runs)
        rows.append((n, wall, n / wall, rss, rep))
    big = sizes[-1]
    resume = kill_and_resume(a.bin, root / f"clips-{big}.csv", root / "out-kill", big)
    print(f"Machine: {os.cpu_count()} cores, load average at start {load[0]:.2f} {load[1]:.2f} "
          f"{load[2]:.2f}; end {os.getloadavg()[0]:.2f}")
    print()
    print("| items | wall s | items/s | peak RSS MiB | decode s | compute s | write s |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for n, wall, ips, rss, rep in rows:
        st = rep["stages"]
        print(f"| {n:,} | {wall:.2f} | {ips:,.0f} | {rss:.0f} | {st['decode_s']:.2f} | "
              f"{st['compute_s']:.2f} | {st['write_s']:.2f} |")
    print()
    first_row = resume["first_row_s"]
    print(f"kill -9 at {resume['done_at_kill']:,} of {big:,} items done; resumed: first new row "
          f"written after {first_row:.2f} s" if first_row is not None else "first row: not seen",
          end="")
    print(f"; first new part committed after {resume['first_part_s']:.2f} s; finished in "
          f"{resume['resumed_total_s']:.1f} s with {resume['done']:,} items done")
    if len(rows) > 1:
        print(f"peak RSS growth {rows[0][0]:,} -> {rows[-1][0]:,} items: "
              f"{rows[-1][3] - rows[0][3]:+.0f} MiB")


if __name__ == "__main__":
    main()
