"""Parallel corpora in the ``{split}.{lang}`` layout (line N of one file translates line N of the other) and the
Multi30k download (``python -m transformer.data``)."""

from __future__ import annotations

import gzip
import os
import tempfile
import urllib.request
from collections.abc import Sequence
from pathlib import Path

MULTI30K_URL = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw"
MULTI30K_SPLITS = ("train", "val", "test_2016_flickr")
MULTI30K_LANGS = ("en", "de", "fr", "cs")


class DataError(Exception):
    """A corpus that is missing or malformed; the message says what to do."""


def read_lines(path: str | Path) -> list[str]:
    path = Path(path)
    if not path.is_file():
        raise DataError(f"missing data file: {path}")
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")  # not splitlines(): U+2028 and friends must not split a sentence
    if lines and lines[-1] == "":
        lines.pop()
    return [line.rstrip("\r") for line in lines]


def read_parallel(data_dir: str | Path, split: str, src: str, tgt: str) -> tuple[list[str], list[str]]:
    """Read ``{split}.{src}`` and ``{split}.{tgt}`` from ``data_dir``; line N of one translates line N of the other."""
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise DataError(f"data directory not found: {data_dir} (expected files like {split}.{src}, {split}.{tgt}; "
                        f"download Multi30k with: python -m transformer.data --download {data_dir})")
    src_lines = read_lines(data_dir / f"{split}.{src}")
    tgt_lines = read_lines(data_dir / f"{split}.{tgt}")
    if len(src_lines) != len(tgt_lines):
        raise DataError(f"{data_dir}/{split}.{src} has {len(src_lines)} lines but {split}.{tgt} has "
                        f"{len(tgt_lines)}: a parallel corpus needs one translation per line")
    return src_lines, tgt_lines


def download_multi30k(dest: str | Path, base_url: str = MULTI30K_URL, splits: Sequence[str] = MULTI30K_SPLITS,
                      langs: Sequence[str] = MULTI30K_LANGS, timeout: float = 60.0) -> list[Path]:
    """Download Multi30k task 1 (raw) ``{split}.{lang}.gz`` from ``base_url`` and decompress into ``dest``.

    Files already present are kept; each file is written atomically.
    """
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    written = []
    for split in splits:
        for lang in langs:
            target = dest / f"{split}.{lang}"
            if target.is_file():
                written.append(target)
                continue
            url = f"{base_url.rstrip('/')}/{split}.{lang}.gz"
            try:
                with urllib.request.urlopen(url, timeout=timeout) as response:
                    payload = response.read()
                text = gzip.decompress(payload)
            except OSError as err:  # URLError, HTTPError, BadGzipFile are all OSErrors
                raise DataError(f"could not download {url}: {err}") from err
            fd, tmp = tempfile.mkstemp(dir=dest, prefix=f".{target.name}.")
            with os.fdopen(fd, "wb") as f:
                f.write(text)
            os.replace(tmp, target)
            written.append(target)
    return written
