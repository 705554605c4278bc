"""What the digits examples share: the data (scikit-learn's bundled 8x8 digits, no download),
a checksum of a model's weights that ranks compare, and one-write log lines."""

from __future__ import annotations

import hashlib
import sys

import numpy as np
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn
from torch.utils.data import TensorDataset


def log(message: str) -> None:
    # One write per line: processes that share a log do not interleave within a line.
    sys.stdout.write(message + "\n")
    sys.stdout.flush()


def digits_datasets() -> tuple[TensorDataset, TensorDataset]:
    """(train, test), 80/20, stratified, the same split on every rank."""
    data = load_digits()
    x = (data.data / 16.0).astype(np.float32)
    y = data.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, random_state=0, stratify=y)
    return (TensorDataset(torch.from_numpy(x_train), torch.from_numpy(y_train)),
            TensorDataset(torch.from_numpy(x_test), torch.from_numpy(y_test)))


def weights_sha256(model: nn.Module) -> str:
    digest = hashlib.sha256()
    for tensor in model.state_dict().values():
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()
