"""The same job from and to a bucket on a loopback S3 server against the local disk (issue 22's
targets): wall time, peak RSS, and the bytes that offsets into a long file fetch.

    cargo build --release -p sonograph -p sonograph-s3-fixture
    python3 bench/storage.py [--clips 2000] [--runs 3] [--long-minutes 60] [--spans 120] [--server-cores 1]
                             [--latency-ms 50]

The server is s3s-fs (crates/s3-fixture, the one the tests start), serving a folder whose
sub-folders are buckets. The corpus is `--clips` copies of tests/data/speech_16000_mono_s16.flac
in `corpus/clips/`, and a `--long-minutes` WAV (sox pink noise, 16 kHz 16-bit) with a NeMo
manifest of `--spans` 10-s spans into it. Jobs:

- local: the clips folder on disk → a folder on disk;
- bucket: `s3://corpus/clips` → `s3://features/runN` (staged in a work folder);
- spans: `s3://corpus/spans.jsonl` → a folder, the server's count of GET bytes read before
  and after, against the bytes the spans hold.

Runs alternate; medians are printed with the machine and its load.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def pinned(cores: set[int] | None):
    """A child's start that confines it to `cores` (None: where this process may run)."""
    return None if cores is None else (lambda: os.sched_setaffinity(0, cores))


