"""`mlyard datasets share|unshare|request|requests|grant|refuse|register|claim|claims|
approve-claim|refuse-claim|transfer`: sharing datasets with other projects and moving their
ownership. Added to `datasets_app` by `cli/datasets.py`. Here `--project` names the other
project (the one granted, asking or receiving); the dataset's own is given as PROJECT/NAME."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.table import Table

from mlyard.cli.console import console
from mlyard.cli.options import OutputFormat, OutputOption, UsageError
from mlyard.cli.output import ago, print_json
from mlyard.client import Client

if TYPE_CHECKING:
    from mlyard.api.datasets import AccessRequestInfo, ClaimInfo

DatasetArgument = Annotated[str, typer.Argument(help="[PROJECT/]NAME (default project: default)",
                                                metavar="DATASET")]
MessageOption = Annotated[str, typer.Option("--message", "-m", help="why")]
MineOption = Annotated[bool, typer.Option("--mine", help="what you asked, with the answers")]
StatusOption = Annotated[str | None, typer.Option(help="pending (default), granted/approved, refused or all")]


def _named(reference: str) -> tuple[str, str]:
    project, _, name = reference.rpartition("/")
    if not name or "/" in project or reference.startswith("/"):
        raise UsageError(f"{reference!r} is not [PROJECT/]NAME")
    return project or "default", name


def _request_table(found: list[AccessRequestInfo]) -> None:
    table = Table("ID", "DATASET", "FOR PROJECT", "BY", "ASKED", "STATUS", "ANSWERED BY", "MESSAGE", box=None)
    for item in found:
        said = item.answer if item.status == "refused" and item.answer else item.message
        table.add_row(str(item.id), escape(f"{item.dataset_project}/{item.dataset}"), escape(item.project),
                      escape(item.requested_by), ago(item.created_at), item.status, escape(item.answered_by or "-"),
                      escape(said.splitlines()[0] if said else ""))
    console.print(table)


def _claim_table(found: list[ClaimInfo]) -> None:
    table = Table("ID", "KIND", "DATASET", "TO PROJECT", "OWNER", "BY", "ASKED", "STATUS", "ANSWERED BY", box=None)
    for item in found:
        table.add_row(str(item.id), item.kind, escape(f"{item.dataset_project}/{item.dataset}"),
                      escape(item.to_project), escape(item.to_user), escape(item.requested_by), ago(item.created_at),
                      item.status, escape(item.answered_by or "-"))
    console.print(table)


def share(dataset: DatasetArgument,
          project: Annotated[str | None, typer.Option(help="the project whose readers may read it")] = None,
          output: OutputOption = OutputFormat.table) -> None:
    """Let another project's viewers and up read a dataset (its owner and its project's
    maintainers); without --project, list the projects it is shared with."""
    owner_project, name = _named(dataset)
    with Client() as client:
        found = [client.datasets.share(owner_project, name, project)] if project else \
            client.datasets.grants(owner_project, name)
    if output is OutputFormat.json:
        print_json(found[0] if project else found)
        return
    for grant in found:
        console.print(f"{owner_project}/{name}: project {escape(grant.project)} reads it "
                      f"(granted by {escape(grant.granted_by)} {ago(grant.granted_at)})")
    if not found:
        console.print(f"{owner_project}/{name} is shared with no other project")


def unshare(dataset: DatasetArgument,
            project: Annotated[str, typer.Option(help="the project to take reading from")]) -> None:
    """Take back another project's reading of a dataset."""
    owner_project, name = _named(dataset)
    with Client() as client:
        client.datasets.unshare(owner_project, name, project)
    console.print(f"{owner_project}/{name} is no longer shared with project {escape(project)}")


def request(dataset: DatasetArgument,
            project: Annotated[str | None, typer.Option(help="your project that would read it (default: your "
                                                             "only one)")] = None,
            message: MessageOption = "", output: OutputOption = OutputFormat.table) -> None:
    """Ask a dataset's owner and maintainers to let a project of yours read it (seen in the catalog)."""
    owner_project, name = _named(dataset)
    with Client() as client:
        made = client.datasets.request_access(owner_project, name, for_project=project, message=message)
    if output is OutputFormat.json:
        print_json(made)
        return
    console.print(f"request {made.id} for project {escape(made.project)} to read {owner_project}/{name}: "
                  f"{made.status}; see the answer with: mlyard datasets requests --mine")


def requests(dataset: Annotated[str | None, typer.Argument(help="[PROJECT/]NAME; default: every dataset you "
                                                                 "answer for", metavar="[DATASET]")] = None,
             mine: MineOption = False, status: StatusOption = None, output: OutputOption = OutputFormat.table) -> None:
    """List the access requests you may answer (pending ones by default), or with --mine yours."""
    project, name = _named(dataset) if dataset else (None, None)
    if mine and dataset:
        raise UsageError("--mine lists your requests of every dataset; give no DATASET with it")
    with Client() as client:
        found = client.datasets.requests(project, name, mine=mine, status=status)
    if output is OutputFormat.json:
        print_json(found)
        return
    _request_table(found)


def _answer(dataset: str, request_id: int, grant: bool, message: str, output: OutputFormat) -> None:
    project, name = _named(dataset)
    with Client() as client:
        answered = client.datasets.answer_request(project, name, request_id, grant=grant, message=message)
    if output is OutputFormat.json:
        print_json(answered)
        return
    console.print(f"request {answered.id}: {answered.status}; project {escape(answered.project)} "
                  + ("reads " if grant else "does not read ") + f"{project}/{name}")


