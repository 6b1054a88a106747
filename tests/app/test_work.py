"""Bounded work (issue #30, parts 2-3): one estimate per request, the caps over ``ATTN_MAX_WORK`` and their notices,
integrated gradients batched by memory, the heavy-job slots, and every cache inside the byte budget."""

from __future__ import annotations

import os
import shutil
import threading
import time

import numpy as np
import pytest
import torch

pytest.importorskip("streamlit")

from conftest import assert_clean, new_app, plain, set_view, tiny_model, translate  # noqa: E402

from app.analysis import cached  # noqa: E402
from app.analysis.inference import DecodeSettings  # noqa: E402
from app.limits import budget, ledger, work  # noqa: E402
from transformer.interpret import attribute, attribution_row_bytes  # noqa: E402

torch.set_num_threads(1)
LONG = ", ".join(["a man rides a red bike in the park"] * 12)


@pytest.fixture()
def public(app_env, monkeypatch):
    monkeypatch.setenv("ATTN_PUBLIC", "1")
    monkeypatch.setenv("ATTN_MODELS", str(app_env))
    cached.RESULTS.clear()
    yield app_env
    cached.RESULTS.clear()


def capped_notices(at) -> list[str]:
    return [plain(i.value) for i in at.info if "ATTN_MAX_WORK" in plain(i.value)]


# ------------------------------------------------------------------------------------------------ estimates


def test_the_estimate_counts_the_output_positions_decoding_may_produce(tr):
    """The estimate's output positions are the decoder's start token and what the one length rule
    (``DecodeSettings.max_output_length``) lets decoding produce, even where ``a * source + b`` is below one token
    (decoding still produces one)."""
    for a, b in ((0.0, 0), (0.0, 1), (1.5, 10), (0.3, 2), (4.0, 200)):
        settings = DecodeSettings(beam_size=1, max_len_a=a, max_len_b=b)
        for source in (1, 3, 7, 20):
            produced = max(1, min(int(a * source + b), tr.config.max_len - 1))
            assert work.output_limit(tr, source, settings) == 1 + produced
    text = "a man rides a red bike in the park"
    none = DecodeSettings(beam_size=1, max_len_a=0.0, max_len_b=0)
    out = tr.translate(text, none, return_attention=False)
    assert len(out.decoder_input_tokens) <= work.output_limit(tr, work.source_length(tr, text), none) == 2


def test_the_ceiling_is_1000_units_in_public_mode_and_unlimited_locally(monkeypatch):
    monkeypatch.delenv("ATTN_MAX_WORK", raising=False)
    monkeypatch.delenv("ATTN_PUBLIC", raising=False)
    assert ledger.max_work() == float("inf")
    monkeypatch.setenv("ATTN_PUBLIC", "1")
    assert ledger.max_work() == 1000
    for raw, expected in (("250", 250), ("", 1000), ("0", float("inf")), ("inf", float("inf"))):
        monkeypatch.setenv("ATTN_MAX_WORK", raw)
        assert ledger.max_work() == expected
    for raw in ("junk", "-3", "²"):  # never a silent default: a one-line message naming the variable
        monkeypatch.setenv("ATTN_MAX_WORK", raw)
        with pytest.raises(ValueError, match=f"^ATTN_MAX_WORK='{raw}' is not understood"):
            ledger.max_work()


def test_estimates_grow_with_every_factor(tr):
    base = DecodeSettings(beam_size=2, max_len_a=1.0, max_len_b=5)
    w = work.translation_work(tr, 10, base)
    assert work.translation_work(tr, 20, base) > w  # pieces in (and so pieces out)
    assert work.translation_work(tr, 10, DecodeSettings(beam_size=4, max_len_a=1.0, max_len_b=5)) > w  # beam
    assert work.translation_work(tr, 10, DecodeSettings(beam_size=2, max_len_a=2.0, max_len_b=5)) > w  # out
    ig = work.attribution_work(work.parameters(tr), 10, 12, 12, "integrated_gradients", 32)
    assert ig == pytest.approx(32 * work.attribution_work(work.parameters(tr), 10, 12, 12, "input_x_gradient", 1))
    # params x positions x (a forward row per point + a backward row, two forwards, per point and output step)
    assert ig == pytest.approx(work.parameters(tr) * 22 * (32 + 2 * 32 * 12) / work.UNIT)


