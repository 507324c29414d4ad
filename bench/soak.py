#!/usr/bin/env python3
"""The service's soak test (issue 20): `sonograph serve` for MINUTES (30 by default) under a
submitter, a canceller, a scraper, a server-sent-events reader and a killer (kill -9 at random,
now and then SIGTERM, restarted on the same state dir and port), with the server's RSS, open file
descriptors and threads sampled per lifetime. At the end the queue drains, every job's Parquet
parts are read back and held to a clean `sonograph extract` run of the same source and options:
no lost, doubled, foreign or changed row, the bad items in report.json's failures, nothing left
running; a sample of canceled jobs is submitted again and must complete (resume). Prints and
writes a summary; exits 1 when a check fails (2 on a setup error).

Run it through `bench/load.sh soak [MINUTES]`, which makes its virtual environment
(bench/.venv-soak, pyarrow) and builds the release binary.
"""

import argparse
import collections
import datetime
import hashlib
import http.client
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import wave

import pyarrow.parquet as pq

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Options that do not change a job's rows (drawn per job) and those that do (a reference run each).
FREE_OPTIONS = {
    "workers": [1, 2],
    "batch-items": [4, 8, 16],
    "prefetch": [2, 4],
    "part-mb": [1, 2, 8, 64],
}
ROW_OPTIONS = {
    "default": {},
    "pieces": {"max-seconds": 20, "chunk-seconds": 10},
}
TERMINAL = {"succeeded", "failed", "canceled"}


def now():
    return time.monotonic()


def setup_error(message):
    """The soak could not be set up (not a finding about the server): exit 2."""
    print(message, file=sys.stderr)
    sys.exit(2)


class Log:
    """Timestamped progress lines on stderr."""

    def __init__(self):
        self.t0 = now()
        self.lock = threading.Lock()

    def __call__(self, *msg):
        with self.lock:
            print(f"[{now() - self.t0:7.1f}s]", *msg, file=sys.stderr, flush=True)


log = Log()


# ---------------------------------------------------------------------------------------------
# The corpus


