"""Type stubs of the `sonograph` package: the names of its compiled module, `sonograph._native`
(python/src/*.rs), which python/sonograph/__init__.py re-exports. The wheel carries this file and
a py.typed marker; python/test.sh checks them with mypy's stubtest against the module as built,
and the tests with mypy against them."""

import os
from typing import Any, Iterable, Iterator, Literal, Mapping, Union, final

import numpy as np
import numpy.typing as npt

__version__: str
__all__ = [
    "DeviceError",
    "Error",
    "InputError",
    "Loader",
    "ModelError",
    "OptionsError",
    "__version__",
    "decode",
    "extract",
    "features",
    "features_batch",
    "load",
    "plan",
    "preset",
    "presets",
    "rf_features",
    "synth_iq",
    "transcribe",
]

_PathLike = Union[str, "os.PathLike[str]"]
_Precision = Literal["auto", "f32", "f64"]
_Spec = Mapping[str, Any]
# A batch's features and lengths: numpy arrays, or torch tensors where output="torch" (typed as
# Any: torch is not a dependency of the package).
_Array = Any

class Error(RuntimeError):
    """Every error sonograph raises."""

class OptionsError(Error, ValueError):
    """An option, spec or argument that cannot be used: its name and why."""

class InputError(Error, ValueError):
    """Audio that cannot be read: the file (or array) and why."""

class DeviceError(Error):
    """A device that cannot run the job."""

class ModelError(Error):
    """A model that cannot load or run."""

def presets() -> list[str]:
    """The names of the presets, in the order `sonograph presets` lists them."""

def preset(name: str) -> dict[str, Any]:
    """A preset's spec as a dict (every parameter explicit)."""

def features(
    samples: npt.ArrayLike,
    sample_rate: int,
    preset: str | None = None,
    *,
    spec: _Spec | _PathLike | None = None,
    precision: _Precision = "auto",
) -> npt.NDArray[np.float32]:
    """The features of mono audio `samples` at `sample_rate` Hz: float32 [frames, bins]."""

def features_batch(
    clips: Iterable[npt.ArrayLike | Mapping[str, Any]],
    sample_rate: int | None = None,
    preset: str | None = None,
    *,
    spec: _Spec | _PathLike | None = None,
    precision: _Precision = "auto",
    layout: Literal["frames_bins", "bins_frames"] = "frames_bins",
) -> list[npt.NDArray[np.float32]]:
    """The features of each clip (arrays at `sample_rate`, or datasets' audio dicts), on every
    core: float32 [frames, bins] each, or [bins, frames] with layout="bins_frames"."""

def load(
    path: _PathLike,
    preset: str | None = None,
    *,
    spec: _Spec | _PathLike | None = None,
    precision: _Precision = "auto",
) -> npt.NDArray[np.float32]:
    """The features of an audio file: what `sonograph features FILE` writes."""

def decode(
    path: _PathLike,
    sample_rate: int = 16000,
    *,
    offset: float = 0.0,
    duration: float | None = None,
) -> npt.NDArray[np.float32]:
    """An audio file's samples as sonograph decodes them: mono, at `sample_rate`, float32."""

def plan(
    source: _PathLike | None = None,
    out: _PathLike | None = None,
    *,
    kind: Literal["extract", "rf-features", "synth-iq", "transcribe"] = "extract",
    **options: Any,
) -> dict[str, Any]:
    """The job of `kind` these arguments would run, every default filled in."""

def extract(source: _PathLike, out: _PathLike, **options: Any) -> dict[str, Any]:
    """Runs an extract job (the CLI's and the service's options, by their Python names);
    returns its report."""

def rf_features(source: _PathLike, out: _PathLike, **options: Any) -> dict[str, Any]:
    """Runs an rf-features job (`sonograph rf-features`' options by their Python names);
    returns its report."""

def synth_iq(out: _PathLike, count: int, **options: Any) -> dict[str, Any]:
    """Runs a synth-iq job (`sonograph synth-iq`'s options by their Python names); returns its
    report."""

def transcribe(
    source: _PathLike, out: _PathLike, model: _PathLike, **options: Any
) -> dict[str, Any]:
    """Runs a transcribe job (`sonograph transcribe`'s options by their Python names);
    returns its report."""

@final
class Loader:
    """Batches `(ids, features [batch, frames, bins], lengths)` of every item of a source, by
    count or by total duration from duration buckets, shared between ranks, reshuffled by
    (seed, epoch), resumable from `state_dict()`, augmented deterministically."""

    def __new__(
        cls,
        source: _PathLike,
        preset: str | None = None,
        *,
        spec: _Spec | _PathLike | None = None,
        precision: _Precision = "auto",
        batch_size: int | None = 32,
        max_duration: float | None = None,
        num_buckets: int = 1,
        workers: int | None = None,
        prefetch: int = 4,
        shuffle: bool = False,
        seed: int = 0,
        drop_last: bool = False,
        rank: int | None = None,
        world_size: int | None = None,
        augment: Mapping[str, Any] | None = None,
        device: str = "cpu",
        output: Literal["numpy", "torch"] = "numpy",
        pin_memory: bool = False,
    ) -> "Loader": ...
    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[tuple[list[str], _Array, _Array]]: ...
    def __next__(self) -> tuple[list[str], _Array, _Array]: ...
    def augmentation(self, id: str, epoch: int | None = None) -> dict[str, Any]:
        """The draws item `id` gets in `epoch` (the current one by default)."""
    def stats(self) -> dict[str, Any]:
        """Batches given, seconds waiting for the workers, seconds on the device."""
    def set_epoch(self, epoch: int) -> None:
        """Starts `epoch` from its first batch."""
    def state_dict(self) -> dict[str, Any]:
        """The epoch, the batches given in it, and the sampler they belong to."""
    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resumes after the last batch `state` says was given."""
    @property
    def epoch(self) -> int:
        """The epoch being given."""
    @property
    def batches_per_epoch(self) -> int:
        """This rank's batches in an epoch."""
    @property
    def padding(self) -> float:
        """The share of the frames given so far that is padding."""
    @property
    def failures(self) -> list[tuple[str, str]]:
        """Items that failed, with their reasons."""