def test_the_lens_counts_its_projections_over_the_vocabulary():
    """The logit lens: one pass plus each decoder layer's output through the output projection. On the shipped
    model's sizes that is the two passes it was calibrated at (docs/limits.md); on a vocabulary 30x larger the
    projections dominate (NLLB-200's 256k: the old two-pass estimate was 2-3x low at 3.3B)."""
    from types import SimpleNamespace

    from conftest import SHIPPED

    import transformer

    def lens_over_two_passes(model) -> float:
        tr = SimpleNamespace(model=model)
        return work.lens_work(tr, 60, 60) / work.forced_work(tr, 60, 60, 2)

    shipped = transformer.load(SHIPPED, device="cpu") if (SHIPPED / "model.safetensors").is_file() else None
    shipped_like = shipped.model if shipped else tiny_model(0, src_vocab_size=10_000, tgt_vocab_size=10_000,
                                                               d_model=128, d_ff=256, n_heads=4, n_encoder_layers=4,
                                                               n_decoder_layers=4, share_embeddings=True)
    assert 0.8 < lens_over_two_passes(shipped_like) < 1.2
    large_vocabulary = tiny_model(0, src_vocab_size=20_000, tgt_vocab_size=20_000, d_model=16, d_ff=32,
                                  n_decoder_layers=24, share_embeddings=True)
    assert lens_over_two_passes(large_vocabulary) > 1.5


def test_a_short_pass_counts_the_read_of_every_weight(tr):
    """A teacher-forced pass over few positions counts ``FORCED_FLOOR`` positions (its cost is reading the weights);
    past the floor it grows with the positions."""
    below = work.FORCED_FLOOR // 4
    assert work.forced_work(tr, below, below) == work.forced_work(tr, 1, 1) == pytest.approx(
        work.parameters(tr) * work.FORCED_FLOOR / work.UNIT)
    assert work.forced_work(tr, work.FORCED_FLOOR, work.FORCED_FLOOR) == pytest.approx(2 * work.forced_work(tr, 1, 1))
    assert work.forced_work(tr, 1, 1, passes=3) == pytest.approx(3 * work.forced_work(tr, 1, 1))


def test_alti_runs_only_within_the_ceiling(tr, monkeypatch):
    w = work.alti_work(tr, 10, 12)
    assert work.alti_work(tr, 20, 12) > w and work.alti_work(tr, 10, 24) > w
    assert w > work.units(work.parameters(tr), 22)  # more than its forward pass: the per-token terms
    monkeypatch.setenv("ATTN_MAX_WORK", str(w * 1.01))
    assert work.plan_alti(tr, 10, 12) == (True, [])
    fits, notices = work.plan_alti(tr, 20, 12)
    assert not fits and len(notices) == 1 and "not computed" in notices[0]
    with ledger.request() as req:  # inside a request: planned against what is left of it, said in its one notice
        ledger.spend(w * 0.5)
        assert not work.plan_alti(tr, 10, 12)[0]
        ledger.cut(work.plan_alti(tr, 10, 12)[1])
        assert "ATTN_MAX_WORK" in req.notice() and "not computed" in req.notice()


def test_the_beam_is_capped_only_over_the_ceiling(tr, monkeypatch):
    settings = DecodeSettings(beam_size=16, max_len_a=4.0, max_len_b=50)
    source = work.source_length(tr, LONG)
    full = work.translation_work(tr, source, settings)
    monkeypatch.setenv("ATTN_MAX_WORK", str(full * 2))
    assert work.cap_translation(tr, source, settings) == (settings, [])
    monkeypatch.setenv("ATTN_MAX_WORK", str(full / 3))
    capped, notices = work.cap_translation(tr, source, settings)
    assert 1 <= capped.beam_size < 16 and work.translation_work(tr, source, capped) <= full / 3
    assert work.translation_work(tr, source, DecodeSettings(capped.beam_size + 1, 0.6, 4.0, 50)) > full / 3
    assert len(notices) == 1 and f"capped at {capped.beam_size} (of 16)" in notices[0]


