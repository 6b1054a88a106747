"""Strangers' links and planted files on the page (issue #66, section 4): an address's integers are ASCII digits
(``²`` and ``٣`` are not understood, never an error page), a manifest's flag rule is read within the rule's caps
and what the page does with it is counted in the work ledger, and the model list checks a folder again only when
its files change."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest

st = pytest.importorskip("streamlit")

from app.analysis import tables  # noqa: E402
from app.limits import ledger, work  # noqa: E402
from app.models import catalog  # noqa: E402
from app.page import params, state  # noqa: E402
from app.views import whole_test_set_charts as test_set_charts  # noqa: E402
from transformer.interpret.flagging import MAX_CONDITIONS  # noqa: E402


@pytest.fixture()
def session(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("ATTN_PUBLIC", raising=False)
    st.session_state.clear()
    yield st.session_state
    st.session_state.clear()


@pytest.mark.parametrize(("view", "name", "key"), [("whole_test_set", "line", "testset_line"),
                                                   ("source_or_prefix", "cl", "source_prefix_layer")])
@pytest.mark.parametrize("text", ["²", "٣", "1²", "³", "１"])
def test_an_address_integer_is_ascii_digits_only(session, view, name, key, text):
    """``"²".isdigit()`` is true and ``int("²")`` raises; ``int("٣")`` is 3: neither is a number in an address."""
    ignored = state.adopt_url({"view": view, name: text})
    assert ignored == [(name, "")] and key not in session
    assert state.adopt_url({"view": view, name: "3"}) == [] and session[key] == 3


def test_any_exception_while_adopting_a_parameter_means_not_understood(session, monkeypatch):
    def slips(text: str) -> int:
        raise ZeroDivisionError(text)

    def refuses(value: object, ss: dict) -> str | None:
        raise KeyError(value)

    extra = (params.Param("zz", "_zz", slips), params.Param("zy", "_zy", params.int_in(0, 9), adopt=refuses))
    monkeypatch.setattr(params, "_FRAME", [*params.frame(), *extra])
    ignored = state.adopt_url({"view": "heatmap", "zz": "1", "zy": "2", "s": "2"})
    assert ignored == [("zz", ""), ("zy", "")] and "_zz" not in session and session[state.SENTENCE] == 2


def rule(conditions: int) -> dict:
    return {"any": [{"column": "seq_logprob", "op": "<=", "value": -5.0 - i / 1000} for i in range(conditions - 1)]
            + [{"column": "source_share", "op": "<=", "value": 0.4}], "rule": "..."}


def test_a_manifests_rule_over_the_cap_is_refused_and_said(session):
    planted = {"model": {"name": "m", "flag_rule": rule(60_000)}}
    assert tables.rule_of(planted) == {}
    assert tables.rule_problem(planted) == "a flag rule has at most 32 conditions, not 60,000"
    assert test_set_charts.beyond_the_line(flagged_table(3_000), rule(60_000), ["source_share"]) == []  # was 150-190 s
    fine = {"model": {"flag_rule": rule(MAX_CONDITIONS)}}
    assert tables.rule_of(fine) == fine["model"]["flag_rule"] and tables.rule_problem(fine) is None


def test_a_manifests_400_digit_number_is_refused_not_an_overflow(session):
    for planted in ({"any": [{"column": "seq_logprob", "op": "<=", "value": 10**400}]},
                    {"any": [], "score": {"threshold": 10**400, "signals": {}}}):
        manifest = {"model": {"flag_rule": planted}}
        assert tables.rule_of(manifest) == {} and tables.thresholds(tables.rule_of(manifest)) == {}
        assert "9" * 5 not in tables.rule_problem(manifest) and "1000000" not in tables.rule_problem(manifest)


def flagged_table(rows: int) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    return pd.DataFrame({"id": np.arange(rows), "flag": np.ones(rows, dtype=bool),
                         "seq_logprob": rng.uniform(-8, -1, rows), "source_share": rng.uniform(0, 1, rows)})


def test_the_lines_beyond_a_threshold_are_counted_as_work_and_said_as_before(session, monkeypatch):
    """The flagged lines x conditions are counted in the request's work; the lines beyond the source-share line and
    the conditions that flagged them are those a row-by-row test finds (the oracle: ``Condition.holds``)."""
    from transformer.interpret.flagging import FlagRule

    frame, asked = flagged_table(3_000), rule(MAX_CONDITIONS)
    frame.loc[5, "seq_logprob"] = np.nan  # missing: never holds
    parsed = FlagRule.from_json(asked)
    records = frame.to_dict("records")
    beyond = [r for r in records if not parsed.conditions[-1].holds(r)]
    fired = [c for c in parsed.conditions[:-1] if any(c.holds(r) for r in beyond)]
    monkeypatch.setenv("ATTN_MAX_WORK", "1000")
    with ledger.request() as req:
        said = test_set_charts.beyond_the_line(frame, asked, ["source_share"])
        assert req.spent == pytest.approx(work.rule_work(3_000, MAX_CONDITIONS)) and req.spent > 0
    assert len(said) == 1 and said[0].startswith(f"{len(beyond):,} flagged lines lie on the other side")
    assert said[0].count(" or ") == len(fired) - 1
    monkeypatch.setenv("ATTN_MAX_WORK", "0.5")  # less than the rule's work: not said, and the notice says why
    with ledger.request() as req:
        assert test_set_charts.beyond_the_line(frame, asked, ["source_share"]) == []
        assert "which flagged lines lie beyond the flag's lines is not said" in req.notice()


def test_the_model_list_checks_a_folder_again_only_when_its_files_change(tmp_path, tiny_checkpoint, monkeypatch):
    import shutil

    folder = tmp_path / "checkpoints" / "tiny"
    shutil.copytree(tiny_checkpoint, folder)
    monkeypatch.setattr(catalog, "REPO_ROOT", tmp_path)
    monkeypatch.delenv("ATTN_PUBLIC", raising=False)
    checked = []
    real = catalog._checkpoint_info
    monkeypatch.setattr(catalog, "_checkpoint_info", lambda f, n: checked.append(n) or real(f, n))
    catalog._checked.cache_clear()
    first = catalog.list_checkpoints()
    assert catalog.list_checkpoints() == first and checked == ["checkpoints/tiny"] and first[0].problem is None
    weights = folder / "model.safetensors"
    data = weights.read_bytes()
    os.unlink(weights)
    weights.write_bytes(data[: len(data) // 2])  # a changed file: checked again, and found damaged
    again = catalog.list_checkpoints()
    assert checked == ["checkpoints/tiny"] * 2 and "truncated or corrupt" in again[0].problem


@pytest.mark.parametrize(("name", "raw"), [("ATTN_TORCH_THREADS", "²"), ("ATTN_HEAVY_JOBS", "²"),
                                           ("ATTN_CACHE_MB", "inf"), ("ATTN_DTYPE", "float16"),
                                           ("ATTN_GEMM", "fastest"), ("ATTN_DEVICE", "gpu")])
def test_a_setting_the_server_does_not_understand_stops_the_page_with_one_line_naming_it(app_env, monkeypatch,
                                                                                         name, raw):
    from conftest import new_app, plain

    monkeypatch.setenv(name, raw)
    at = new_app()
    assert not at.exception
    said = [plain(e.value) for e in at.error]
    assert len(said) == 1 and f"{name}='{raw}' is not understood" in said[0], said


def test_a_snapshot_that_is_a_fifo_is_refused_before_safetensors_opens_it(tr, tmp_path, monkeypatch):
    """safetensors opens a file holding the interpreter's lock: on a FIFO the whole server would wait for a writer.
    The snapshot's header is checked first (a regular file, within MAX_HEADER_BYTES), so safetensors never sees it."""
    import safetensors.torch

    from app.analysis import probes
    from transformer import CheckpointError

    os.mkfifo(tmp_path / "step0000001.safetensors")
    monkeypatch.setattr(safetensors.torch, "load_file", lambda *a, **k: pytest.fail("safetensors opened a FIFO"))
    with pytest.raises(CheckpointError, match="not a regular file"):
        probes.load_snapshot_model(tr, tmp_path / "step0000001.safetensors")
    assert probes.snapshot_step("step٣.safetensors") == -1 and probes.snapshot_step("step0000038.safetensors") == 38
