"""``python -m transformer.data --download DIR``: Multi30k task 1 (raw) into a directory, as ``{split}.{lang}`` files
(the reading and the download: :mod:`transformer.evaluation.data`)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from .cli import error
from .evaluation.data import MULTI30K_LANGS, MULTI30K_SPLITS, MULTI30K_URL, DataError, download_multi30k


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Download Multi30k task 1 (raw) into a directory.")
    p.add_argument("--download", metavar="DIR", required=True, help="directory to write {split}.{lang} into")
    p.add_argument("--base-url", default=MULTI30K_URL)
    p.add_argument("--langs", nargs="+", default=list(MULTI30K_LANGS))
    p.add_argument("--splits", nargs="+", default=list(MULTI30K_SPLITS),
                   help="which splits (the app's image fetches test_2016_flickr only)")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        files = download_multi30k(args.download, args.base_url, splits=args.splits, langs=args.langs)
    except DataError as err:
        return error(err)
    print(f"{len(files)} files in {args.download}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
