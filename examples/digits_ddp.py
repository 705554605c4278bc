"""Train a small CNN on scikit-learn's 8x8 digits with PyTorch DistributedDataParallel.

Plain DDP code: the process group is initialised from the standard rendezvous
environment variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), so the same
script runs under mlyard, under torchrun, or as a single process:

    torchrun --nproc-per-node 2 examples/digits_ddp.py
    RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29511 \
        python examples/digits_ddp.py

Checkpoints go through mlyard's SDK (mlyard.sdk.checkpoint) into MLYARD_CHECKPOINT_DIR
(./checkpoints outside mlyard): rank 0 saves the model, optimizer, LR schedule and
epoch every --checkpoint-every epochs, and a run that finds a checkpoint there (a
restarted or preempted job) continues from it. At the end rank 0 writes final.pt.

Where the `tensorboard` package is installed, rank 0 also writes the epoch's loss and
accuracy as TensorBoard scalars to MLYARD_TENSORBOARD_DIR (`mlyard tensorboard JOB`
shows them).
"""

import argparse
import gc
import os
import random
import sys
import time
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from mlyard.sdk import checkpoint, report


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--checkpoint-every", type=non_negative_int, default=1, metavar="EPOCHS",
        help="save a checkpoint to resume from every EPOCHS epochs (0: never)",
    )
    parser.add_argument(
        "--data", metavar="DIR",
        help="train on an image folder (CLASS/file or train|test/CLASS/file, classes 0-9), such as a "
             "labeling task's ImageFolder export, instead of scikit-learn's bundled digits",
    )
    parser.add_argument(
        "--epoch-delay", type=float, default=0.0, metavar="SECONDS",
        help="sleep after each epoch, to make a run long enough to interrupt",
    )
    return parser.parse_args()


def non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {value}")
    return value


def log(message: str) -> None:
    # One write per line: ranks that share a terminal (torchrun, local runs)
    # would otherwise interleave a line's text and its newline.
    sys.stdout.write(message + "\n")
    sys.stdout.flush()


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def load_folder(root: str) -> tuple[TensorDataset, TensorDataset]:
    """Images under `root` as torchvision's ImageFolder lays them out, read as 8x8 grey pixels
    in 0..1; a top-level test/ folder is the test set, else a fixed fifth of the images."""
    from pathlib import Path

    from PIL import Image

    found = {"train": ([], []), "test": ([], [])}
    for path in sorted(Path(root).rglob("*")):
        if path.suffix.lower() not in {".png", ".jpg", ".jpeg", ".bmp"} or not path.parent.name.isdigit():
            continue
        split = "test" if path.relative_to(root).parts[0] in ("test", "val") else "train"
        with Image.open(path) as image:
            pixels = np.asarray(image.convert("L").resize((8, 8)), dtype=np.float32) / 255.0
        found[split][0].append(pixels[None, :, :])
        found[split][1].append(int(path.parent.name))
    if not found["test"][0]:
        x, y = np.stack(found["train"][0]), np.array(found["train"][1], dtype=np.int64)
        x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, random_state=0)
    else:
        (x_train, y_train), (x_test, y_test) = ((np.stack(x), np.array(y, dtype=np.int64))
                                                for x, y in (found["train"], found["test"]))
    log(f"data {root}: {len(y_train)} training and {len(y_test)} test images, "
        f"classes {sorted(set(y_train.tolist()) | set(y_test.tolist()))}")
    return (
        TensorDataset(torch.from_numpy(x_train), torch.from_numpy(y_train)),
        TensorDataset(torch.from_numpy(x_test), torch.from_numpy(y_test)),
    )


def load_data() -> tuple[TensorDataset, TensorDataset]:
    # The digits images ship inside scikit-learn, so no download is needed.
    digits = load_digits()
    x = digits.images.astype(np.float32) / 16.0  # pixel values are 0..16
    x = x[:, None, :, :]  # N x 1 x 8 x 8
    y = digits.target.astype(np.int64)
    # A fixed split so that every rank (and every run) sees the same test set.
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=0.2, random_state=0, stratify=y
    )
    return (
        TensorDataset(torch.from_numpy(x_train), torch.from_numpy(y_train)),
        TensorDataset(torch.from_numpy(x_test), torch.from_numpy(y_test)),
    )


