"""Model parallelism: one model split into two pipeline stages on two processes (replicas).

A small classifier for scikit-learn's 8x8 digits is cut in two: stage 0 (rank 0) holds the
first layer, stage 1 (rank 1) the rest and the loss. Each batch is split into micro-batches
and run with PyTorch's own pipelining (`torch.distributed.pipelining`, GPipe schedule):
stage 0 sends activations forward, stage 1 sends their gradients back, and each stage steps
the optimizer of its own layers. The process group comes from RANK, WORLD_SIZE, MASTER_ADDR
and MASTER_PORT (gloo on CPU), so it runs under mlyard (examples/pipeline-parallel.yaml), under
`torchrun --nproc-per-node=2`, or, with `--single-process`, as the same model trained whole
in one process on the same batches, for comparison.

Stage 0 prints `pipeline stage=0 ...`, stage 1 `pipeline stage=1 ...` and, at the end,
`final test_accuracy=...` (the single process prints the same line).
"""

import argparse
import os
import sys
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn
from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

NUM_STAGES = 2


def log(message: str) -> None:
    sys.stdout.write(message + "\n")
    sys.stdout.flush()


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--microbatches", type=int, default=4)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--single-process", action="store_true",
                        help="train the whole model in this process (the reference the stages must match)")
    return parser.parse_args()


def load_data() -> tuple[torch.Tensor, ...]:
    digits = load_digits()  # ships inside scikit-learn: no download
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, random_state=0, stratify=y)
    return tuple(torch.from_numpy(part) for part in (x_train, x_test, y_train, y_test))


def build_model() -> nn.Sequential:
    """The whole model, made identically (same seed) in every process; stages take their part."""
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Sequential(nn.Linear(64, 256), nn.ReLU()),                          # stage 0
        nn.Sequential(nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10)),     # stage 1
    )


def batches(count: int, batch_size: int, epoch: int) -> list[torch.Tensor]:
    """The same shuffled full batches in every process (each stage needs only its half: images
    for the first, labels for the last)."""
    order = torch.randperm(count, generator=torch.Generator().manual_seed(epoch))
    return [order[i:i + batch_size] for i in range(0, count - batch_size + 1, batch_size)]


def train_single(args: argparse.Namespace) -> int:
    x_train, x_test, y_train, y_test = load_data()
    model = build_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    for epoch in range(args.epochs):
        for index in batches(len(x_train), args.batch_size, epoch):
            optimizer.zero_grad()
            F.cross_entropy(model(x_train[index]), y_train[index]).backward()
            optimizer.step()
        log(f"epoch {epoch + 1}/{args.epochs}")
    with torch.no_grad():
        accuracy = (model(x_test).argmax(dim=1) == y_test).float().mean().item()
    log(f"final test_accuracy={accuracy:.4f}")
    return 0


def train_pipeline(args: argparse.Namespace) -> int:
    # A missing peer fails the job within a minute instead of hanging.
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    rank, world_size = dist.get_rank(), dist.get_world_size()
    if world_size != NUM_STAGES:
        raise SystemExit(f"this pipeline has {NUM_STAGES} stages: run it with WORLD_SIZE={NUM_STAGES}, "
                         f"not {world_size}")
    log(f"pipeline stage={rank} of {NUM_STAGES} world_size={world_size} "
        f"master={os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}")
    x_train, x_test, y_train, y_test = load_data()
    part = build_model()[rank]
    stage = PipelineStage(part, stage_index=rank, num_stages=NUM_STAGES, device=torch.device("cpu"))
    # The loss of each micro-batch is its mean; GPipe then divides the summed gradients by
    # the number of micro-batches: the gradient of the whole batch's mean loss.
    schedule = ScheduleGPipe(stage, n_microbatches=args.microbatches, loss_fn=F.cross_entropy)
    optimizer = torch.optim.Adam(part.parameters(), lr=args.lr)
    last = rank == NUM_STAGES - 1

    for epoch in range(args.epochs):
        losses: list[torch.Tensor] = []
        for index in batches(len(x_train), args.batch_size, epoch):
            optimizer.zero_grad()
            if rank == 0:
                schedule.step(x_train[index])           # forward: activations go to stage 1
            else:
                schedule.step(target=y_train[index], losses=losses)  # backward: gradients come back
            optimizer.step()
        if last:
            log(f"epoch {epoch + 1}/{args.epochs} loss={torch.stack(losses).mean().item():.4f}")

    # Evaluation through the same two stages: the first layer's activations of the test set go
    # to stage 1, which classifies them.
    with torch.no_grad():
        if rank == 0:
            dist.send(part(x_test).contiguous(), dst=1)
        else:
            hidden = torch.empty(len(x_test), part[0].in_features)
            dist.recv(hidden, src=0)
            accuracy = (part(hidden).argmax(dim=1) == y_test).float().mean().item()
            log(f"final test_accuracy={accuracy:.4f}")
    dist.barrier()
    dist.destroy_process_group()
    return 0


def main() -> int:
    args = parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    if args.batch_size % args.microbatches:
        raise SystemExit("--batch-size must be a multiple of --microbatches")
    return train_single(args) if args.single_process else train_pipeline(args)


if __name__ == "__main__":
    sys.exit(main())
