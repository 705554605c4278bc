"""`mlyard nodes`."""

from __future__ import annotations

from mlyard.cli.jobs import OutputOption
from mlyard.cli.output import OutputFormat, console, print_json, nodes_table
from mlyard.client import Client


def nodes(output: OutputOption = OutputFormat.table) -> None:
    """List nodes: capacity, what jobs hold, and what a node cannot enforce."""
    with Client() as client:
        found = client.nodes()
    if output is OutputFormat.json:
        print_json(found)
    else:
        console.print(nodes_table(found))
