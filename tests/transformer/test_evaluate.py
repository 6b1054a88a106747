"""``python -m transformer.evaluate`` on a tiny checkpoint and a tiny corpus."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from transformer import evaluate
from transformer.evaluation.scores import score


def test_evaluate_json(tiny_checkpoint: Path, tiny_corpus: Path, capsys: pytest.CaptureFixture) -> None:
    code = evaluate.main(["--checkpoint", str(tiny_checkpoint), "--data-dir", str(tiny_corpus), "--split", "test",
                          "--beam", "2", "--alpha", "1.2", "--batch-size", "8", "--json", "--no-progress"])
    assert code == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    result = json.loads(last)
    assert {"bleu", "chrf", "bleu_lc_tok", "length_ratio", "signature", "sentences", "seconds"} <= set(result)
    assert result["sentences"] == 20
    assert (result["beam"], result["alpha"]) == (2, 1.2)
    assert 0.0 <= result["bleu"] <= 100.0 and 0.0 <= result["chrf"] <= 100.0
    assert result["signature"].startswith("nrefs:1")


def test_score_is_perfect_on_identical_text() -> None:
    refs = ["Ein Mann fährt Fahrrad.", "Zwei Hunde spielen im Park."]
    perfect = score(refs, refs, "de")
    assert perfect["bleu"] == pytest.approx(100.0) and perfect["bleu_lc_tok"] == pytest.approx(100.0)
    lower = score([r.lower() for r in refs], refs, "de")
    assert lower["bleu"] < 100.0 and lower["bleu_lc_tok"] == pytest.approx(100.0)
    assert perfect["length_ratio"] == lower["length_ratio"] == 1.0


def test_length_ratio_counts_13a_tokens() -> None:
    refs = ["Ein Mann fährt Fahrrad.", "Zwei Hunde spielen im Park."]  # 5 + 6 tokens under 13a ("." split off)
    short = score(["Ein Mann.", "Zwei Hunde spielen im Park."], refs, "de")  # 3 + 6 tokens
    assert short["length_ratio"] == pytest.approx(9 / 11, abs=1e-4)
    assert short["bleu"] < 100.0  # brevity penalty
    long = score(["Ein Mann fährt ein rotes Fahrrad.", "Zwei Hunde spielen im Park."], refs, "de")
    assert long["length_ratio"] == pytest.approx(13 / 11, abs=1e-4)


def test_evaluate_clear_errors(tiny_checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "test.en").write_text("a\nb\n", encoding="utf-8")
    (tmp_path / "test.de").write_text("a\n", encoding="utf-8")
    code = evaluate.main(["--checkpoint", str(tiny_checkpoint), "--data-dir", str(tmp_path), "--split", "test"])
    assert code == 1
    assert "2 lines but test.de has 1" in capsys.readouterr().err
    code = evaluate.main(["--checkpoint", str(tmp_path / "missing"), "--data-dir", str(tmp_path), "--split", "x"])
    assert code == 1
    assert "error:" in capsys.readouterr().err


def _with_decoding(tiny_checkpoint: Path, target: Path, decoding: object) -> Path:
    """A copy of the tiny checkpoint whose metadata names ``decoding``."""
    import shutil

    shutil.copytree(tiny_checkpoint, target)
    meta_path = target / "metadata.json"
    meta = json.loads(meta_path.read_text(encoding="utf-8")) if meta_path.is_file() else {}
    meta["decoding"] = decoding
    meta_path.write_text(json.dumps(meta), encoding="utf-8")
    return target


def test_checkpoint_length_penalty_is_the_default(tiny_checkpoint: Path, tiny_corpus: Path, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture) -> None:
    """A checkpoint's ``decoding.alpha`` (chosen on val) is what evaluate and ``alpha=None`` decode with."""
    import transformer

    ckpt = _with_decoding(tiny_checkpoint, tmp_path / "ckpt", {"beam": 5, "alpha": 1.7, "chosen_on": "val"})
    assert evaluate.main(["--checkpoint", str(ckpt), "--data-dir", str(tiny_corpus), "--split", "test",
                          "--beam", "2", "--batch-size", "8", "--json", "--no-progress"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["alpha"] == 1.7
    tr = transformer.load(ckpt, device="cpu")
    assert tr.default_alpha == 1.7
    text = "a b c d e"
    chosen = tr.translate(text, beam_size=3, return_attention=False)
    explicit = tr.translate(text, beam_size=3, alpha=1.7, return_attention=False)
    other = tr.translate(text, beam_size=3, alpha=0.0, return_attention=False)
    assert (chosen.text, chosen.score) == (explicit.text, explicit.score)
    assert chosen.score != other.score  # the penalty really entered the score
    for bad in ("1.4", -1.0, True, None, float("nan"), 1e9):
        bad_ckpt = _with_decoding(tiny_checkpoint, tmp_path / f"bad{len(list(tmp_path.iterdir()))}", {"alpha": bad})
        assert transformer.load(bad_ckpt, device="cpu").default_alpha == 0.6
    listed = _with_decoding(tiny_checkpoint, tmp_path / "list", [1.4])
    assert transformer.load(listed, device="cpu").default_alpha == 0.6


def test_bad_numbers_are_refused_with_a_message(tiny_checkpoint: Path, capsys: pytest.CaptureFixture) -> None:
    """A zero beam or batch, or negative threads, stop at the command line (exit 2) with what is wrong."""
    for flag, value in (("--beam", "0"), ("--batch-size", "0"), ("--threads", "-1"), ("--beam", "x")):
        with pytest.raises(SystemExit) as exit_info:
            evaluate.main(["--checkpoint", str(tiny_checkpoint), flag, value])
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and flag in err, err