def start_server(binary: str, root: Path, cores: set[int] | None) -> tuple[subprocess.Popen, str]:
    server = subprocess.Popen([binary, str(root)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              preexec_fn=pinned(cores))
    assert server.stdout is not None
    first = server.stdout.readline().split()
    assert first[0] == "endpoint", first
    return server, first[1]


def ask(server: subprocess.Popen, line: str) -> list[str]:
    """The server's one-line answer to `line` on its standard input, split."""
    assert server.stdin is not None and server.stdout is not None
    server.stdin.write(line + "\n")
    server.stdin.flush()
    return server.stdout.readline().split()


def stats(server: subprocess.Popen) -> int:
    return int(ask(server, "stats")[1])


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds process `pid` has used so far (its threads included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(cmd: list[str], env: dict[str, str], cores: set[int] | None) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of one run."""
    start = time.perf_counter()
    child = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             preexec_fn=pinned(cores))
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        assert child.stderr is not None
        raise SystemExit(f"{' '.join(cmd)} exited {code}: {child.stderr.read().decode()}")
    return wall, usage.ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=str(ROOT / "target" / "release" / "sonograph"))
    ap.add_argument("--server", default=str(ROOT / "target" / "release" / "sonograph-s3-fixture"))
    ap.add_argument("--clips", type=int, default=2000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--long-minutes", type=float, default=60.0)
    ap.add_argument("--spans", type=int, default=120)
    ap.add_argument("--clip-seconds", type=float, default=None,
                    help="clips of this many seconds of sox pink noise (16 kHz 16-bit WAV) instead of the FLAC")
    ap.add_argument("--bucket-args", default="", help="more arguments of the bucket run (e.g. '--workers 2')")
    ap.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                    help="set in both runs' environment (e.g. MIMALLOC_PURGE_DELAY=0)")
    ap.add_argument("--latency-ms", type=int, default=0,
                    help="each request waits this long at the server (a store's round trip; 0: loopback's)")
    ap.add_argument("--server-cores", type=int, default=0,
                    help="the server on this many of the machine's last cores and every job on the others, "
                         "as a store on other machines would leave the job its cores (0: all share every core)")
    args = ap.parse_args()
    cores = sorted(os.sched_getaffinity(0))
    if args.server_cores:
        if args.server_cores >= len(cores):
            raise SystemExit(f"--server-cores {args.server_cores} leaves no core of {len(cores)} to the jobs")
        server_cores, job_cores = set(cores[-args.server_cores:]), set(cores[:-args.server_cores])
    else:
        server_cores = job_cores = None

    with tempfile.TemporaryDirectory(prefix="sonograph-storage-") as tmp:
        root = Path(tmp)
        buckets = root / "s3"
        clips = buckets / "corpus" / "clips"
        clips.mkdir(parents=True)
        (buckets / "features").mkdir()
        if args.clip_seconds is None:
            audio, extension = (ROOT / "tests" / "data" / "speech_16000_mono_s16.flac").read_bytes(), "flac"
        else:
            one = root / "one.wav"
            subprocess.run(["sox", "-n", "-r", "16000", "-b", "16", "-c", "1", str(one), "synth",
                            str(args.clip_seconds), "pinknoise", "vol", "0.3"], check=True)
            audio, extension = one.read_bytes(), "wav"
        for i in range(args.clips):
            (clips / f"clip{i:06}.{extension}").write_bytes(audio)
        long_wav = buckets / "corpus" / "long.wav"
        seconds = args.long_minutes * 60
        subprocess.run(["sox", "-n", "-r", "16000", "-b", "16", "-c", "1", str(long_wav), "synth", str(seconds),
                        "pinknoise", "vol", "0.3"], check=True)
        step = (seconds - 10) / args.spans
        with open(buckets / "corpus" / "spans.jsonl", "w") as f:
            for i in range(args.spans):
                f.write(json.dumps({"audio_filepath": "long.wav", "offset": round(i * step, 3), "duration": 10.0}) + "\n")
        needed = args.spans * 10 * 16000 * 2

        server, endpoint = start_server(args.server, buckets, server_cores)
        if args.latency_ms:
            assert ask(server, f"latency {args.latency_ms}") == ["latency", str(args.latency_ms)]
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update({
            "AWS_ACCESS_KEY_ID": "sonograph-test", "AWS_SECRET_ACCESS_KEY": "sonograph-test-secret",
            "AWS_REGION": "us-east-1", "AWS_ENDPOINT": endpoint, "AWS_ALLOW_HTTP": "true",
        })
        env.update(dict(kv.split("=", 1) for kv in args.env))
        common = ["--preset", "whisper", "--no-progress"]
        walls: dict[str, list[float]] = {"local": [], "bucket": []}
        rss: dict[str, list[float]] = {"local": [], "bucket": []}
        server_cpu: list[float] = []
        try:
            for r in range(args.runs):
                out = root / "out-local"
                shutil.rmtree(out, ignore_errors=True)
                w, m = run([args.bin, "extract", str(clips), "--out", str(out), *common], env, job_cores)
                walls["local"].append(w)
                rss["local"].append(m)
                work = root / f"work-{r}"
                served_before = cpu_seconds(server.pid)
                w, m = run([args.bin, "extract", "s3://corpus/clips", "--out", f"s3://features/run{r}",
                            "--work-dir", str(work), *common, *args.bucket_args.split()], env, job_cores)
                server_cpu.append(cpu_seconds(server.pid) - served_before)
                walls["bucket"].append(w)
                rss["bucket"].append(m)
                shutil.rmtree(buckets / "features" / f"run{r}", ignore_errors=True)
                shutil.rmtree(work, ignore_errors=True)
            before = stats(server)
            spans_out = root / "out-spans"
            w_spans, _ = run([args.bin, "extract", "s3://corpus/spans.jsonl", "--out", str(spans_out), *common], env, job_cores)
            fetched = stats(server) - before
            report = json.loads((spans_out / "__sonograph" / "report.json").read_text())
            assert report["items_ok"] == args.spans, report
        finally:
            server.stdin.close()  # type: ignore[union-attr]
            server.wait()

    load = os.getloadavg()
    print(f"machine: {os.cpu_count()} cores, load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    kind = "FLAC" if args.clip_seconds is None else f"{args.clip_seconds:g}-s WAV"
    print(f"{args.clips} clips of {len(audio)} bytes ({kind}, 16 kHz), whisper, {args.runs} runs alternating; "
          f"bucket run's own arguments: {args.bucket_args or '(none)'}; environment: {args.env or '(as is)'}; "
          f"server latency {args.latency_ms} ms; "
          f"cores: {'all shared' if job_cores is None else f'server on {sorted(server_cores)}, jobs on {sorted(job_cores)}'}")
    for kind in ("local", "bucket"):
        print(f"{kind:>7}: wall median {statistics.median(walls[kind]):.2f} s {['%.2f' % w for w in walls[kind]]}, "
              f"peak RSS median {statistics.median(rss[kind]):.0f} MB {['%.0f' % m for m in rss[kind]]}")
    print(f" server: CPU median {statistics.median(server_cpu):.2f} s a bucket job {['%.2f' % c for c in server_cpu]}")
    ratio = statistics.median(walls["bucket"]) / statistics.median(walls["local"])
    rss_gap = statistics.median(rss["bucket"]) - statistics.median(rss["local"])
    print(f"bucket / local wall: {ratio:.2f}x (target <= 1.3x); peak RSS bucket - local: {rss_gap:+.0f} MB "
          f"(target <= 50 MB)")
    print(f"spans: {args.spans} x 10 s of a {args.long_minutes:.0f}-min WAV in the bucket: fetched {fetched} bytes "
          f"for {needed} bytes of spans ({fetched / needed:.2f}x, target <= 2x) in {w_spans:.2f} s")


if __name__ == "__main__":
    main()
