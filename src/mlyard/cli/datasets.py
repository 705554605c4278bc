"""`mlyard datasets …`: datasets of a project, their versions, aliases, and pushing and pulling
directories (or pushing an archive's files). A dataset is named `NAME` (in the project of
`--project`, by default `default`) or `PROJECT/NAME`; a version `NAME:v2` or `NAME:ALIAS`."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn
from rich.table import Table

from mlyard.api.datasets import LATEST, MAX_FILES
from mlyard.cli.console import console, errors
from mlyard.cli.options import OutputFormat, OutputOption, UsageError
from mlyard.cli.output import ago, print_json
from mlyard.client import Client
from mlyard.client.hash_cache import HashCache
from mlyard.spec import format_bytes, parse_memory

if TYPE_CHECKING:
    from mlyard.api.datasets import VersionCreated, VersionInfo
    from mlyard.client.versioned_files import PushPlan, VersionedFiles

datasets_app = typer.Typer(help="Datasets: versioned files of a project that jobs read and write; push a directory or "
                                "archive, pull a version, compare versions, move aliases, share, remove.")
DatasetArgument = Annotated[str, typer.Argument(help="NAME or PROJECT/NAME", metavar="DATASET")]
VersionedArgument = Annotated[str, typer.Argument(help="[PROJECT/]NAME[:VERSION or ALIAS] (default: latest)",
                                                  metavar="DATASET[:VERSION]")]
ProjectOption = Annotated[str | None, typer.Option(help="the project of a DATASET given without one "
                                                        "(default: default)")]


def _named(reference: str, project: str | None) -> tuple[str, str, str]:
    """(project, name, version) of `[PROJECT/]NAME[:VERSION]`."""
    name, _, version = reference.partition(":")
    if "/" in name:
        project, _, name = name.partition("/")
    if not name or not project and project is not None:
        raise UsageError(f"{reference!r} is not [PROJECT/]NAME[:VERSION]")
    return project or "default", name, version or LATEST


def _progress() -> Progress:
    return Progress(TextColumn("[progress.description]{task.description}"), BarColumn(), DownloadColumn(),
                    TransferSpeedColumn(), TextColumn("{task.fields[files]} files"), console=errors,
                    transient=not errors.is_terminal)


def _hash_cache() -> HashCache:
    folder = os.environ.get("MLYARD_CONFIG_DIR") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") \
        / "mlyard"
    return HashCache(Path(folder) / "file-hashes.sqlite")


@datasets_app.command("create")
def create(dataset: DatasetArgument, project: ProjectOption = None,
           description: Annotated[str, typer.Option(help="Markdown")] = "",
           licence: Annotated[str | None, typer.Option(help="e.g. CC-BY-4.0")] = None,
           tag: Annotated[list[str] | None, typer.Option(help="a tag (repeat for more)")] = None,
           catalog: Annotated[bool, typer.Option(help="show its card to every user")] = False,
           output: OutputOption = OutputFormat.table) -> None:
    """Create an empty dataset of a project you are a member of (`push` creates one too)."""
    project, name, _ = _named(dataset, project)
    with Client() as client:
        made = client.datasets.create(project, name, description=description, licence=licence, tags=tag or [],
                                      visibility="catalog" if catalog else "project")
    if output is OutputFormat.json:
        print_json(made)
        return
    console.print(f"created dataset {made.project}/{made.name}")


@datasets_app.command("ls")
def list_datasets(project: Annotated[str | None, typer.Option(help="only this project's")] = None,
                  search: Annotated[str | None, typer.Option(help="words of the name or description")] = None,
                  tag: Annotated[str | None, typer.Option(help="only those with this tag")] = None,
                  owner: Annotated[str | None, typer.Option(help="only this user's")] = None,
                  output: OutputOption = OutputFormat.table) -> None:
    """List the datasets of your projects and the catalog's."""
    with Client() as client:
        found = client.datasets.list(project=project, q=search, tag=tag, owner=owner)
    if output is OutputFormat.json:
        print_json(found)
        return
    table = Table("DATASET", "OWNER", "VERSIONS", "LATEST", "TAGS", "UPDATED", box=None)
    for item in found:
        table.add_row(escape(f"{item.project}/{item.name}"), escape(item.owner or "(unowned)"), str(item.versions),
                      item.aliases.get(LATEST, "-"), escape(", ".join(item.tags)), ago(item.updated_at))
    console.print(table)


