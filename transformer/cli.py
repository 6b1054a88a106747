"""What the commands share on the command line (``python -m transformer.evaluate``, ``heads``, ``detect``,
``corpus`` and ``python -m app.report``): the default checkpoint and data folder, the decoding flags (their
defaults are :data:`transformer.decoding.DEFAULTS`, the one home of decoding defaults), the number of threads,
argparse's number types, and the one-line error a command prints for bad input."""

from __future__ import annotations

import argparse
import sys

import torch

from .decoding.settings import DEFAULT_ALPHA, DEFAULTS, DecodeSettings

DEFAULT_CHECKPOINT = "checkpoints/multi30k-en-de"  # the shipped model, the paper's post-norm layout
DEFAULT_DATA_DIR = "data/multi30k"  # where ``python -m transformer.data --download data/multi30k`` puts the corpus
DATA_DIR_HELP = f"directory with {{split}}.{{lang}} files (python -m transformer.data --download {DEFAULT_DATA_DIR})"


def positive(text: str) -> int:
    """argparse type: an int of at least 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def non_negative(text: str) -> int:
    """argparse type: an int of 0 or more."""
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {value}")
    return value


def add_checkpoint(p: argparse.ArgumentParser) -> None:
    """``--checkpoint``: a checkpoint directory or Hub repo id, :data:`DEFAULT_CHECKPOINT` by default."""
    p.add_argument("--checkpoint", default=DEFAULT_CHECKPOINT,
                   help=f"checkpoint directory or Hub repo id (default: {DEFAULT_CHECKPOINT})")


def add_data_dir(p: argparse.ArgumentParser) -> None:
    """``--data-dir``: the folder of ``{split}.{lang}`` files, :data:`DEFAULT_DATA_DIR` by default."""
    p.add_argument("--data-dir", default=DEFAULT_DATA_DIR, help=f"{DATA_DIR_HELP} (default: {DEFAULT_DATA_DIR})")


def add_decoding(p: argparse.ArgumentParser, languages: bool = False) -> None:
    """The decoding flags, with :data:`DEFAULTS`' values: ``--beam`` and ``--alpha`` (None: the checkpoint's own);
    with ``languages``, a multilingual model's ``--src-lang`` and ``--tgt-lang``. :func:`settings` reads them."""
    p.add_argument("--beam", type=positive, default=DEFAULTS.beam_size,
                   help=f"beam size; 1 is greedy search (default: {DEFAULTS.beam_size})")
    p.add_argument("--alpha", type=float, default=DEFAULTS.alpha,
                   help=f"length penalty (default: the checkpoint's, metadata.json decoding.alpha, else "
                        f"{DEFAULT_ALPHA})")
    if languages:
        p.add_argument("--src-lang", default=DEFAULTS.src_lang,
                       help="a multilingual model's source language code (e.g. eng_Latn)")
        p.add_argument("--tgt-lang", default=DEFAULTS.tgt_lang,
                       help="a multilingual model's target language code (e.g. deu_Latn)")


def settings(args: argparse.Namespace) -> DecodeSettings:
    """The :class:`DecodeSettings` the decoding flags of ``args`` name (:func:`add_decoding`; what they leave out:
    :data:`DEFAULTS`')."""
    return DEFAULTS.but(beam_size=getattr(args, "beam", None), alpha=getattr(args, "alpha", None),
                        src_lang=getattr(args, "src_lang", None), tgt_lang=getattr(args, "tgt_lang", None))


def add_threads(p: argparse.ArgumentParser) -> None:
    """``--threads``: ``torch.set_num_threads`` for the command's process (0: leave as is); :func:`use_threads`."""
    p.add_argument("--threads", type=non_negative, default=0,
                   help="torch.set_num_threads for this process (0: leave as is)")


def use_threads(args: argparse.Namespace) -> None:
    """Apply ``--threads`` (:func:`add_threads`)."""
    if getattr(args, "threads", 0):
        torch.set_num_threads(args.threads)


def add_streams(p: argparse.ArgumentParser) -> None:
    """``--streams``: a split's batches decoded side by side on a CPU, one thread each (``translate_all``'s)."""
    p.add_argument("--streams", type=positive, default=1,
                   help="on a CPU, batches decoded side by side, one thread each (default: 1; faster for a small "
                        "model such as the shipped one on a few cores, not for an OPUS-MT-sized one: "
                        "docs/benchmarks.md, \"Decoding streams\")")


def add_decoding_arguments(p: argparse.ArgumentParser) -> None:
    """The flags every command that decodes a split shares (``evaluate``, ``heads``, ``detect``): model, data,
    split and languages, beam and length penalty, batch, device, threads, output."""
    add_checkpoint(p)
    add_data_dir(p)
    p.add_argument("--split", default="test_2016_flickr", help="the split to decode (default: test_2016_flickr)")
    p.add_argument("--src", default="en", help="the source files' language suffix (default: en)")
    p.add_argument("--tgt", default="de", help="the reference files' language suffix (default: de)")
    add_decoding(p)
    p.add_argument("--batch-size", type=positive, default=64, help="sentences per decoding batch (default: 64)")
    p.add_argument("--device", default="auto", help="auto (CUDA when there is a GPU), cpu or cuda (default: auto)")
    add_threads(p)
    p.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    p.add_argument("--no-progress", action="store_true")


def one_line(message: object) -> str:
    """``message`` as one line: its whitespace, newlines included, made single spaces."""
    return " ".join(str(message).split())


def error(message: object) -> int:
    """Print ``error: <message>`` on one line to stderr, as every command says what went wrong (never a stack
    trace); returns 1, the commands' exit status for it."""
    print(f"error: {one_line(message)}", file=sys.stderr)
    return 1
