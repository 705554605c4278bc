"""Asynchronous TensorFlow training with parameter servers, on scikit-learn's 8x8 digits.

Written as TensorFlow's "Parameter server training with ParameterServerStrategy" tutorial
does it. Every task reads the cluster and its own role from TF_CONFIG
(`TFConfigClusterResolver`):

- `worker` and `ps` tasks start a `tf.distribute.Server` and `join()` it: they serve forever
  (the platform stops them once the chief is done: examples/tf-ps.yaml runs under the
  `chief` success policy, the default of a TensorFlow job with a chief);
- the `chief` is the coordinator: it creates `tf.distribute.ParameterServerStrategy`
  (the model's variables live on the ps tasks) and a
  `tf.distribute.coordinator.ClusterCoordinator`, which schedules training steps onto the
  workers; it evaluates the model inline at the end and exits.

The chief prints `tf_ps chief workers=W ps=P`, `epoch N/M accuracy=...` and
`final test_accuracy=...`; the other tasks print `tf_ps server TYPE:INDEX listening`.

Needs TensorFlow with the tf-keras package (examples/requirements-tf.txt and
examples/requirements-tf-nodeps.txt): Keras 3 does not support ParameterServerStrategy.
"""

import os

# Keras 2 (tf-keras): Keras 3 has no ParameterServerStrategy support. Set before importing TF.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import argparse
import signal
import sys

import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split


def log(message: str) -> None:
    sys.stdout.write(message + "\n")
    sys.stdout.flush()


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--global-batch-size", type=int, default=64)
    return parser.parse_args()


def limit_threads() -> None:
    # Keep each op's threads to the CPU share the platform gives this task (the inter-op pool
    # of a server needs more than one thread, see run_server).
    threads = int(os.environ.get("OMP_NUM_THREADS") or "0")
    if threads > 0:
        tf.config.threading.set_intra_op_parallelism_threads(threads)


def run_server(cluster_resolver: tf.distribute.cluster_resolver.ClusterResolver) -> int:
    # As the tutorial does: a worker or ps task fails its RPCs fast and lets the caller retry.
    os.environ["GRPC_FAIL_FAST"] = "use_caller"
    server = tf.distribute.Server(
        cluster_resolver.cluster_spec(),
        job_name=cluster_resolver.task_type,
        task_index=cluster_resolver.task_id,
        protocol=cluster_resolver.rpc_layer or "grpc",
        start=True,
        # A server runs the functions the coordinator sends on its inter-op pool, one thread
        # per schedulable core by default; with one (a task pinned to a share of one core) a
        # step waits forever for a thread it holds itself. Two or more avoid that.
        config=tf.compat.v1.ConfigProto(inter_op_parallelism_threads=max(2, len(os.sched_getaffinity(0)))),
    )
    # Stop at once when the platform sends SIGTERM (once the chief has finished).
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    log(f"tf_ps server {cluster_resolver.task_type}:{cluster_resolver.task_id} listening")
    server.join()
    return 0


def load_data() -> tuple[np.ndarray, ...]:
    digits = load_digits()  # ships inside scikit-learn: no download
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    return train_test_split(x, y, test_size=0.2, random_state=0, stratify=y)


def run_coordinator(cluster_resolver: tf.distribute.cluster_resolver.ClusterResolver,
                    args: argparse.Namespace) -> int:
    cluster = cluster_resolver.cluster_spec()
    num_ps = cluster.num_tasks("ps")
    log(f"tf_ps chief workers={cluster.num_tasks('worker')} ps={num_ps}")

    # Variables are split over the ps tasks once they are big enough to be worth it.
    variable_partitioner = tf.distribute.experimental.partitioners.MinSizePartitioner(
        min_shard_bytes=(256 << 10), max_shards=num_ps
    )
    strategy = tf.distribute.ParameterServerStrategy(cluster_resolver, variable_partitioner=variable_partitioner)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)

    x_train, x_test, y_train, y_test = load_data()
    global_batch_size = args.global_batch_size

    def dataset_fn(input_context: tf.distribute.InputContext) -> tf.data.Dataset:
        batch_size = input_context.get_per_replica_batch_size(global_batch_size)
        dataset = tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(len(x_train)).repeat()
        dataset = dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        return dataset.batch(batch_size).prefetch(2)

    with strategy.scope():
        model = tf.keras.Sequential([
            tf.keras.layers.Input(shape=(64,)),
            tf.keras.layers.Dense(128, activation="relu"),
            tf.keras.layers.Dense(10),
        ])
        optimizer = tf.keras.optimizers.legacy.Adam(learning_rate=3e-3)
        accuracy = tf.keras.metrics.SparseCategoricalAccuracy()
    loss_object = tf.keras.losses.SparseCategoricalCrossentropy(
        from_logits=True, reduction=tf.keras.losses.Reduction.NONE
    )

    @tf.function
    def step_fn(iterator):
        def replica_fn(batch_data, labels):
            with tf.GradientTape() as tape:
                logits = model(batch_data, training=True)
                loss = tf.nn.compute_average_loss(loss_object(labels, logits), global_batch_size=global_batch_size)
            gradients = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(gradients, model.trainable_variables))
            accuracy.update_state(labels, logits)
            return loss

        batch_data, labels = next(iterator)
        losses = strategy.run(replica_fn, args=(batch_data, labels))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)

    def per_worker_dataset_fn():
        return strategy.distribute_datasets_from_function(dataset_fn)

    per_worker_dataset = coordinator.create_per_worker_dataset(per_worker_dataset_fn)
    per_worker_iterator = iter(per_worker_dataset)

    steps_per_epoch = len(x_train) // global_batch_size
    for epoch in range(args.epochs):
        accuracy.reset_states()
        for _ in range(steps_per_epoch):
            coordinator.schedule(step_fn, args=(per_worker_iterator,))
        # Steps run asynchronously on the workers: wait for them at the epoch's end.
        coordinator.join()
        log(f"epoch {epoch + 1}/{args.epochs} accuracy={accuracy.result().numpy():.4f}")

    # Inline evaluation on the coordinator, with the variables the ps tasks hold.
    logits = model(x_test, training=False)
    test_accuracy = float(np.mean(np.argmax(logits.numpy(), axis=1) == y_test))
    log(f"final test_accuracy={test_accuracy:.4f}")
    return 0


def main() -> int:
    args = parse_args()
    limit_threads()
    cluster_resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    if cluster_resolver.task_type in ("worker", "ps"):
        return run_server(cluster_resolver)
    return run_coordinator(cluster_resolver, args)


if __name__ == "__main__":
    sys.exit(main())
