"""sonograph: audio features (log-mel, MFCC, spectrograms, PSD) that match Whisper, Kaldi, NeMo,
librosa and the training frameworks' frontends; resumable dataset jobs; a training Loader.

The engine is the compiled module `sonograph._native` (python/src/*.rs); everything it has is
here under the same names. `sonograph.torch` (imported on its own: PyTorch is optional) hands
the Loader to code that expects a torch DataLoader.
"""

from ._native import *  # noqa: F403 (the module's own __all__)
from ._native import __all__, __version__  # noqa: F401
