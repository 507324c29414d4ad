"""`sonograph.Loader` for code written around a torch `DataLoader`.

    loader = sonograph.Loader("corpus/", "nemo", max_duration=200, num_buckets=10,
                              shuffle=True, output="torch")
    batches = DataLoader(LoaderDataset(loader), batch_size=None, pin_memory=True)

The Loader batches, decodes and augments on worker threads of its own, so the DataLoader only
passes its batches on (`batch_size=None`, `num_workers=0`); more DataLoader workers would each
give every batch again, and are refused. Importing this module needs PyTorch, which the rest of
sonograph does not.
"""

from __future__ import annotations

from typing import Any, Iterator

from . import Loader, OptionsError


def _require_torch() -> None:
    """PyTorch is optional: without it (or with a torch that fails to load), say so in one line."""
    try:
        import torch  # noqa: F401
    except (ImportError, OSError) as e:  # OSError: a torch whose CUDA libraries fail to load
        raise ImportError(f"sonograph.torch needs PyTorch (pip install torch): {e}") from e


_require_torch()
from torch.utils.data import IterableDataset, get_worker_info  # noqa: E402

__all__ = ["LoaderDataset"]


class LoaderDataset(IterableDataset):  # type: ignore[type-arg]
    """A Loader as a torch `IterableDataset` of batches `(ids, features, lengths)`: one pass is
    the Loader's next epoch. `len()` is the batches in an epoch of this rank; `set_epoch`,
    `state_dict` and `load_state_dict` are the Loader's, so a sampler-style training loop and a
    checkpoint of the dataset both work."""

    def __init__(self, loader: Loader) -> None:
        super().__init__()
        if not isinstance(loader, Loader):
            raise OptionsError(f"LoaderDataset takes a sonograph.Loader, not {type(loader).__name__}")
        self.loader = loader

    def __iter__(self) -> Iterator[Any]:
        if get_worker_info() is not None:
            raise OptionsError(
                "LoaderDataset in a DataLoader worker: the Loader has workers of its own, so give "
                "the DataLoader num_workers=0 (and batch_size=None)"
            )
        return iter(self.loader)

    def __len__(self) -> int:
        return self.loader.batches_per_epoch

    def set_epoch(self, epoch: int) -> None:
        self.loader.set_epoch(epoch)

    def state_dict(self) -> dict[str, Any]:
        return self.loader.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.loader.load_state_dict(state)
