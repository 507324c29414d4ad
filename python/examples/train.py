"""A training loop fed by `sonograph.Loader`: a tiny classifier (tone or noise) on Kaldi fbank
features as lhotse computes them, batches of up to `--max-duration` seconds of audio from
duration buckets, speed perturbation, gain and SpecAugment drawn by (seed, epoch, item), the
ranks of a distributed job (torchrun's RANK and WORLD_SIZE; gloo, so two CPU processes will do),
and a checkpoint after every step that a stopped run resumes from: the resumed run gives the
same batches, losses and weights as one that never stopped.

    python python/examples/toy_corpus.py /tmp/toy
    python -m torch.distributed.run --standalone --nproc-per-node 2 python/examples/train.py /tmp/toy \\
        --checkpoints /tmp/ckpt --stop-after 5      # stops after 5 steps, as a preempted job
    python -m torch.distributed.run --standalone --nproc-per-node 2 python/examples/train.py /tmp/toy \\
        --checkpoints /tmp/ckpt                     # resumes after step 5

Each rank appends a line per step to CHECKPOINTS/log-rank{R}.jsonl: the epoch, the items, the
loss. python/tests/test_examples.py runs it so.
"""

import argparse
import json
import os
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

import sonograph

PRESET = "lhotse-fbank"
RATE = 16000


class TinyClassifier(nn.Module):
    """Mean and spread of each band over an item's own frames (the padding left out), then a
    linear layer: enough to tell a tone from noise."""

    def __init__(self, bins: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(2 * bins)
        self.out = nn.Linear(2 * bins, 2)

    def forward(self, feats: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        frames = torch.arange(feats.shape[1])[None, :, None] < lengths[:, None, None]
        n = lengths[:, None].clamp(min=1).to(feats.dtype)
        mean = (feats * frames).sum(1) / n
        spread = (((feats - mean[:, None]) ** 2) * frames).sum(1) / n
        return self.out(self.norm(torch.cat([mean, spread.sqrt()], dim=1)))


def save(path: Path, state: dict) -> None:
    """Whole or not at all: a run killed while saving keeps the previous checkpoint."""
    partial = path.with_suffix(".partial")
    torch.save(state, partial)
    os.replace(partial, path)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("corpus", type=Path)
    p.add_argument("--checkpoints", type=Path, required=True)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--max-duration", type=float, default=12.0)
    p.add_argument("--stop-after", type=int, default=None, help="stop after this many steps of this run")
    p.add_argument("--workers", type=int, default=2)
    args = p.parse_args()

    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        dist.init_process_group("gloo")  # from torchrun's MASTER_ADDR, RANK, WORLD_SIZE
    rank = dist.get_rank() if dist.is_initialized() else 0
    args.checkpoints.mkdir(parents=True, exist_ok=True)

    # The Loader reads RANK and WORLD_SIZE itself: this rank's share, as many batches as the others.
    loader = sonograph.Loader(
        args.corpus, PRESET, batch_size=None, max_duration=args.max_duration, num_buckets=4,
        shuffle=True, seed=7, workers=args.workers, output="torch",
        pin_memory=torch.cuda.is_available(),
        augment={"speed": [0.9, 1.0, 1.1], "volume_db": [-6.0, 6.0],
                 "spec_augment": {"freq_masks": 2, "freq_width": 8, "time_masks": 2, "time_width": 0.05}})
    bins = sonograph.features(np.zeros(RATE, np.float32), RATE, PRESET).shape[1]
    torch.manual_seed(0)  # the same initial weights on every rank
    model = TinyClassifier(bins)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.02)
    step = 0
    checkpoint = args.checkpoints / f"rank{rank}.pt"
    if checkpoint.exists():
        saved = torch.load(checkpoint)
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        loader.load_state_dict(saved["loader"])
        step = saved["step"]
    trained = nn.parallel.DistributedDataParallel(model) if dist.is_initialized() else model

    log = open(args.checkpoints / f"log-rank{rank}.jsonl", "a")
    steps_this_run = 0
    epoch = loader.epoch
    while epoch < args.epochs:
        for ids, feats, lengths in loader:  # the rest of the epoch, after a resume
            labels = torch.tensor([name.startswith("tone") for name in ids], dtype=torch.long)
            loss = nn.functional.cross_entropy(trained(feats, lengths), labels)
            optimizer.zero_grad()
            loss.backward()  # DDP averages the gradients of the ranks here
            optimizer.step()
            step += 1
            save(checkpoint, {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                              "loader": loader.state_dict(), "step": step})
            log.write(json.dumps({"step": step, "epoch": epoch, "ids": ids, "loss": loss.item()}) + "\n")
            log.flush()
            steps_this_run += 1
            if steps_this_run == args.stop_after:
                print(f"rank {rank}: stopped after step {step}")
                return
        epoch += 1
    print(f"rank {rank}: {step} steps, padding {loader.padding:.1%}, failures {loader.failures}")


if __name__ == "__main__":
    main()
