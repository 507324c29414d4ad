"""The Loader's sampling for training: batches by total duration from duration buckets, shares
for distributed ranks, epochs reshuffled by (seed, epoch), and a resume from `state_dict()` that
neither repeats nor skips an item; the same batches whatever the workers.

Run by python/test.sh (which builds and installs the package).
"""

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import sonograph
from audio import RATE, noise_clips, write_wav
# Forty clips of 0.5 to 8.3 s, in a scattered order of lengths.
SECONDS = [0.5 + ((k * 17) % 40) * 0.2 for k in range(40)]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return noise_clips(tmp_path_factory.mktemp("lengths"), SECONDS, seed=5, scale=3000)


def duration(item):
    return SECONDS[int(item[4:6])]


def epoch(loader):
    """One epoch's batches: (ids, features, lengths) each."""
    return [(ids, feats.copy(), lengths.copy()) for ids, feats, lengths in loader]


def same(a, b):
    return len(a) == len(b) and all(
        x[0] == y[0] and np.array_equal(x[1], y[1]) and np.array_equal(x[2], y[2]) for x, y in zip(a, b))


def test_batches_by_duration_hold_every_item_once_and_buckets_cut_the_padding(corpus):
    loader = sonograph.Loader(corpus, "nemo", batch_size=None, max_duration=20.0, num_buckets=4,
                              shuffle=True, seed=1, workers=2)
    batches = epoch(loader)
    assert len(batches) == loader.batches_per_epoch
    seen = [i for ids, _, _ in batches for i in ids]
    assert sorted(seen) == sorted(f"clip{k:02d}.wav" for k in range(40))
    for ids, feats, lengths in batches:
        assert sum(duration(i) for i in ids) <= 20.0 or len(ids) == 1, ids
        # NeMo's 10 ms hop: the frames follow the durations.
        for i, n in zip(ids, lengths):
            assert abs(n - duration(i) * 100) <= 2, (i, n)
    flat = sonograph.Loader(corpus, "nemo", batch_size=None, max_duration=20.0, shuffle=True, seed=1)
    epoch(flat)
    assert loader.padding < flat.padding / 2, (loader.padding, flat.padding)


def test_the_same_seed_and_epoch_give_the_same_batches_whatever_the_workers(corpus):
    options: dict[str, Any] = dict(batch_size=3, max_duration=12.0, num_buckets=3, shuffle=True, seed=9)
    one = epoch(sonograph.Loader(corpus, "kaldi", workers=1, **options))
    three = epoch(sonograph.Loader(corpus, "kaldi", workers=3, prefetch=1, **options))
    assert same(one, three)
    # The next epoch: the same items in another order; set_epoch gives it from the start.
    loader = sonograph.Loader(corpus, "kaldi", workers=2, **options)
    first, second = epoch(loader), epoch(loader)
    assert loader.epoch == 1 and same(first, one)
    assert [b[0] for b in second] != [b[0] for b in first]
    assert sorted(i for b in second for i in b[0]) == sorted(i for b in first for i in b[0])
    other = sonograph.Loader(corpus, "kaldi", workers=2, **options)
    other.set_epoch(1)
    assert same(epoch(other), second)


def test_a_resume_from_the_state_gives_the_batches_that_came_next(corpus):
    options: dict[str, Any] = dict(batch_size=4, num_buckets=2, max_duration=16.0, shuffle=True, seed=3, workers=2)
    whole = sonograph.Loader(corpus, "nemo", **options)
    epoch(whole)
    expected = epoch(whole)  # epoch 1
    after = epoch(whole)  # epoch 2
    for stop_after in (0, 1, len(expected) - 1):
        first = sonograph.Loader(corpus, "nemo", **options)
        first.set_epoch(1)
        taken = [next(first) for _ in range(stop_after)]
        state = first.state_dict()
        assert state["epoch"] == 1 and state["batches_done"] == stop_after
        del first
        resumed = sonograph.Loader(corpus, "nemo", **options)
        resumed.load_state_dict(state)
        rest = epoch(resumed)
        assert same([(i, f, n) for i, f, n in taken] + rest, expected), stop_after
    # Saved after an epoch's last batch: the next pass is the next epoch.
    done = sonograph.Loader(corpus, "nemo", **options)
    done.load_state_dict({**state, "batches_done": len(expected)})
    assert same(epoch(done), after) and done.epoch == 2
    other = sonograph.Loader(corpus, "nemo", **dict(options, seed=4))
    with pytest.raises(sonograph.OptionsError) as e:
        other.load_state_dict(state)
    assert "seed 3" in str(e.value)


