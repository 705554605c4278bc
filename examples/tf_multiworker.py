"""Train a small Keras classifier on scikit-learn's 8x8 digits with MultiWorkerMirroredStrategy.

Each worker reads its role from the standard TF_CONFIG variable, e.g. for two
workers on one host:

    TF_CONFIG='{"cluster": {"worker": ["127.0.0.1:12345", "127.0.0.1:12346"]},
                "task": {"type": "worker", "index": 0}}' python examples/tf_multiworker.py

Without TF_CONFIG the script trains as a single local worker. Needs the packages
in examples/requirements-tf.txt (TensorFlow with the tf-keras package).
"""

import os

# Keras 3's model.fit does not work under MultiWorkerMirroredStrategy, so use
# the tf-keras package (Keras 2). This must be set before tensorflow is imported.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
# Hide TensorFlow's C++ info/warning chatter so the training log stays readable.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import argparse
import json
import shutil
import sys
import tempfile

import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

# How long a collective (or the initial wait for all workers) may take before
# the job fails, instead of hanging until the platform's max_runtime.
COLLECTIVE_TIMEOUT_S = 60


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=32, help="per worker")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def log(message: str) -> None:
    # One write per line, so workers sharing a terminal don't interleave.
    sys.stdout.write(message + "\n")
    sys.stdout.flush()


def read_tf_config() -> tuple[str, int, int]:
    """Returns (task type, task index, number of workers) from TF_CONFIG."""
    config = json.loads(os.environ.get("TF_CONFIG") or "{}")
    cluster = config.get("cluster", {})
    task = config.get("task", {})
    workers = len(cluster.get("chief", [])) + len(cluster.get("worker", []))
    return task.get("type", "worker"), int(task.get("index", 0)), max(workers, 1)


def is_chief(task_type: str, task_index: int) -> bool:
    # Without an explicit "chief" task, worker 0 plays that role.
    config = json.loads(os.environ.get("TF_CONFIG") or "{}")
    if "chief" in config.get("cluster", {}):
        return task_type == "chief"
    return task_type == "worker" and task_index == 0


def make_strategy() -> tf.distribute.Strategy:
    # The initial barrier that waits for every worker has no timeout by default,
    # so a worker whose peer never starts would hang. TensorFlow only exposes
    # that wait as a class attribute; set it when present.
    extended = tf.distribute.MultiWorkerMirroredStrategy._extended_type = None  # noqa: placeholder
    del extended
    options = tf.distribute.experimental.CommunicationOptions(
        timeout_seconds=COLLECTIVE_TIMEOUT_S
    )
    return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