class SmallCNN(nn.Module):
    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, padding=1)  # 8x8
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)  # 8x8 -> pool -> 4x4
        self.dropout = nn.Dropout(0.25)
        self.fc = nn.Linear(64 * 4 * 4, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = self.dropout(torch.flatten(x, 1))
        return self.fc(x)


@torch.no_grad()
def evaluate(model: nn.Module, dataset: TensorDataset, device: torch.device) -> float:
    # The test set is tiny (360 images): one forward pass over all of it.
    model.eval()
    x, y = (t.to(device) for t in dataset.tensors)
    correct = (model(x).argmax(dim=1) == y).sum().item()
    model.train()
    return correct / len(y)


def main() -> int:
    args = parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    seed_everything(args.seed)

    use_cuda = torch.cuda.is_available()
    if use_cuda:
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")

    # env:// initialisation; the short timeout makes a missing peer fail fast
    # instead of hanging until the job's max_runtime.
    dist.init_process_group(
        backend="nccl" if use_cuda else "gloo", timeout=timedelta(seconds=60)
    )
    try:
        return train(args, device)
    finally:
        # DDP's reducer sits in a reference cycle that holds the process group: left to
        # interpreter shutdown, gloo's threads can be destroyed unjoined and the process
        # aborts ("terminate called without an active exception", exit 134).
        gc.collect()
        dist.destroy_process_group()


def train(args: argparse.Namespace, device: torch.device) -> int:
    rank = dist.get_rank()
    world_size = dist.get_world_size()
    log(
        f"rendezvous rank={rank} world_size={world_size} "
        f"local_rank={os.environ.get('LOCAL_RANK', '0')} "
        f"master={os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}"
    )

    train_set, test_set = load_folder(args.data) if args.data else load_data()
    sampler = DistributedSampler(
        train_set, num_replicas=world_size, rank=rank, seed=args.seed
    )
    loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler)
    steps_per_epoch = len(loader)

    # Same seed on every rank; DDP also broadcasts rank 0's weights at wrap time.
    model = SmallCNN().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    scheduler = make_scheduler(optimizer, args, steps_per_epoch)

    # Every rank reads the checkpoint: each needs the optimizer state and the
    # epoch. The directory is stable here, since a job's next attempt starts
    # only once every replica of the previous one is gone.
    start_epoch = 0
    found = checkpoint.load_latest(map_location=device)
    if found is not None:
        state, _ = found
        start_epoch = state["epoch"]
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        if (state["epochs"], state["steps_per_epoch"]) == (args.epochs, steps_per_epoch):
            scheduler.load_state_dict(state["scheduler"])
        elif start_epoch < args.epochs:
            # A different --epochs or world size (a resize) changes the
            # schedule's length: start the new one as far along as the old was.
            scheduler = make_scheduler(
                optimizer, args, steps_per_epoch, done=start_epoch * steps_per_epoch
            )
        # Dropout continues with the random numbers it would have drawn.
        torch.set_rng_state(state["rng"].cpu())
        log(
            f"resumed from checkpoint at epoch {start_epoch} "
            f"(restart {checkpoint.restart_count()})"
        )
    ddp_model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    writer = tensorboard_writer() if rank == 0 else None

    for epoch in range(start_epoch, args.epochs):
        # The shuffle depends on the epoch alone (same on all ranks), so a
        # resumed run sees the batches the interrupted one would have seen.
        sampler.set_epoch(epoch)
        epoch_started = time.perf_counter()
        total_loss = torch.zeros(2, device=device)  # [sum of losses, sample count]
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            optimizer.zero_grad()
            loss = F.cross_entropy(ddp_model(x), y)
            loss.backward()
            optimizer.step()
            scheduler.step()
            total_loss += torch.tensor([loss.item() * len(y), len(y)], device=device)
        # Report the loss over the whole epoch, not just rank 0's shard.
        dist.all_reduce(total_loss)
        done = epoch + 1
        if rank == 0:
            # Weights are identical on all ranks, so evaluating once is enough;
            # the other ranks simply wait for rank 0 at the next collective.
            accuracy = evaluate(model, test_set, device)
            mean_loss = (total_loss[0] / total_loss[1]).item()
            log(
                f"epoch {done}/{args.epochs} loss={mean_loss:.4f} "
                f"test_accuracy={accuracy:.4f}"
            )
            # Shown by `mlyard metrics JOB`; does nothing outside mlyard.
            samples = total_loss[1].item()
            report(step=done, loss=mean_loss, test_accuracy=accuracy,
                   samples_per_second=samples / (time.perf_counter() - epoch_started))
            if writer is not None:
                writer.add_scalar("loss", mean_loss, done)
                writer.add_scalar("test_accuracy", accuracy, done)
                writer.flush()
            if args.checkpoint_every and done % args.checkpoint_every == 0:
                save_checkpoint(model, optimizer, scheduler, args, done, steps_per_epoch)
        if args.epoch_delay:
            time.sleep(args.epoch_delay)

    if writer is not None:
        writer.close()
    if rank == 0:
        checkpoint_dir = os.environ.get("MLYARD_CHECKPOINT_DIR") or "checkpoints"
        os.makedirs(checkpoint_dir, exist_ok=True)
        path = os.path.join(checkpoint_dir, "final.pt")
        torch.save({"epoch": args.epochs, "model_state_dict": model.state_dict()}, path)
        log(f"saved checkpoint {path}")
        # Evaluated here, not taken from the last epoch: a run resumed after
        # its last epoch has no epoch of its own.
        log(f"final test_accuracy={evaluate(model, test_set, device):.4f}")
    # Keep ranks together until the checkpoint is written, so no rank tears
    # down the process group while rank 0 is still saving.
    dist.barrier()
    return 0


def tensorboard_writer():
    """A SummaryWriter on MLYARD_TENSORBOARD_DIR, or None outside mlyard or without the
    `tensorboard` package (torch.utils.tensorboard needs it)."""
    directory = os.environ.get("MLYARD_TENSORBOARD_DIR")
    if not directory:
        return None
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        return None
    # One subdirectory per attempt: a resumed run's steps show as a run of their own.
    return SummaryWriter(os.path.join(directory, f"attempt-{os.environ.get('MLYARD_ATTEMPT', '1')}"))


def make_scheduler(
    optimizer: torch.optim.Optimizer,
    args: argparse.Namespace,
    steps_per_epoch: int,
    done: int = 0,
) -> torch.optim.lr_scheduler.OneCycleLR:
    # last_epoch counts optimizer steps here; -1 means "not started".
    return torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=args.lr, epochs=args.epochs, steps_per_epoch=steps_per_epoch,
        last_epoch=done - 1,
    )


def save_checkpoint(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.OneCycleLR,
    args: argparse.Namespace,
    epoch: int,
    steps_per_epoch: int,
) -> None:
    state = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "epoch": epoch,
        "epochs": args.epochs,
        "steps_per_epoch": steps_per_epoch,
        "rng": torch.get_rng_state(),
    }
    checkpoint.save(state, step=epoch, keep=3)
    log(f"checkpoint saved at epoch {epoch}")


if __name__ == "__main__":
    sys.exit(main())