def test_ranks_get_disjoint_shares_of_as_many_batches(corpus, monkeypatch):
    options: dict[str, Any] = dict(batch_size=3, num_buckets=2, max_duration=14.0, shuffle=True, seed=2)
    shares = [epoch(sonograph.Loader(corpus, "nemo", rank=r, world_size=3, **options)) for r in range(3)]
    assert len({len(s) for s in shares}) == 1 and len(shares[0]) > 0
    items = [i for s in shares for b in s for i in b[0]]
    assert len(items) == len(set(items))
    # torch.distributed's launcher's variables name the rank where the arguments do not.
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "3")
    assert same(epoch(sonograph.Loader(corpus, "nemo", **options)), shares[1])
    with pytest.raises(sonograph.OptionsError) as e:
        sonograph.Loader(corpus, "nemo", rank=3, **options)
    assert "rank 3 must be below world_size 3" in str(e.value)


def test_bad_sampling_options_are_refused_by_name(corpus):
    cases: list[tuple[dict[str, Any], str]] = [
        (dict(batch_size=None), "give batch_size, max_duration or both"),
        (dict(max_duration=-1.0), "max_duration -1 must be"),
        (dict(num_buckets=0), "num_buckets 0 is outside"),
        (dict(batch_size=0), "batch_size 0 is outside"),
    ]
    for options, says in cases:
        with pytest.raises(sonograph.OptionsError) as e:
            sonograph.Loader(corpus, "nemo", **options)
        assert says in str(e.value), str(e.value)


@pytest.fixture(scope="module")
def noise(tmp_path_factory):
    """Two noise clips: 3 s of white noise and 0.7 s of a buzz (shorter than most items)."""
    folder = tmp_path_factory.mktemp("noise")
    rng = np.random.default_rng(8)
    clips = {"white.wav": rng.standard_normal(3 * RATE) * 2000,
             "buzz.wav": np.sign(np.sin(np.arange(int(0.7 * RATE)) * 0.3)) * 1500}
    for name, samples in clips.items():
        write_wav(folder / name, samples)
    return folder


AUGMENT: dict[str, Any] = {"volume_db": [-6.0, 6.0], "noise": {"snr_db": [0.0, 15.0]},
           "spec_augment": {"freq_masks": 2, "freq_width": 20, "time_masks": 2, "time_width": 0.1}}


def test_augmentation_is_what_numpy_computes_from_the_same_draws(corpus, noise):
    augment = {**AUGMENT, "noise": {**AUGMENT["noise"], "source": str(noise)}}
    loader = sonograph.Loader(corpus, "nemo", batch_size=5, seed=4, augment=augment, workers=2)
    ids, feats, lengths = next(loader)
    used = set()
    for k, item in enumerate(ids):
        d = loader.augmentation(item)
        # The reference, in numpy from the item's samples and the draws.
        x = sonograph.decode(corpus / item, RATE).astype(np.float64)
        x = (x * 10 ** (d["gain_db"] / 20)).astype(np.float32).astype(np.float64)
        n = d["noise"]
        used.add(Path(n["path"]).name)
        clip = sonograph.decode(n["path"], RATE, offset=n["file_offset_s"], duration=len(x) / RATE)
        clip = np.resize(clip, len(x)).astype(np.float64)  # repeated where it is shorter
        scale = np.sqrt(np.mean(x ** 2) / (np.mean(clip ** 2) * 10 ** (n["snr_db"] / 10)))
        mixed = (x + scale * clip).astype(np.float32)
        want = sonograph.features(mixed, RATE, "nemo")
        for left, width in d["freq_masks"]:
            want[:, left:left + width] = 0.0
        for left, width in d["time_masks"]:
            want[left:left + width, :] = 0.0
        got = feats[k, : lengths[k]]
        assert got.shape == want.shape
        # Equal in practice; the sums of squares are added in another order (numpy's
        # pairwise), which may move the noise's scale by its last bit. Without the gain, the
        # difference is 3e-3 and more.
        assert np.max(np.abs(got - want)) < 1e-5, (item, np.max(np.abs(got - want)))
        assert np.array_equal(got == 0.0, want == 0.0), item
        assert 0 <= d["noise"]["snr_db"] <= 15 and -6 <= d["gain_db"] <= 6
    assert used == {"white.wav", "buzz.wav"}, used


