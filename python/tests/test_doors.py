"""One engine behind three doors: the same options given to the CLI (`extract --plan`, and
each other command's), the service (`POST /api/v1/plan`, with the job's `kind`) and Python
(`sonograph.plan`) plan the same job, every option of every kind included; and a job run
through each writes the same job.json.

Run by python/test.sh (which builds and installs the package); SONOGRAPH_BIN names the CLI.
"""

import json
import os
import queue
import shutil
import subprocess
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pyarrow.parquet as pq  # type: ignore[import-untyped]  # pyarrow ships no stubs
import pytest

import sonograph

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
BIN = os.environ.get("SONOGRAPH_BIN", str(ROOT / "target" / "debug" / "sonograph"))

# Every option of a job, none at its default: (the option's Python name, its value).
EVERY_OPTION = {
    "preset": "nemo",
    "n_mels": 64,
    "precision": "f32",
    "device": "cpu",
    "gpu_memory": "1GiB",
    "workers": 3,
    "prefetch": 2,
    "batch_items": 5,
    "max_seconds": 20.0,
    "chunk_seconds": 10.0,
    "shard_index": 1,
    "shard_count": 3,
    "dtype": "f16",
    "part_mb": 7,
    "part_format": "webdataset",
    "channel": 0,
    "max_duration": 3600.0,
    "max_channels": 8,
    "max_sample_rate": 96000,
    "sample_rate": 48000.0,
    "format": "ci16",
    "max_samples": 1000000,
    "model_device": "cpu",
    "model_batch": 4,
    "model_threads": 2,
    "vad": True,
    "threshold": 0.4,
    "neg_threshold": 0.2,
    "min_speech_ms": 100.0,
    "max_speech_s": 15.0,
    "min_silence_ms": 50.0,
    "speech_pad_ms": 10.0,
    "min_silence_at_max_speech_ms": 80.0,
    "use_max_poss_sil_at_max_speech": False,
}


def flag(name, value):
    """The CLI's spelling of an option."""
    return [f"--{name.replace('_', '-')}", str(value).lower() if isinstance(value, bool) else str(value)]