def test_attribution_drops_steps_then_span_then_falls_back_to_input_x_gradient(tr, monkeypatch):
    s, t, params = 30, 40, work.parameters(tr)
    cost = lambda method, steps, rows: work.attribution_work(params, s, t, rows, method, steps)
    cases = [
        (cost("integrated_gradients", 32, t), ("integrated_gradients", 32, (0, t)), 0),
        (cost("integrated_gradients", 16, t) * 1.01, ("integrated_gradients", 16, (0, t)), 1),
        (cost("integrated_gradients", 8, 20) * 1.01, ("integrated_gradients", 8, (0, 20)), 1),
        (cost("input_x_gradient", 1, t) * 1.01, ("input_x_gradient", 1, (0, t)), 1),
        (cost("input_x_gradient", 1, 5) * 1.01, ("input_x_gradient", 1, (0, 5)), 1),
    ]
    for ceiling, (method, steps, span), notes in cases:
        monkeypatch.setenv("ATTN_MAX_WORK", str(ceiling))
        plan = work.plan_attribution(tr, s, t, "integrated_gradients")
        assert (plan.method, plan.steps, plan.span) == (method, steps, span), ceiling
        assert plan.estimate <= ceiling and len(plan.notices) == notes


def test_sentence_groups_stay_within_the_ceiling_and_cover_every_sentence(tr, monkeypatch):
    sentences = [f"a man rides a bike number {i} in the park." for i in range(30)]
    settings = DecodeSettings(beam_size=4)
    each = work.units(work.parameters(tr), work.source_length(tr, sentences[0])
                      + work.output_limit(tr, work.source_length(tr, sentences[0]), settings) * work.decode_step(4))
    costs = [work.plain_work(tr, work.source_length(tr, s), settings) for s in sentences]
    assert costs == [each] * 30
    monkeypatch.setenv("ATTN_MAX_WORK", str(each * 7.5))
    groups = work.sentence_groups(costs)
    assert [i for g in groups for i in g] == list(range(30))
    assert len(groups[0]) == 7 and all(len(g) <= 7 for g in groups)
    monkeypatch.setenv("ATTN_MAX_WORK", "0")
    assert work.sentence_groups(costs) == [list(range(30))]


def test_snapshots_are_subsampled_keeping_the_first_and_the_last(tr, monkeypatch):
    snaps = [f"step{i}" for i in range(10)]
    monkeypatch.setenv("ATTN_MAX_WORK", str(work.snapshot_work(tr, 20, 20) * 4.5))
    chosen, notices = work.pick_snapshots(tr, 20, 20, snaps)
    assert len(chosen) == 4 and chosen[0] == "step0" and chosen[-1] == "step9" and len(notices) == 1
    monkeypatch.setenv("ATTN_MAX_WORK", "0")
    assert work.pick_snapshots(tr, 20, 20, snaps) == (snaps, [])


# ------------------------------------------------------------------------------------------------ IG by memory


