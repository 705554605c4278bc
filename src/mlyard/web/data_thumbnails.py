"""PNG thumbnails of a dataset version's image files, for the file browser and the labeling page.

The work is bounded before any pixel is decoded: a file over `MAX_SOURCE_BYTES` gets none, and
an image whose header declares more than `MAX_PIXELS` pixels (a decompression bomb: a few KiB
of PNG that would inflate to gigabytes) is refused from that header alone. At most
`MAX_CONCURRENT` thumbnails are made at once per process, and the answers are kept in memory by
(digest, size) up to `CACHE_BYTES`, least recently used out first: a blob's bytes never change,
so neither does its thumbnail. Who may read the file is the caller's business
(`services.datasets.versions.file_blob`); this module only reads the path it is given.
"""

from __future__ import annotations

import io
import threading
from collections import OrderedDict
from pathlib import Path

from PIL import Image, ImageOps, UnidentifiedImageError

SIZES = (96, 192, 1024)
"""The edge lengths (pixels) a thumbnail may be asked for; the first is the default. The largest
is the labeling page's view of an image: a decoded PNG, never the uploaded bytes, so a file that
only claims to be an image reaches no browser."""
MAX_SOURCE_BYTES = 32 * 1024 * 1024
MAX_PIXELS = 40_000_000
"""Width × height declared by the header; Pillow's own bomb limit is about 179 million."""
MAX_CONCURRENT = 2
CACHE_BYTES = 32 * 1024 * 1024
MEDIA_TYPE = "image/png"
THUMBNAILED_FORMATS = frozenset({"PNG", "JPEG", "GIF", "WEBP", "BMP", "TIFF"})


class NoThumbnail(Exception):
    """The file gets no thumbnail (too large, not an image, a bomb); the message says why."""


class ThumbnailCache:
    """PNG bytes by (digest, size), bounded by their total size; a thumbnail in the stored
    orientation (not turned upright) is kept under its size negated."""

    def __init__(self, limit: int = CACHE_BYTES) -> None:
        self.limit = limit
        self.used = 0
        self._entries: OrderedDict[tuple[str, int], bytes] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[str, int]) -> bytes | None:
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
            return found

    def put(self, key: tuple[str, int], value: bytes) -> None:
        if len(value) > self.limit:
            return
        with self._lock:
            if key in self._entries:
                return
            self._entries[key] = value
            self.used += len(value)
            while self.used > self.limit:
                _, dropped = self._entries.popitem(last=False)
                self.used -= len(dropped)

    def __len__(self) -> int:
        return len(self._entries)


_cache = ThumbnailCache()
_slots = threading.BoundedSemaphore(MAX_CONCURRENT)


def make_thumbnail(path: Path, *, size: int, max_pixels: int = MAX_PIXELS, upright: bool = True) -> bytes:
    """A PNG of at most `size`×`size` pixels of the image at `path` (its first frame), or
    NoThumbnail. The header's declared size is checked before decoding. `upright` turns a photo
    as its EXIF orientation says; without it the pixels stay as stored, the frame in which
    labeling boxes are measured (COCO's, YOLO's and VOC's)."""
    try:
        with Image.open(path) as image:
            if image.format not in THUMBNAILED_FORMATS:
                raise NoThumbnail(f"{image.format} images get no thumbnail")
            if image.width * image.height > max_pixels:
                raise NoThumbnail(f"the image is {image.width}x{image.height}, over {max_pixels:,} pixels")
            image.draft("RGB", (size, size))  # JPEG: decode at a fraction of the size
            image.thumbnail((size, size))
            if upright:
                image = ImageOps.exif_transpose(image)
            if image.mode not in ("RGB", "RGBA", "L", "LA"):
                image = image.convert("RGBA")
            written = io.BytesIO()
            image.save(written, format="PNG", optimize=False)
            return written.getvalue()
    except (OSError, UnidentifiedImageError, ValueError, Image.DecompressionBombError, SyntaxError) as error:
        raise NoThumbnail(f"not an image Pillow reads: {error}") from error


def thumbnail(path: Path, *, digest: str, file_size: int, size: int, upright: bool = True) -> bytes:
    """The cached thumbnail of a blob, made (under the process's bound) when missing."""
    if size not in SIZES:
        raise NoThumbnail(f"thumbnails are {', '.join(map(str, SIZES))} pixels wide")
    if file_size > MAX_SOURCE_BYTES:
        raise NoThumbnail(f"the file is over {MAX_SOURCE_BYTES >> 20} MiB")
    key = (digest, size if upright else -size)
    found = _cache.get(key)
    if found is not None:
        return found
    with _slots:
        made = make_thumbnail(path, size=size, upright=upright)
    _cache.put(key, made)
    return made
