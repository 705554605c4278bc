"""Plain PyTorch DistributedDataParallel on scikit-learn's 8x8 digits, for any launcher.

The process group comes from the standard variables (RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT; `init_process_group("gloo")` reads them), so this one script runs:

- under torchrun, which starts the processes of each node and sets those variables:
      torchrun --nproc-per-node=2 examples/torch_ddp.py        (examples/torchrun-ddp.yaml)
- as the processes mlyard's launcher starts for a role with `processes: N`
      python examples/torch_ddp.py                             (examples/processes-ddp.yaml)
- as one process: RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29511 python examples/torch_ddp.py

Every rank prints who it is (`ddp rank=R world_size=W local_rank=L node_rank=N`) and, at the
end, a checksum of its final weights (`weights rank=R sha256=...`): DDP keeps them equal on
every rank, so every rank prints the same one. Rank 0 prints `final test_accuracy=...`.
"""

import argparse
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

from digits_data import digits_datasets, log, weights_sha256


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--lr", type=float, default=3e-3)
    args = parser.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    torch.manual_seed(0)

    # A missing peer fails the job within a minute instead of hanging.
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    rank, world_size = dist.get_rank(), dist.get_world_size()
    log(f"ddp rank={rank} world_size={world_size} local_rank={os.environ.get('LOCAL_RANK', '0')} "
        f"node_rank={os.environ.get('GROUP_RANK', os.environ.get('NODE_RANK', '0'))}")

    train_set, test_set = digits_datasets()
    sampler = DistributedSampler(train_set, num_replicas=world_size, rank=rank, seed=0)
    loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    ddp_model = DDP(model)  # broadcasts rank 0's initial weights
    optimizer = torch.optim.Adam(ddp_model.parameters(), lr=args.lr)

    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            F.cross_entropy(ddp_model(x), y).backward()  # gradients averaged over all ranks
            optimizer.step()
        if rank == 0:
            log(f"epoch {epoch + 1}/{args.epochs}")

    log(f"weights rank={rank} sha256={weights_sha256(model)}")
    if rank == 0:
        with torch.no_grad():
            x, y = test_set.tensors
            accuracy = (model(x).argmax(dim=1) == y).float().mean().item()
        log(f"final test_accuracy={accuracy:.4f}")
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