class Server:
    """`sonograph serve` on a free loopback port with one data root."""

    def __init__(self, root, state):
        self.proc = subprocess.Popen(
            [BIN, "serve", "--addr", "127.0.0.1:0", "--data-root", str(root),
             "--state-dir", str(state), "--device", "cpu"],
            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        lines: queue.Queue[str] = queue.Queue()
        stderr = self.proc.stderr
        assert stderr is not None

        def forward():
            for line in stderr:
                lines.put(line)

        threading.Thread(target=forward, daemon=True).start()
        while True:
            line = lines.get(timeout=60)
            if "serving on http://" in line:
                self.base = "http://" + line.split("serving on http://", 1)[1].strip()
                break

    def post(self, path, body):
        request = urllib.request.Request(self.base + path, data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=60) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def get(self, path):
        with urllib.request.urlopen(self.base + path, timeout=60) as r:
            return json.loads(r.read())

    def wait(self, job_id):
        """The job's record once it has ended (60 s at most)."""
        for _ in range(600):
            record = self.get(f"/api/v1/jobs/{job_id}")
            if record["state"] not in ("queued", "running"):
                return record
            threading.Event().wait(0.1)
        raise AssertionError(f"job {job_id} did not end: {record}")

    def close(self):
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def root(tmp_path):
    root = (tmp_path / "root").resolve()
    (root / "corpus").mkdir(parents=True)
    for name in ["speech_16000_mono_s16.wav", "sample.flac"]:
        shutil.copy(DATA / name, root / "corpus" / name)
    shutil.copy(ROOT / "crates/model/tests/data/asr/ctc/model.onnx", root / "model.onnx")
    return root


@pytest.fixture
def server(root, tmp_path):
    s = Server(root, tmp_path / "state")
    yield s
    s.close()


def cli_args(options):
    """The CLI's flags for `options`: a flag alone for True, its value otherwise."""
    args = []
    for name, value in options.items():
        if value is True:
            args.append(f"--{name.replace('_', '-')}")
        else:
            args += flag(name, value)
    return args


def clean_env():
    return {k: v for k, v in os.environ.items() if not k.startswith(("SONOGRAPH_", "SLURM_", "JOB_COMPLETION"))}


def three_plans(server, source, out, options, kind="extract"):
    """The plan of the same options through the CLI, the service and Python."""
    positional = [] if source is None else [str(source)]
    args = [BIN, kind, *positional, "--out", str(out), "--plan"]
    args += cli_args({k: v for k, v in options.items() if k != "spec"})
    if "spec" in options:
        args += ["--spec", str(options["spec"])]
    cli = subprocess.run(args, check=True, capture_output=True, text=True, env=clean_env())
    # The service takes a spec inline, never a path of its disk: the same spec, read here.
    request = {k.replace("_", "-"): v for k, v in options.items()}
    if "spec" in options:
        request["spec"] = json.loads(Path(options["spec"]).read_text())
    if source is not None:
        request["source"] = str(source)
    status, api = server.post("/api/v1/plan", {"kind": kind, "out": str(out), **request})
    assert status == 200, api
    python = sonograph.plan(source, out, kind=kind, **options)
    return json.loads(cli.stdout), api, python


def test_every_option_plans_the_same_job_through_the_three_doors(root, server):
    options = dict(EVERY_OPTION, model=str(root / "model.onnx"))
    cli, api, python = three_plans(server, root / "corpus", root / "out", options)
    assert cli == api == python
    # Every option made it through, none fell back to its default.
    assert cli["workers"] == 3 and cli["batch_items"] == 5 and cli["part_mb"] == 7
    assert cli["part_format"] == "webdataset"
    assert (cli["shard_index"], cli["shard_count"]) == (1, 3)
    assert cli["spec"]["n_mels"] == 64 and cli["precision"] == "f32" and cli["dtype"] == "f16"
    assert cli["iq"] == {"sample_rate": 48000.0, "format": "ci16_le", "max_samples": 1000000}
    assert cli["model"]["batch"] == 4 and cli["model"]["threads"] == 2
    assert cli["vad"]["threshold"] == 0.4 and cli["vad"]["use_max_poss_sil_at_max_speech"] is False
    assert (cli["max_duration"], cli["max_channels"], cli["max_sample_rate"]) == (3600.0, 8, 96000)
    assert cli["channel"] == 0 and cli["gpu_memory"] == "1GiB"


def test_a_spec_file_and_the_defaults_plan_the_same_job_through_the_three_doors(root, server):
    spec = sonograph.preset("kaldi")
    spec["n_mels"] = 23
    (root / "spec.json").write_text(json.dumps(spec))
    cli, api, python = three_plans(server, root / "corpus", root / "out",
                                   {"spec": root / "spec.json", "device": "cpu", "workers": 2})
    assert cli == api == python
    assert cli["spec"]["n_mels"] == 23
    # Defaults, written once in the pipeline, are the same through each door.
    assert (cli["prefetch"], cli["batch_items"], cli["max_seconds"], cli["part_mb"]) == (4, 16, 60.0, 64)
    # The spec inline (a dict in Python, a JSON object in a request) is the same spec.
    inline = sonograph.plan(root / "corpus", root / "out", spec=spec, device="cpu", workers=2)
    assert inline == python


def test_a_job_run_through_each_door_writes_the_same_job_json(root, server):
    options = {"preset": "kaldi", "device": "cpu", "batch_items": 3, "dtype": "f16", "max_seconds": 40.0}
    env = {k: v for k, v in os.environ.items() if not k.startswith("SONOGRAPH_")}
    args = [BIN, "extract", str(root / "corpus"), "--out", str(root / "cli"), "--no-progress"]
    for name, value in options.items():
        args += flag(name, value)
    subprocess.run(args, check=True, capture_output=True, env=env)
    status, job = server.post("/api/v1/jobs", {"source": str(root / "corpus"), "out": str(root / "api"),
                                               **{k.replace("_", "-"): v for k, v in options.items()}})
    assert status == 201, job
    record = server.wait(job["id"])
    assert record["state"] == "succeeded", record
    sonograph.extract(root / "corpus", root / "python", **options)
    shapes = [json.loads((root / door / "__sonograph" / "job.json").read_text())
              for door in ("cli", "api", "python")]
    assert shapes[0] == shapes[1] == shapes[2]
    assert shapes[0]["dtype"].lower() == "f16"


def test_the_errors_are_a_family_and_name_the_option_as_python_spells_it(tmp_path):
    with pytest.raises(sonograph.OptionsError) as e:
        sonograph.extract(DATA, tmp_path / "out", batch_items=10**6)
    assert "batch_items 1000000 is outside" in str(e.value), str(e.value)
    assert isinstance(e.value, sonograph.Error) and isinstance(e.value, ValueError)
    with pytest.raises(sonograph.InputError) as missing:
        sonograph.load(tmp_path / "missing.wav")
    assert "missing.wav" in str(missing.value) and isinstance(missing.value, ValueError)
    with pytest.raises(sonograph.DeviceError):
        sonograph.extract(DATA, tmp_path / "out", device="gpu:99")
    assert issubclass(sonograph.ModelError, sonograph.Error)
    with pytest.raises(sonograph.ModelError) as bad_model:
        (tmp_path / "bad.onnx").write_bytes(b"not a model")
        sonograph.extract(DATA, tmp_path / "out2", preset="nemo", model=tmp_path / "bad.onnx", device="cpu")
    assert "bad.onnx" in str(bad_model.value)


# Every option of the other kinds, none at its default.
RF_FEATURES_OPTIONS = {
    "sample_rate": 1e6, "format": "ci16", "window_ms": 5.0, "calibration_db": -20.0, "psd": True,
    "nperseg": 256, "noverlap": 64, "detrend": True, "max_samples": 1000000, "rows_per_part": 100,
    "workers": 3, "device": "cpu", "shard_index": 1, "shard_count": 3,
}
SYNTH_IQ_OPTIONS = {
    "count": 12, "sample_rate": 100000.0, "samples": 4096, "modulation": "bpsk,fm", "snr_db": "-5:5",
    "snr_definition": "full-band", "seed": 9, "format": "parquet", "rows_per_part": 6, "workers": 2,
    "device": "cpu", "shard_index": 1, "shard_count": 2,
}
TRANSCRIBE_OPTIONS = {
    "format": "parquet", "items_per_part": 7, "shard_index": 0, "shard_count": 2,
    "window_s": 20.0, "threshold": 0.4, "neg_threshold": 0.2, "min_speech_ms": 100.0, "max_speech_s": 15.0,
    "min_silence_ms": 50.0, "speech_pad_ms": 10.0, "min_silence_at_max_speech_ms": 80.0,
    "use_max_poss_sil_at_max_speech": False, "batch": 4, "threads": 2, "channel": 0,
    "max_duration": 3600.0, "max_channels": 8, "max_sample_rate": 96000,
}


def test_every_option_of_each_kind_plans_the_same_job_through_the_three_doors(root, server):
    (root / "iq").mkdir()
    cli, api, python = three_plans(server, root / "iq", root / "rf", RF_FEATURES_OPTIONS, "rf-features")
    assert cli == api == python
    welch = cli["rows"]["features"]["welch"]
    assert (welch["nperseg"], welch["noverlap"], welch["detrend"]) == (256, 64, True)
    assert cli["rows"]["psd"] is True and cli["rows"]["window_ms"] == 5.0
    assert cli["rows"]["features"]["calibration_db"] == -20.0
    assert (cli["format"], cli["sample_rate"], cli["rows_per_part"], cli["workers"]) == ("ci16_le", 1e6, 100, 3)
    assert (cli["shard_index"], cli["shard_count"], cli["max_samples"]) == (1, 3, 1000000)

    cli, api, python = three_plans(server, None, root / "synth", SYNTH_IQ_OPTIONS, "synth-iq")
    assert cli == api == python
    spec = cli["spec"]
    assert (spec["sample_rate"], spec["n_samples"], spec["snr_definition"]) == (100000.0, 4096, "full_band")
    assert [m["kind"] for m in spec["modulations"]] == ["bpsk", "fm"]
    assert spec["snr_db"] == {"min": -5.0, "max": 5.0}
    assert (cli["count"], cli["seed"], cli["format"], cli["rows_per_part"]) == (12, 9, "parquet", 6)
    assert (cli["workers"], cli["shard_index"], cli["shard_count"]) == (2, 1, 2)
    # A spec file (a dict in Python and in a request), its duration in ms and SigMF's sample type.
    (root / "synth.json").write_text(json.dumps(spec))
    cli, api, python = three_plans(server, None, root / "synth", {
        "count": 3, "spec": root / "synth.json", "duration_ms": 2.0, "datatype": "ci16"}, "synth-iq")
    assert cli == api == python
    assert (cli["spec"]["n_samples"], cli["datatype"], cli["format"]) == (200, "ci16_le", "sigmf")

    shutil.copytree(ROOT / "crates/model/tests/data/asr/ctc", root / "asr")
    options = dict(TRANSCRIBE_OPTIONS, model=str(root / "asr"))
    cli, api, python = three_plans(server, root / "corpus", root / "text", options, "transcribe")
    assert cli == api == python
    vad = cli["vad"]
    assert (vad["threshold"], vad["neg_threshold"], vad["max_speech_duration_s"]) == (0.4, 0.2, 15.0)
    assert vad["use_max_poss_sil_at_max_speech"] is False and vad["speech_pad_ms"] == 10.0
    assert (cli["format"], cli["segment"], cli["window_s"], cli["batch"], cli["threads"]) == (
        "parquet", "vad", 20.0, 4, 2)
    assert (cli["items_per_part"], cli["channel"], cli["max_sample_rate"]) == (7, 0, 96000)
    # Fixed windows, which take no VAD option (one is refused through every door).
    cli, api, python = three_plans(server, root / "corpus", root / "text",
                                   {"model": str(root / "asr"), "segment": "fixed"}, "transcribe")
    assert cli == api == python and cli["segment"] == "fixed"
    status, refusal = server.post("/api/v1/plan", {"kind": "transcribe", "source": str(root / "corpus"),
                                                   "out": str(root / "text"), "model": str(root / "asr"),
                                                   "segment": "fixed", "threshold": 0.3})
    assert status == 400 and "need segment vad" in refusal["error"], refusal


def test_an_rf_job_run_through_each_door_writes_the_same_dataset(root, server):
    """synth-iq through the CLI, the service and Python gives the same files, and rf-features
    over them through the three doors the same parts and job.json."""
    synth = {"samples": 2048, "modulation": "qpsk", "seed": 4}
    env = clean_env()
    subprocess.run([BIN, "synth-iq", "--count", "3", "--out", str(root / "cli-iq"), *cli_args(synth)],
                   check=True, capture_output=True, env=env)
    report = sonograph.synth_iq(root / "python-iq", 3, **synth)
    assert (report["written"], report["recordings"]) == (3, 3)
    status, job = server.post("/api/v1/jobs", {"kind": "synth-iq", "out": str(root / "api-iq"), "count": 3,
                                               **{k.replace("_", "-"): v for k, v in synth.items()}})
    assert status == 201, job
    record = server.wait(job["id"])
    assert record["state"] == "succeeded" and record["report"]["written"] == 3, record
    names = sorted(p.name for p in (root / "cli-iq").iterdir() if p.suffix.startswith(".sigmf"))
    assert len(names) == 6
    for name in names:
        for door in ("python-iq", "api-iq"):
            assert (root / "cli-iq" / name).read_bytes() == (root / door / name).read_bytes(), (door, name)
    shapes = [json.loads((root / door / "dataset.json").read_text()) for door in ("cli-iq", "api-iq", "python-iq")]
    assert shapes[0] == shapes[1] == shapes[2]
    features = {"psd": True, "nperseg": 256, "rows_per_part": 2}
    subprocess.run([BIN, "rf-features", str(root / "cli-iq"), "--out", str(root / "cli-rf"), "--no-progress",
                    *cli_args(features)], check=True, capture_output=True, env=env)
    report = sonograph.rf_features(root / "python-iq", root / "python-rf", **features)
    assert (report["items_ok"], report["items_failed"]) == (3, 0)
    status, job = server.post("/api/v1/jobs", {"kind": "rf-features", "source": str(root / "api-iq"),
                                               "out": str(root / "api-rf"),
                                               **{k.replace("_", "-"): v for k, v in features.items()}})
    assert status == 201, job
    record = server.wait(job["id"])
    assert record["state"] == "succeeded" and record["report"]["items_ok"] == 3, record
    doors = ("cli-rf", "python-rf", "api-rf")
    shapes = [json.loads((root / door / "__sonograph" / "job.json").read_text()) for door in doors]
    assert shapes[0] == shapes[1] == shapes[2]
    parts = [sorted((root / door).glob("*.parquet")) for door in doors]
    assert [p.name for p in parts[0]] == [p.name for p in parts[1]] == [p.name for p in parts[2]]
    assert len(parts[0]) == 2
    # The same rows, but for the path each door read its recordings from (as JSON text: NaN,
    # rssi_dbm without a calibration, equals itself there).
    tables = [[json.dumps(pq.read_table(p).drop_columns(["source"]).to_pylist()) for p in door] for door in parts]
    for cli_rows, python_rows, api_rows in zip(*tables):
        assert cli_rows != "[]" and cli_rows == python_rows == api_rows
    status, refusal = server.post("/api/v1/plan", {"kind": "synth-iq", "out": str(root / "api-iq"),
                                                   "count": 3, "spec": str(root / "synth.json")})
    assert status == 400 and "inline" in refusal["error"], refusal


def test_an_option_of_another_kind_is_refused_by_its_python_name(tmp_path):
    with pytest.raises(sonograph.OptionsError) as e:
        sonograph.synth_iq(tmp_path / "iq", 3, rows_per_part=0, format="parquet")
    assert "rows_per_part 0 is outside" in str(e.value), str(e.value)
    with pytest.raises(sonograph.OptionsError) as e:
        sonograph.rf_features(tmp_path, tmp_path / "rf", batch_items=3)
    assert "unknown field `batch_items`" in str(e.value), str(e.value)
    with pytest.raises(sonograph.OptionsError) as e:
        sonograph.plan(tmp_path, tmp_path / "o", kind="synth-iq", count=1)
    assert "a synth-iq job takes no source" in str(e.value), str(e.value)
