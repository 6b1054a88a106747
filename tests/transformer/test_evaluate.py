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


def test_streams_translate_the_same_each_batch_on_one_thread(tiny_checkpoint: Path, tiny_corpus: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """``translate_all(streams=2)``: the outputs of one stream, in input order; every batch decoded on a thread set
    to one intra-op thread, on more than one thread; the caller's thread count untouched, and a thread started
    after gets the process's count as before."""
    import threading

    import torch

    import transformer
    from transformer import DecodeSettings
    from transformer.evaluation.scores import translate_all

    tr = transformer.load(tiny_checkpoint, device="cpu")
    sources = (tiny_corpus / "test.en").read_text(encoding="utf-8").splitlines()
    settings = DecodeSettings(beam_size=2, alpha=0.6)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)  # the one-stream reference on one thread, as each stream: the same arithmetic
        one = translate_all(tr, sources, settings, batch_size=3, progress=False)
        torch.set_num_threads(2)
        seen: list[tuple[int, int]] = []
        barrier = threading.Barrier(2, timeout=30)  # the first two batches wait for each other: two streams at once
        original = tr.translate_batch

        def spy(*args, **kwargs):
            seen.append((threading.get_ident(), torch.get_num_threads()))
            if len(seen) <= 2:
                barrier.wait()
            return original(*args, **kwargs)

        monkeypatch.setattr(tr, "translate_batch", spy)
        two = translate_all(tr, sources, settings, batch_size=3, progress=False, streams=2)
        later: list[int] = []
        thread = threading.Thread(target=lambda: later.append(torch.get_num_threads()))
        thread.start()
        thread.join()
        assert two == one and len(two) == len(sources) == 20
        assert len(seen) == 7 and {n for _, n in seen} == {1} and len({t for t, _ in seen}) == 2
        assert torch.get_num_threads() == 2 and later == [2]
    finally:
        torch.set_num_threads(before)


def test_a_failing_batch_stops_the_streams_with_its_error(tiny_checkpoint: Path, tiny_corpus: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    import transformer
    from transformer import DecodeSettings
    from transformer.evaluation.scores import translate_all

    tr = transformer.load(tiny_checkpoint, device="cpu")
    sources = (tiny_corpus / "test.en").read_text(encoding="utf-8").splitlines()
    calls: list[int] = []

    def broken(*args, **kwargs):
        calls.append(1)
        time.sleep(0.05)  # a batch's work: the failure is seen before the last batches start
        raise RuntimeError("out of memory in batch")

    monkeypatch.setattr(tr, "translate_batch", broken)
    with pytest.raises(RuntimeError, match="out of memory in batch"):
        translate_all(tr, sources, DecodeSettings(beam_size=2), batch_size=2, progress=False, streams=2)
    assert len(calls) < 10  # the batches not started were dropped


def test_evaluate_streams_flag(tiny_checkpoint: Path, tiny_corpus: Path, capsys: pytest.CaptureFixture) -> None:
    args = ["--checkpoint", str(tiny_checkpoint), "--data-dir", str(tiny_corpus), "--split", "test", "--beam", "2",
            "--batch-size", "4", "--json", "--no-progress"]
    assert evaluate.main(args) == 0
    one = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert evaluate.main(args + ["--streams", "2"]) == 0
    two = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (two["bleu"], two["chrf"], two["length_ratio"]) == (one["bleu"], one["chrf"], one["length_ratio"])
    assert (one["streams"], two["streams"]) == (1, 2)
    with pytest.raises(SystemExit) as exit_info:
        evaluate.main(args + ["--streams", "0"])
    assert exit_info.value.code == 2 and "--streams" in capsys.readouterr().err