@datasets_app.command("show")
def show(dataset: VersionedArgument, project: ProjectOption = None, output: OutputOption = OutputFormat.table) -> None:
    """Show a dataset's card, or with :VERSION one version and its statistics."""
    project, name, version = _named(dataset, project)
    with Client() as client:
        if ":" not in dataset:
            card = client.datasets.get(project, name)
            if output is OutputFormat.json:
                print_json(card)
                return
            console.print(f"[bold]{escape(card.project)}/{escape(card.name)}[/] owner {escape(card.owner or '-')}, "
                          f"{card.visibility}, {card.versions} versions; aliases: "
                          + (", ".join(f"{alias} → {target}" for alias, target in card.aliases.items()) or "none"))
            if card.description:
                console.print(escape(card.description))
            return
        found = client.datasets.version(project, name, version)
    if output is OutputFormat.json:
        print_json(found)
        return
    console.print(f"[bold]{escape(found.project)}/{escape(found.dataset)}:{found.version}[/] "
                  f"({found.file_count:,} files, {format_bytes(found.total_bytes)}) by {escape(found.created_by or '-')} "
                  f"{ago(found.created_at)}; parent {found.parent or '-'}; aliases {', '.join(found.aliases) or '-'}")
    if found.message:
        console.print(escape(found.message))
    if found.source_job is not None:
        console.print(f"  written by job {found.source_job}")
    if found.read_by:
        console.print(f"  read by jobs {', '.join(map(str, found.read_by))}")
    for folder, figures in sorted(found.statistics.get("folders", {}).items()):
        console.print(f"  {escape(folder)}/: {figures['files']:,} files, {format_bytes(figures['bytes'])}")
    labelled = found.statistics.get("labels")
    if labelled:
        shown = list(labelled["counts"].items())
        console.print(f"  labels ({escape(labelled['source'])}): "
                      + ", ".join(f"{escape(label)} {count:,}" for label, count in shown[:20])
                      + (f", … ({len(shown):,} labels)" if len(shown) > 20 else ""))


@datasets_app.command("versions")
def versions(dataset: DatasetArgument, project: ProjectOption = None, output: OutputOption = OutputFormat.table) -> None:
    """List a dataset's versions, oldest first."""
    project, name, _ = _named(dataset, project)
    with Client() as client:
        found = client.datasets.versions(project, name)
    if output is OutputFormat.json:
        print_json(found)
        return
    table = Table("VERSION", "PARENT", "FILES", "SIZE", "BY", "MADE", "ALIASES", "MESSAGE", box=None)
    for item in found:
        table.add_row(item.version, item.parent or "-", f"{item.file_count:,}", format_bytes(item.total_bytes),
                      escape(item.created_by or "-"), ago(item.created_at), ", ".join(item.aliases),
                      escape(item.message.splitlines()[0] if item.message else ""))
    console.print(table)


def _unpack_limit(max_unpacked: str) -> int:
    try:
        return parse_memory(max_unpacked)
    except ValueError as error:
        raise UsageError(f"--max-unpacked: {error}") from None


@contextmanager
def _unpacked(archive: Path, max_bytes: int) -> Iterator[Path]:
    """A private temporary folder holding what `archive` unpacks to, under the checks code
    snapshots get; removed on leaving, whatever happens (Ctrl-C included)."""
    from mlyard.storage import UnpackLimits, extract_archive

    folder = Path(tempfile.mkdtemp(prefix="mlyard-archive-"))
    try:
        # A bomb is then refused as it passes the free space, before it fills the disk.
        free = shutil.disk_usage(folder).free
        limit = f"the free space in {folder.parent}" if free < max_bytes else "the limit of --max-unpacked"
        limits = UnpackLimits(max_bytes=min(max_bytes, free), max_members=MAX_FILES, label=f"archive {archive.name}",
                              bytes_limit_name=limit)
        with errors.status(f"unpacking {escape(archive.name)}"):
            extract_archive(archive, folder, limits=limits)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _advance(bar: Progress, task: int):
    """What a push or pull tells of its (files, bytes) done, drawn on `task`."""
    return lambda files, size: bar.update(task, advance=size, files=bar.tasks[task].fields["files"] + files)


