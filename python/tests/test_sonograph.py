"""The Python package against the CLI: the same features, bit for bit, and the same jobs.

Run by python/test.sh (which builds and installs the package); SONOGRAPH_BIN names the CLI.
"""

import os
import subprocess
import threading
import wave
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import sonograph
from audio import write_wav

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
    # decode gives the samples the features are computed from.
    assert np.array_equal(sonograph.decode(DATA / name, rate), samples)
    decoded = sonograph.decode(DATA / name, 16000)
    assert np.array_equal(sonograph.features(decoded, 16000, "whisper"),
                          sonograph.load(DATA / name, "whisper"))


def test_a_batch_gives_each_clips_features_and_takes_datasets_audio_dicts():
    speech, rate = wav_samples(DATA / "speech_16000_mono_s16.wav")
    low, low_rate = wav_samples(DATA / "speech_8000_mono_s16.wav")
    clips = [speech, speech[: rate // 2], low]
    one = [sonograph.features(c, r, "whisper-hf")
           for c, r in zip(clips, [rate, rate, low_rate])]
    assert all(f.shape == (3000, 80) for f in one)
    # datasets' audio column: {"array", "sampling_rate"} per clip, rates mixed.
    audio = [{"array": c, "sampling_rate": r} for c, r in zip(clips, [rate, rate, low_rate])]
    got = sonograph.features_batch(audio, preset="whisper-hf")
    assert len(got) == 3 and all(np.array_equal(g, o) for g, o in zip(got, one))
    # transformers' layout: input_features [80, 3000].
    hf = sonograph.features_batch(audio, preset="whisper-hf", layout="bins_frames")
    assert all(h.shape == (80, 3000) and np.array_equal(h, o.T) for h, o in zip(hf, one))
    assert all(h.flags["C_CONTIGUOUS"] for h in hf)
    # Plain arrays at one rate.
    same = sonograph.features_batch(clips[:2], rate, "whisper-hf")
    assert all(np.array_equal(g, o) for g, o in zip(same, one[:2]))
    # What cannot be used says which clip and why, in the exception of its kind.
    with pytest.raises(sonograph.OptionsError, match="clip 0: an array without sample_rate"):
        sonograph.features_batch([speech], preset="whisper")
    with pytest.raises(sonograph.InputError, match="clip 1: a dict without \"sampling_rate\""):
        sonograph.features_batch([audio[0], {"array": speech}], preset="whisper")
    with pytest.raises(sonograph.InputError, match="clip 1: .*no samples"):
        sonograph.features_batch([speech, np.zeros(0, np.float32)], rate, "whisper-hf")
    with pytest.raises(sonograph.OptionsError, match="layout"):
        sonograph.features_batch(audio, preset="whisper", layout="bins")  # type: ignore[arg-type]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork() is POSIX's")
def test_a_batch_in_a_forked_child_computes_as_in_its_parent():
    # datasets.map(num_proc=N), torch's DataLoader workers and multiprocessing fork the
    # process: the child got the parent's pool but none of its threads, and waited forever.
    speech, rate = wav_samples(DATA / "speech_16000_mono_s16.wav")
    clips = [speech, speech[: rate // 2], speech[: rate // 3]]
    parent = sonograph.features_batch(clips, rate, "whisper-hf")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its features through the pipe, then out at once
        os.close(read)
        try:
            child = sonograph.features_batch(clips, rate, "whisper-hf")
            ok = all(np.array_equal(c, p) for c, p in zip(child, parent))
            os.write(write, b"equal" if ok else b"differ")
        finally:
            os._exit(0)
    os.close(write)
    import select
    ready, _, _ = select.select([read], [], [], 60)
    if not ready:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        pytest.fail("the forked child's features_batch did not finish in 60 s")
    answer = os.read(read, 16)
    os.waitpid(pid, 0)
    os.close(read)
    assert answer == b"equal"


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
        (lambda: sonograph.features(ok, 16000, precision="f16"), "f16"),  # type: ignore[arg-type]
        (lambda: sonograph.features(ok, 16000, "iq-power"), "IQ"),
        (lambda: sonograph.features(np.zeros(16000, np.int16), 16000), "int16"),
        (lambda: sonograph.features(ok, 999_999_937), "sample_rate 999999937"),
        (lambda: sonograph.decode(DATA / "sample.flac", 10), "sample_rate 10"),
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
    # A numpy scalar is an option's value like a Python number.
    report = sonograph.extract(DATA, out, preset="whisper", device="cpu", batch_items=np.int64(4))
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
    cases: list[tuple[dict[str, Any], str]] = [
        (dict(bogus=1), "unknown field `bogus`"),
        (dict(batch_items="four"), "batch_items: TypeError"),
        (dict(max_seconds=float("nan")), "max_seconds NaN is outside"),
        (dict(preset=object()), "preset: "),
        (dict(batch_items=1000, prefetch=1000), "at most 65536"),
        (dict(model_batch=4), "need a model"),
        (dict(workers=0), "workers 0 is outside 1..=1024"),
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


def test_loader_batches_every_item_in_order_with_what_load_gives(tmp_path):
    names = sorted(p.name for p in DATA.iterdir() if p.suffix in (".wav", ".flac", ".mp3", ".ogg"))
    loader = sonograph.Loader(DATA, "nemo", batch_size=4, workers=3, prefetch=2)
    assert len(loader) == len(names)
    seen = []
    for ids, feats, lengths in loader:
        assert feats.dtype == np.float32 and feats.shape[0] == len(ids) <= 4
        assert feats.shape[1] == lengths.max() and feats.shape[2] == 80
        for k, item in enumerate(ids):
            want = sonograph.load(DATA / item, "nemo")
            assert lengths[k] == len(want)
            assert np.array_equal(feats[k, : lengths[k]], want), item
            assert not feats[k, lengths[k]:].any(), "padding is zeros"
        seen += ids
    assert seen == names and loader.failures == []


def test_loader_shuffles_by_seed_and_lists_failures(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name in ("speech_16000_mono_s16.wav", "speech_8000_mono_s16.wav", "sample.flac"):
        (corpus / name).write_bytes((DATA / name).read_bytes())
    (corpus / "broken.wav").write_bytes(b"RIFF\x24\x00\x00\x00WAVEfmt junk")
    manifest = tmp_path / "m.jsonl"
    manifest.write_text(
        '{"audio_filepath": "corpus/sample.flac", "offset": 1.0, "duration": 2.0}\n'
        '{"audio_filepath": "corpus/missing.wav"}\n')

    def order(seed):
        loader = sonograph.Loader(corpus, batch_size=2, shuffle=True, seed=seed, workers=2)
        return [i for ids, _, _ in loader for i in ids], loader.failures

    first, failures = order(7)
    assert order(7) == (first, failures)
    assert sorted(first) == ["sample.flac", "speech_16000_mono_s16.wav", "speech_8000_mono_s16.wav"]
    assert [f[0] for f in failures] == ["broken.wav"] and "broken.wav" in failures[0][1]
    assert {tuple(order(s)[0]) for s in range(8)} != {tuple(first)}, "seeds change the order"

    # A manifest's offsets and durations cut the item, as extract cuts it.
    loader = sonograph.Loader(manifest, "whisper", batch_size=8)
    (ids, feats, lengths), = list(loader)
    assert ids == ["corpus/sample.flac@1"], ids
    cut = sonograph.decode(corpus / "sample.flac", 16000, offset=1.0, duration=2.0)
    assert len(cut) == 32000
    assert np.array_equal(feats[0], sonograph.features(cut, 16000, "whisper"))
    assert lengths[0] == 200, lengths  # 2 s at Whisper's 100 frames a second
    assert [f[0] for f in loader.failures] == ["corpus/missing.wav"], loader.failures

    with pytest.raises(ValueError):
        sonograph.Loader(corpus, batch_size=0)
    with pytest.raises(ValueError) as e:
        sonograph.Loader(tmp_path / "nowhere")
    assert "nowhere" in str(e.value)


def minutes_of_noise(tmp_path, files):
    """A folder of `files` one-minute 16 kHz WAVs of noise (hard links to one file)."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    samples = np.random.default_rng(3).standard_normal(16000 * 60) * 0.1
    write_wav(corpus / "000.wav", np.clip(samples, -1, 1) * 32767)
    for k in range(1, files):
        os.link(corpus / "000.wav", corpus / f"{k:03d}.wav")
    return corpus


def test_a_loader_left_early_stops_its_workers_at_once(tmp_path):
    import time
    corpus = minutes_of_noise(tmp_path, 300)
    loader = sonograph.Loader(corpus, "whisper", batch_size=1, workers=1, prefetch=300)
    next(iter(loader))
    start = time.monotonic()
    del loader  # five hours of audio are handed to the worker: it must not compute them all
    assert time.monotonic() - start < 0.5


def test_ctrl_c_stops_extract_resumably(tmp_path):
    import signal
    import sys
    import time
    corpus = minutes_of_noise(tmp_path, 400)
    out = tmp_path / "out"
    # Python leaves SIGINT ignored where its parent ignored it (a test run started in the
    # background by a shell): the job's own handler is installed, so that Ctrl-C means the same
    # wherever the tests run.
    script = ("import signal, sonograph, sys\n"
              "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
              "try:\n"
              # Parts of 1 MiB: the first is out long before the job could end, however
              # loaded the machine (with 64 MiB parts it came near the end, and the job
              # could finish before the interrupt was seen).
              f"    sonograph.extract({str(corpus)!r}, {str(out)!r}, device='cpu', workers=1,"
              " part_mb=1)\n"
              "except KeyboardInterrupt:\n"
              "    sys.exit(42)\n")
    job = subprocess.Popen([sys.executable, "-c", script])
    ledger = out / "__sonograph"
    start = time.monotonic()
    while not any(out.glob("*.parquet")) and time.monotonic() - start < 60:
        time.sleep(0.05)  # a part is written: the job is well under way
    job.send_signal(signal.SIGINT)
    sent = time.monotonic()
    assert job.wait(timeout=30) == 42
    assert time.monotonic() - sent < 5, "Ctrl-C must stop the job at its next batch"
    assert ledger.is_dir()
    report = sonograph.extract(corpus, out, device="cpu", part_mb=1)
    assert report["items_ok"] == 400 and 0 < report["items_resumed"] < 400, report["items_resumed"]