def test_augmentation_is_the_same_whatever_the_workers_and_changes_with_the_epoch(corpus, noise):
    augment = {**AUGMENT, "noise": {**AUGMENT["noise"], "source": str(noise), "prob": 0.5}}
    options: dict[str, Any] = dict(batch_size=4, shuffle=True, seed=6, augment=augment)
    one = epoch(sonograph.Loader(corpus, "nemo", workers=1, **options))
    three = sonograph.Loader(corpus, "nemo", workers=3, **options)
    assert same(one, epoch(three))
    assert three.augmentation("clip03.wav", epoch=0) != three.augmentation("clip03.wav", epoch=1)
    # A resume mid-epoch gives the same augmented batches.
    first = sonograph.Loader(corpus, "nemo", workers=2, **options)
    next(first)
    resumed = sonograph.Loader(corpus, "nemo", workers=2, **options)
    resumed.load_state_dict(first.state_dict())
    assert same(epoch(resumed), one[1:])
    with pytest.raises(sonograph.OptionsError) as e:
        sonograph.Loader(corpus, "nemo", augment={"volume_db": [6.0, -6.0]})
    assert "augment: volume_db [6, -6]" in str(e.value), str(e.value)
    with pytest.raises(sonograph.OptionsError) as e:
        sonograph.Loader(corpus, "nemo", augment={"echo": {}})
    assert str(e.value).startswith("augment: echo: unknown field `echo`"), str(e.value)
    with pytest.raises(sonograph.OptionsError) as e:
        sonograph.Loader(corpus, "nemo", augment={"speed": [0.9, 3.0]})
    assert "speed: the factor 3 is outside [0.5, 2]" in str(e.value), str(e.value)


def test_every_augmentation_is_bit_identical_with_1_2_and_8_workers_and_after_a_resume_at_any_batch(corpus, noise):
    augment = {"speed": [0.9, 1.0, 1.1], "volume_db": [-6.0, 6.0],
               "noise": {"source": str(noise), "snr_db": [0.0, 15.0], "prob": 0.5},
               "spec_augment": {"time_warp": 10, "freq_masks": 2, "freq_width": 20, "time_masks": 2,
                                "time_width": 0.1}}
    options: dict[str, Any] = dict(batch_size=None, max_duration=14.0, num_buckets=3, shuffle=True, seed=12,
                                   augment=augment)
    runs = {w: sonograph.Loader(corpus, "nemo", workers=w, **options) for w in (1, 2, 8)}
    for loader in runs.values():
        loader.set_epoch(2)
    batches = {w: epoch(loader) for w, loader in runs.items()}
    assert len(batches[1]) > 4
    assert same(batches[1], batches[2]) and same(batches[1], batches[8])
    for stop in range(len(batches[1])):
        first = sonograph.Loader(corpus, "nemo", workers=2, **options)
        first.set_epoch(2)
        for _ in range(stop):
            next(first)
        state = first.state_dict()
        del first
        resumed = sonograph.Loader(corpus, "nemo", workers=8, **options)
        resumed.load_state_dict(state)
        assert same(epoch(resumed), batches[1][stop:]), stop


def test_speed_and_reverberation_are_what_scipy_computes_from_the_same_draws(corpus, tmp_path):
    signal = pytest.importorskip("scipy.signal", reason="scipy (scripts/requirements-rf.txt) is the reference")
    rirs = tmp_path / "rirs"
    rirs.mkdir()
    # A room's response: silence, a direct path at sample 40 (its largest value), a decaying tail.
    t = np.arange(int(0.3 * RATE))
    h = np.random.default_rng(2).standard_normal(len(t)) * np.exp(-t / 800) * 3000
    h[:40] = 0
    h[40] = 20000
    write_wav(rirs / "room.wav", h)
    # Mel energies without a log: the two resamplers differ only near Nyquist, where a log of
    # little energy would magnify it.
    spec = sonograph.preset("nemo")
    spec.update(normalize="none", output="mel", log="none", preemphasis=0.0)
    loader = sonograph.Loader(corpus, spec=spec, batch_size=6, seed=2, workers=2,
                              augment={"speed": [0.9, 1.1], "reverb": {"source": str(rirs)}})
    ids, feats, lengths = next(loader)
    factors = set()
    for k, item in enumerate(ids):
        d = loader.augmentation(item)
        factors.add(d["speed"])
        x = sonograph.decode(corpus / item, RATE).astype(np.float64)
        y = signal.resample_poly(x, RATE, round(RATE * d["speed"])).astype(np.float32).astype(np.float64)
        rir = sonograph.decode(d["rir"]["path"], RATE).astype(np.float64)
        full = signal.fftconvolve(y, rir)
        shift = int(np.argmax(rir))
        out = full[shift:shift + len(y)]
        out *= np.sqrt(np.mean(y ** 2) / np.mean(out ** 2))
        want = sonograph.features(out.astype(np.float32), RATE, spec=spec)
        got = feats[k, : lengths[k]]
        assert got.shape == want.shape, (item, got.shape, want.shape)
        # The energy of each frame up to 6 kHz (the first 64 of 80 bands). The resamplers
        # differ by their passband ripples (0.01 dB each, up to 0.3 % in a band, measured on
        # white noise) and near Nyquist, which moves the reverb's rescaling to the whole
        # band's mean square by as much: measured 0.39 % at most.
        rel = np.abs(got[:, :64].sum(1) - want[:, :64].sum(1)) / want[:, :64].sum(1)
        assert np.median(rel) < 1e-2 and rel.max() < 2e-2, (item, np.median(rel), rel.max())
    assert factors == {0.9, 1.1}, factors


