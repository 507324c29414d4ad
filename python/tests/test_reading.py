"""docs/reading.md's snippets, each run as written against a real output folder of `extract`
(float32 and float16): the dataset libraries see a [num_frames, num_bins] array per row."""

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import required

BIN = os.environ.get("SONOGRAPH_BIN", "sonograph")
ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "reading.md"
PLACEHOLDER = "/data/features"
# Each reader, by the module its snippet imports (scripts/requirements-readers.txt).
READERS = ["pyarrow", "pandas", "datasets", "ray", "duckdb"]


def snippets() -> dict[str, str]:
    """The doc's python blocks, keyed by the reader each one imports."""
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    by_reader: dict[str, str] = {}
    for block in blocks:
        imported = {m.split(".")[0] for m in re.findall(r"^(?:import|from) ([\w.]+)", block, re.M)}
        readers = [r for r in READERS if r in imported]
        assert len(readers) == 1, f"a snippet of docs/reading.md imports {readers} of {READERS}"
        assert readers[0] not in by_reader, f"docs/reading.md has two {readers[0]} snippets"
        by_reader[readers[0]] = block
    return by_reader


def test_every_reader_has_a_snippet() -> None:
    assert sorted(snippets()) == sorted(READERS)


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """An extract of tests/data (13 items of 1 to 6 s) in each dtype."""
    root = tmp_path_factory.mktemp("reading")
    folders: dict[str, Path] = {}
    for dtype in ["f32", "f16"]:
        out = root / dtype
        subprocess.run([BIN, "extract", str(ROOT / "tests" / "data"), "--out", str(out), "--preset", "whisper",
                        "--dtype", dtype, "--no-progress"], check=True, capture_output=True)
        assert list(out.glob("part-*.parquet"))
        folders[dtype] = out
    return folders


@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize("reader", READERS)
def test_a_snippet_reads_frames(reader: str, dtype: str, outputs: dict[str, Path], tmp_path: Path) -> None:
    required.module(reader)
    code = snippets()[reader]
    assert PLACEHOLDER in code
    code = code.replace(PLACEHOLDER, str(outputs[dtype]))
    # Caches and Ray's session files in temporary folders, and nothing from the network. Ray's
    # sockets live in its folder, whose path must be short (AF_UNIX: 107 bytes): not tmp_path.
    ray_tmp = tempfile.mkdtemp(prefix="sg-ray-")
    env = dict(os.environ, HF_HOME=str(tmp_path / "hf"), HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1",
               RAY_TMPDIR=ray_tmp, RAY_USAGE_STATS_ENABLED="0")
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300,
                              cwd=tmp_path)
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert done.returncode == 0, f"docs/reading.md's {reader} snippet on {dtype}:\n{done.stderr[-3000:]}"
