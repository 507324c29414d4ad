"""The Python package against the CLI: the same features, bit for bit, and the same jobs.

Run by python/test.sh (which builds and installs the package); SONOGRAPH_BIN names the CLI.
"""

import os
import subprocess
import threading
import wave
from pathlib import Path

import numpy as np
import pytest

import sonograph

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
BIN = os.environ.get("SONOGRAPH_BIN", str(ROOT / "target" / "debug" / "sonograph"))


def cli_features(path, preset, tmp_path, *extra):
    out = tmp_path / f"{Path(path).stem}.{preset}.npy"
    subprocess.run([BIN, "features", str(path), "--preset", preset, "--out", str(out),
                    "--device", "cpu", *extra], check=True, capture_output=True)
    return np.load(out)


def wav_samples(path):
    """A 16-bit WAV's samples as the decoder scales them (x / 32768)."""
    with wave.open(str(path)) as w:
        assert w.getnchannels() == 1 and w.getsampwidth() == 2
        pcm = np.frombuffer(w.readframes(w.getnframes()), "<i2")
        return pcm.astype(np.float32) / 32768.0, w.getframerate()


@pytest.mark.parametrize("preset", ["whisper", "nemo", "kaldi", "librosa-mfcc", "nemo-legacy-128"])
@pytest.mark.parametrize("name", ["speech_16000_mono_s16.wav", "speech_44100_stereo.flac",
                                  "speech_8000_mono_s16.wav"])
def test_load_gives_what_the_cli_writes(preset, name, tmp_path):
    got = sonograph.load(DATA / name, preset)
    want = cli_features(DATA / name, preset, tmp_path)
    assert got.dtype == np.float32 and got.shape == want.shape
    assert np.array_equal(got, want)


@pytest.mark.parametrize("name", ["speech_16000_mono_s16.wav", "speech_8000_mono_s16.wav"])
def test_features_of_an_array_equal_those_of_its_file(name):
    samples, rate = wav_samples(DATA / name)
    for dtype in (np.float32, np.float64):
        got = sonograph.features(samples.astype(dtype), rate, "whisper")
        assert np.array_equal(got, sonograph.load(DATA / name, "whisper")), (name, dtype)


def test_a_spec_dict_is_a_preset_changed_or_not():
    samples, rate = wav_samples(DATA / "speech_16000_mono_s16.wav")
    spec = sonograph.preset("nemo")
    assert spec["n_mels"] == 80 and "nemo" in sonograph.presets()
    assert np.array_equal(sonograph.features(samples, rate, spec=spec),
                          sonograph.features(samples, rate, "nemo"))
    spec["n_mels"] = 64
    assert sonograph.features(samples, rate, spec=spec).shape[1] == 64
    f64 = sonograph.features(samples, rate, "whisper", precision="f64")
    f32 = sonograph.features(samples, rate, "whisper", precision="f32")
    assert f64.shape == f32.shape and np.abs(f64 - f32).max() < 1e-3


def test_bad_input_is_one_clear_value_error(tmp_path):
    ok = np.zeros(16000, np.float32)
    nan = ok.copy()
    nan[100] = np.nan
    broken = tmp_path / "broken.wav"
    broken.write_bytes(b"RIFF\x24\x00\x00\x00WAVEfmt junk that is no header")
    cases = [
        (lambda: sonograph.features(np.zeros((2, 3)), 16000), "shape (2, 3)"),
        (lambda: sonograph.features("abc", 16000), "1-D array"),
        (lambda: sonograph.features(nan, 16000), "NaN"),
        (lambda: sonograph.features(ok, 16000, "nope"), "nope"),
        (lambda: sonograph.features(ok, 16000, "nemo", spec={}), "not both"),
        (lambda: sonograph.features(ok, 16000, precision="f16"), "f16"),
        (lambda: sonograph.features(ok, 16000, "iq-power"), "IQ"),
        (lambda: sonograph.load(tmp_path / "missing.wav"), "missing.wav"),
        (lambda: sonograph.load(broken), "broken.wav"),
    ]
    for call, says in cases:
        with pytest.raises(ValueError) as e:
            call()
        message = str(e.value)
        assert says in message and "\n" not in message, message


def test_extract_runs_the_clis_job_and_resumes(tmp_path):
    out = tmp_path / "out"
    report = sonograph.extract(DATA, out, preset="whisper", device="cpu", batch_items=4)
    assert (report["items_ok"], report["items_failed"], report["items_resumed"]) == (13, 0, 0)
    assert report["rows"] == 13 and report["parts"] >= 1
    parts = {p.name: p.stat().st_mtime_ns for p in out.glob("*.parquet")}
    assert len(parts) == report["parts"]
    # Complete: the same call does nothing and gives the report of the run that completed it.
    again = sonograph.extract(DATA, out, preset="whisper", device="cpu", batch_items=4)
    keys = ("items_ok", "items_failed", "rows", "parts", "spec_id", "wall_seconds")
    assert {k: again[k] for k in keys} == {k: report[k] for k in keys}
    assert parts == {p.name: p.stat().st_mtime_ns for p in out.glob("*.parquet")}
    # The CLI's job on the same corpus counts the same audio.
    cli_out = tmp_path / "cli"
    subprocess.run([BIN, "extract", str(DATA), "--out", str(cli_out), "--preset", "whisper",
                    "--device", "cpu", "--no-progress"], check=True, capture_output=True)
    import json
    cli = json.loads((cli_out / "__sonograph" / "report.json").read_text())
    assert (cli["rows"], cli["audio_seconds"]) == (report["rows"], report["audio_seconds"])


def test_extract_refuses_what_it_would_ignore(tmp_path):
    cases = [
        (dict(bogus=1), "unknown field `bogus`"),
        (dict(batch_items="four"), "invalid type"),
        (dict(model_batch=4), "need a model"),
        (dict(workers=0), "--workers"),
    ]
    for options, says in cases:
        with pytest.raises(ValueError) as e:
            sonograph.extract(DATA, tmp_path / "out", device="cpu", **options)
        assert says in str(e.value), str(e.value)
    assert not (tmp_path / "out").exists()


def test_the_gil_is_released_while_features_are_computed():
    samples = np.random.default_rng(1).standard_normal(16000 * 600).astype(np.float32)
    ticks = []
    done = threading.Event()

    def tick():
        while not done.is_set():
            ticks.append(1)
            done.wait(0.001)

    t = threading.Thread(target=tick)
    t.start()
    before = len(ticks)
    sonograph.features(samples, 16000, "whisper")
    during = len(ticks) - before
    done.set()
    t.join()
    # Ten minutes of audio take well over the ticker's 1 ms period; a held GIL would freeze it.
    assert during > 5, during
