"""Decoding checks and perceptual hashes of image files.

An image is checked twice, as Pillow's own documentation advises: `verify()` reads the structure
(chunk checksums, markers) without decoding, and a fresh open's `load()` decodes the pixels, where
a truncated file shows. An image whose header declares more pixels than `MAX_PIXELS` is not
decoded at all: a few bytes can declare gigabytes of pixels.
"""

from __future__ import annotations

import posixpath
import warnings
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from PIL import Image

from mlyard.cleaning import extras
from mlyard.cleaning.files import open_beneath

MAX_PIXELS = 89_478_485  # Pillow's own decompression-bomb threshold, whatever the process set it to
MAX_PROBLEM_LENGTH = 300
# The Pillow formats each extension may hold; MPO is how Pillow names the JPEGs cameras write.
FORMATS = {
    ".jpg": {"JPEG", "MPO"}, ".jpeg": {"JPEG", "MPO"}, ".jpe": {"JPEG", "MPO"}, ".jfif": {"JPEG", "MPO"},
    ".png": {"PNG"}, ".gif": {"GIF"}, ".bmp": {"BMP", "DIB"}, ".dib": {"BMP", "DIB"},
    ".tif": {"TIFF"}, ".tiff": {"TIFF"}, ".webp": {"WEBP"}, ".ico": {"ICO"},
    ".ppm": {"PPM"}, ".pgm": {"PPM"}, ".pbm": {"PPM"}, ".pnm": {"PPM"}, ".tga": {"TGA"},
    ".jp2": {"JPEG2000"}, ".j2k": {"JPEG2000"}, ".pcx": {"PCX"},
}


@dataclass(frozen=True)
class Examined:
    """What one file's bytes hold: a problem, or the Pillow format and the 64-bit perceptual
    hash (None where the pixels decode but cannot be hashed, such as a mode phash cannot take)."""
    problem: str | None = None
    format: str | None = None
    phash: int | None = None


def examine(root: Path, path: str) -> Examined:
    """Checks and hashes the image at `path`; never raises for what the file holds."""
    phash = extras.imagehash().phash
    files = ExitStack()
    try:
        file = files.enter_context(open_beneath(root, path))
    except OSError as error:
        return Examined(problem=_short(f"cannot be read: {error.strerror or error}"))
    with files, warnings.catch_warnings():
        # Decoders warn about odd EXIF and the like; what matters is whether the pixels decode.
        warnings.simplefilter("ignore")
        try:
            problem = _verify(file)
            if problem is not None:
                return Examined(problem=problem)
            file.seek(0)
            with Image.open(file) as image:
                image.load()
                return Examined(format=image.format, phash=_hash(phash, image))
        except Exception as error:  # noqa: BLE001 - decoders raise anything from SyntaxError to struct.error
            return Examined(problem=_short(f"cannot be decoded: {type(error).__name__}: {error}"))


def wrong_extension(path: str, image_format: str | None) -> str | None:
    """The extension of `path` where it does not name `image_format`'s files."""
    extension = posixpath.splitext(path)[1].lower()
    accepted = FORMATS.get(extension)
    if image_format is None or accepted is None or image_format in accepted:
        return None
    return extension


def _verify(file: BinaryIO) -> str | None:
    with Image.open(file) as image:
        width, height = image.size
        if width * height > MAX_PIXELS:
            return f"not decoded: declares {width}×{height} pixels, over {MAX_PIXELS:,}"
        image.verify()
    return None


def _hash(phash: Callable[[Image.Image], Any], image: Image.Image) -> int | None:
    """The 64 bits as one integer, first bit highest (as imagehash's hex string reads)."""
    try:
        bits = phash(image).hash
    except (ValueError, OSError, TypeError):
        return None  # a mode the hash cannot convert: the image is sound, just not compared
    return int.from_bytes(bytes(extras.numpy().packbits(bits.flatten())), "big")


def _short(text: str) -> str:
    text = " ".join(text.split())  # one line, whatever the decoder's message held
    return text if len(text) <= MAX_PROBLEM_LENGTH else text[:MAX_PROBLEM_LENGTH - 1] + "…"
