"""``python -m bench``: the quick smoke run gives every key with sane values (no timing assertions)."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bench.common import percentile, sentence_of_words, synthetic_sentences
from bench.run import REQUIRED_KEYS, markdown, report, rows
from bench.train_speed import NNTransformerSeq2Seq, OursSeq2Seq, random_batches
from transformer import TransformerConfig

ROOT = Path(__file__).resolve().parents[2]


def test_percentile_and_sentences():
    assert percentile([3.0], 95) == 3.0
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], 50) == 3.0
    assert percentile([0.0, 10.0], 95) == pytest.approx(9.5)
    assert len(sentence_of_words(20, ["too short."]).split()) == 20
    assert sentence_of_words(3, ["a b c", "d e f g"]) == "a b c"
    assert len(synthetic_sentences(7)) == 7
    assert percentile([1.0, math.inf, math.inf], 95) == math.inf  # a visitor never served stays visible
    assert percentile([1.0, 2.0, math.inf], 50) == 2.0


def test_server_times_pick_the_run_whose_page_the_visitor_saw(tmp_path):
    from bench.heavy_links import server_times

    runs = [  # (start, end, text): an earlier run of the same text, a run stopped by the click's rerun, the run
        (90.0, 91.0, "a"), (100.1, 100.2, "a"), (100.3, 101.5, "a"), (100.2, 100.9, "b"), (130.0, 131.0, "a")]
    log = tmp_path / "runs.jsonl"
    log.write_text("".join(json.dumps({"start": s, "end": e, "cpu": 0.1, "view": "heatmap", "text": t}) + "\n"
                           for s, e, t in runs), encoding="utf-8")
    got = server_times(log, ["a", "b", "c"], [100.0, 100.0, 100.0], [2.0, 1.5, 3.0])
    assert got[0] == pytest.approx(1.5) and got[1] == pytest.approx(0.9) and got[2] == math.inf


def test_training_peers_have_the_same_sizes_and_batches():
    cfg = TransformerConfig(src_vocab_size=50, tgt_vocab_size=50, d_model=16, n_heads=2, n_encoder_layers=1,
                            n_decoder_layers=1, d_ff=32, max_len=32)
    ours, theirs = OursSeq2Seq(cfg), NNTransformerSeq2Seq(cfg)
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in theirs.parameters())
    for src, tgt_in, tgt_out in random_batches(cfg, 2, 5, 10):
        assert (src == cfg.eos_id).sum(dim=1).eq(1).all()  # one EOS per source, then padding
        assert (tgt_in[:, 0] == cfg.bos_id).all() and torch.equal(tgt_in[:, 1:], tgt_out[:, :-1])
        assert ours(src, tgt_in).shape == theirs(src, tgt_in).shape == (*tgt_in.shape, cfg.tgt_vocab_size)


@pytest.mark.slow
def test_quick_run_reports_every_key(tiny_checkpoint, tiny_corpus):
    cmd = [sys.executable, "-m", "bench", "--quick", "--json", "--markdown", "--threads", "1",
           "--checkpoint", str(tiny_checkpoint), "--data-dir", str(tiny_corpus), "--split", "test", "--no-cuda"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["errors"] == {}
    assert result["quick"] is True and result["machine"]["torch_threads"] == 1
    try:
        import ctranslate2  # noqa: F401

        has_ct2 = True
    except ImportError:
        has_ct2 = False
    for key in REQUIRED_KEYS:
        assert key in result, key
        value = result[key]
        if value is None and not has_ct2 and "ctranslate2" in key:
            continue
        assert isinstance(value, (int, float)) and math.isfinite(value) and value > 0, (key, value)
    assert result["greedy_ms_p95"] >= result["greedy_ms_p50"]
    marian = ["marian_batch_sent_s", "marian_batch_sent_s_hf", "marian_hf_ratio", "marian_greedy_ms_p50",
              "marian_greedy_ms_p50_hf", "marian_latency_hf_ratio"] + \
        (["marian_batch_sent_s_ctranslate2", "marian_ctranslate2_ratio"] if has_ct2 else [])
    for key in marian:  # the OPUS-MT-sized section (tiny in --quick)
        assert isinstance(result[key], (int, float)) and result[key] > 0, (key, result.get(key))
    assert result["marian_hf_ratio"] == pytest.approx(result["marian_batch_sent_s"] / result["marian_batch_sent_s_hf"],
                                                      abs=0.01)
    for key in ("m2m100_batch_sent_s", "m2m100_batch_sent_s_hf", "m2m100_hf_ratio", "m2m100_greedy_ms_p50",
                "m2m100_greedy_ms_p50_hf"):  # the M2M100-418M-sized section (tiny in --quick)
        assert isinstance(result[key], (int, float)) and result[key] > 0, (key, result.get(key))
    if has_ct2:  # greedy search gives the same tokens in both engines
        assert result["ctranslate2_greedy_identical"] == result["ctranslate2_greedy_compared"] > 0
        assert 0 <= result["ctranslate2_identical"] <= result["batch_sentences"]
    assert "training" in proc.stdout and "CTranslate2" in proc.stdout  # the readable table came first
    # every section measured is in the readable table, each ratio beside its goal (issue #69's where it set one)
    goals = {row[0].split(":")[0]: (row[3], row[4]) for row in rows(result)}
    shipped = next(k for k in goals if k.startswith("batch, "))
    opus = next(k for k in goals if k.startswith("Marian (OPUS-MT) ") and "sentences, beam 4" in k)
    assert goals[shipped] == (f"{result['ctranslate2_ratio']:.2f}x", ">= 1.0x")
    assert goals[opus] == (f"{result['marian_hf_ratio']:.2f}x", ">= 1.2x")
    assert goals["Marian (OPUS-MT), one 20-word sentence with attentions, greedy"] == (
        f"{result['marian_latency_hf_ratio']:.2f}x", ">= 2.0x")
    if has_ct2:
        assert goals["same sentences, each engine's best of its rounds in turns"] == (
            f"{result['marian_ctranslate2_ratio']:.2f}x", ">= 1.0x")
    assert any(k.startswith("M2M100 ") and "sentences, beam 4" in k for k in goals)
    for line in (f"Marian (OPUS-MT) {result['marian_model']}, random weights",
                 f"M2M100 {result['m2m100_model']}, random weights"):  # the shape measured, whatever the size
        assert line in proc.stdout and line in markdown(result)
    assert "| measure | ours |" in markdown(result) and "CPU" in report(result)


def test_crowd_captions_hold_one_two_and_three_sentences(tmp_path):
    """``bench.app_heavy --crowd``'s ordinary visitor types captions of 1, 2 and 3 sentences in turn, each new."""
    from app.analysis.inference import split_sentences
    from bench.app_heavy import crowd_captions

    (tmp_path / "test_2016_flickr.en").write_text("".join(f"A dog number {i} runs on the beach\n" for i in range(99)),
                                                  encoding="utf-8")
    for data_dir in (tmp_path, None):  # Multi30k's captions, else built ones
        texts = crowd_captions(7, data_dir and str(data_dir), offset=3)
        assert [len(split_sentences(t, "en")) for t in texts] == [1, 2, 3, 1, 2, 3, 1]
        assert len(set(texts)) == 7
    two = crowd_captions(2, str(tmp_path), offset=3)[1]
    assert two == "A dog number 4 runs on the beach. A dog number 5 runs on the beach."


