"""python/examples/ run as a user runs them: the training loop (train.py) over two ranks of
torch.distributed (torchrun, gloo, on this machine's CPU) on the toy corpus, once whole and once
stopped after a few steps and resumed from its checkpoints. The resumed run must be the same
run: the same batches on each rank, the same losses, the same final weights.

Run by python/test.sh (scripts/test.sh's venv has torch).
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from required import module

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.fixture(scope="module")
def torch():
    return module("torch", install="pip install --no-deps -r python/requirements-torch.txt, as scripts/test.sh does")


def train(corpus: Path, checkpoints: Path, *extra: str) -> None:
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                          str(EXAMPLES / "train.py"), str(corpus), "--checkpoints", str(checkpoints), *extra],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]


def log(checkpoints: Path, rank: int) -> list[dict]:
    return [json.loads(line) for line in (checkpoints / f"log-rank{rank}.jsonl").read_text().splitlines()]


def test_two_ranks_train_and_a_stopped_run_resumes_as_if_it_had_not_stopped(tmp_path, torch):
    corpus = tmp_path / "toy"
    subprocess.run([sys.executable, str(EXAMPLES / "toy_corpus.py"), str(corpus), "--clips", "48"], check=True)
    whole, stopped = tmp_path / "whole", tmp_path / "stopped"
    train(corpus, whole)
    train(corpus, stopped, "--stop-after", "4")
    assert [len(log(stopped, r)) for r in (0, 1)] == [4, 4]
    train(corpus, stopped)

    runs = {r: log(whole, r) for r in (0, 1)}
    assert len(runs[0]) == len(runs[1]) > 8  # every rank as many steps: DDP's all-reduce needs it
    for r in (0, 1):
        assert log(stopped, r) == runs[r], f"rank {r}"  # batches, epochs and losses, exactly
    for r in (0, 1):
        a = torch.load(whole / f"rank{r}.pt")["model"]
        b = torch.load(stopped / f"rank{r}.pt")["model"]
        assert all(torch.equal(a[k], b[k]) for k in a)
    assert all(torch.equal(v, torch.load(whole / "rank1.pt")["model"][k])
               for k, v in torch.load(whole / "rank0.pt")["model"].items())  # one model, two ranks

    items = {p.name for p in corpus.iterdir()}
    for epoch in range(3):
        shares = [[i for s in runs[r] if s["epoch"] == epoch for i in s["ids"]] for r in (0, 1)]
        given = shares[0] + shares[1]
        assert len(given) == len(set(given)), f"epoch {epoch}: an item twice"
        assert set(given) <= items and len(given) >= 0.8 * len(items)  # the rest: batches left out to even the ranks
    orders = [[s["ids"] for s in runs[0] if s["epoch"] == e] for e in range(3)]
    assert orders[0] != orders[1] != orders[2]  # reshuffled by epoch
    first, last = ([s["loss"] for s in runs[0] if s["epoch"] == e] for e in (0, 2))
    assert sum(last) / len(last) < 0.5 * sum(first) / len(first)  # it learns
