"""Hugging Face Accelerate on scikit-learn's 8x8 digits, one process per machine on two machines.

Written as Accelerate's quick tour shows: an `Accelerator`, `prepare` on the model, optimizer
and data loader, `accelerator.backward(loss)`. The script knows nothing of the cluster; each
machine runs it through `accelerate launch` with the multi-machine flags (examples/accelerate-ddp.yaml):

    accelerate launch --cpu --num_machines 2 --num_processes 2 --machine_rank $NODE_RANK \
        --main_process_ip $MASTER_ADDR --main_process_port $MASTER_PORT examples/accelerate_ddp.py

Every process prints `accelerate process_index=R num_processes=W distributed_type=T` and, at
the end, a checksum of its final weights (`weights rank=R sha256=...`); the main process prints
`final test_accuracy=...`.
"""

import argparse
import gc
import os
import sys
from datetime import timedelta

import torch
import torch.nn.functional as F
from accelerate import Accelerator
from accelerate.utils import InitProcessGroupKwargs
from torch import nn
from torch.utils.data import DataLoader

from digits_data import digits_datasets, log, weights_sha256


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    torch.manual_seed(0)

    # A missing peer fails the job within a minute instead of hanging.
    accelerator = Accelerator(kwargs_handlers=[InitProcessGroupKwargs(timeout=timedelta(seconds=60))])
    log(f"accelerate process_index={accelerator.process_index} num_processes={accelerator.num_processes} "
        f"distributed_type={accelerator.distributed_type.value} device={accelerator.device}")

    train_set, test_set = digits_datasets()
    train_loader = DataLoader(train_set, batch_size=32, shuffle=True)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    # Wraps the model in DDP and shards the loader between the processes.
    model, optimizer, train_loader = accelerator.prepare(model, optimizer, train_loader)

    model.train()
    for epoch in range(args.epochs):
        for x, y in train_loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
        accelerator.print(f"epoch {epoch + 1}/{args.epochs}")

    accelerator.wait_for_everyone()
    unwrapped = accelerator.unwrap_model(model)
    log(f"weights rank={accelerator.process_index} sha256={weights_sha256(unwrapped)}")
    if accelerator.is_main_process:
        with torch.no_grad():
            x, y = test_set.tensors
            accuracy = (unwrapped(x).argmax(dim=1) == y).float().mean().item()
        log(f"final test_accuracy={accuracy:.4f}")
    accelerator.end_training()
    return 0


if __name__ == "__main__":
    code = main()
    # As in digits_ddp.py: DDP's reducer holds the process group in a reference cycle; left to
    # interpreter shutdown, gloo's threads can be destroyed unjoined and the process aborts
    # ("terminate called without an active exception", SIGABRT). Collect it, then close the group.
    gc.collect()
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    sys.exit(code)
