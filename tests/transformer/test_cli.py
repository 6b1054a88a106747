"""The command line's shared parts (``transformer.cli``) and the decoding defaults' one home (``DecodeSettings``):
every command's defaults are ``DEFAULTS``' fields and the shared paths, every search's keyword defaults too, and
a command's error is one line."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest
import torch

from transformer import cli, corpus, detect, evaluate, heads, train
from transformer.decoding import (
    DEFAULTS,
    TRANSFORMERS_ALPHA,
    DecodeSettings,
    beam_search,
    beam_search_transformers,
    greedy_decode,
    search,
)

ROOT = Path(__file__).resolve().parents[2]


def test_every_command_takes_its_decoding_defaults_and_paths_from_one_place():
    report = pytest.importorskip("app.report")
    parsed = {"evaluate": evaluate.parse_args([]), "heads": heads.parse_args([]), "detect": detect.parse_args([]),
              "corpus": corpus.parse_args(["--out", "table.parquet"]),
              "report": report.command_line().parse_args(["A dog runs.", "--out", "page.html"])}
    for name, args in parsed.items():
        assert cli.settings(args) == DecodeSettings(), name  # beam, alpha (the checkpoint's), languages
        assert args.checkpoint == cli.DEFAULT_CHECKPOINT and args.threads == 0, name
        if name != "report":
            assert args.data_dir == cli.DEFAULT_DATA_DIR, name
    assert train.parse_args([]).data_dir == cli.DEFAULT_DATA_DIR
    args = evaluate.parse_args(["--beam", "2", "--alpha", "0.3"])
    assert cli.settings(args) == DecodeSettings(beam_size=2, alpha=0.3)


def test_a_bad_flag_value_is_refused_by_argparse(capsys):
    for argv in (["--beam", "0"], ["--threads", "-1"], ["--beam", "x"]):
        with pytest.raises(SystemExit):
            evaluate.parse_args(argv)
        assert "error:" in capsys.readouterr().err


def test_every_search_defaults_to_the_decoding_settings():
    """The keyword defaults of the searches are ``DEFAULTS``' (transformers' rules: its own length penalty)."""
    for fn, alpha in ((greedy_decode, None), (beam_search, None), (beam_search_transformers, TRANSFORMERS_ALPHA)):
        params = inspect.signature(fn).parameters
        for name in ("beam_size", "max_len_a", "max_len_b"):
            if name in params:
                assert params[name].default == getattr(DEFAULTS, name), (fn.__name__, name)
        if alpha is not None:
            assert params["alpha"].default == alpha


def test_the_searches_defaults_decode_as_the_default_settings():
    """Called with no settings, greedy and beam search give what ``search`` gives for ``DecodeSettings()``."""
    from transformer import Transformer, TransformerConfig

    torch.manual_seed(0)
    model = Transformer(TransformerConfig(src_vocab_size=40, tgt_vocab_size=40, d_model=32, n_heads=2,
                                          n_encoder_layers=1, n_decoder_layers=1, d_ff=64, max_len=64)).eval()
    src = torch.tensor([[5, 6, 7, 8, 9, 2], [10, 11, 12, 2, 0, 0]])
    beam = search(model, src, DEFAULTS)
    assert torch.equal(beam_search(model, src).tokens, beam.tokens)
    greedy = search(model, src, DEFAULTS.but(beam_size=1))
    assert torch.equal(greedy_decode(model, src).tokens, greedy.tokens)


def test_an_error_is_one_line(capsys, tmp_path):
    assert cli.error("a file\nis missing:\n  here") == 1
    assert capsys.readouterr().err == "error: a file is missing: here\n"
    (tmp_path / "x.en").write_text("a\n", encoding="utf-8")
    (tmp_path / "x.de").write_text("a\n", encoding="utf-8")
    common = ["--checkpoint", str(tmp_path / "missing"), "--data-dir", str(tmp_path), "--split", "x"]
    for main, argv in ((evaluate.main, common), (heads.main, [*common, "--calibration-split", "x"])):
        assert main(argv) == 1
        err = capsys.readouterr().err
        assert err.startswith("error: ") and err.count("\n") == 1, err


def _literals(path: Path) -> list[str]:
    """The string constants of a module that are not docstrings."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body
            and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return [node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs]


def test_the_default_paths_are_written_once():
    """The default checkpoint and data folder are ``transformer.cli``'s; no other module writes them again."""
    paths = [p for folder in ("transformer", "app", "bench") for p in sorted((ROOT / folder).rglob("*.py"))]
    for path in paths:
        if path == ROOT / "transformer" / "cli.py":
            continue
        written = [s for s in _literals(path) if s.strip("/") in (cli.DEFAULT_CHECKPOINT, cli.DEFAULT_DATA_DIR)]
        assert not written, f"{path.relative_to(ROOT)} writes {written} again (use transformer.cli)"
