"""One reader for every number (and choice) a server takes from its environment (issue #66, section 4):
one rule for what unset, ``0``, ``inf`` and garbage mean, and a one-line message naming the variable."""

from __future__ import annotations

import math

import pytest

from transformer import environment
from transformer.environment import SettingError

# the rule, written out: (what the variable holds, a limit that may be lifted, a count) -> value, or None: refused
RULE = [
    ("", 7, 7),  # unset or empty: the default
    ("   ", 7, 7),
    ("250", 250.0, 250),
    (" 12 ", 12.0, 12),
    ("0.5", 0.5, None),
    ("1e3", 1000.0, None),
    ("1e-300", 1e-300, None),  # a tiny limit is the limit asked (its messages write it as 1e-300, never 0)
    ("0", math.inf, None),  # no limit where a limit may be lifted; never 0 threads or 0 heavy slots
    ("inf", math.inf, None),
    ("none", math.inf, None),
    ("Unlimited", math.inf, None),
    ("-3", None, None),
    ("nan", None, None),
    ("1e999", None, None),  # past a float
    ("junk", None, None),
    ("²", None, None),  # str.isdigit() is true for it, int() raises
    ("٣", None, None),  # int() reads it as 3: not ASCII
    ("1_000", None, None),
]


@pytest.mark.parametrize(("raw", "limit", "count"), RULE)
def test_one_rule_for_every_number(monkeypatch, raw, limit, count):
    monkeypatch.setenv("ATTN_SOMETHING", raw)
    for expected, kwargs in ((limit, {"unlimited": True, "unit": "MB"}), (count, {"whole": True})):
        if expected is None:
            with pytest.raises(SettingError) as err:
                environment.number("ATTN_SOMETHING", 7, **kwargs)
            message = str(err.value)
            assert message.startswith("ATTN_SOMETHING=") and "\n" not in message and len(message) < 160
        else:
            assert environment.number("ATTN_SOMETHING", 7, **kwargs) == expected


def test_a_quantity_that_is_no_limit_is_never_unlimited(monkeypatch):
    for raw in ("0", "inf"):
        monkeypatch.setenv("ATTN_CACHE_MB", raw)
        with pytest.raises(SettingError, match=f"ATTN_CACHE_MB='{raw}' is not understood: give a positive number"):
            environment.number("ATTN_CACHE_MB", 1024, unit="MB")


def test_a_choice_is_one_of_its_options(monkeypatch):
    monkeypatch.setenv("ATTN_DTYPE", " BFloat16 ")
    assert environment.choice("ATTN_DTYPE", ("float32", "bfloat16"), "float32") == "bfloat16"
    for raw in ("float16", "x" * 500):
        monkeypatch.setenv("ATTN_DTYPE", raw)
        with pytest.raises(SettingError) as err:
            environment.choice("ATTN_DTYPE", ("float32", "bfloat16"), "float32")
        assert str(err.value).startswith("ATTN_DTYPE='") and "float32 or bfloat16" in str(err.value)
        assert len(str(err.value)) < 160


def test_every_number_the_app_reads_goes_through_the_one_reader(monkeypatch):
    """Each variable of the page's settings refuses garbage with its name (the readers that once crashed on it:
    ATTN_CACHE_MB=inf raised OverflowError, ATTN_TORCH_THREADS=² and ATTN_HEAVY_JOBS=² ValueError, and
    ATTN_MAX_MODEL_MB=0 silently meant 3000), and no module reads ``os.environ`` for a number besides it."""
    pytest.importorskip("streamlit")
    from pathlib import Path

    from app.limits import budget, ledger, work
    from app.models import catalog
    from transformer.checkpoint import hub

    readers = {"ATTN_MAX_MODEL_MB": catalog.max_model_mb, "ATTN_DTYPE": catalog.model_dtype,
               "ATTN_MAX_DOWNLOAD_MB": hub.max_download_mb, "ATTN_CACHE_MB": budget.budget_bytes,
               "ATTN_MAX_WORK": ledger.max_work, "ATTN_WORK_MB": work.work_bytes, "ATTN_HEAVY_JOBS": ledger.heavy_slots}
    for name, read in readers.items():
        monkeypatch.setenv(name, "²")
        with pytest.raises(SettingError, match=f"^{name}='²' is not understood"):
            read()
        monkeypatch.delenv(name)
        read()
    monkeypatch.setenv("ATTN_MAX_MODEL_MB", "0")
    assert catalog.max_model_mb() == math.inf and ledger.max_work() > 0
    root = Path(__file__).resolve().parents[2]
    for path in [*root.joinpath("app").rglob("*.py"), *root.joinpath("transformer").rglob("*.py")]:
        text = path.read_text(encoding="utf-8")
        for name in readers:
            assert f'environ.get("{name}"' not in text, f"{path.name} reads {name} itself"


def test_a_tiny_limit_is_said_as_it_is_never_as_0_mb(monkeypatch, tiny_checkpoint):
    pytest.importorskip("streamlit")
    from app.models import catalog
    from transformer import CheckpointError

    monkeypatch.setenv("ATTN_MAX_MODEL_MB", "1e-300")
    with pytest.raises(CheckpointError, match=r"over this server's limit of 1e-300 MB \(ATTN_MAX_MODEL_MB\)"):
        catalog.check_model_size(tiny_checkpoint, "float32")
