"""The corpus reader, token-count batching and the Multi30k download (against a local server)."""

from __future__ import annotations

import functools
import gzip
import http.server
import threading
from pathlib import Path

import pytest
import torch

from transformer.evaluation.data import DataError, download_multi30k, read_parallel
from transformer.training.step import token_batches


def test_read_parallel_reads_aligned_lines(tiny_corpus: Path) -> None:
    src, tgt = read_parallel(tiny_corpus, "train", "en", "de")
    assert len(src) == len(tgt) == 300
    assert all(s and t for s, t in zip(src, tgt))


def test_read_parallel_keeps_unicode_line_separators(tmp_path: Path) -> None:
    (tmp_path / "x.en").write_text("a\u2028b\nc\n", encoding="utf-8")
    (tmp_path / "x.de").write_text("d\ne\n", encoding="utf-8")
    src, tgt = read_parallel(tmp_path, "x", "en", "de")
    assert src == ["a\u2028b", "c"] and tgt == ["d", "e"]


def test_missing_directory_and_files_and_mismatch_are_clear(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="data directory not found"):
        read_parallel(tmp_path / "nope", "train", "en", "de")
    with pytest.raises(DataError, match="missing data file"):
        read_parallel(tmp_path, "train", "en", "de")
    (tmp_path / "train.en").write_text("a\nb\n", encoding="utf-8")
    (tmp_path / "train.de").write_text("a\n", encoding="utf-8")
    with pytest.raises(DataError, match="2 lines but train.de has 1"):
        read_parallel(tmp_path, "train", "en", "de")


def test_token_batches_cover_everything_within_budget() -> None:
    import random

    rng = random.Random(3)
    lengths = [(rng.randint(1, 40), rng.randint(1, 40)) for _ in range(500)]
    batches = token_batches(lengths, max_tokens=200, seed=7)
    assert sorted(i for b in batches for i in b) == list(range(500))
    for b in batches:
        longest = max(max(lengths[i]) for i in b)
        assert longest * len(b) <= 200 or len(b) == 1
    assert token_batches(lengths, 200, seed=7) == batches
    assert token_batches(lengths, 200, seed=8) != batches


@pytest.fixture()
def local_server(tmp_path: Path):
    """Serve a directory of ``{split}.{lang}.gz`` files on 127.0.0.1."""
    served = tmp_path / "served"
    served.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield served, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_download_multi30k_from_local_server(local_server, tmp_path: Path) -> None:
    served, url = local_server
    texts = {}
    for split in ("train", "val"):
        for lang in ("en", "de"):
            text = f"{split} {lang} line one\nzweite Zeile – ü ß 😀\n"
            texts[f"{split}.{lang}"] = text
            (served / f"{split}.{lang}.gz").write_bytes(gzip.compress(text.encode("utf-8")))
    dest = tmp_path / "data"
    files = download_multi30k(dest, base_url=url, splits=("train", "val"), langs=("en", "de"))
    assert sorted(f.name for f in files) == sorted(texts)
    for name, text in texts.items():
        assert (dest / name).read_text(encoding="utf-8") == text
    src, tgt = read_parallel(dest, "train", "en", "de")
    assert len(src) == len(tgt) == 2
    assert not list(dest.glob(".*"))  # no temporary files left behind


def test_the_command_fetches_only_the_splits_and_languages_named(local_server, tmp_path: Path) -> None:
    """As the app's image runs it: the test split's two languages, nothing else."""
    from transformer.data import main

    served, url = local_server
    for split in ("train", "test_2016_flickr"):
        for lang in ("en", "de", "fr"):
            (served / f"{split}.{lang}.gz").write_bytes(gzip.compress(f"{split} {lang}\n".encode()))
    dest = tmp_path / "data"
    main(["--download", str(dest), "--base-url", url, "--splits", "test_2016_flickr", "--langs", "en", "de"])
    assert sorted(f.name for f in dest.iterdir()) == ["test_2016_flickr.de", "test_2016_flickr.en"]


def test_download_reports_missing_file(local_server, tmp_path: Path) -> None:
    _, url = local_server
    with pytest.raises(DataError, match="could not download"):
        download_multi30k(tmp_path / "data", base_url=url, splits=("train",), langs=("en",))
    assert not (tmp_path / "data" / "train.en").exists()


def test_pad_sequences_matches_a_hand_written_loop():
    from transformer.network.masks import pad_sequences

    seqs = [[5, 6, 7], [8], [], [9, 10]]
    out = pad_sequences(seqs, pad_id=0)
    assert out.dtype == torch.long and out.shape == (4, 3)
    for i, s in enumerate(seqs):
        for j in range(3):
            assert int(out[i, j]) == (s[j] if j < len(s) else 0)
