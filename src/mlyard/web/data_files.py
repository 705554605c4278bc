"""A dataset version's file browser (`/data/{project}/{name}/{version}/files?prefix=`), its
image thumbnails and its downloads.

The browser shows the folders and files directly under `prefix`, a page at a time, from the
keyset-paged `versions.list_files`: it reads the paths under the prefix in path order and, on
meeting a folder, asks again past the folder's last possible path, so a folder of a million
files costs one query. That skip needs the database to order paths by code point (SQLite
does; PostgreSQL does under the C collation); a page whose paths come back in another order
turns it off for the rest of the request, which then reads every path, still correctly.

Downloads are a route of the pages (the API refuses the session cookie): always an attachment
of type application/octet-stream, so a dataset's HTML file never runs as a page of this site."""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from typing import Annotated
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Query, Request
from fastapi.responses import FileResponse, PlainTextResponse
from starlette.responses import Response

from mlyard.api.datasets import VersionFile
from mlyard.errors import MlyardError
from mlyard.server import auth
from mlyard.server.services.datasets import catalog, versions
from mlyard.web import data_thumbnails
from mlyard.web.data import Name, Project, Reference, dataset_url
from mlyard.web.session import PagePrincipal
from mlyard.web.templating import page

router = APIRouter(include_in_schema=False)

ENTRIES_PER_PAGE = 200
BATCH = 500
MAX_QUERIES = 40
"""Queries one page of the browser may make (each skipped folder is one)."""
PAST_EVERYTHING = "\U0010ffff"
"""Sorts after every character a path may hold: `folder/` + this is past the whole folder."""
NO_NUL = r"^[^\x00]*$"
FilePath = Annotated[str, Query(min_length=1, max_length=1024, pattern=NO_NUL)]


@dataclass(frozen=True)
class Entry:
    name: str
    folder: bool
    file: VersionFile | None = None

    @property
    def image(self) -> bool:
        return self.file is not None and (self.file.media_type or "").startswith("image/")


@dataclass
class Listing:
    version: str = ""
    entries: list[Entry] = field(default_factory=list)
    next_after: str | None = None


def _prefix(value: str) -> str:
    """'' or a folder path ending in one slash."""
    value = value.replace("\x00", "").strip("/")
    return f"{value}/" if value else ""


def browse(database, principal: auth.Principal, project: str, name: str, reference: str, *, prefix: str,
           after: str | None, limit: int = ENTRIES_PER_PAGE) -> Listing:
    """The folders and files directly under `prefix`, from past `after`, at most `limit`."""
    listing, folders, skipping = Listing(), set(), True
    cursor = after
    for _ in range(MAX_QUERIES):
        batch = versions.list_files(database, principal, project, name, reference, after=cursor, limit=BATCH,
                                    prefix=prefix or None)
        listing.version = batch.version
        paths = [item.path for item in batch.files]
        skipping = skipping and paths == sorted(paths)
        skipped = False
        for item in batch.files:
            rest = item.path[len(prefix):]
            if len(listing.entries) >= limit:
                listing.next_after = cursor
                return listing
            cursor = item.path
            if "/" not in rest:
                listing.entries.append(Entry(name=rest, folder=False, file=item))
                continue
            folder = rest.split("/", 1)[0]
            if folder not in folders:
                folders.add(folder)
                listing.entries.append(Entry(name=folder, folder=True))
            if skipping:
                cursor, skipped = f"{prefix}{folder}/{PAST_EVERYTHING}", True
                break
        if not skipped and batch.next_after is None:
            return listing
    listing.next_after = cursor
    return listing


def _crumbs(prefix: str) -> list[tuple[str, str]]:
    """(folder name, its prefix) from the top down."""
    parts = [part for part in prefix.split("/") if part]
    return [(part, "/".join(parts[:index + 1]) + "/") for index, part in enumerate(parts)]


def version_url(project: str, name: str, version: str) -> str:
    return f"{dataset_url(project, name)}/{quote(version, safe='')}"


@router.get("/data/{project}/{name}/{version}/files")
def files_page(request: Request, principal: PagePrincipal, project: Project, name: Name, version: Reference,
               prefix: Annotated[str, Query(max_length=1024, pattern=NO_NUL)] = "",
               after: Annotated[str | None, Query(max_length=1030, pattern=NO_NUL)] = None) -> Response:
    prefix = _prefix(prefix)
    database = request.app.state.database
    try:
        listing = browse(database, principal, project, name, version, prefix=prefix, after=after or None)
        dataset = catalog.get_dataset(database, principal, project, name)
    except MlyardError as error:
        return page(request, "error.html", status_code=error.http_status, error=error, principal=principal,
                    nav="data")
    base = version_url(project, name, listing.version)
    next_url = (f"{base}/files?{urlencode({'prefix': prefix, 'after': listing.next_after})}"
                if listing.next_after else None)
    return page(request, "data_files.html", nav="data", principal=principal, dataset=dataset, listing=listing,
                prefix=prefix, crumbs=_crumbs(prefix), base=base, dataset_url=dataset_url(project, name),
                next_url=next_url, first_page=after is None, thumbnail_size=data_thumbnails.SIZES[0])


def _not_found(reason: str) -> Response:
    return PlainTextResponse(reason, status_code=404, headers={"Cache-Control": "no-store"})


@router.get("/data/{project}/{name}/{version}/thumbnail")
def thumbnail(request: Request, principal: PagePrincipal, project: Project, name: Name, version: Reference,
              path: FilePath, size: Annotated[int, Query(ge=1, le=1024)] = data_thumbnails.SIZES[0],
              orient: Annotated[str, Query(pattern="^(upright|stored)$")] = "upright") -> Response:
    """A PNG thumbnail of an image file of a version the caller may read; 404 for a dataset or
    file they may not read or that does not exist, 422 for a file that gets none."""
    try:
        blob, file = versions.file_blob(request.app.state.database, request.app.state.blobs, principal, project,
                                        name, version, path)
    except MlyardError:
        return _not_found("no such file")
    if not (file.media_type or "").startswith("image/"):
        return PlainTextResponse("not an image", status_code=422)
    try:
        made = data_thumbnails.thumbnail(blob, digest=file.sha256, file_size=file.size, size=size,
                                         upright=orient == "upright")
    except data_thumbnails.NoThumbnail as refused:
        return PlainTextResponse(f"no thumbnail: {refused}", status_code=422)
    return Response(made, media_type=data_thumbnails.MEDIA_TYPE, headers={
        "X-Content-Type-Options": "nosniff", "Cache-Control": "private, max-age=86400",
        "ETag": f'"{file.sha256[:32]}-{size}-{orient}"'})


@router.get("/data/{project}/{name}/{version}/download")
def download(request: Request, principal: PagePrincipal, project: Project, name: Name, version: Reference,
             path: FilePath) -> Response:
    """One file's bytes, as an attachment (readers of the dataset)."""
    try:
        blob, file = versions.file_blob(request.app.state.database, request.app.state.blobs, principal, project,
                                        name, version, path)
    except MlyardError as error:
        return page(request, "error.html", status_code=error.http_status, error=error, principal=principal,
                    nav="data")
    return FileResponse(blob, media_type="application/octet-stream", filename=posixpath.basename(file.path),
                        content_disposition_type="attachment",
                        headers={"ETag": f'"{file.sha256}"', "X-Content-Type-Options": "nosniff"})
