"""The views: one module each, with ``render(ctx)``. Adding a view = one module and one line in ``VIEWS``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..state import COMPARE_VIEW, ViewContext
from . import (
    ablation,
    all_heads,
    beam_tree,
    compare,
    drivers,
    evolution,
    export,
    head_table,
    heads,
    heatmap,
    inside_head,
    layers,
    lines,
    masks,
    positional,
    step,
)


@dataclass(frozen=True)
class View:
    """A view of the explorer: its name (also its URL value), icon, and whether it needs a translated sentence."""

    name: str
    icon: str
    render: Callable[[ViewContext], None]
    needs_translation: bool = True


VIEWS: dict[str, View] = {v.name: v for v in [
    View("Heatmap", ":material/grid_on:", heatmap.render),
    View("All heads", ":material/apps:", all_heads.render),
    View("Lines", ":material/timeline:", lines.render),
    View("Step through", ":material/skip_next:", step.render),
    View("Head table", ":material/table_rows:", head_table.render),
    View("Ablation", ":material/content_cut:", ablation.render),
    View("Masks", ":material/visibility_off:", masks.render),
    View("Positional encoding", ":material/waves:", positional.render, needs_translation=False),
    View("Training evolution", ":material/history:", evolution.render),
    View("Inside a head", ":material/calculate:", inside_head.render),
    View("What drives each word", ":material/bolt:", drivers.render),
    View("Layer by layer", ":material/layers:", layers.render),
    View("Beam tree", ":material/account_tree:", beam_tree.render),
    View("Heads across the test set", ":material/query_stats:", heads.render),
    View(COMPARE_VIEW, ":material/compare:", compare.render),
    View("Export", ":material/download:", export.render),
]}
