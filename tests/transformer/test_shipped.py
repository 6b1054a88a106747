"""The shipped checkpoints against their own model cards: each one's test_2016_flickr score, re-measured with the
decoding its ``metadata.json`` names, is the score the card reports (skipped without the shared data)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import transformer
from transformer.decoding import DecodeSettings
from transformer.evaluation.data import read_parallel
from transformer.evaluation.scores import score, translate_all


def _scored(folder: Path) -> bool:
    meta = folder / "metadata.json"
    return meta.is_file() and "test_2016_flickr" in json.loads(meta.read_text(encoding="utf-8"))


SHIPPED = sorted(p for p in (Path(__file__).resolve().parents[2] / "checkpoints").glob("*") if _scored(p))


@pytest.mark.data
@pytest.mark.parametrize("ckpt", SHIPPED, ids=[p.name for p in SHIPPED])
def test_card_scores_are_the_models(ckpt: Path, multi30k_dir: Path) -> None:
    reported = json.loads((ckpt / "metadata.json").read_text())["test_2016_flickr"]
    tr = transformer.load(ckpt, device="cpu")
    alpha = reported.get("alpha", 0.6)
    assert tr.default_alpha == alpha  # what the app and evaluate decode with is what the card was scored with
    sources, refs = read_parallel(multi30k_dir, "test_2016_flickr", "en", "de")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the suite's other process has the other core: two threads each would wait on each other
    try:
        settings = DecodeSettings(beam_size=reported["beam"], alpha=alpha)
        result = score(translate_all(tr, sources, settings, progress=False), refs, "de")
    finally:
        torch.set_num_threads(threads)
    # float rounding on another CPU may flip a close beam decision in a sentence or two
    assert result["bleu"] == pytest.approx(reported["bleu"], abs=0.1)
    assert result["bleu_lc_tok"] == pytest.approx(reported["bleu_lc_tok"], abs=0.1)
