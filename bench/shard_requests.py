"""A WebDataset shard in a bucket: the requests and bytes one `extract` of it costs, against the
same shard on the local disk (issue 22: "tar headers one request per member").

    cargo build --release -p sonograph -p sonograph-s3-fixture
    python3 bench/shard_requests.py [--samples 200] [--runs 3]

The shard holds `--samples` samples, each tests/data/speech_16000_mono_s16.flac (2 s) and a
small `.json`, on the loopback S3 server the tests start (crates/s3-fixture). Prints the
server's count of requests and GET bytes for the job, and the wall times (medians) of the
bucket and local jobs with the machine's load. On loopback a request costs well under a
millisecond; on a cloud store it costs tens, so the request count is the figure to compare.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path

from storage import ROOT, run, start_server


def server_stats(server: subprocess.Popen) -> tuple[int, int]:
    assert server.stdin is not None and server.stdout is not None
    server.stdin.write("stats\n")
    server.stdin.flush()
    fields = server.stdout.readline().split()
    return int(fields[1]), int(fields[3])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=str(ROOT / "target" / "release" / "sonograph"))
    ap.add_argument("--server", default=str(ROOT / "target" / "release" / "sonograph-s3-fixture"))
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="sonograph-shard-") as tmp:
        root = Path(tmp)
        members = root / "members"
        members.mkdir()
        audio = (ROOT / "tests" / "data" / "speech_16000_mono_s16.flac").read_bytes()
        names = []
        for i in range(args.samples):
            (members / f"utt{i:05}.flac").write_bytes(audio)
            (members / f"utt{i:05}.json").write_text(f'{{"text": "utterance {i}"}}')
            names += [f"utt{i:05}.flac", f"utt{i:05}.json"]
        bucket = root / "s3" / "corpus"
        bucket.mkdir(parents=True)
        shard = bucket / "train-000.tar"
        subprocess.run(["tar", "-cf", str(shard), "-C", str(members), *names], check=True)
        shard_bytes = shard.stat().st_size
        local = root / "train-000.tar"
        shutil.copy(shard, local)
        server, endpoint = start_server(args.server, root / "s3")
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update({
            "AWS_ACCESS_KEY_ID": "sonograph-test", "AWS_SECRET_ACCESS_KEY": "sonograph-test-secret",
            "AWS_REGION": "us-east-1", "AWS_ENDPOINT": endpoint, "AWS_ALLOW_HTTP": "true",
        })
        common = ["--preset", "whisper", "--no-progress", "--device", "cpu"]
        walls: dict[str, list[float]] = {"local": [], "bucket": []}
        counts = []
        try:
            for _ in range(args.runs):
                for kind, source in (("local", str(local)), ("bucket", "s3://corpus/train-000.tar")):
                    out = root / f"out-{kind}"
                    shutil.rmtree(out, ignore_errors=True)
                    before = server_stats(server)
                    wall, _ = run([args.bin, "extract", source, "--out", str(out), *common], env)
                    after = server_stats(server)
                    walls[kind].append(wall)
                    if kind == "bucket":
                        counts.append((after[1] - before[1], after[0] - before[0]))
        finally:
            server.stdin.close()  # type: ignore[union-attr]
            server.wait()
    load = os.getloadavg()
    print(f"machine: {os.cpu_count()} cores, load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    requests, fetched = counts[-1]
    print(f"{args.samples} samples (2-s FLAC + .json), a shard of {shard_bytes} bytes")
    print(f"bucket job: {requests} requests ({requests / args.samples:.2f} a sample), "
          f"{fetched} bytes fetched ({fetched / shard_bytes:.2f}x the shard); "
          f"the same in every run: {len(set(counts)) == 1}")
    for kind in ("local", "bucket"):
        print(f"{kind:>7}: wall median {statistics.median(walls[kind]):.2f} s {['%.2f' % w for w in walls[kind]]}")


if __name__ == "__main__":
    main()
