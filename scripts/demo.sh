#!/usr/bin/env bash
# Starts mlyard embedded, runs the 2-replica DDP example on it, and shows the outcome.
set -euo pipefail
cd "$(dirname "$0")/.."
MLYARD=.venv/bin/mlyard

"$MLYARD" server start
job=$("$MLYARD" submit examples/digits-ddp.yaml)
echo "Following job $job (2 replicas of examples/digits_ddp.py, PyTorch DDP on CPU):"
"$MLYARD" wait "$job" --follow || true

status=$("$MLYARD" show "$job" --output json | .venv/bin/python -c 'import json, sys; print(json.load(sys.stdin)["status"])')
accuracy=$("$MLYARD" logs "$job" | sed -n 's/^final test_accuracy=\([0-9.]*\).*/\1/p' | tail -n 1)
echo
echo "Job $job: $status"
echo "Test accuracy: ${accuracy:-not reported}"
echo
echo "Look further (after 'source .venv/bin/activate', or with .venv/bin/mlyard):"
printf '  %-30s %s\n' "mlyard jobs --all" "every job and its status" \
  "mlyard show $job" "replicas, exit codes, events, last log lines" \
  "mlyard logs $job --replica 1" "what rank 1 printed" \
  "mlyard nodes" "the node, its CPUs, memory and GPUs"
echo "Stop the server with: mlyard server stop"
[ "$status" = SUCCEEDED ]
