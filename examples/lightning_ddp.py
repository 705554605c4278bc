"""PyTorch Lightning on scikit-learn's 8x8 digits: DDP over two nodes of one CPU process each.

Written as Lightning's multi-node documentation shows: the Trainer is told the shape of the
world (`num_nodes=2, devices=1`) and each node is started with the same command. Since
LOCAL_RANK is set, Lightning's default `LightningEnvironment` takes the processes as started
from outside and reads who each is: its node from NODE_RANK (else GROUP_RANK), its process on
the node from LOCAL_RANK, the rendezvous from MASTER_ADDR and MASTER_PORT; its global rank is
NODE_RANK * devices + LOCAL_RANK. mlyard sets all of them on every replica
(examples/lightning-ddp.yaml); with `processes: N` and `devices=N`, its launcher starts the
N processes of each node.

Every rank prints `lightning global_rank=R world_size=W node_rank=N` and, after `fit`, a
checksum of its final weights (`weights rank=R sha256=...`); rank 0 prints
`final test_accuracy=...`.
"""

import argparse
import os
import sys

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader

from digits_data import digits_datasets, log, weights_sha256


class DigitsClassifier(pl.LightningModule):
    def __init__(self, lr: float = 3e-3):
        super().__init__()
        self.lr = lr
        self.net = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss, sync_dist=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.lr)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--num-nodes", type=int, default=2, help="replicas")
    parser.add_argument("--devices", type=int, default=1, help="processes per replica (the role's `processes`)")
    args = parser.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    pl.seed_everything(0, verbose=False)

    train_set, test_set = digits_datasets()
    # A plain DataLoader: under DDP Lightning gives it a DistributedSampler itself.
    train_loader = DataLoader(train_set, batch_size=32, shuffle=True)
    model = DigitsClassifier()
    trainer = pl.Trainer(
        strategy="ddp",
        num_nodes=args.num_nodes,
        devices=args.devices,
        accelerator="cpu",
        max_epochs=args.epochs,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model, train_loader)

    log(f"lightning global_rank={trainer.global_rank} world_size={trainer.world_size} "
        f"node_rank={trainer.node_rank} local_rank={trainer.local_rank} "
        f"environment={type(trainer.strategy.cluster_environment).__name__}")
    log(f"weights rank={trainer.global_rank} sha256={weights_sha256(model)}")
    if trainer.is_global_zero:
        with torch.no_grad():
            x, y = test_set.tensors
            accuracy = (model(x).argmax(dim=1) == y).float().mean().item()
        log(f"final test_accuracy={accuracy:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
