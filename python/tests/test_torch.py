"""The Loader's torch door: batches as torch tensors (output="torch", through DLPack), pinned
where torch has a CUDA device, and `sonograph.torch.LoaderDataset` for a torch DataLoader.
PyTorch is optional: without it both fail in one line naming it.

Run by python/test.sh (which builds and installs the package; scripts/test.sh's venv has torch).
"""

import subprocess
import sys
import warnings
from typing import Any

import numpy as np
import pytest

import sonograph
from audio import noise_clips
from required import module
SECONDS = [0.4 + 0.3 * k for k in range(12)]


@pytest.fixture(scope="module")
def torch():
    return module("torch", install="pip install --no-deps -r python/requirements-torch.txt, as scripts/test.sh does")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return noise_clips(tmp_path_factory.mktemp("torch-corpus"), SECONDS, seed=11, scale=2000)


def loader(corpus, **options):
    return sonograph.Loader(corpus, "nemo", max_duration=4.0, num_buckets=3, shuffle=True, seed=3,
                            workers=2, augment={"volume_db": [-6.0, 6.0], "spec_augment": {"freq_masks": 2, "time_masks": 2}}, **options)


def test_torch_batches_are_the_numpy_batches_as_tensors(corpus, torch):
    as_numpy = list(loader(corpus))
    as_torch = list(loader(corpus, output="torch"))
    assert len(as_torch) == len(as_numpy) > 2
    for (ids, feats, lengths), (tids, tfeats, tlengths) in zip(as_numpy, as_torch):
        assert isinstance(tfeats, torch.Tensor) and isinstance(tlengths, torch.Tensor)
        assert (tfeats.dtype, tlengths.dtype) == (torch.float32, torch.int64)
        assert tids == ids
        assert np.array_equal(tfeats.numpy(), feats) and np.array_equal(tlengths.numpy(), lengths)
        assert not tfeats.is_pinned()


def test_pinned_batches_where_torch_has_cuda_and_a_warning_where_it_has_none(corpus, torch):
    cuda = torch.cuda.is_available()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pinned = loader(corpus, output="torch", pin_memory=True)
    # (torch may warn of its own while it looks for CUDA: only sonograph's are counted.)
    ours = [str(w.message) for w in caught if "pin_memory" in str(w.message)]
    _, feats, lengths = next(iter(pinned))
    if cuda:
        assert not ours
        assert feats.is_pinned() and lengths.is_pinned()
    else:
        assert ours == ["pin_memory=True, but torch sees no CUDA device: batches are not pinned"]
        assert not feats.is_pinned()


def test_torch_output_options_are_refused_by_name(corpus):
    with pytest.raises(sonograph.OptionsError, match='give output="torch" too'):
        loader(corpus, pin_memory=True)
    with pytest.raises(sonograph.OptionsError, match='output "jax": "numpy" or "torch"'):
        loader(corpus, output="jax")


def test_without_torch_the_torch_door_says_so_in_one_line(corpus):
    # A Python where `import torch` fails: what a user without PyTorch sees.
    script = f"""
import sys
sys.modules["torch"] = None
import sonograph
try:
    sonograph.Loader({str(corpus)!r}, "nemo", output="torch")
except sonograph.OptionsError as e:
    print("loader:", e)
try:
    import sonograph.torch
except ImportError as e:
    print("module:", e)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    lines = out.stdout.splitlines()
    assert len(lines) == 2, out
    assert lines[0].startswith('loader: output="torch" needs PyTorch, and `import torch` failed:')
    assert lines[1].startswith("module: sonograph.torch needs PyTorch (pip install torch):")


def test_a_torch_dataloader_passes_the_loaders_batches_on(corpus, torch):
    from torch.utils.data import DataLoader

    from sonograph.torch import LoaderDataset

    direct = list(loader(corpus, output="torch"))
    dataset = LoaderDataset(loader(corpus))
    batches = DataLoader(dataset, batch_size=None)
    assert len(batches) == len(direct)
    through = list(batches)
    assert len(through) == len(direct)
    for (ids, feats, lengths), (tids, tfeats, tlengths) in zip(direct, through):
        assert tids == ids and torch.equal(tfeats, feats) and torch.equal(tlengths, lengths)
    # The next pass is the next epoch, as the Loader's own.
    assert dataset.state_dict()["epoch"] == 0
    second = list(batches)
    assert dataset.state_dict()["epoch"] == 1
    assert [b[0] for b in second] != [b[0] for b in through]


def test_a_dataloader_with_workers_of_its_own_is_refused(corpus, torch):
    from torch.utils.data import DataLoader

    from sonograph.torch import LoaderDataset

    with pytest.raises(sonograph.OptionsError, match="num_workers=0"):
        next(iter(DataLoader(LoaderDataset(loader(corpus)), batch_size=None, num_workers=1)))
    with pytest.raises(sonograph.OptionsError, match="takes a sonograph.Loader, not list"):
        LoaderDataset([])  # type: ignore[arg-type]


def test_time_warp_is_what_torch_interpolates_from_the_same_draws(corpus, torch):
    """lhotse 1.33's `time_warp` (lhotse/dataset/signal_transforms.py), its body with the
    Loader's draws in place of numpy's: torch's bicubic interpolation of the frames before the
    drawn boundary to its new place and of those after it to the rest; then the masks."""
    masks = {"freq_masks": 2, "freq_width": 8, "time_masks": 2, "time_width": 10}
    options: dict[str, Any] = dict(batch_size=4, seed=9, workers=2)
    plain = {ids[k]: feats[k, :n] for ids, feats, lengths in
             sonograph.Loader(corpus, "lhotse-fbank", **options) for k, n in enumerate(lengths)}
    warped = sonograph.Loader(corpus, "lhotse-fbank", augment={"spec_augment": {**masks, "time_warp": 20}},
                              **options)
    interpolate = torch.nn.functional.interpolate
    seen, worst = 0, 0.0
    for ids, feats, lengths in warped:
        for k, item in enumerate(ids):
            drawn = warped.augmentation(item)
            expected = plain[item].copy()
            if "time_warp" in drawn:
                center, to = drawn["time_warp"]
                x = torch.from_numpy(expected)[None, None]
                t, bins = x.shape[2], x.shape[3]
                left = interpolate(x[:, :, :center, :], size=(to, bins), mode="bicubic", align_corners=False)
                right = interpolate(x[:, :, center:, :], size=(t - to, bins), mode="bicubic", align_corners=False)
                expected = torch.cat((left, right), dim=2)[0, 0].numpy().copy()
                seen += 1
            for first, width in drawn["freq_masks"]:
                expected[:, first:first + width] = 0.0
            for first, width in drawn["time_masks"]:
                expected[first:first + width] = 0.0
            got = feats[k, :lengths[k]]
            assert got.shape == expected.shape
            # Relative to the item's largest value. torch's outer weights (Keys' cubic at 1 + t
            # and 2 − t: a difference of terms near 3) come out up to a float32 step of those
            # terms (2^-22) from ours, as its compiled kernel rounds them its own way (the
            # middle weights agree bit for bit); over the four taps and the sum's rounding
            # that is within 2^-18 of the largest value (this test saw 43 × 2^-24).
            worst = max(worst, float(np.max(np.abs(got - expected)) / np.max(np.abs(expected))))
    assert seen >= 8, seen  # items of over 41 frames: all but the shortest, most of them warped
    assert worst <= 2.0**-18, worst
