"""Where the CLI writes: `console` (stdout) for what a command answers, `errors` (stderr) for
errors and progress. Rich alone: importing this module imports no API model."""

from __future__ import annotations

from rich.console import Console

console = Console()
errors = Console(stderr=True, soft_wrap=True)  # an error stays one line, whatever the width
if not console.is_terminal:  # piped output: wide rows rather than truncated columns
    console = Console(width=200)