def upload_with_progress(api: VersionedFiles, folder: Path, *, cached: bool, follows: object | None,
                         push: Callable[[PushPlan, Callable[[int, int], None]], object]) -> tuple[PushPlan, object]:
    """Hashes `folder` (with the hash cache when `cached`) and hands the plan to `push`, with
    Rich progress of both; `follows`: the version the push would follow (`api.plan_push`)."""
    # An unpacked archive sits under a name never seen again: its hashes would only fill the cache.
    cache = _hash_cache() if cached else None
    try:
        with _progress() as bar:
            task = bar.add_task("hashing", total=None, files=0)
            plan = api.plan_push(folder, cache, _advance(bar, task), parent=follows)
            bar.update(task, visible=False)
            sending = bar.add_task("uploading", total=sum(file.size for file in plan.missing), files=0)
            created = push(plan, _advance(bar, sending))
    finally:
        if cache is not None:
            cache.close()
    return plan, created


def pull_with_progress(api: VersionedFiles, project: str, name: str, found, directory: Path) -> tuple[int, int]:
    """Pulls version `found` (as `api.version` answered) into `directory` with Rich progress."""
    with _progress() as bar:
        task = bar.add_task("downloading", total=found.total_bytes, files=0)
        return api.pull(project, name, found.version, directory, _advance(bar, task))


def _upload(client: Client, project: str, name: str, folder: Path, *, parent: str | None, message: str,
            cached: bool, follows: VersionInfo | None) -> tuple[PushPlan, VersionCreated]:
    return upload_with_progress(client.datasets, folder, cached=cached, follows=follows, push=lambda plan, uploaded:
                                client.datasets.push(project, name, plan, parent=parent, message=message,
                                                     uploaded=uploaded))


def _followed(client: Client, project: str, name: str, parent: str | None) -> tuple[bool, VersionInfo | None]:
    """Whether the dataset exists, and the version a push would follow (None: none yet)."""
    from mlyard.client import ClientError
    try:
        return True, client.datasets.version(project, name, parent or LATEST)
    except ClientError as error:
        if error.status != 404 or parent is not None:
            raise
    try:
        client.datasets.get(project, name)
        return True, None
    except ClientError as error:
        if error.status != 404:
            raise
        return False, None


@datasets_app.command("push")
def push(dataset: DatasetArgument,
         directory: Annotated[Path | None, typer.Argument(help="the files of the new version", metavar="[DIR]",
                                                          show_default=False)] = None,
         project: ProjectOption = None,
         from_archive: Annotated[Path | None, typer.Option(
             "--from-archive", metavar="FILE", help="the files of a tar, tar.gz or zip archive instead of a DIR, "
             "unpacked into a temporary folder (in TMPDIR) under the checks code snapshots get")] = None,
         max_unpacked: Annotated[str, typer.Option(
             metavar="SIZE", help="with --from-archive: refuse an archive that unpacks to more (or to more than "
             "TMPDIR has free)")] = "64Gi",
         parent: Annotated[str | None, typer.Option(help="the version it follows (default: latest)")] = None,
         message: Annotated[str, typer.Option("--message", "-m", help="what changed")] = "",
         output: OutputOption = OutputFormat.table) -> None:
    """Upload a directory, or an archive's files, as a new version: only files the server lacks
    travel, and the files of the parent make no version. Creates the dataset if it does not exist."""
    project, name, _ = _named(dataset, project)
    if (directory is None) == (from_archive is None):
        raise UsageError("give a DIR or --from-archive FILE, not both" if directory else
                         "give a DIR to push, or --from-archive FILE")
    if directory is not None and not directory.is_dir():
        raise UsageError(f"{directory} is not a directory")
    if from_archive is not None and not from_archive.is_file():
        raise UsageError(f"--from-archive {from_archive} is not a file")
    max_bytes = _unpack_limit(max_unpacked)
    with Client() as client:
        exists, follows = _followed(client, project, name, parent)
        # Unpacked before the dataset is made: a refused archive leaves nothing on the server.
        with _unpacked(from_archive, max_bytes) if from_archive is not None else nullcontext(directory) as folder:
            if not exists:
                client.datasets.create(project, name)
            plan, created = _upload(client, project, name, folder, parent=parent, message=message,
                                    cached=from_archive is None, follows=follows)
            now = _followed(client, project, name, parent)[1] if plan.unchanged is not None else None
            if plan.unchanged is not None and (now is None or now.version != plan.unchanged.version):
                # Another push moved the version this one follows while it was hashing: compared again.
                plan, created = _upload(client, project, name, folder, parent=parent, message=message,
                                        cached=from_archive is None, follows=None)
    if output is OutputFormat.json:
        print_json(created)
        return
    for skipped in plan.skipped:
        errors.print(f"skipped {escape(skipped)}: not a regular file")
    sent = sum(file.size for file in plan.missing)
    version = created.version
    if not created.created:
        console.print(f"{project}/{name}: unchanged, still {version.version} ({version.file_count:,} files)")
        return
    console.print(f"{project}/{name}:{version.version} ({version.file_count:,} files, "
                  f"{format_bytes(version.total_bytes)}); uploaded {len(plan.missing):,} files, {format_bytes(sent)}")