def test_work_units_bench_times_alti_beside_integrated_gradients(tiny_checkpoint):
    import transformer
    from app.limits import work
    from bench.work_units import measure

    row = measure(str(tiny_checkpoint), repeats=1, sizes=((12, 9),))[0]
    assert row["alti_units"] == pytest.approx(work.alti_work(transformer.load(tiny_checkpoint, device="cpu"), 12, 9))
    assert row["alti_s"] > 0 and row["ig_s"] > 0 and row["ig_units"] > 0


def test_work_units_bench_times_patching_per_unit_of_its_record(tiny_checkpoint):
    from bench.work_units import measure_patching

    (row,) = measure_patching(str(tiny_checkpoint), repeats=1, words=(8,))
    assert row["patching_s"] > 0 and row["patching_units"] > 0 and row["source"] >= 9


def _report_bench(argv: list[str], capsys) -> dict:
    from bench.report import main

    assert main([*argv, "--rounds", "1", "--repeat", "1", "--json"]) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


@pytest.mark.slow  # among the fast loop's slowest (issue 57 §19: it stays under a minute)
def test_report_bench_times_the_page_apart_from_the_translation(tiny_checkpoint, capsys):
    from app import report

    result = _report_bench(["--checkpoint", str(tiny_checkpoint), "--words", "6"], capsys)
    assert len(result["sentence"].split()) == 6
    assert result["this"]["translate_ms"] > 0 and result["this"]["page_ms"] > 0 and "base" not in result
    assert [k for k in result["steps_ms"] if k.startswith("describe ")] == [f"describe {v}" for v in
                                                                             report.DEFAULT_VIEWS]
    assert result["steps_ms"]["figures"] > len(report.DEFAULT_VIEWS)


