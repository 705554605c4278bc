#!/usr/bin/env bash
# Starts mlyard embedded, runs the 2-replica DDP example on it, and shows the outcome.
set -euo pipefail
cd "$(dirname "$0")/.."
MLYARD=.venv/bin/mlyard

# Where jobs cannot run under per-user OS accounts (a root server whose Python lives under a
# closed /root), the server refuses to start; the demo then runs them on the server's account.
if ! started=$("$MLYARD" server start 2>&1); then
  if [ -n "${MLYARD_JOB_USERS:-}" ] || [[ "$started" != *"MLYARD_JOB_USERS=off"* ]]; then
    echo "$started" >&2
    exit 1
  fi
  echo "${started#error: }" | fold -s -w 100
  echo "The demo goes on with MLYARD_JOB_USERS=off: every job runs as $(id -un)."
  started=$(MLYARD_JOB_USERS=off "$MLYARD" server start)
fi
echo "$started"
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
