"""``bench.paired``: the other tree imported apart from this one, and the paired CPU-time measurement."""

from __future__ import annotations

import sys
from pathlib import Path

from bench.paired import import_base, main, paired

ROOT = Path(__file__).resolve().parents[2]


def test_the_base_tree_is_a_separate_package(tmp_path):
    import transformer

    try:
        base = import_base(ROOT, tmp_path)
        assert base.__name__ == "transformer_base" and base.Transformer is not transformer.Transformer
        assert Path(base.__file__).parent == tmp_path / "transformer_base"
    finally:
        sys.path.remove(str(tmp_path))
        for name in [m for m in sys.modules if m.split(".")[0] == "transformer_base"]:
            del sys.modules[name]


def test_paired_counts_cpu_time_of_each_side():
    calls = []

    def spin(n: int):
        return lambda: calls.append(sum(range(n)))

    out = paired(spin(20000), spin(200000), 4)
    assert out["pairs"] == 4 and len(calls) == 10  # one warm-up each, then 4 pairs
    assert out["ours_ms"] > out["base_ms"] and out["ratio"] > 2  # ten times the work


def test_a_tree_without_the_package_is_refused(tmp_path, capsys):
    assert main(["--base", str(tmp_path)]) == 1
    assert "no transformer/ package" in capsys.readouterr().err