@pytest.mark.slow
def test_report_bench_times_another_checkout_in_its_own_process(tiny_checkpoint, capsys):
    result = _report_bench(["--checkpoint", str(tiny_checkpoint), "--words", "6", "--base", str(ROOT)], capsys)
    assert result["base"]["page_ms"] > 0 and result["page_ratio"] > 0


@pytest.mark.slow  # among the slowest of the fast loop (its CPU budget: 60 s)
def test_decode_profile_counts_each_linear_of_a_step_against_its_roofline():
    from bench import decode_profile as dp

    peak = {"peak_gflops_float32": 100.0, "bandwidth_gbs": 10.0}
    one, many = dp.roofline(peak, 1, 1), dp.roofline(peak, 256, 1)
    d, layers, ff, vocab = dp.D, dp.LAYERS, dp.FF, dp.VOCAB
    weights = layers * (6 * d * d + 2 * d * ff) + d * vocab  # q, k, v, out, cross q, cross out; feed-forward; output
    assert sum(r["flops"] for r in one) == 2 * weights and sum(r["flops"] for r in many) == 2 * 256 * weights
    assert {r["bound_by"] for r in one} == {"memory"} and {r["bound_by"] for r in many} == {"compute"}
    for r in one + many:
        assert r["roofline_ms"] == pytest.approx(1e3 * max(r["flops"] / 100e9, r["bytes"] / 10e9))
        assert r["measured_ms"] > 0


def test_large_app_table_counts_each_views_own_units():
    from bench import large_app

    row = {"seconds": 2.0, "cpu_s": 1.0, "peak_mb": 1024.0, "work_notice": [], "said": ["warning: cut"]}
    result = {"size": "tiny", "dtype": "bfloat16", "threads": 1, "weights_mb": 100.0, "cpu": "x", "sentence": "s",
              "app_seconds": 9.0, "app_peak_mb": 2048.0,
              "app": {"first": {**row, "units": 100.0},
                      "views": [{**row, "view": "heatmap", "title": "Heatmap", "units": 100.0},
                                {**row, "view": "beam_tree", "title": "Beam tree", "units": 600.0,
                                 "work_notice": ["This page did less"], "said": ["warning: cut", "info: new"]}]}}
    lines = large_app.table(result).splitlines()
    beam = next(line for line in lines if line.startswith("| Beam tree"))
    assert "600 (500)" in beam and "| 2.00 |" in beam  # 1 CPU second for its own 500 units
    assert "This page did less" in beam and "info: new" in beam and "warning: cut" not in beam
    assert "| no |" in next(line for line in lines if line.startswith("| Heatmap"))


