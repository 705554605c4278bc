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

_WORKER_STARTERS = frozenset({"torchrun", "deepspeed"})
_WORKER_STARTER_MODULES = {"torch.distributed.run": "torchrun", "torch.distributed.launch": "torchrun",
                           "accelerate.commands.launch": "accelerate"}
# What may stand before the program of a simple command without being it.
_PREFIXES = frozenset({"env", "exec", "nohup", "time", "nice", "stdbuf"})
_OPERATORS = frozenset({";", "&&", "||", "|", "&", "(", ")", ";;"})


def _simple_commands(command: Sequence[str]) -> list[list[str]]:
    """The simple commands of a command: itself, or those of a shell line (`sh -c LINE`)."""
    if len(command) >= 3 and os.path.basename(command[0]) in ("sh", "bash", "dash") and command[1] == "-c":
        lexer = shlex.shlex(command[2], posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        try:
            words = list(lexer)
        except ValueError:
            words = command[2].split()
        commands: list[list[str]] = [[]]
        for word in words:
            if word in _OPERATORS:
                commands.append([])
            else:
                commands[-1].append(word)
        return [words for words in commands if words]
    return [list(command)]


def _program(words: list[str]) -> list[str]:
    """The words from the program on: past `env`, `VAR=value` and the like."""
    position = 0
    while position < len(words):
        word = words[position]
        if os.path.basename(word) in _PREFIXES or ("=" in word and not word.startswith(("-", "/"))):
            position += 1
        elif word.startswith("-") and position > 0:  # an option of a prefix (`env -i`, `nice -n`)
            position += 1
        else:
            break
    return words[position:]


def worker_starter(command: Sequence[str]) -> str | None:
    """Which launcher that starts one process per local rank itself a program of the command is:
    `torchrun` (also `python -m torch.distributed.run`), `deepspeed` or `accelerate` (`accelerate
    launch`); None for a plain command. Only the program position counts: `--strategy deepspeed`
    is an argument, not a launcher."""
    for words in _simple_commands(command):
        program = _program(words)
        if not program:
            continue
        name = os.path.basename(program[0])
        if name in _WORKER_STARTERS:
            return name
        if name == "accelerate" and program[1:2] == ["launch"]:
            return "accelerate"
        if name.startswith("python") and len(program) > 2 and program[1] == "-m" \
                and program[2] in _WORKER_STARTER_MODULES:
            return _WORKER_STARTER_MODULES[program[2]]
    return None


def starts_own_workers(command: Sequence[str]) -> bool:
    return worker_starter(command) is not None


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
# script text. The first copy to exit non-zero (whichever rank) has the others stopped, and its
# code is the result; SIGTERM goes to every copy, and the shell waits until all have exited,
# with SIGKILL for those still there KILL_AFTER seconds after a failure, as the launcher does.
KILL_AFTER = 30
_SHELL_FANOUT = """
base=${RANK:-0}; count=$1; shift; pids=""; local_rank=0
while [ "$local_rank" -lt "$count" ]; do
  RANK=$((base + local_rank)) LOCAL_RANK=$local_rank "$@" & pids="$pids $!"
  local_rank=$((local_rank + 1))
done
trap 'kill -TERM $pids 2>/dev/null' TERM INT
status=0; running=$pids; ticks=-1
while [ -n "$running" ]; do
  still=""
  for pid in $running; do
    if kill -0 "$pid" 2>/dev/null; then still="$still $pid"; continue; fi
    wait "$pid"; code=$?
    if [ "$code" -ne 0 ] && [ "$status" -eq 0 ]; then status=$code; ticks=0; kill -TERM $pids 2>/dev/null; fi
  done
  running=$still
  if [ "$ticks" -ge 0 ]; then
    ticks=$((ticks + 1))
    [ "$ticks" -gt $((KILL_AFTER * 5)) ] && kill -KILL $running 2>/dev/null
  fi
  [ -n "$running" ] && sleep 0.2
done
exit "$status"
""".replace("KILL_AFTER", str(KILL_AFTER))


def in_processes(command: Sequence[str], processes: int) -> tuple[str, ...]:
    """The command a container runs for a replica of `processes` processes: the command itself,
    or a shell that starts its copies (`copies_to_start`) with their own RANK and LOCAL_RANK."""
    copies = copies_to_start(command, processes)
    if copies == 1:
        return tuple(command)
    return ("/bin/sh", "-c", _SHELL_FANOUT, "mlyard-processes", str(copies), *command)
