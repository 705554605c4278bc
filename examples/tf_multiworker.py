"""Train a small Keras classifier on scikit-learn's 8x8 digits, multi-worker.

Synchronous data parallelism with tf.distribute.MultiWorkerMirroredStrategy.

Each worker reads its role from the standard TF_CONFIG variable, e.g. for two
workers on one host:

    export TF_CONFIG='{"cluster": {"worker": ["127.0.0.1:12345", "127.0.0.1:12346"]},
                       "task": {"type": "worker", "index": 0}}'
    python examples/tf_multiworker.py

Without TF_CONFIG the script trains as a single local worker. Needs the packages
in examples/requirements-tf.txt (TensorFlow with the tf-keras package).
"""

import os

# Keras 3's model.fit does not work under MultiWorkerMirroredStrategy, so use
# the tf-keras package (Keras 2). This must be set before tensorflow is imported.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
# Hide most of TensorFlow's C++ info/warning output so the training log stays readable.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import argparse
import faulthandler
import json
import shutil
import signal
import sys
import tempfile

import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

# How long a worker waits for all its peers to join before giving up, instead
# of hanging until the platform's max_runtime.
JOIN_TIMEOUT_S = 60


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
    # Creating the strategy blocks, with no time limit of its own, until every
    # worker in TF_CONFIG has joined, so a worker whose peer never starts would
    # hang. It blocks inside TensorFlow while holding the GIL, so a Python
    # thread cannot act as the watchdog; faulthandler's C-level timer can: it
    # prints where the process is stuck and exits with status 1.
    #
    # Once running, a dead peer is detected by the coordination service's
    # heartbeats (a killed or frozen peer fails the job within seconds).
    # CommunicationOptions(timeout_seconds=...) is deliberately not used: in
    # TensorFlow 2.21 each collective given a timeout keeps a thread alive for
    # that long, so threads pile up by the thousand within seconds of training
    # until the process aborts.
    faulthandler.dump_traceback_later(JOIN_TIMEOUT_S, exit=True)
    try:
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
    finally:
        faulthandler.cancel_dump_traceback_later()
    # The coordination service installs a SIGTERM handler that only records a
    # preemption notice (for tf.distribute's failure-handling API, unused
    # here), so the process would ignore SIGTERM; restore the default so that
    # cancelling the job stops the worker at once.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    return strategy


def load_data() -> tuple[np.ndarray, ...]:
    # The digits images ship inside scikit-learn, so no download is needed.
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)  # 64 pixels, values 0..16
    y = digits.target.astype(np.int64)
    # A fixed split (independent of --seed), so all workers and all runs
    # evaluate on the same images.
    return train_test_split(x, y, test_size=0.2, random_state=0, stratify=y)


def make_dataset(x, y, global_batch: int, shuffle_seed: int | None) -> tf.data.Dataset:
    ds = tf.data.Dataset.from_tensor_slices((x, y))
    if shuffle_seed is not None:
        # Repeat instead of re-creating the distributed iterator every epoch,
        # which costs noticeably more than the epoch itself on this tiny data.
        ds = ds.shuffle(len(x), seed=shuffle_seed, reshuffle_each_iteration=True)
        ds = ds.repeat()
    ds = ds.batch(global_batch)
    # In-memory data has no files to split between workers, so shard by
    # element: the strategy hands each worker its part of every global batch.
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = (
        tf.data.experimental.AutoShardPolicy.DATA
    )
    return ds.with_options(options)


def build_model() -> tf.keras.Model:
    model = tf.keras.Sequential(
        [
            tf.keras.layers.Input(shape=(64,)),
            tf.keras.layers.Dense(128, activation="relu"),
            tf.keras.layers.Dropout(0.2),
            tf.keras.layers.Dense(64, activation="relu"),
            tf.keras.layers.Dense(10),
        ]
    )
    model.compile(
        optimizer=tf.keras.optimizers.Adam(learning_rate=3e-3),
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model


class EpochLog(tf.keras.callbacks.Callback):
    """Prints one short line per epoch instead of Keras' progress bar."""

    def __init__(self, epochs: int):
        super().__init__()
        self.epochs = epochs

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        log(
            f"epoch {epoch + 1}/{self.epochs} loss={logs['loss']:.4f} "
            f"accuracy={logs['accuracy']:.4f}"
        )


def save_model(model: tf.keras.Model, chief: bool, task_index: int) -> None:
    # Every worker must take part in saving (it may run collectives), but only
    # the chief's copy is kept: the others write to a temporary directory that
    # is removed right away, as the TensorFlow multi-worker guide recommends.
    if chief:
        target_dir = os.environ.get("MLYARD_CHECKPOINT_DIR") or "checkpoints"
        os.makedirs(target_dir, exist_ok=True)
    else:
        target_dir = tempfile.mkdtemp(prefix=f"worker{task_index}-")
    path = os.path.join(target_dir, "model.keras")
    model.save(path)
    if chief:
        log(f"saved model {path}")
    else:
        shutil.rmtree(target_dir, ignore_errors=True)


def main() -> int:
    args = parse_args()
    task_type, task_index, num_workers = read_tf_config()
    log(f"tf_config task={task_type}:{task_index} workers={num_workers}")
    chief = is_chief(task_type, task_index)

    # Keep the thread pools to the CPUs the platform gives each replica.
    threads = int(os.environ.get("OMP_NUM_THREADS", "0"))
    if threads > 0:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)
    # Same seed on every worker: identical initial weights and the same
    # shuffle order, which element-wise sharding relies on.
    tf.keras.utils.set_random_seed(args.seed)

    # The strategy must be created before any other TensorFlow op runs.
    strategy = make_strategy()

    x_train, x_test, y_train, y_test = load_data()
    global_batch = args.batch_size * strategy.num_replicas_in_sync
    train_ds = make_dataset(x_train, y_train, global_batch, shuffle_seed=args.seed)
    test_ds = make_dataset(x_test, y_test, global_batch, shuffle_seed=None)

    steps_per_epoch = len(x_train) // global_batch
    # A restarted or preempted attempt resumes at the epoch it had reached. This
    # runs in a TensorFlow environment without mlyard (so without mlyard.sdk);
    # Keras' own BackupAndRestore keeps the state in the job's checkpoint
    # directory, which outlives attempts, and removes it once fit() completes.
    backup_dir = os.path.join(
        os.environ.get("MLYARD_CHECKPOINT_DIR") or "checkpoints", "backup"
    )
    with strategy.scope():
        model = build_model()
    model.fit(
        train_ds,
        epochs=args.epochs,
        steps_per_epoch=steps_per_epoch,
        verbose=0,
        callbacks=[
            tf.keras.callbacks.BackupAndRestore(backup_dir),
            EpochLog(args.epochs),
        ],
    )
    loss, accuracy = model.evaluate(test_ds, verbose=0)

    save_model(model, chief, task_index)
    log(f"final loss={loss:.4f} accuracy={accuracy:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