def test_a_gpu_computes_the_cpus_batches_with_the_same_augmentation(corpus, noise):
    augment = {**AUGMENT, "noise": {**AUGMENT["noise"], "source": str(noise)},
               "spec_augment": {**AUGMENT["spec_augment"], "time_warp": 10}}
    options: dict[str, Any] = dict(batch_size=None, max_duration=15.0, num_buckets=2, shuffle=True,
                                   seed=5, augment=augment, workers=2)
    try:
        gpu = sonograph.Loader(corpus, "nemo", device="gpu", **options)
    except sonograph.DeviceError as e:
        if os.environ.get("SONOGRAPH_REQUIRE_GPU") == "1":
            raise
        pytest.skip(f"no GPU adapter (lavapipe: apt-get install mesa-vulkan-drivers): {e}")
    cpu = sonograph.Loader(corpus, "nemo", **options)
    on_gpu, on_cpu = epoch(gpu), epoch(cpu)
    assert [b[0] for b in on_gpu] == [b[0] for b in on_cpu]
    worst = 0.0
    for (_, g, glen), (_, c, clen) in zip(on_gpu, on_cpu):
        assert np.array_equal(glen, clen)
        # The masks are the same cells.
        assert np.array_equal(g == 0.0, c == 0.0)
        worst = max(worst, float(np.max(np.abs(g - c))))
    # NeMo's features in f64 on both where the GPU has f64 in shaders (lavapipe does: 0.0
    # apart there), normalised per band; a GPU in f32 stays within 1e-4 of them.
    assert worst < 1e-4, worst
    stats = gpu.stats()
    assert stats["batches"] == len(on_gpu) and stats["device_s"] > 0, stats
    assert stats["device"] != "cpu" and cpu.stats()["device"] == "cpu", stats


def test_a_rank_whose_batch_fails_whole_gives_it_empty_and_a_refused_state_changes_nothing(tmp_path, corpus):
    folder = tmp_path / "three"
    folder.mkdir()
    for name in ("clip00.wav", "clip01.wav"):
        (folder / name).write_bytes((corpus / name).read_bytes())
    (folder / "clip02.wav").write_bytes(b"RIFF\x24\x00\x00\x00WAVEfmt junk")
    ranks = [epoch(sonograph.Loader(folder, "nemo", batch_size=1, rank=r, world_size=3)) for r in range(3)]
    # Every rank gives its one batch, the broken file's rank an empty one: none waits for ever.
    assert [len(b) for b in ranks] == [1, 1, 1]
    assert [b[0][0] for b in ranks] == [["clip00.wav"], ["clip01.wav"], []]
    assert ranks[2][0][1].shape == (0, 0, 80)
    # A lone process skips it.
    assert [b[0] for b in epoch(sonograph.Loader(folder, "nemo", batch_size=1))] == [["clip00.wav"], ["clip01.wav"]]
    loader = sonograph.Loader(folder, "nemo", batch_size=1)
    with pytest.raises(sonograph.OptionsError) as e:
        loader.load_state_dict({**loader.state_dict(), "batches_done": 10**6})
    assert "batches done, but epoch 0 has 3" in str(e.value), str(e.value)
    assert [b[0] for b in epoch(loader)] == [["clip00.wav"], ["clip01.wav"]]
    # The state of another source with as many items is refused.
    other = tmp_path / "other"
    other.mkdir()
    for name in ("clip03.wav", "clip04.wav", "clip05.wav"):
        (other / name).write_bytes((corpus / name).read_bytes())
    with pytest.raises(sonograph.OptionsError) as e:
        sonograph.Loader(other, "nemo", batch_size=1).load_state_dict(loader.state_dict())
    assert "state: saved by a loader of 3 items (" in str(e.value), str(e.value)


def test_batches_by_duration_count_the_items_as_speed_perturbation_makes_them(corpus):
    slow_batches = 0
    for factor in (0.5, 2.0):
        loader = sonograph.Loader(corpus, "nemo", batch_size=None, max_duration=20.0, num_buckets=3,
                                  shuffle=True, seed=3, augment={"speed": [factor]})
        batches = epoch(loader)
        for ids, _, lengths in batches:
            # NeMo's 10 ms frames: the items' lengths after the speed change.
            assert lengths.sum() / 100 <= 20.0 + 0.02 * len(ids) or len(ids) == 1, (factor, ids)
        assert sorted(i for b in batches for i in b[0]) == sorted(f"clip{k:02d}.wav" for k in range(40))
        if factor == 2.0:
            # Twice as fast, half as long: about twice as many items to a batch as at 0.5.
            assert len(batches) < slow_batches / 2, (len(batches), slow_batches)
        slow_batches = len(batches)