@pytest.mark.slow  # among the slowest of the fast loop (its CPU budget: 60 s)
@pytest.mark.parametrize("method", ["integrated_gradients", "input_x_gradient"])
def test_attribution_batched_by_memory_equals_one_big_batch(method):
    model = tiny_model(seed=3)
    torch.manual_seed(1)
    src = torch.randint(4, 20, (2, 7))
    tgt = torch.cat([torch.full((2, 1), 2), torch.randint(4, 20, (2, 5))], dim=1)
    labels = torch.randint(4, 20, (2, 6))
    row = attribution_row_bytes(model, 7, 6)
    whole = attribute(model, src, tgt, labels, method=method, steps=12, max_batch_bytes=10**12)
    passes = []
    small = attribute(model, src, tgt, labels, method=method, steps=12, max_batch_bytes=row,  # one row a pass
                      progress=lambda done, total: passes.append(total))
    for a, b in zip(whole, small):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    assert passes[-1] == 2 * (12 if method == "integrated_gradients" else 1)  # sentences x points, one by one
    first = attribute(model, src, tgt, labels, method=method, steps=12, output_span=(1, 4), max_batch_bytes=2 * row)
    torch.testing.assert_close(first[0], whole[0][:, 1:4], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(first[1], whole[1][:, 1:4], rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError):
        attribute(model, src, tgt, labels, method=method, output_span=(4, 9))


def test_the_row_estimate_bounds_what_a_pass_really_holds():
    """The estimate is an upper bound: autograd's saved tensors of one row, measured, stay below it."""
    model = tiny_model(seed=0, max_len=64)
    src, tgt = torch.randint(4, 20, (1, 40)), torch.randint(4, 20, (1, 30))
    saved = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved.append(t.untyped_storage().nbytes())
        return t

    from transformer.interpret import forward_from_embeddings

    src_e = model.src_embed(src).detach().requires_grad_(True)
    tgt_e = model.tgt_embed(tgt).detach().requires_grad_(True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        forward_from_embeddings(model, src, tgt, src_e, tgt_e, positions=torch.tensor([29]))
    assert 0 < sum(saved) <= attribution_row_bytes(model, 40, 30)


# ------------------------------------------------------------------------------------------------ heavy jobs


@pytest.mark.slow  # among the slowest of the fast loop (its CPU budget: 60 s)
def test_heavy_jobs_wait_for_a_free_slot_and_say_how_long():
    jobs = ledger.HeavyJobs(lambda: 1)
    inside, most, waited = [0], [0], []
    release = threading.Event()
    lock = threading.Lock()

    def job(hold: bool) -> None:
        with jobs.slot(waiting=waited.append, poll=0.02):
            with lock:
                inside[0] += 1
                most[0] = max(most[0], inside[0])
            if hold:
                release.wait(5)
            else:
                with jobs.slot():  # a heavy job inside a heavy job runs in the same slot (no deadlock)
                    pass
            with lock:
                inside[0] -= 1

    first = threading.Thread(target=job, args=(True,))
    first.start()
    time.sleep(0.05)
    second = threading.Thread(target=job, args=(False,))
    second.start()
    time.sleep(0.2)
    assert second.is_alive() and waited and waited[-1] > 0  # still waiting, and told so
    release.set()
    first.join(5)
    second.join(5)
    assert not second.is_alive() and most[0] == 1
    # two slots: both run at once
    jobs2, both = ledger.HeavyJobs(lambda: 2), threading.Barrier(2, timeout=5)

    def together() -> None:
        with jobs2.slot():
            both.wait()

    threads = [threading.Thread(target=together) for _ in range(2)]
    for x in threads:
        x.start()
    for x in threads:
        x.join(5)
    assert not both.broken


def test_a_heavy_job_gets_the_cores_no_other_heavy_job_runs_on(monkeypatch):
    monkeypatch.setattr(ledger, "cores", lambda: 4)
    jobs = ledger.HeavyJobs(lambda: 3)
    assert jobs.threads() == 4  # outside a slot: all of them
    with jobs.slot(release=False):
        assert jobs.threads() == 4  # alone
        inner, held = threading.Event(), threading.Event()

        def second() -> None:
            with jobs.slot(release=False):
                held.set()
                inner.wait(5)

        other = threading.Thread(target=second)
        other.start()
        assert held.wait(5)
        assert jobs.threads() == 2  # two jobs share four cores
        monkeypatch.setattr(ledger, "cores", lambda: 1)
        assert jobs.threads() == 1  # never fewer than one
        inner.set()
        other.join(5)


@pytest.mark.slow  # among the fast loop's slowest (issue 57 §19: it stays under a minute)
def test_heavy_jobs_are_served_in_the_order_they_asked():
    """First come, first served: requests that queue behind a long job get the slot in the order they asked, however
    often they wake to say how long they have waited, and a request that stopped while it waited leaves the queue
    (the one behind it is not stuck). Oracle: the order the threads asked in."""
    jobs = ledger.HeavyJobs(lambda: 1)
    order, asked, release = [], [], threading.Event()

    def first() -> None:
        with jobs.slot():
            release.wait(5)

    def later(k: int) -> None:
        asked.append(k)
        with jobs.slot(waiting=lambda s: None, poll=0.003):
            order.append(k)
            time.sleep(0.002)

    class Stopped(Exception):
        pass

    def gives_up(seconds: float) -> None:
        raise Stopped  # a newer click stops the run while it waits

    holder = threading.Thread(target=first)
    holder.start()
    time.sleep(0.05)
    threads = []
    for k in range(8):
        threads.append(threading.Thread(target=later, args=(k,)))
        threads[-1].start()
        time.sleep(0.02)  # each in the queue before the next asks
        if k == 3:
            with pytest.raises(Stopped):
                jobs.slot(waiting=gives_up, poll=0.001).__enter__()
    assert len(jobs._queue) == 8  # all eight in the queue (the one that gave up left it)
    release.set()
    for x in [holder, *threads]:
        x.join(5)
    assert order == asked == list(range(8))
    assert jobs.running == 0 and not jobs._queue


def test_memory_is_handed_back_after_every_heavy_job(monkeypatch):
    released = []
    monkeypatch.setattr(ledger, "release_freed_memory", lambda: released.append(1))
    jobs = ledger.HeavyJobs(lambda: 1)
    with jobs.slot():
        pass
    with pytest.raises(RuntimeError), jobs.slot():
        raise RuntimeError("a failed job too")
    assert released == [1, 1]


def test_heavy_slots_default_to_one_in_public_mode(monkeypatch):
    monkeypatch.delenv("ATTN_HEAVY_JOBS", raising=False)
    monkeypatch.setenv("ATTN_PUBLIC", "1")
    assert ledger.heavy_slots() == 1
    monkeypatch.setenv("ATTN_HEAVY_JOBS", "3")
    assert ledger.heavy_slots() == 3


def test_heavy_slots_default_to_the_cpus_this_process_may_use(monkeypatch):
    """Outside public mode, one heavy job per CPU of the process's affinity (a container narrowed to 2 of 64), not
    per CPU of the host."""
    monkeypatch.delenv("ATTN_HEAVY_JOBS", raising=False)
    monkeypatch.delenv("ATTN_PUBLIC", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {4, 5}, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    assert ledger.heavy_slots() == 2
    monkeypatch.delattr(os, "sched_getaffinity")  # a system without affinity (macOS): the CPU count
    assert ledger.heavy_slots() == 64


# ------------------------------------------------------------------------------------------------ the page


def test_a_long_input_at_beam_16_is_capped_with_a_notice(public, monkeypatch, tr):
    settings = DecodeSettings(beam_size=16, alpha=0.6, max_len_a=4.0, max_len_b=50)
    monkeypatch.setenv("ATTN_MAX_WORK", str(work.translation_work(tr, work.source_length(tr, LONG), settings) / 4))
    at = new_app({"text": LONG, "beam": "16", "a": "4", "b": "50"})
    assert_clean(at)
    notices = capped_notices(at)
    assert len(notices) == 1 and "beam size capped" in notices[0]
    key = next(k for k in cached.RESULTS._items if k[0] == "analysis")
    assert 1 <= key[4].beam_size < 16  # what ran is the capped beam


def test_attribution_over_the_ceiling_does_less_and_says_so(public, monkeypatch, tr):
    at = new_app({"text": LONG, "beam": "1"})
    assert_clean(at)
    result = next(v for k, (v, _) in cached.RESULTS._items.items() if k[0] == "analysis")
    s, t = len(result.source_ids), len(result.target_ids)
    cost = work.attribution_work(work.parameters(tr), s, t, 5, "integrated_gradients", 8)
    monkeypatch.setenv("ATTN_MAX_WORK", str(max(cost * 1.01, 1e-9)))
    at = set_view(at, "what_drives_each_word")
    assert_clean(at)
    notes = capped_notices(at)
    assert notes, [plain(i.value) for i in at.info]
    ceiling = ledger.max_work() - work.translation_work(tr, s, result.settings)  # what the page's analysis left
    plan = work.plan_attribution(tr, s, t, "integrated_gradients", ceiling=max(0.0, ceiling))
    assert len(notes) == 1 and plan.notices[0] in notes[0] and plan.span[1] < t
    source_chart = [c for c in at.get("plotly_chart")][0]
    assert len(__import__("json").loads(source_chart.proto.spec)["data"][0]["y"]) == plan.span[1] - plan.span[0]


def test_many_sentences_are_translated_a_group_at_a_time(public, monkeypatch, tr):
    sentences = [f"A man rides bike number {i}." for i in range(12)]
    settings = DecodeSettings(beam_size=4, alpha=0.6)
    one = work.units(work.parameters(tr), work.source_length(tr, sentences[0])
                     + work.output_limit(tr, work.source_length(tr, sentences[0]), settings) * work.decode_step(4))
    monkeypatch.setenv("ATTN_MAX_WORK", str(one * 30))  # the analysis of one fits; the plain translations: 5 a group
    monkeypatch.setattr(work, "sentence_groups", lambda costs, *_: [list(range(i, min(i + 5, len(costs))))
                                                                     for i in range(0, len(costs), 5)])
    at = new_app()
    at = translate(at, " ".join(sentences))
    assert_clean(at)
    listed = "\n".join(x.value for x in at.text if x.value.startswith("1. "))  # the scrolling list of sentences
    assert listed.count("→") == 5
    assert any("5 of the 12 sentences" in plain(i.value) for i in at.info)
    at.button(key="more_sentences").click().run()
    listed = "\n".join(x.value for x in at.text if x.value.startswith("1. "))
    assert listed.count("→") == 10


# ------------------------------------------------------------------------------------------------ caches


def with_snapshots(app_env, tmp_path, tr):
    """A copy of the tiny checkpoint with three training snapshots."""
    from safetensors.torch import save_file

    ckpt = tmp_path / "ckpt"
    shutil.copytree(app_env, ckpt)
    (ckpt / "snapshots").mkdir()
    state = {k: v.half().contiguous() for k, v in tr.model.state_dict().items()
             if k not in ("tgt_embed.weight", "generator.weight")}  # as training writes them: tied weights once
    for step in (1, 2, 3):
        save_file(state, str(ckpt / "snapshots" / f"step{step:07d}.safetensors"))
    return ckpt


def test_training_evolution_of_a_long_input_draws_a_window(app_env, tmp_path, tr, monkeypatch):
    ckpt = with_snapshots(app_env, tmp_path, tr)
    monkeypatch.setenv("ATTN_CHECKPOINT", str(ckpt))
    at = new_app({"text": " ".join(["a man rides a red bike in the park"] * 10), "view": "training_evolution",
                  "att": "encoder"})
    assert_clean(at)
    spec = __import__("json").loads(at.get("plotly_chart")[0].proto.spec)
    heatmaps = [t for t in spec["data"] if t["type"] == "heatmap"]
    assert len(heatmaps) == 4  # three snapshots and the final model
    from conftest import arr

    assert all(arr(t["z"]).shape == (60, 60) for t in heatmaps)  # not the whole 64 x 64


@pytest.mark.slow  # among the slowest of the fast loop (its CPU budget: 60 s)
def test_snapshots_and_their_attentions_live_in_the_byte_budget(app_env, tmp_path, tr, monkeypatch):
    ckpt = with_snapshots(app_env, tmp_path, tr)
    cached.RESULTS.clear()
    result = tr.translate("a man rides a bike.")
    for snap in sorted((ckpt / "snapshots").glob("*.safetensors")):
        cached.Model(str(ckpt), "cpu").snapshot_attentions(str(snap), tuple(result.source_ids),
                                                           tuple(result.target_ids))
    kinds = [k[0] for k in cached.RESULTS._items]
    assert kinds.count("snapshot") == 3 and kinds.count("snapshot model") == 3
    weights = sum(p.numel() * 4 for p in tr.model.parameters())
    assert cached.RESULTS.nbytes >= 3 * weights  # the snapshot models' weights are counted
    # and a small budget evicts them like any result
    small = budget.ByteLRU(budget=lambda: 2 * weights)
    for i in range(5):
        small.get(i, lambda: tiny_model())
    assert small.nbytes <= 2 * weights + budget.size_of(tiny_model()) and len(small) < 5
    cached.RESULTS.clear()


def test_a_numpy_view_is_counted_with_the_array_it_keeps_alive():
    big = np.zeros((100, 1000), dtype=np.float32)
    assert budget.size_of(big[:, :5]) == big.nbytes
    assert budget.size_of(big[:, :5].copy()) == 100 * 5 * 4
    assert budget.size_of(torch.zeros(10, 10)) == 400


# ------------------------------------------------------------------------------------------------ a crowd (#37)


CAPTION = "A chef cooks. People eat. A dog sleeps."


def test_short_captions_never_take_a_heavy_slot(public, counted_slot, tr):
    at = translate(new_app(), CAPTION)
    assert_clean(at)
    listed = "\n".join(x.value for x in at.text if x.value.startswith("1. "))
    assert listed.count("→") == 3  # every sentence translated, and the first one analysed
    assert any(k[0] == "analysis" for k in cached.RESULTS._items)
    assert counted_slot.taken == 0  # light work: never behind a heavy job
    # the same caption is heavy once the light share is smaller than it: then it takes the slot, once
    cached.RESULTS.clear()
    with pytest.MonkeyPatch.context() as m:
        m.setattr(ledger, "LIGHT_WORK", 0.0)
        at = new_app()
        first = counted_slot.taken
        at = translate(at, CAPTION.replace("eat", "drink"))  # one request: three translations and an analysis
    assert_clean(at)
    assert counted_slot.taken - first == 1


def test_ordinary_captions_are_light_on_the_shipped_model():
    """Three caption sentences of the benchmark's kind, at the page's default settings, with the analysis of the
    longest, stay within ``LIGHT_WORK`` on the shipped model (so they never queue for a heavy slot)."""
    import transformer
    from app.page import state

    path = work.REPO_ROOT / "checkpoints" / "multi30k-en-de" if hasattr(work, "REPO_ROOT") else None
    path = path or __import__("pathlib").Path(__file__).resolve().parents[2] / "checkpoints" / "multi30k-en-de"
    if not (path / "model.safetensors").is_file():
        pytest.skip("the shipped checkpoint is not here")
    big = transformer.load(path, device="cpu")
    d = state.SIDEBAR_DEFAULTS
    settings = DecodeSettings(beam_size=d[state.BEAM], alpha=d[state.ALPHA], max_len_a=d[state.MAX_A],
                              max_len_b=d[state.MAX_B])
    captions = ["Two young guys with shaggy hair look at their hands while hanging out in the yard.",
                "A man in a blue shirt is standing on a ladder cleaning windows.",
                "Several men in hard hats are operating a giant pulley system."]
    longest = max(captions, key=lambda c: work.source_length(big, c))
    total = (sum(work.plain_work(big, work.source_length(big, c), settings) for c in captions)
             + work.translation_work(big, work.source_length(big, longest), settings))
    assert total <= ledger.LIGHT_WORK


def test_one_requests_jobs_together_stay_within_the_ceiling_with_one_notice(public, monkeypatch, tr):
    """The page's analysis and the view's attribution share one ceiling: the sum of what ran (read back from the
    cache keys, estimated independently of the request's ledger) stays within it, and one notice names both
    cuts."""
    settings = DecodeSettings(beam_size=16, alpha=0.6, max_len_a=4.0, max_len_b=50)
    ceiling = work.translation_work(tr, work.source_length(tr, LONG), settings) / 2
    monkeypatch.setenv("ATTN_MAX_WORK", str(ceiling))
    at = new_app({"text": LONG, "beam": "16", "a": "4", "b": "50", "view": "what_drives_each_word"})
    assert_clean(at)
    keys = list(cached.RESULTS._items)
    analysis_key = next(k for k in keys if k[0] == "analysis")
    ran = work.translation_work(tr, work.source_length(tr, LONG), analysis_key[4])
    method, steps, span = next(k for k in keys if k[0] == "attributions")[6:9]
    result = cached.RESULTS._items[analysis_key][0]
    ran += work.attribution_work(work.parameters(tr), len(result.source_ids), len(result.target_ids),
                                 span[1] - span[0], method, steps)
    assert ran <= ceiling * (1 + 1e-9)
    notices = capped_notices(at)
    assert len(notices) == 1, notices
    assert "beam size capped" in notices[0]
    assert "integrated gradients with" in notices[0] or "input × gradient" in notices[0]


def test_the_export_is_built_only_when_asked_and_counted(public, tr):
    """Opening Export builds no file (the old page built a JSON and an NPZ per tab, held by Streamlit outside the
    budget); the download's callable builds it on the click, into the byte-budgeted cache."""
    import json as json_

    from app.analysis import inference

    at = new_app({"text": "a man rides a bike.", "view": "export"})
    assert_clean(at)
    assert len(at.get("download_button")) == 3  # JSON, NPZ, the offline page
    assert not [k for k in cached.RESULTS._items if k[0] in ("export", "report")]
    key = next(k for k in cached.RESULTS._items if k[0] == "analysis")
    result = cached.RESULTS._items[key][0]
    before = cached.RESULTS.nbytes
    data = cached.Model(key[1], key[2]).export_file(key[3], key[4], (), "json")()
    assert json_.loads(data) == json_.loads(inference.export_json(result, key[1]))
    assert [k for k in cached.RESULTS._items if k[0] == "export"]
    assert cached.RESULTS.nbytes - before >= len(data)  # counted in ATTN_CACHE_MB
    cached.RESULTS.clear()  # the analysis left the cache: the click still builds the file
    npz = np.load(__import__("io").BytesIO(cached.Model(key[1], key[2]).export_file(key[3], key[4], (), "npz")()))
    np.testing.assert_allclose(npz["cross"], result.cross, atol=1e-6)


def test_one_model_handle_serves_every_visitor(app_env):
    """``cached.Model`` names a model by its checkpoint and device only: equal handles are one key and share the one
    cached model; it holds no translator, analysis or visitor's state, and a download's callable keeps the handle
    and the request's key, nothing more (the model stays the cache's to evict, the bytes the budget's)."""
    import dataclasses

    from app.analysis.inference import Analysis
    from transformer import Transformer, Translator

    a, b = cached.Model(str(app_env), "cpu"), cached.Model(str(app_env), "cpu")
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert vars(a) == {"checkpoint": str(app_env), "device": "cpu"}
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.device = "cuda"  # type: ignore[misc]
    assert a.tr is b.tr and isinstance(a.tr, Translator) and vars(a) == vars(b)  # loading left nothing on the handle
    click = a.export_file("a dog runs.", DecodeSettings(beam_size=1), (), "json")
    kept = [cell.cell_contents for cell in click.__closure__]
    assert a in kept and all(isinstance(x, (cached.Model, str, DecodeSettings, tuple)) for x in kept), kept
    assert not any(isinstance(x, (Translator, Transformer, Analysis, bytes)) for x in kept)


# ------------------------------------------------------------------------------------------------ probe records


def test_a_probe_is_one_record_its_run_its_cost_its_words(app_env, tr, monkeypatch):
    """``Model.beyond`` reads everything of a probe from its record: the run, the estimate it counts, the words of a
    heavy slot and whether it always takes one; a cached result counts its estimate again and does not run."""
    from app import report
    from app.analysis import probes

    a = report.analysis_for(tr.translate("A man rides a red bike.", return_attention=True), tr, "A man rides.")
    ran, slots = [], []
    monkeypatch.setattr(cached, "heavy", lambda run, what: slots.append(what) or run())
    monkeypatch.setitem(probes.PROBES, "light_spy", probes.Probe(lambda t, x, n: ran.append(n) or 2 * n,
                                                                 lambda t, x, n: 7.0, "Spying…"))
    monkeypatch.setitem(probes.PROBES, "heavy_spy", probes.Probe(lambda t, x, n: ran.append(-n) or -n,
                                                                 lambda t, x, n: 3.0, "Spying hard…", heavy=True))
    model = cached.Model(str(app_env), "cpu")
    cached.RESULTS.clear()
    with ledger.request() as req:
        assert model.beyond("light_spy", a, 21) == 42 and req.spent == 7.0 and slots == []  # light: at once
        assert model.beyond("light_spy", a, 21) == 42 and req.spent == 14.0 and ran == [21]  # cached, counted
        assert model.beyond("heavy_spy", a, 5) == -5 and slots == ["Spying hard…"] and req.spent == 17.0
    with pytest.MonkeyPatch.context() as m, ledger.request():
        m.setattr(ledger, "LIGHT_WORK", 0.0)  # no longer light: the light probe waits for a slot too, in its words
        assert model.beyond("light_spy", a, 22) == 44 and slots[-1] == "Spying…"
    cached.RESULTS.clear()
    assert all(p.cost(tr, a, *args) >= 0 for p, args in [
        (probes.PROBES["lens"], ()), (probes.PROBES["alti"], ()), (probes.PROBES["flow"], ()),
        (probes.PROBES["norms"], ()), (probes.PROBES["beam_tree"], ()),
        (probes.PROBES["attributions"], ("integrated_gradients", 8, None)),
        (probes.PROBES["patching"], ("A man rides.", None, None, "denoise"))])