@datasets_app.command("pull")
def pull(dataset: VersionedArgument, directory: Annotated[Path, typer.Argument(help="where its files go")],
         project: ProjectOption = None) -> None:
    """Download a version into a directory, each file checked against its sha256; files already
    there and right are kept."""
    project, name, version = _named(dataset, project)
    with Client() as client:
        found = client.datasets.version(project, name, version)
        written, kept = pull_with_progress(client.datasets, project, name, found, directory)
    console.print(f"{project}/{name}:{found.version} in {directory}: {written:,} files written, {kept:,} already there")


@datasets_app.command("diff")
def diff(dataset: DatasetArgument, before: Annotated[str, typer.Argument(help="vN or an alias")],
         after: Annotated[str, typer.Argument(help="vN or an alias")] = LATEST, project: ProjectOption = None,
         output: OutputOption = OutputFormat.table) -> None:
    """List the files added, removed and changed between two versions."""
    project, name, _ = _named(dataset, project)
    with Client() as client:
        found = client.datasets.diff(project, name, before, after)
    if output is OutputFormat.json:
        print_json(found)
        return
    for file in found.added:
        console.print(f"[green]+ {escape(file.path)}[/]")
    for file in found.removed:
        console.print(f"[red]- {escape(file.path)}[/]")
    for change in found.changed:
        console.print(f"[yellow]~ {escape(change.path)}[/] ({format_bytes(change.before.size)} → "
                      f"{format_bytes(change.after.size)})")
    console.print(f"{found.before} → {found.after}: {len(found.added)} added, {len(found.removed)} removed, "
                  f"{len(found.changed)} changed")


@datasets_app.command("alias")
def alias(dataset: DatasetArgument, name: Annotated[str | None, typer.Argument(help="the alias to move")] = None,
          version: Annotated[str | None, typer.Argument(help="the version it is to name")] = None,
          project: ProjectOption = None, output: OutputOption = OutputFormat.table) -> None:
    """Point an alias (clean, production, …) at a version; without one, list the aliases and
    their moves."""
    project, dataset_name, _ = _named(dataset, project)
    move_or_list_aliases(lambda client: client.datasets, project, dataset_name, name, version, output,
                         lambda moves: "moves: " + " ← ".join(move.after or "-" for move in reversed(moves)))


def move_or_list_aliases(api: Callable[[Client], VersionedFiles], project: str, owner: str, name: str | None,
                         version: str | None, output: OutputFormat, history: Callable[[list], str]) -> None:
    """`alias` of datasets and models: moves `name` to `version`, or lists every alias; `history`
    says an alias's moves."""
    if (name is None) != (version is None):
        raise UsageError("give an alias and a version, or neither to list them")
    with Client() as client:
        if name is not None:
            found = [api(client).set_alias(project, owner, name, version)]
        else:
            found = api(client).aliases(project, owner)
    if output is OutputFormat.json:
        print_json(found)
        return
    for item in found:
        console.print(f"{item.alias} → {item.version}  ({escape(history(item.moves))})")


@datasets_app.command("rm")
def remove(dataset: VersionedArgument, project: ProjectOption = None) -> None:
    """Remove a version (NAME:vN), or a dataset with no version left (NAME): its owner and the
    project's maintainers. A version an alias, a later version or an unfinished job needs stays."""
    project, name, version = _named(dataset, project)
    with Client() as client:
        if ":" in dataset:
            client.datasets.remove_version(project, name, version)
            errors.print(f"removed {project}/{name}:{version}")
        else:
            client.datasets.remove(project, name)
            errors.print(f"removed dataset {project}/{name}")


from mlyard.cli.dataset_sharing import add_commands  # noqa: E402 - its commands join this group

add_commands(datasets_app)

from mlyard.cli.dataset_cleaning import add_commands as add_cleaning  # noqa: E402 - its commands join this group

add_cleaning(datasets_app)