RequestArgument = Annotated[int, typer.Argument(help="the request's id (mlyard datasets requests)", min=1)]


def grant(dataset: DatasetArgument, request_id: RequestArgument, message: MessageOption = "",
          output: OutputOption = OutputFormat.table) -> None:
    """Grant an access request: its project reads the dataset from now on."""
    _answer(dataset, request_id, True, message, output)


def refuse(dataset: DatasetArgument, request_id: RequestArgument, message: MessageOption = "",
           output: OutputOption = OutputFormat.table) -> None:
    """Refuse an access request, saying why with -m."""
    _answer(dataset, request_id, False, message, output)


def register(path: Annotated[str, typer.Argument(help="a directory on the server's machine, under MLYARD_DATA_ROOTS")],
             name: Annotated[str, typer.Option(help="the dataset's name")],
             project: Annotated[str, typer.Option(help="the project it is registered in")] = "default",
             description: Annotated[str, typer.Option(help="Markdown")] = "",
             private: Annotated[bool, typer.Option(help="keep its card to the project's readers (by default "
                                                        "every user sees it, to claim it)")] = False,
             output: OutputOption = OutputFormat.table) -> None:
    """Administrators: make a directory under the server's data roots v1 of a dataset nobody owns
    (the server hashes its files into its store); users then claim it."""
    with Client() as client:
        # Not normalized here: the server refuses a path with '..' rather than guess what it meant.
        absolute = path if os.path.isabs(path) else os.path.join(os.getcwd(), path)
        made = client.datasets.register(absolute, name, project=project, description=description,
                                        visibility="project" if private else "catalog")
    if output is OutputFormat.json:
        print_json(made)
        return
    console.print(f"registered {made.project}/{made.name}: {made.aliases.get('latest', '-')}, no owner yet "
                  f"(mlyard datasets claim {made.project}/{made.name} --project P)")


def claim(dataset: DatasetArgument,
          project: Annotated[str, typer.Option(help="your project it would move to")],
          message: MessageOption = "", output: OutputOption = OutputFormat.table) -> None:
    """Ask for a dataset nobody owns, for a project of yours; an administrator decides."""
    owner_project, name = _named(dataset)
    with Client() as client:
        made = client.datasets.claim(owner_project, name, project, message)
    if output is OutputFormat.json:
        print_json(made)
        return
    console.print(f"claim {made.id} of {owner_project}/{name} for project {escape(made.to_project)}: {made.status}")


def transfer(dataset: DatasetArgument,
             to_project: Annotated[str, typer.Option(help="the project it would move to")],
             to_user: Annotated[str | None, typer.Option(help="its new owner (default: you)")] = None,
             message: MessageOption = "", output: OutputOption = OutputFormat.table) -> None:
    """Ask to move a dataset you own (or whose project you maintain) to another project or
    owner; a maintainer of the receiving project decides."""
    owner_project, name = _named(dataset)
    with Client() as client:
        made = client.datasets.transfer(owner_project, name, to_project, to_user=to_user, message=message)
    if output is OutputFormat.json:
        print_json(made)
        return
    console.print(f"transfer {made.id} of {owner_project}/{name} to {escape(made.to_project)} "
                  f"({escape(made.to_user)}): {made.status}")


def claims(mine: MineOption = False, status: StatusOption = None, output: OutputOption = OutputFormat.table) -> None:
    """List the claims and transfers you may decide (pending ones by default), or with --mine yours."""
    with Client() as client:
        found = client.datasets.claims(mine=mine, status=status)
    if output is OutputFormat.json:
        print_json(found)
        return
    _claim_table(found)


ClaimArgument = Annotated[int, typer.Argument(help="the claim's id (mlyard datasets claims)", min=1)]


def _decide(claim_id: int, approve: bool, message: str, output: OutputFormat) -> None:
    with Client() as client:
        decided = client.datasets.decide_claim(claim_id, approve=approve, message=message)
    if output is OutputFormat.json:
        print_json(decided)
        return
    console.print(f"{decided.kind} {decided.id}: {decided.status}; dataset "
                  f"{escape(decided.dataset_project)}/{escape(decided.dataset)} owned by "
                  + (escape(decided.to_user) if approve else "whoever owned it"))


def approve_claim(claim_id: ClaimArgument, message: MessageOption = "", output: OutputOption = OutputFormat.table) -> None:
    """Approve a claim (administrators) or a transfer (the receiving project's maintainers): the dataset moves."""
    _decide(claim_id, True, message, output)


def refuse_claim(claim_id: ClaimArgument, message: MessageOption = "", output: OutputOption = OutputFormat.table) -> None:
    """Refuse a claim or a transfer, saying why with -m."""
    _decide(claim_id, False, message, output)


COMMANDS = {"share": share, "unshare": unshare, "request": request, "requests": requests, "grant": grant,
            "refuse": refuse, "register": register, "claim": claim, "claims": claims, "transfer": transfer,
            "approve-claim": approve_claim, "refuse-claim": refuse_claim}


def add_commands(app: typer.Typer) -> None:
    for name, command in COMMANDS.items():
        app.command(name)(command)
