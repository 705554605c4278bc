"""Processes per replica: how many copies of a command the launcher starts, and who each is.

A role's `processes: N` makes each of its replicas one node of N processes. A plain command
(`python train.py`) is started N times by the launcher, each copy with torchrun's static
variables (`RANK = first rank + local rank`, `LOCAL_RANK`); a command that starts its own
workers (torchrun, `python -m torch.distributed.run`, `accelerate launch`, deepspeed) is started
once and reads N from `PET_NPROC_PER_NODE` or its own flags.

Pure, and imports nothing of mlyard: the launcher loads it at every replica's start.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping, Sequence

_WORKER_STARTERS = frozenset({"torchrun", "deepspeed", "accelerate", "accelerate-launch", "lightning"})
_WORKER_STARTER_MODULES = frozenset({"torch.distributed.run", "torch.distributed.launch", "accelerate.commands.launch"})


def _words(command: Sequence[str]) -> list[str]:
    """The words of the command; a shell line (`sh -c LINE`) is split into its own words."""
    if len(command) >= 3 and os.path.basename(command[0]) in ("sh", "bash", "dash") and command[1] == "-c":
        try:
            return shlex.split(command[2])
        except ValueError:
            return command[2].split()
    return list(command)


def starts_own_workers(command: Sequence[str]) -> bool:
    """Whether the command is a launcher that starts one process per local rank itself."""
    words = _words(command)
    for position, word in enumerate(words):
        if os.path.basename(word) in _WORKER_STARTERS:
            return True
        if word == "-m" and position + 1 < len(words) and words[position + 1] in _WORKER_STARTER_MODULES:
            return True
    return False


def copies_to_start(command: Sequence[str], processes: int) -> int:
    """How many times the launcher starts the command for a replica of `processes` processes."""
    return 1 if processes <= 1 or starts_own_workers(command) else processes


def process_environment(environment: Mapping[str, str], local_rank: int) -> dict[str, str]:
    """The environment of copy `local_rank` of a replica's command: its rank is the replica's
    first rank plus its local rank, as torchrun numbers the workers of a node."""
    copy = dict(environment)
    first = int(environment.get("RANK", "0"))
    copy.update(RANK=str(first + local_rank), LOCAL_RANK=str(local_rank))
    return copy


# Where no launcher of mlyard's runs (a container of the local engine runs its image's own
# programs), a POSIX shell starts the copies. The command reaches it as arguments, never as
# script text; the first non-zero exit (in rank order) stops the others and is the result.
_SHELL_FANOUT = """
base=${RANK:-0}; count=$1; shift; pids=""; local_rank=0
while [ "$local_rank" -lt "$count" ]; do
  RANK=$((base + local_rank)) LOCAL_RANK=$local_rank "$@" & pids="$pids $!"
  local_rank=$((local_rank + 1))
done
trap 'kill -TERM $pids 2>/dev/null' TERM INT
status=0
for pid in $pids; do
  wait "$pid"; code=$?
  if [ "$code" -ne 0 ] && [ "$status" -eq 0 ]; then status=$code; kill -TERM $pids 2>/dev/null; fi
done
exit "$status"
"""


def in_processes(command: Sequence[str], processes: int) -> tuple[str, ...]:
    """The command a container runs for a replica of `processes` processes: the command itself,
    or a shell that starts its copies (`copies_to_start`) with their own RANK and LOCAL_RANK."""
    copies = copies_to_start(command, processes)
    if copies == 1:
        return tuple(command)
    return ("/bin/sh", "-c", _SHELL_FANOUT, "mlyard-processes", str(copies), *command)
