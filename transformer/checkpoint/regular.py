"""Reading a file that may come from a stranger (every file of a checkpoint folder, a table's manifest, a data
folder's lines): only a regular file, never more than a bound. The one reader of such files; it imports nothing else
of the project, so that every module that opens a checkpoint's files (``files``, ``tokenizer``, the families) can
use it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO


class FileRefused(ValueError):
    """A file that will not be read (not a regular file, or over its bound); the message says why in plain words,
    naming the file as the caller called it (never its path)."""


def megabytes(size: int) -> str:
    """A size as the messages write it: kB under 1 MB, MB with one decimal under ten, else whole MB."""
    mb = size / 2**20
    return f"{size / 2**10:,.0f} kB" if mb < 1 else f"{mb:.1f} MB" if mb < 10 else f"{mb:,.0f} MB"


def _check_regular(info: os.stat_result, max_bytes: int, what: str) -> None:
    if not stat.S_ISREG(info.st_mode):
        raise FileRefused(f"{what} is not a regular file")
    if info.st_size > max_bytes:
        raise FileRefused(f"{what} is {megabytes(info.st_size)}, over the {megabytes(max_bytes)} it may hold")


def open_regular(path: str | Path, max_bytes: int, what: str) -> BinaryIO:
    """``path`` opened for reading in binary mode, when it is a regular file of at most ``max_bytes``;
    ``FileNotFoundError`` when there is nothing at ``path``, else :class:`FileRefused` naming it as ``what``.

    A file may come from a stranger: a FIFO would block the reading thread until someone writes to it, and a device
    may never end or may act on being opened, so the path is checked with ``os.stat`` before it is opened, opened
    without blocking, and checked again on the open descriptor (the file may have been swapped in between)."""
    try:
        _check_regular(os.stat(path), max_bytes, what)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise
    except OSError as err:
        raise FileRefused(f"{what} cannot be read: {err.strerror or type(err).__name__}") from None
    try:
        _check_regular(os.fstat(fd), max_bytes, what)  # the file that was opened, not the one stat saw
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: str | Path, max_bytes: int, what: str) -> bytes:
    """The bytes of a regular file of at most ``max_bytes`` (:func:`open_regular`; one that grew past the bound
    while read is refused too)."""
    with open_regular(path, max_bytes, what) as f:
        try:
            raw = f.read(max_bytes + 1)
        except OSError as err:
            raise FileRefused(f"{what} cannot be read: {err.strerror or type(err).__name__}") from None
    if len(raw) > max_bytes:
        raise FileRefused(f"{what} is over the {megabytes(max_bytes)} it may hold")
    return raw