def test_patching_bench_builds_pairs_blind_and_reports_recovery(tr):
    from bench.patching import KS, PARTNER, chosen_k, measure, minimal_pairs

    sentences = ["Two people are walking on the beach.", "A man rides a red bike.", "A girl plays with a blue ball."]
    pairs = minimal_pairs(tr, sentences, 10)
    assert pairs and all(len(tr.encode_source(a)[0]) == len(tr.encode_source(b)[0]) for _, a, b in pairs)
    for kind, a, b in pairs:  # one word changed: the sentence's first swappable one, for its partner
        wa, wb = a.rstrip(".").split(), b.rstrip(".").split()
        changed = [i for i, (x, y) in enumerate(zip(wa, wb)) if x != y]
        first = next(i for i, w in enumerate(wa) if w.lower() in PARTNER)
        assert changed == [first] and PARTNER[wa[first].lower()] == (kind, wb[first].lower())
    out = measure(tr, pairs, progress=False)
    assert out["pairs"] + out["skipped_too_small"] == len(pairs)
    for direction in ("denoise", "noise"):
        for name in ("top", "random", "kind_matched", "attention"):
            assert set(out["recovery"][direction][name]) == {str(k) for k in KS}
    assert chosen_k(out) in KS


@pytest.mark.slow  # two fresh interpreters
def test_a_side_process_reads_its_own_peak_memory_not_its_parents():
    """``bench.common.peak_rss_mb`` (``bench.large``'s sides, ``bench.app_cost``): a process started by one that
    held 600 MB reads the same peak as one started by a small parent (``ru_maxrss`` carried the parent's over)."""
    root = Path(__file__).resolve().parents[2]
    child = "from bench.common import peak_rss_mb; print(peak_rss_mb())"
    parent = ("import subprocess, sys\n"
              "held = bytearray({mb} << 20)\n"
              "held[::4096] = b'x' * len(held[::4096])  # resident\n"
              f"print(subprocess.run([sys.executable, '-c', {child!r}], capture_output=True, text=True, check=True,"
              " cwd=sys.argv[1]).stdout)")
    small, large = (float(subprocess.run([sys.executable, "-c", parent.format(mb=mb), str(root)], capture_output=True,
                                         text=True, check=True, cwd=root).stdout.split()[-1]) for mb in (1, 600))
    assert abs(large - small) < 100, (small, large)


@pytest.mark.slow  # three processes, each importing torch
def test_batch_cpu_times_another_checkouts_package_not_this_trees(tiny_checkpoint, tmp_path):
    from bench.batch_cpu import run

    base = tmp_path / "base"  # a copy of this tree's package, timed as another checkout's
    shutil.copytree(ROOT / "transformer", base / "transformer")
    result = run(str(tiny_checkpoint), ["a man rides a bike .", "two dogs play in the park ."], threads=1, rounds=1,
                 base=base)
    assert result["packages"] == {"ours": str((ROOT / "transformer").resolve()),
                                  "base": str((base / "transformer").resolve())}
    assert all(len(s) == 1 and s[0] > 0 for s in result["cpu_seconds"].values())
    assert result["ours_vs_base"] == pytest.approx(result["cpu_seconds"]["base"][0] / result["cpu_seconds"]["ours"][0])


@pytest.mark.slow
def test_the_batch_section_times_each_engine_in_streams_too(tiny_checkpoint, tiny_corpus):
    """With two threads on a CPU, the batch section also times each engine's batches side by side (ours
    ``translate_all(streams=2)``, CTranslate2's ``inter_threads``), each in a process of its own; the rows print."""
    pytest.importorskip("ctranslate2")
    import transformer
    from bench.batch import bench_batch
    from bench.run import rows

    sentences = (tiny_corpus / "test.en").read_text(encoding="utf-8").splitlines()
    result = bench_batch(transformer.load(tiny_checkpoint, device="cpu"), sentences, batch_size=4, repeat=1,
                         threads=2, identity_sentences=4)
    assert result["batch_streams"] == 2
    for key in ("batch_streams_sent_s", "batch_streams_sent_s_ctranslate2"):
        assert result[key] > 0
    assert result["ctranslate2_streams_ratio"] == pytest.approx(
        result["batch_streams_sent_s"] / result["batch_streams_sent_s_ctranslate2"])
    assert any(row[0].startswith("same, 2 batches side by side") for row in rows(result))