def write_wav(path, rate, channels, frames_bytes):
    with wave.open(path, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(frames_bytes)


def noise_pcm(rng, frames, channels, quiet=False):
    """White noise as 16-bit PCM (random bytes, the high byte tamed when quiet)."""
    raw = bytearray(rng.randbytes(frames * channels * 2))
    if quiet:
        raw[1::2] = bytes(b & 0x0F for b in raw[1::2])
    return bytes(raw)


def speech_pcm():
    with wave.open(os.path.join(REPO, "tests/data/speech_16000_mono_s16.wav")) as w:
        return w.readframes(w.getnframes())


class Corpus:
    """The sources under ROOT: two folders and two manifests, each with bad items.

    `bad[source]` is the number of items that must fail, `good[source]` the number that must
    not (a long item or a span is one item of several rows)."""

    def __init__(self, root, seed):
        self.root = root
        rng = random.Random(seed)
        speech = speech_pcm()
        self.sources = {}
        self.good = {}
        self.bad = {}
        data = os.path.join(REPO, "tests/data")

        # Folder A: the repository's clips, generated WAVs (noise and cuts of speech, 8-48 kHz,
        # mono and stereo, 0.2-3 s), two long files (pieces) and three broken files.
        a = os.path.join(root, "corpus")
        for sub in ("data", "gen", "long", "sub"):
            os.makedirs(os.path.join(a, sub))
        copies = sorted(f for f in os.listdir(data) if f.endswith((".wav", ".flac")))
        for f in copies:
            shutil.copy(os.path.join(data, f), os.path.join(a, "data", f))
        generated_a = self._generate(rng, os.path.join(a, "gen"), "g", 230, speech)
        self.long_files = []
        for i, seconds in enumerate((67.5, 94.0)):
            path = os.path.join(a, "long", f"long{i}.wav")
            write_wav(path, 16000, 1, noise_pcm(rng, int(16000 * seconds), 1, quiet=True))
            self.long_files.append((path, seconds))
        with open(os.path.join(a, "garbage.wav"), "wb") as f:
            f.write(b"RIFF....WAVEnot really")
        open(os.path.join(a, "empty.flac"), "wb").close()
        flac = open(os.path.join(data, "speech_16000_mono_s16.flac"), "rb").read()
        with open(os.path.join(a, "sub", "cut.flac"), "wb") as f:
            f.write(flac[: len(flac) // 3])
        self.sources["corpus"] = a
        self.good["corpus"] = len(copies) + len(generated_a) + len(self.long_files)
        self.bad["corpus"] = 3

        # Folder B: other generated WAVs, the MP3 and Ogg clips, one broken file.
        b = os.path.join(root, "corpus-b")
        os.makedirs(b)
        generated_b = self._generate(rng, b, "b", 70, speech)
        for f in ("speech_44100_stereo.mp3", "speech_44100_stereo.ogg"):
            shutil.copy(os.path.join(data, f), os.path.join(b, f))
        with open(os.path.join(b, "zz-garbage.wav"), "wb") as f:
            f.write(b"RIFF\x24\x00\x00\x00WAVEfmt garbage garbage garbage")
        self.sources["corpus-b"] = b
        self.good["corpus-b"] = len(generated_b) + 2
        self.bad["corpus-b"] = 1

        lists = os.path.join(root, "lists")
        os.makedirs(lists)
        # A CSV manifest: 60 items of folder A under ids of their own, two missing files, one
        # broken file.
        m1 = os.path.join(lists, "m1.csv")
        picks = rng.sample(generated_a, 60)
        with open(m1, "w") as f:
            f.write("id,path\n")
            for i, p in enumerate(picks):
                f.write(f"m1-{i:03d},{p}\n")
            f.write(f"m1-missing-0,{a}/gen/no-such-file.wav\n")
            f.write(f"m1-missing-1,{root}/nowhere/x.flac\n")
            f.write(f"m1-garbage,{a}/garbage.wav\n")
        self.sources["m1"] = m1
        self.good["m1"] = 60
        self.bad["m1"] = 3

        # A NeMo JSON-lines manifest: 40 whole files of folder B, 12 spans of a long file, a
        # missing file, a line that is not JSON and a span of negative duration.
        m2 = os.path.join(lists, "m2.jsonl")
        lines = [json.dumps({"audio_filepath": p, "text": "x"}) for p in rng.sample(generated_b, 40)]
        long0 = self.long_files[0][0]
        lines += [
            json.dumps({"audio_filepath": long0, "offset": 5.0 * k, "duration": 4.5})
            for k in range(12)
        ]
        lines.append(json.dumps({"audio_filepath": f"{b}/missing.wav"}))
        lines.append("{this is not json")
        lines.append(json.dumps({"audio_filepath": long0, "offset": 1.0, "duration": -2.0}))
        rng.shuffle(lines)
        with open(m2, "w") as f:
            f.write("\n".join(lines) + "\n")
        self.sources["m2"] = m2
        self.good["m2"] = 52
        self.bad["m2"] = 3

        # A big CSV manifest: 2,000 ids over folder A's generated files (a job of several
        # seconds, so that kills and cancels land in running jobs), two missing files.
        m3 = os.path.join(lists, "m3-big.csv")
        with open(m3, "w") as f:
            f.write("id,path\n")
            for i in range(2000):
                f.write(f"big-{i:04d},{rng.choice(generated_a)}\n")
            f.write(f"big-missing-0,{a}/gen/none-0.wav\n")
            f.write(f"big-missing-1,{a}/gen/none-1.wav\n")
        self.sources["m3"] = m3
        self.good["m3"] = 2000
        self.bad["m3"] = 2

    @staticmethod
    def _generate(rng, folder, prefix, n, speech):
        paths = []
        for i in range(n):
            rate = rng.choice([8000, 16000, 22050, 44100, 48000])
            channels = rng.choice([1, 1, 2])
            seconds = rng.uniform(0.2, 3.0)
            frames = max(1, int(rate * seconds))
            if rng.random() < 0.5:
                pcm = noise_pcm(rng, frames, channels, quiet=rng.random() < 0.5)
            else:
                # A cut of the speech clip (16 kHz mono) written at this rate and layout.
                start = rng.randrange(0, len(speech) // 2 - 1000) * 2
                mono = (speech[start:] * 4)[: frames * 2]
                mono += b"\x00" * (frames * 2 - len(mono))
                if channels == 2:
                    pcm = b"".join(mono[j : j + 2] * 2 for j in range(0, len(mono), 2))
                else:
                    pcm = mono
            path = os.path.join(folder, f"{prefix}{i:03d}.wav")
            write_wav(path, rate, channels, pcm)
            paths.append(path)
        return paths


# ---------------------------------------------------------------------------------------------
# Reading outputs


def read_rows(out):
    """(rows, temporaries): rows = list of ((id, offset µs), digest) from every part under `out`
    (duplicates kept), temporaries = leftover `.tmp` files."""
    rows = []
    temporaries = []
    if not os.path.isdir(out):
        return rows, temporaries
    for name in sorted(os.listdir(out)):
        if name.endswith(".tmp"):
            temporaries.append(name)
            continue
        if not name.endswith(".parquet") or name.startswith("."):
            continue
        table = pq.read_table(
            os.path.join(out, name),
            columns=["id", "offset_s", "num_frames", "num_bins", "features"],
        )
        ids = table.column("id").to_pylist()
        offsets = table.column("offset_s").to_pylist()
        frames = table.column("num_frames").to_pylist()
        bins = table.column("num_bins").to_pylist()
        digests = []
        for chunk in table.column("features").chunks:
            # A list of frames, each a fixed-size list of the bins: offsets count frames.
            frames_of_chunk = chunk.flatten()
            per_frame = frames_of_chunk.type.list_size
            flat = frames_of_chunk.flatten()
            width = flat.type.byte_width
            values = flat.buffers()[1]
            base = flat.offset
            offs = chunk.offsets.to_pylist()
            first = offs[0]
            for k in range(len(chunk)):
                lo = (base + (offs[k] - first) * per_frame) * width
                hi = (base + (offs[k + 1] - first) * per_frame) * width
                digests.append(hashlib.blake2b(values[lo:hi], digest_size=12).hexdigest())
        for i in range(len(ids)):
            key = (ids[i], round(offsets[i] * 1e6))
            rows.append((key, (frames[i], bins[i], digests[i])))
    return rows, temporaries


def report_of(out):
    path = os.path.join(out, "__sonograph", "report.json")
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


# ---------------------------------------------------------------------------------------------
# HTTP


def call(method, url, body=None, timeout=10.0):
    """(status, parsed JSON or text); raises OSError on a transport error."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("content-type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            status, text = r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read().decode(errors="replace")
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_stats(pid):
    """(rss KiB, threads, open fds) of a live process, or None."""
    try:
        with open(f"/proc/{pid}/status") as f:
            status = f.read()
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        rss = int(fields["VmRSS"].split()[0])
        threads = int(fields["Threads"])
        fds = len(os.listdir(f"/proc/{pid}/fd"))
        return rss, threads, fds
    except (OSError, KeyError, ValueError):
        return None


def metric(text, name, labels=""):
    prefix = name + labels + " "
    for line in text.splitlines():
        if line.startswith(prefix):
            try:
                return float(line[len(prefix):].split()[0])
            except ValueError:
                return None
    return None


# ---------------------------------------------------------------------------------------------
# The server


class Lifetime:
    def __init__(self, n, pid, started):
        self.n = n
        self.pid = pid
        self.started = started  # monotonic, at spawn
        self.ready_s = None  # seconds from spawn to /ready 200
        self.ended = None
        self.end = None  # "kill -9", "TERM", "final TERM"
        self.exit = None
        self.exit_s = None  # seconds from the signal to the exit
        # (t since spawn, rss KiB, threads, fds, job running, jobs queued, seconds idle)
        self.samples = []
        self.first_job = None  # seconds from spawn to the first sample with a job running
        self.idle_threads = []  # (t, {thread name: count}) at idle samples

    def span(self):
        return (self.ended or now()) - self.started


class Server:
    """`sonograph serve` on a fixed port and state dir, restarted as often as the killer likes."""

    def __init__(self, binary, root, state, port, logdir):
        self.binary, self.root, self.state, self.port, self.logdir = (
            binary, root, state, port, logdir)
        self.base = f"http://127.0.0.1:{port}"
        self.proc = None
        self.lifetimes = []
        self.lock = threading.Lock()
        self.up = False  # answering, not being stopped
        self.epoch = 0  # bumped at every stop and start
        self.findings = []
        self.control = threading.Lock()  # one stop-and-start at a time

    def url(self, path):
        return self.base + path

    def state_now(self):
        with self.lock:
            return self.up, self.epoch

    def start(self):
        for attempt in range(20):
            n = len(self.lifetimes) + 1
            logf = open(os.path.join(self.logdir, f"serve-{n:03d}.log"), "ab")
            proc = subprocess.Popen(
                [self.binary, "serve", "--addr", f"127.0.0.1:{self.port}",
                 "--data-root", self.root, "--state-dir", self.state, "--device", "cpu"],
                stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env={k: v for k, v in os.environ.items()
                     if not k.startswith("SONOGRAPH_") and k != "FAILPOINTS"},
            )
            logf.close()
            life = Lifetime(n, proc.pid, now())
            deadline = now() + 60
            ready = False
            while now() < deadline and proc.poll() is None:
                try:
                    if call("GET", self.url("/ready"), timeout=2)[0] == 200:
                        ready = True
                        break
                except OSError:
                    pass
                time.sleep(0.05)
            if ready:
                life.ready_s = now() - life.started
                with self.lock:
                    self.proc = proc
                    self.lifetimes.append(life)
                    self.up = True
                    self.epoch += 1
                return life
            code = proc.poll()
            if code is None:
                proc.kill()
                proc.wait()
            tail = open(os.path.join(self.logdir, f"serve-{n:03d}.log"), errors="replace").read()[-600:]
            self.findings.append(f"start {attempt + 1} of lifetime {n} failed (exit {code}): {tail!r}")
            log(f"server start failed (exit {code}), again in 1 s: {tail[-200:]!r}")
            time.sleep(1)
        raise RuntimeError("the server did not start 20 times in a row")

    def stop(self, how):
        """Stops the server with kill -9 ("kill -9") or SIGTERM ("TERM", "final TERM")."""
        with self.lock:
            self.up = False
            self.epoch += 1
            proc, life = self.proc, self.lifetimes[-1]
        t = now()
        if how == "kill -9":
            proc.send_signal(signal.SIGKILL)
            code = proc.wait()
        else:
            proc.send_signal(signal.SIGTERM)
            try:
                code = proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.findings.append(
                    f"lifetime {life.n}: SIGTERM did not end the server in 30 s; killed with -9")
                proc.kill()
                code = proc.wait()
        life.exit_s = now() - t
        life.ended = now()
        life.end = how
        life.exit = code
        if how != "kill -9" and (code != 0 or life.exit_s > 10):
            self.findings.append(
                f"lifetime {life.n}: SIGTERM exit {code} after {life.exit_s:.1f} s "
                "(the README: exit 0 within 10 s)")
        # A crash of its own shows here as an exit the killer did not cause.
        return code


# ---------------------------------------------------------------------------------------------
# The soak


class Soak:
    def __init__(self, args):
        self.args = args
        self.rng = random.Random(args.seed)
        self.work = args.work or tempfile.mkdtemp(prefix="sonograph-soak-")
        os.makedirs(self.work, exist_ok=True)
        self.root = os.path.join(self.work, "root")
        self.state = os.path.join(self.work, "state")
        self.logs = os.path.join(self.work, "logs")
        for d in (self.root, self.state, self.logs, os.path.join(self.root, "out")):
            os.makedirs(d, exist_ok=True)
        self.root = os.path.realpath(self.root)
        self.stop_load = threading.Event()  # submitter, canceller, killer
        self.stop_all = threading.Event()  # scraper, sse, sampler
        self.findings = []  # checks that failed
        self.notes = []
        self.lock = threading.Lock()
        self.submissions = []  # dicts: out, request, id, outcome, t, source, rows
        self.cancels = []  # (t, id, code, state)
        self.counts = collections.Counter()
        self.unexpected = []  # request errors while the server was up
        self.sse_events = collections.Counter()
        self.load = []  # (t, 1-min load)
        self.kills = collections.Counter()
        self.pause_until_idle = threading.Event()
        self.last_running_t = now()
        self.settle_lock = threading.Lock()
        self.settled = {}  # job id -> (state, check result)
        self.kept = []  # canceled jobs whose output is kept to be submitted again

    # -- setup

    def build(self):
        log(f"work dir {self.work}; corpus ...")
        self.corpus = Corpus(self.root, self.args.seed)
        self.references = {}
        for source, path in self.corpus.sources.items():
            for rowname, opts in ROW_OPTIONS.items():
                out = os.path.join(self.work, "reference", f"{source}-{rowname}")
                cmd = [self.args.binary, "extract", path, "--out", out, "--preset", "whisper",
                       "--device", "cpu"]
                for k, v in opts.items():
                    cmd += [f"--{k}", str(v)]
                t = now()
                r = subprocess.run(cmd, capture_output=True, text=True)
                if r.returncode not in (0, 3):  # 3: done, some items failed
                    setup_error(f"setup: {' '.join(cmd)} exited {r.returncode}: {r.stderr[-2000:]}")
                rows, _ = read_rows(out)
                expected = {}
                for key, digest in rows:
                    if key in expected:
                        setup_error(f"setup: the reference {out} holds {key} twice")
                    expected[key] = digest
                report = report_of(out)
                failures = sorted(f["id"] for f in report["failures"])
                ids = {k[0] for k in expected}
                if len(ids) != self.corpus.good[source] or len(failures) != self.corpus.bad[source]:
                    raise SystemExit(
                        f"setup: the reference of {source} has {len(ids)} good and "
                        f"{len(failures)} failed items, the corpus {self.corpus.good[source]} "
                        f"and {self.corpus.bad[source]}: {failures}")
                self.references[(source, rowname)] = (expected, failures)
                log(f"reference {source}/{rowname}: {len(ids)} items, {len(expected)} rows, "
                    f"{len(failures)} failures, {now() - t:.1f} s")
                self.reference_seconds = getattr(self, "reference_seconds", 0) + now() - t
        shutil.rmtree(os.path.join(self.work, "reference"))

    # -- the load

    def new_request(self, seq):
        source = self.rng.choices(list(self.corpus.sources), weights=[3, 1, 1, 1, 3])[0]
        rowname = "pieces" if self.rng.random() < 0.2 else "default"
        req = {"source": self.corpus.sources[source],
               "out": os.path.join(self.root, "out", f"job-{seq:04d}"),
               "preset": "whisper", "device": "cpu"}
        for k, choices in FREE_OPTIONS.items():
            if self.rng.random() < 0.6:
                req[k] = self.rng.choice(choices)
        req.update(ROW_OPTIONS[rowname])
        return req, source, rowname

    def submit(self, req, source, rowname, resubmit_of=None):
        sub = {"out": req["out"], "request": req, "id": None, "outcome": None, "t": now(),
               "source": source, "rows": rowname, "resubmit_of": resubmit_of}
        up, epoch = self.server.state_now()
        try:
            status, body = call("POST", self.server.url("/api/v1/jobs"), req, timeout=15)
        except OSError as e:
            sub["outcome"] = "unknown"  # it may or may not have been taken
            self.request_error("POST /api/v1/jobs", e, up, epoch)
            with self.lock:
                self.submissions.append(sub)
            return sub
        if status == 201:
            sub["id"] = body["id"]
            sub["outcome"] = "created"
            self.counts["submitted"] += 1
        else:
            sub["outcome"] = f"refused {status}"
            if not (status == 503 and not self.server.state_now()[0]):
                self.findings.append(f"POST {req['out']}: {status} {body}")
        with self.lock:
            self.submissions.append(sub)
        return sub

    def request_error(self, what, err, up, epoch):
        up_now, epoch_now = self.server.state_now()
        if up and up_now and epoch == epoch_now:
            self.unexpected.append(f"{what}: {err!r} at {now() - log.t0:.1f}s")
            log(f"UNEXPECTED error while the server was up: {what}: {err!r}")
        else:
            self.counts["expected request errors (server down)"] += 1

    def jobs(self):
        status, body = call("GET", self.server.url("/api/v1/jobs"), timeout=15)
        if status != 200:
            raise OSError(f"GET /api/v1/jobs: {status}")
        return body["jobs"]

    def active(self):
        with self.lock:
            return [s for s in self.submissions if s["outcome"] == "created"]

    def submitter(self):
        seq = 0
        cap = 4
        pause_every = max(45.0, self.args.minutes * 60 / 8)
        next_pause = now() + pause_every
        while not self.stop_load.is_set():
            if now() > next_pause:
                self.idle_window()
                next_pause = now() + pause_every
                continue
            up, epoch = self.server.state_now()
            if not up:
                time.sleep(0.5)
                continue
            try:
                pending = [j for j in self.jobs() if j["state"] in ("queued", "running")]
            except OSError as e:
                self.request_error("GET /api/v1/jobs", e, up, epoch)
                time.sleep(1)
                continue
            if len(pending) < cap:
                seq += 1
                req, source, rowname = self.new_request(seq)
                self.submit(req, source, rowname)
            self.stop_load.wait(self.rng.uniform(0.5, 3))

    def idle_window(self):
        """Submits nothing until the queue has drained and the server has idled 20 s, so that
        its idle fds and threads are sampled between jobs (6 min at most)."""
        log("idle window: letting the queue drain")
        start = now()
        idle_since = None
        while not self.stop_load.is_set() and now() - start < 360:
            up, epoch = self.server.state_now()
            try:
                busy = up and any(j["state"] in ("queued", "running") for j in self.jobs())
            except OSError as e:
                self.request_error("GET /api/v1/jobs", e, up, epoch)
                busy = True
            if up and not busy:
                idle_since = idle_since or now()
                if now() - idle_since > 20:
                    break
            else:
                idle_since = None
            time.sleep(1)
        self.counts["idle windows"] += 1
        log(f"idle window over after {now() - start:.0f} s")

    def canceller(self):
        while not self.stop_load.wait(self.rng.uniform(*self.cancel_every)):
            up, epoch = self.server.state_now()
            if not up:
                continue
            try:
                pending = [j for j in self.jobs() if j["state"] in ("queued", "running")]
            except OSError as e:
                self.request_error("GET /api/v1/jobs", e, up, epoch)
                continue
            if not pending:
                continue
            job = self.rng.choice(pending)
            try:
                code, body = call("DELETE", self.server.url(f"/api/v1/jobs/{job['id']}"))
            except OSError as e:
                self.request_error("DELETE", e, up, epoch)
                continue
            self.cancels.append((now(), job["id"], code, job["state"]))
            self.counts[f"DELETE {job['state']} -> {code}"] += 1
            if code not in (200, 202, 409):
                self.findings.append(f"DELETE job {job['id']} ({job['state']}): {code} {body}")

    def killer(self):
        for interval in self.kill_plan:
            if self.stop_load.wait(interval):
                return
            how = "TERM" if self.rng.random() < 0.25 else "kill -9"
            # Most stops land in a running job: wait up to 30 s for one (jobs take seconds),
            # then up to 1.5 s more so that they land at any point of it; one in five lands
            # wherever it falls.
            if self.rng.random() < 0.8:
                deadline = now() + 30
                while now() < deadline and not self.stop_load.is_set():
                    try:
                        text = call("GET", self.server.url("/metrics"), timeout=5)[1]
                        if metric(text, "sonograph_job_running"):
                            break
                    except OSError:
                        pass
                    time.sleep(0.2)
                time.sleep(self.rng.uniform(0, 1.5))
            try:
                text = call("GET", self.server.url("/metrics"), timeout=5)[1]
                if metric(text, "sonograph_job_running"):
                    self.kills[f"{how} with a job running"] += 1
            except OSError:
                pass
            with self.server.control:
                life = self.server.lifetimes[-1]
                code = self.server.stop(how)
                self.kills[how] += 1
                time.sleep(self.rng.uniform(0, 2))
                self.server.start()
            log(f"{how}: lifetime {life.n} ended after {life.span():.0f} s (exit {code}, "
                f"{life.exit_s:.2f} s after the signal)")
            if how == "kill -9" and code != -9:
                self.findings.append(f"lifetime {life.n} exited {code} before kill -9 landed")
            log(f"lifetime {self.server.lifetimes[-1].n} ready in {self.server.lifetimes[-1].ready_s:.2f} s")

    def watch_exits(self):
        """A server that exits without the killer's signal crashed: recorded, and restarted."""
        while not self.stop_all.wait(0.5):
            with self.server.control:
                with self.server.lock:
                    proc, up, life = self.server.proc, self.server.up, self.server.lifetimes[-1]
                if not up or proc.poll() is None:
                    continue
                with self.server.lock:
                    self.server.up = False
                    self.server.epoch += 1
                life.ended, life.end, life.exit = now(), "crash", proc.returncode
                self.findings.append(
                    f"lifetime {life.n} exited on its own ({proc.returncode}) after "
                    f"{life.span():.0f} s; log: {self.logs}/serve-{life.n:03d}.log")
                log(f"CRASH: lifetime {life.n} exited {proc.returncode}; restarting")
                self.server.start()

    # -- observers

    def scraper(self):
        paths = ["/metrics", "/api/v1/status"]
        while not self.stop_all.is_set():
            for path in paths:
                up, epoch = self.server.state_now()
                if not up:
                    continue
                t = now()
                try:
                    status, body = call("GET", self.server.url(path), timeout=10)
                except OSError as e:
                    self.request_error(f"GET {path}", e, up, epoch)
                    continue
                latency = now() - t
                self.counts[f"GET {path} {status}"] += 1
                self.max_latency[path] = max(self.max_latency.get(path, 0), latency)
                if status != 200:
                    if self.server.state_now() == (up, epoch):
                        self.unexpected.append(f"GET {path}: {status} {str(body)[:200]}")
                elif path == "/metrics" and metric(body, "sonograph_ready") is None:
                    self.unexpected.append("GET /metrics without sonograph_ready")
            self.stop_all.wait(0.5)

    def sse_reader(self):
        while not self.stop_all.is_set():
            up, epoch = self.server.state_now()
            if not up:
                time.sleep(0.2)
                continue
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=20)
                conn.request("GET", "/api/v1/events")
                resp = conn.getresponse()
                if resp.status != 200:
                    raise OSError(f"status {resp.status}")
                self.counts["event stream connections"] += 1
                event = None
                while not self.stop_all.is_set():
                    line = resp.readline()
                    if not line:
                        raise EOFError("the stream ended")
                    line = line.decode(errors="replace").rstrip("\r\n")
                    if line.startswith("event:"):
                        event = line[6:].strip()
                    elif line.startswith("data:") and event:
                        self.sse_events[event] += 1
                        if event == "job":
                            try:
                                self.job_events.add(json.loads(line[5:])["id"])
                            except (ValueError, KeyError, TypeError):
                                pass
                    elif line == "":
                        event = None
                conn.close()
            except (OSError, EOFError, http.client.HTTPException) as e:
                up_now, epoch_now = self.server.state_now()
                if up and up_now and epoch == epoch_now and not self.stop_all.is_set():
                    # Give the killer a moment to flag a stop that raced with the read.
                    time.sleep(1)
                    if self.server.state_now() == (True, epoch):
                        self.unexpected.append(f"event stream: {e!r} at {now() - log.t0:.1f}s")
                        log(f"UNEXPECTED: the event stream broke while the server was up: {e!r}")
                else:
                    self.counts["event streams ended by a stop"] += 1
                time.sleep(0.2)

    def sampler(self):
        while not self.stop_all.wait(self.args.sample_every):
            with self.server.lock:
                up, proc, life = self.server.up, self.server.proc, self.server.lifetimes[-1]
            try:
                self.load.append((now(), float(open("/proc/loadavg").read().split()[0])))
            except OSError:
                pass
            if not up:
                continue
            # The job state around the /proc read, from both gauges: sonograph_job_running
            # comes from the telemetry sampler and lags a job's start by up to a second,
            # sonograph_jobs{state="running"} does not. A sample is idle only when the server
            # had no job queued or running both before and after it was taken.
            def busy():
                text = call("GET", self.server.url("/metrics"), timeout=10)[1]
                return (metric(text, "sonograph_job_running") or 0.0,
                        metric(text, "sonograph_jobs", '{state="running"}') or 0.0,
                        metric(text, "sonograph_jobs", '{state="queued"}') or 0.0)
            try:
                before = busy()
                # Let the server close this connection before its fds are counted.
                time.sleep(0.05)
                stats = proc_stats(proc.pid)
                after = busy()
            except OSError:
                continue
            running = max(before[0], before[1], after[0], after[1])
            queued = max(before[2], after[2])
            if running:
                self.last_running_t = now()
                if life.first_job is None:
                    life.first_job = now() - life.started
            if stats is None or life.pid != proc.pid:
                continue
            rss, threads, fds = stats
            idle_for = now() - self.last_running_t if not running and not queued else 0.0
            life.samples.append((now() - life.started, rss, threads, fds, running, queued, idle_for))
            if idle_for >= 15:
                try:
                    names = collections.Counter(
                        open(f"/proc/{proc.pid}/task/{t}/comm").read().strip()
                        for t in os.listdir(f"/proc/{proc.pid}/task"))
                    life.idle_threads.append((now() - life.started, dict(sorted(names.items()))))
                except OSError:
                    pass

    # -- the run

    def run(self):
        self.build()
        port = free_port()
        self.server = Server(self.args.binary, self.root, self.state, port, self.logs)
        self.max_latency = {}
        self.job_events = set()
        total = self.args.minutes * 60
        scale = self.args.minutes / 30
        lo, hi = max(15, 60 * scale), max(40, 240 * scale)
        self.cancel_every = (max(5, 15 * scale), max(15, 60 * scale))
        # Kill intervals of 1-4 min (scaled for short runs), and one lifetime of a third of the
        # run (among the first three) so that its RSS has room to drift.
        plan, spent = [], 0.0
        long_at = self.rng.randrange(0, 3)
        while spent < total - lo:
            interval = total / 3 if len(plan) == long_at else self.rng.uniform(lo, hi)
            plan.append(interval)
            spent += interval
        self.kill_plan = plan
        log(f"kill plan (s): {[round(x) for x in plan]}")
        self.server.start()
        log(f"serving on {self.server.base}, state {self.state}")
        t0 = now()
        threads = [threading.Thread(target=f, daemon=True, name=f.__name__) for f in
                   (self.submitter, self.canceller, self.killer)]
        observers = [threading.Thread(target=f, daemon=True, name=f.__name__) for f in
                     (self.scraper, self.sse_reader, self.sampler, self.watch_exits,
                      self.checker)]
        for t in observers + threads:
            t.start()
        while now() - t0 < total:
            time.sleep(5)
            with self.lock:
                n = len(self.submissions)
            log(f"{(now() - t0) / 60:.1f} min: {n} submissions, kills {dict(self.kills)}, "
                f"lifetime {self.server.lifetimes[-1].n}, events {dict(self.sse_events)}")
        self.stop_load.set()
        for t in threads:
            t.join()
        self.load_seconds = now() - t0
        log("load stopped; draining")
        self.drain()
        self.resubmit_canceled()
        time.sleep(20)  # a last idle stretch for the sampler
        self.final_jobs = self.jobs()
        self.stop_all.set()
        for t in observers:
            t.join(timeout=30)
        code = self.server.stop("final TERM")
        self.kills_final = code
        self.total_seconds = now() - log.t0

    def drain(self, limit=1200):
        """Waits until no job is queued or running; restarts the server once when nothing moves
        for 3 minutes (a hang, recorded)."""
        start = now()
        last, last_change, restarted = None, now(), False
        while now() - start < limit:
            if not self.server.state_now()[0]:
                time.sleep(1)
                continue
            try:
                jobs = self.jobs()
            except OSError:
                time.sleep(1)
                continue
            pending = [(j["id"], j["state"], j["progress"]["items_ok"] if j.get("progress") else None)
                       for j in jobs if j["state"] in ("queued", "running")]
            if not pending:
                log(f"drained in {now() - start:.0f} s")
                self.drain_seconds = now() - start
                return
            if pending != last:
                last, last_change = pending, now()
            elif now() - last_change > 180:
                self.findings.append(f"no progress for 3 min while draining: {pending}")
                if restarted:
                    break
                with self.server.control:
                    self.server.stop("kill -9")
                    self.kills["kill -9 (drain)"] += 1
                    self.server.start()
                restarted, last_change = True, now()
            time.sleep(1)
        self.findings.append(f"the queue did not drain in {limit} s")
        self.drain_seconds = now() - start

    def resubmit_canceled(self):
        """Submits the kept canceled jobs again (the same request, so the same out): each must
        resume and complete."""
        self.settle_all(self.jobs())
        self.resubmitted = []
        for s in list(self.kept):
            sub = self.submit(dict(s["request"]), s["source"], s["rows"], resubmit_of=s["id"])
            if sub["outcome"] == "created":
                self.resubmitted.append((s, sub, s["had_rows"]))
        log(f"resubmitted {len(self.resubmitted)} canceled jobs")
        self.drain(limit=600)

    # -- the checks

    def checker(self):
        """Checks each job as soon as it has ended (and removes its output, to bound the disk)."""
        while not self.stop_all.wait(3):
            up, epoch = self.server.state_now()
            if not up:
                continue
            try:
                self.settle_all(self.jobs())
            except OSError as e:
                self.request_error("GET /api/v1/jobs", e, up, epoch)

    def settle_all(self, jobs):
        by_id = {j["id"]: j for j in jobs}
        with self.settle_lock:
            for sub in self.active():
                job = by_id.get(sub["id"])
                if job and job["state"] in TERMINAL and sub["id"] not in self.settled:
                    self.settle(sub, job)

    def settle(self, sub, job):
        state = job["state"]
        if job["request"]["out"] != sub["out"]:
            self.findings.append(f"job {sub['id']}: out {job['request']['out']} != {sub['out']}")
        if state == "succeeded":
            result = self.check_output(sub, job, complete=True)
            delete = not self.args.keep
        elif state == "canceled":
            result = self.check_output(sub, job, complete=False)
            sub["had_rows"] = result["items with rows"]
            kept_rows = sum(1 for k in self.kept if k["had_rows"])
            kept_empty = len(self.kept) - kept_rows
            if sub["resubmit_of"] is None and (
                    (sub["had_rows"] and kept_rows < self.args.resubmit)
                    or (not sub["had_rows"] and kept_empty < 2)):
                self.kept.append(sub)
                delete = False
            else:
                delete = not self.args.keep
        else:
            self.findings.append(f"job {sub['id']} {state}: {job.get('error')}")
            result, delete = collections.Counter(), False
        self.settled[sub["id"]] = (state, result)
        if delete:
            shutil.rmtree(sub["out"], ignore_errors=True)

    def check_output(self, sub, job, complete):
        """Holds the rows under a job's out folder to the reference: counts of lost (complete
        jobs only), doubled, foreign and changed rows, and failure-list mismatches."""
        expected, failures = self.references[(sub["source"], sub["rows"])]
        rows, temporaries = read_rows(sub["out"])
        seen = collections.Counter(k for k, _ in rows)
        result = collections.Counter()
        result["rows read"] = len(rows)
        result["items with rows"] = len({k[0] for k in seen})
        result["doubled"] = sum(c - 1 for c in seen.values() if c > 1)
        result["foreign"] = sum(1 for k in seen if k not in expected)
        result["changed"] = sum(1 for k, d in rows if k in expected and expected[k] != d)
        problems = []
        if complete:
            result["lost"] = sum(1 for k in expected if k not in seen)
            report = report_of(sub["out"])
            got = sorted(f["id"] for f in (report or {}).get("failures", []))
            if got != failures:
                result["failure lists wrong"] = 1
                problems.append(f"report.json failures {got} != {failures}")
            elif report.get("items_failed") != len(failures):
                result["failure counts wrong"] = 1
                problems.append(f"report.json items_failed {report.get('items_failed')} "
                                f"!= {len(failures)} failures listed")
            if temporaries:
                result["temporaries left"] = len(temporaries)
                problems.append(f"temporaries left: {temporaries}")
        for k in ("doubled", "foreign", "changed", "lost"):
            if result[k]:
                problems.append(f"{result[k]} {k} rows")
        if result["doubled"]:
            problems.append("doubled: " + ", ".join(
                f"{k}x{c}" for k, c in list((k, c) for k, c in seen.items() if c > 1)[:5]))
        if problems:
            self.findings.append(f"job {job['id']} ({job['state']}, attempts {job.get('attempts')}, "
                                 f"{sub['out']}): " + "; ".join(problems))
        return result

    def check(self):
        jobs = {j["id"]: j for j in self.final_jobs}
        by_out = collections.defaultdict(list)
        for j in jobs.values():
            by_out[j["request"]["out"]].append(j["id"])
        acknowledged = {s["id"] for s in self.submissions if s["outcome"] == "created"}
        # Jobs the server has that no 201 told us of (a POST cut by a kill): checked as well.
        for s in self.submissions:
            if s["outcome"] == "unknown":
                ids = [i for i in by_out.get(s["out"], []) if i not in acknowledged]
                if ids:
                    s["id"], s["outcome"] = ids[0], "created"
                    self.counts["POSTs cut by a stop but taken"] += 1
                else:
                    self.counts["POSTs cut by a stop and not taken"] += 1
        self.settle_all(self.final_jobs)
        known = {s["id"] for s in self.submissions if s["id"] is not None}
        lost_jobs = sorted(known - set(jobs))
        strangers = sorted(set(jobs) - known)
        if lost_jobs:
            self.findings.append(f"jobs acknowledged but not listed: {lost_jobs}")
        if strangers:
            self.findings.append(f"jobs listed that nobody submitted: {strangers}")
        states = collections.Counter(j["state"] for j in jobs.values())
        for state in ("queued", "running"):
            if states[state]:
                self.findings.append(f"{states[state]} jobs still {state} at the end")
        totals = collections.Counter()
        for state, result in self.settled.values():
            totals[f"{state} jobs checked"] += 1
            totals.update(result)
        for old, sub, had in self.resubmitted:
            job = jobs.get(sub["id"])
            if not job or job["state"] != "succeeded":
                self.findings.append(f"resubmitted job {old['id']} as {sub['id']}: {job and job['state']}")
                continue
            resumed = (job.get("report") or {}).get("items_resumed", 0)
            self.resumes.append((old["id"], sub["id"], had, resumed))
            if had and not resumed:
                self.findings.append(
                    f"resubmitted job {old['id']} as {sub['id']}: {had} items had rows, none resumed")
        self.states = states
        self.totals = totals
        self.attempts = collections.Counter(j.get("attempts", 0) for j in jobs.values())

    # -- flatness

    def flatness(self):
        """Returns (lines, ok). Criteria (stated in the summary):
        - fds and threads come back to their idle values between jobs: every "warm idle" sample
          (no job queued or running for 15 s or more, in a lifetime that has run a job: its
          executor threads exist) of the whole run is within 4 fds (connections in flight) and
          2 threads (tokio's blocking threads linger 10 s after an API call) of the lowest warm
          idle sample of the run, however many jobs, cancels and restarts came before.
        - RSS: in the longest lifetime, from its first job on, the median of its last quarter is
          within 20 % + 32 MiB of the median of its first quarter (jobs of different sizes and
          part sizes make RSS swing by ~150 MiB; a leak of 1 MiB a job or 30 KB a request
          would exceed this over that lifetime; smaller ones would not)."""
        FD_SLACK, THREAD_SLACK = 4, 2
        lines, ok = [], True
        warm = [(life.n, s) for life in self.server.lifetimes for s in life.samples
                if s[6] >= 15 and life.first_job is not None and s[0] > life.first_job]
        if len(warm) < 3:
            lines.append(f"fds/threads: only {len(warm)} warm idle samples, no verdict")
            ok = False
        else:
            fd_min, fd_max = min(s[3] for _, s in warm), max(s[3] for _, s in warm)
            th_min, th_max = min(s[2] for _, s in warm), max(s[2] for _, s in warm)
            fd_ok = fd_max <= fd_min + FD_SLACK
            th_ok = th_max <= th_min + THREAD_SLACK
            ok &= fd_ok and th_ok
            n_lives = len({n for n, _ in warm})
            lines.append(
                f"warm idle fds {fd_min}-{fd_max} over {len(warm)} samples in {n_lives} lifetimes "
                f"(allowed: lowest + {FD_SLACK}): {'flat' if fd_ok else 'NOT FLAT'}")
            lines.append(
                f"warm idle threads {th_min}-{th_max} (allowed: lowest + {THREAD_SLACK}): "
                f"{'flat' if th_ok else 'NOT FLAT'}")
            per_life = []
            for life in self.server.lifetimes:
                w = [s for n, s in warm if n == life.n]
                if w:
                    per_life.append(f"{life.n}: {w[0][3]}/{w[0][2]} -> {w[-1][3]}/{w[-1][2]}")
            lines.append("warm idle fds/threads per lifetime, first -> last: " + ", ".join(per_life))
            busy = [s for life in self.server.lifetimes for s in life.samples]
            lines.append(f"peaks over the run (jobs running): fds {max(s[3] for s in busy)}, "
                         f"threads {max(s[2] for s in busy)}, RSS {max(s[1] for s in busy) / 1024:.1f} MiB")
            names = [n for life in self.server.lifetimes for _, n in life.idle_threads[-1:]]
            if names:
                lines.append(f"threads at the last idle sample: {names[-1]}")
        longest = max(self.server.lifetimes, key=lambda l: l.span())
        samples = [s for s in longest.samples
                   if longest.first_job is not None and s[0] >= longest.first_job]
        if len(samples) >= 8:
            q = len(samples) // 4
            first = statistics.median(s[1] for s in samples[:q]) / 1024
            last = statistics.median(s[1] for s in samples[-q:]) / 1024
            rss_ok = last <= first * 1.20 + 32
            ok &= rss_ok
            xs = [s[0] / 60 for s in samples]
            ys = [s[1] / 1024 for s in samples]
            mx, my = statistics.mean(xs), statistics.mean(ys)
            slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / max(
                1e-9, sum((x - mx) ** 2 for x in xs))
            lines.append(
                f"RSS of the longest lifetime ({longest.n}, {longest.span() / 60:.1f} min, "
                f"{len(samples)} samples from its first job): median {first:.1f} MiB in its first "
                f"quarter, {last:.1f} MiB in its last (allowed: first x 1.20 + 32 MiB; least-squares "
                f"slope {slope:+.2f} MiB/min, min {min(ys):.1f}, max {max(ys):.1f}): "
                f"{'flat' if rss_ok else 'NOT FLAT'}")
        else:
            lines.append(f"RSS: the longest lifetime has {len(samples)} samples, no verdict")
            ok = False
        return lines, ok

    # -- the summary

    def summary(self):
        a = self.args
        out = []
        p = out.append
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        model = next((l.split(":", 1)[1].strip() for l in lscpu.splitlines()
                      if l.startswith("Model name")), "?")
        p(f"sonograph soak, {datetime.datetime.now().isoformat(timespec='seconds')}")
        p(f"machine: {model}, {os.cpu_count()} cores; binary {a.binary}; seed {a.seed}")
        loads = [x for _, x in self.load]
        if loads:
            p(f"load average (1 min) during the run: mean {statistics.mean(loads):.2f}, "
              f"max {max(loads):.2f}")
        p(f"duration: load {self.load_seconds / 60:.1f} min, drain {self.drain_seconds:.0f} s, "
          f"whole run {self.total_seconds / 60:.1f} min (references {self.reference_seconds:.0f} s)")
        s = self.states
        subs = [x for x in self.submissions if x["resubmit_of"] is None]
        p(f"jobs: {sum(1 for x in subs if x['outcome'].startswith('created'))} submitted "
          f"({len(subs)} POSTs), then {len(self.resubmitted)} canceled ones submitted again; final "
          f"states of all {sum(s.values())}: succeeded {s['succeeded']}, canceled {s['canceled']}, "
          f"failed {s['failed']}, queued {s['queued']}, running {s['running']}")
        p(f"attempts per job: {dict(sorted(self.attempts.items()))}")
        p(f"cancels: {len(self.cancels)} DELETEs: "
          + ", ".join(f"{k} {v}" for k, v in sorted(self.counts.items()) if k.startswith("DELETE")))
        kills = dict(self.kills)
        p(f"stops: kill -9 {kills.get('kill -9', 0)}, SIGTERM {kills.get('TERM', 0)}"
          + (f", kill -9 while draining {kills['kill -9 (drain)']}" if kills.get('kill -9 (drain)') else "")
          + f" ({kills.get('kill -9 with a job running', 0)} and {kills.get('TERM with a job running', 0)}"
          " of them with a job running)"
          + f"; final SIGTERM exit {self.kills_final}")
        t = self.totals
        p(f"rows checked: {t['rows read']} in {t['succeeded jobs checked']} succeeded and "
          f"{t['canceled jobs checked']} canceled jobs; lost {t['lost']}, doubled {t['doubled']}, "
          f"foreign {t['foreign']}, changed {t['changed']}, failure lists wrong "
          f"{t['failure lists wrong']}, failure counts wrong {t['failure counts wrong']}, temporaries left {t['temporaries left']}")
        p("resumes of canceled jobs (old id -> new id: items with rows before, items_resumed): "
          + ", ".join(f"{o}->{n}: {h}, {r}" for o, n, h, r in self.resumes))
        p("requests: " + ", ".join(f"{k} {v}" for k, v in sorted(self.counts.items())
                                     if not k.startswith("DELETE")))
        p("max latency: " + ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in self.max_latency.items()))
        p(f"events read: {dict(self.sse_events)}; jobs seen in job events: {len(self.job_events)}")
        p(f"request errors while the server was up: {len(self.unexpected)}")
        for u in self.unexpected[:10]:
            p(f"  {u}")
        p("")
        p("per server lifetime (RSS MiB / fds / threads at its first sample, median, last sample):")
        p(f"{'life':>4} {'min':>5} {'ready s':>7} {'end':>10} {'exit':>4} {'exit s':>6}  "
          f"{'start':>17} {'median':>17} {'end':>17}")
        for life in self.server.lifetimes:
            sm = life.samples
            if not sm:
                cells = ["-"] * 3
            else:
                med = (statistics.median(x[1] for x in sm), statistics.median(x[3] for x in sm),
                       statistics.median(x[2] for x in sm))
                cells = [f"{sm[0][1] / 1024:6.1f}/{sm[0][3]:3d}/{sm[0][2]:3d}",
                         f"{med[0] / 1024:6.1f}/{med[1]:3.0f}/{med[2]:3.0f}",
                         f"{sm[-1][1] / 1024:6.1f}/{sm[-1][3]:3d}/{sm[-1][2]:3d}"]
            p(f"{life.n:4d} {life.span() / 60:5.1f} {life.ready_s or 0:7.2f} {life.end or '-':>10} "
              f"{'-' if life.exit is None else life.exit:>4} "
              f"{'-' if life.exit_s is None else f'{life.exit_s:.2f}':>6}  "
              + " ".join(f"{c:>17}" for c in cells))
        p("")
        lines, flat = self.flatness()
        p("flatness:")
        for l in lines:
            p(f"  {l}")
        if not flat:
            self.findings.append("flatness: " + "; ".join(l for l in lines if "NOT" in l or "no verdict" in l))
        for f in self.server.findings:
            self.findings.append(f)
        if self.unexpected:
            self.findings.append(f"{len(self.unexpected)} requests failed while the server was up")
        p("")
        if self.findings:
            p(f"CHECKS FAILED ({len(self.findings)}):")
            for f in self.findings:
                p(f"  - {f}")
        else:
            p("all checks passed: no lost or doubled row, no job lost or left running, every "
              "canceled job resubmitted resumed and completed, fds/threads/RSS flat")
        p(f"work dir: {self.work}" + (" (kept)" if self.findings or a.keep else " (removed)"))
        return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--binary", default=os.path.join(REPO, "target/release/sonograph"))
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--work", help="work folder (a fresh temporary one by default)")
    ap.add_argument("--summary", help="also write the summary to this file")
    ap.add_argument("--samples", help="write the RSS/fd/thread samples to this file (JSON lines)")
    ap.add_argument("--sample-every", type=float, default=2.0)
    ap.add_argument("--resubmit", type=int, default=6, help="canceled jobs with rows to resubmit")
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    args = ap.parse_args()
    if args.seed is None:
        args.seed = random.randrange(1 << 31)
    args.binary = os.path.abspath(args.binary)
    log(f"seed {args.seed} (--seed to repeat)")
    soak = Soak(args)
    soak.resumes = []
    soak.resubmitted = []
    try:
        soak.run()
        soak.check()
    except BaseException:
        # Leave no server behind.
        if getattr(soak, "server", None) and soak.server.proc and soak.server.proc.poll() is None:
            soak.server.proc.kill()
        raise
    text = soak.summary()
    print(text)
    if args.summary:
        os.makedirs(os.path.dirname(os.path.abspath(args.summary)), exist_ok=True)
        with open(args.summary, "w") as f:
            f.write(text + "\n")
    if args.samples:
        # One JSON line per sample: lifetime, seconds since its start, RSS KiB, threads, fds,
        # job running, jobs queued, seconds idle.
        with open(args.samples, "w") as f:
            for life in soak.server.lifetimes:
                for x in life.samples:
                    f.write(json.dumps({"life": life.n, "t": round(x[0], 2), "rss_kib": x[1],
                                        "threads": x[2], "fds": x[3], "running": x[4],
                                        "queued": x[5], "idle_s": round(x[6], 1)}) + "\n")
    if not soak.findings and not args.keep:
        shutil.rmtree(soak.work, ignore_errors=True)
    sys.exit(1 if soak.findings else 0)


if __name__ == "__main__":
    main()
