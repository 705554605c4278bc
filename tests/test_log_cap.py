"""A replica's log stops growing at `max_log_bytes`: the launcher as a real process, and its
`CappedLog` on a real file."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from mlyard.runtime.launch_config import EXIT_FILE, OUTPUT_LOG, LaunchConfig, write_launch_config
from mlyard.runtime.launcher import (
    DEFAULT_MAX_LOG_BYTES,
    CappedLog,
    format_bytes,
    truncation_line,
)

PYTHON = sys.executable
KIBIBYTE = 1024


def run_replica(directory: Path, command: list[str], timeout: float = 30, **settings: Any) -> dict[str, Any]:
    directory.mkdir(parents=True, exist_ok=True)
    write_launch_config(directory, LaunchConfig.from_data({"command": command, **settings}))
    result = subprocess.run([PYTHON, "-m", "mlyard.runtime.launcher", str(directory)], stdin=subprocess.DEVNULL,
                            capture_output=True, text=True, timeout=timeout, check=False)
    assert result.returncode == 0, result.stderr
    return json.loads((directory / EXIT_FILE).read_text())


def printing(total: int, *, then: str = "") -> list[str]:
    """A command that writes `total` bytes of numbered 16-byte lines as fast as it can."""
    script = (
        "import sys\n"
        f"data = b''.join(b'line %010d\\n' % n for n in range({total} // 16))\n"
        "sys.stdout.buffer.write(data)\n"
        "sys.stdout.flush()\n"
        f"{then}\n"
    )
    return [PYTHON, "-c", script]


def expected_lines(total: int) -> bytes:
    return b"".join(b"line %010d\n" % n for n in range(total // 16))


def test_output_past_the_limit_is_discarded_after_one_line_that_says_so(tmp_path: Path) -> None:
    limit = 64 * KIBIBYTE
    directory = tmp_path / "replica"
    finished = run_replica(directory, printing(2 * 1024 * KIBIBYTE), max_log_bytes=limit)

    assert finished["exit_code"] == 0
    log = (directory / OUTPUT_LOG).read_bytes()
    marker = truncation_line(limit)
    assert marker == b"[mlyard] log truncated: this replica wrote more than 64.0 KiB; the rest was discarded\n"
    assert log.endswith(marker)
    assert log.count(b"log truncated") == 1
    assert log[:-len(marker)] == expected_lines(2 * 1024 * KIBIBYTE)[:limit], "the start of the output is kept as written"


def test_the_command_is_never_blocked_and_keeps_its_exit_code(tmp_path: Path) -> None:
    directory = tmp_path / "replica"
    began = time.monotonic()
    # 64 MiB against an 8 KiB limit: a launcher that stopped reading would leave it stuck on the pipe.
    finished = run_replica(directory, printing(64 * 1024 * KIBIBYTE, then="print('after'); sys.exit(3)"),
                           max_log_bytes=8 * KIBIBYTE)
    assert time.monotonic() - began < 20
    assert (finished["exit_code"], finished["signal"]) == (3, None)
    log = (directory / OUTPUT_LOG).read_bytes()
    assert len(log) == 8 * KIBIBYTE + len(truncation_line(8 * KIBIBYTE))
    assert b"after" not in log


def test_output_under_the_limit_is_whole_even_when_the_command_ends_at_once(tmp_path: Path) -> None:
    directory = tmp_path / "replica"
    total = 512 * KIBIBYTE  # more than a pipe holds: the copy must drain it after the command exits
    finished = run_replica(directory, printing(total, then="print('last line', file=sys.stderr)"),
                           max_log_bytes=total + 100)
    assert finished["exit_code"] == 0
    assert (directory / OUTPUT_LOG).read_bytes() == expected_lines(total) + b"last line\n"


def test_a_cut_inside_a_line_puts_the_notice_on_a_line_of_its_own(tmp_path: Path) -> None:
    directory = tmp_path / "replica"
    run_replica(directory, ["/bin/sh", "-c", "printf 'abcdefghij'; printf 'klmnop\\n'"], max_log_bytes=5)
    assert (directory / OUTPUT_LOG).read_bytes() == b"abcde\n" + truncation_line(5)


def test_without_a_limit_in_the_config_the_default_applies(tmp_path: Path) -> None:
    directory = tmp_path / "replica"
    run_replica(directory, ["/bin/sh", "-c", "echo hello"])
    assert (directory / OUTPUT_LOG).read_text() == "hello\n"
    assert format_bytes(DEFAULT_MAX_LOG_BYTES) == "1.0 GiB"


def test_a_log_already_at_the_limit_takes_only_the_notice(tmp_path: Path) -> None:
    directory = tmp_path / "replica"
    run_replica(directory, ["/bin/sh", "-c", "echo 0123456789"], max_log_bytes=12)
    run_replica(directory, ["/bin/sh", "-c", "echo again"], max_log_bytes=12)
    assert (directory / OUTPUT_LOG).read_bytes() == b"0123456789\na\n" + truncation_line(12)


def test_capped_log_writes_up_to_the_limit_then_the_notice_once(tmp_path: Path) -> None:
    path = tmp_path / OUTPUT_LOG
    log = CappedLog(path, 10)
    for piece in (b"12345", b"67890", b"", b"x", b"more\n", b"and more\n"):
        log.write(piece)
    log.close()
    assert path.read_bytes() == b"1234567890\n" + truncation_line(10)
    assert log.truncated and log.size == 10


def test_format_bytes_reads_as_people_write_sizes() -> None:
    assert [format_bytes(n) for n in (0, 1023, 1024, 65536, 1536 * 1024, 3 * 1024**3)] == [
        "0 bytes", "1023 bytes", "1.0 KiB", "64.0 KiB", "1.5 MiB", "3.0 GiB"]
