"""`mlyard nodes`."""

from __future__ import annotations

from rich.markup import escape

from mlyard.api.nodes import JOBS_RUN_AS
from mlyard.cli.console import console
from mlyard.cli.options import OutputFormat, OutputOption
from mlyard.cli.output import nodes_table, print_json
from mlyard.client import Client


def nodes(output: OutputOption = OutputFormat.table) -> None:
    """List nodes: capacity, what jobs hold, and what a node cannot enforce."""
    with Client() as client:
        found = client.nodes()
    if output is OutputFormat.json:
        print_json(found)
    else:
        console.print(nodes_table(found))
        # Below the table, where a narrow terminal does not wrap it into the NOTES column.
        for node in found:
            for note in node.notes:
                if note.startswith(JOBS_RUN_AS):
                    console.print(f"{escape(node.name)}: {escape(note)}")
