"""The views: one module each, with ``render(ctx)`` and its address parameters ``PARAMS``. Adding a view = one
module and one line in ``VIEWS``; a view that also works outside the page (the offline page, a notebook) is
described once in :mod:`app.parts`, which its module draws from too (``View.offline``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

from .. import parts
from ..page import params
from ..page.state import ViewContext
from . import (
    ablation,
    all_heads,
    beam_tree,
    compare,
    drivers,
    evolution,
    export,
    flow,
    head_table,
    heads,
    heatmap,
    inside_head,
    layers,
    lines,
    masks,
    positional,
    source_prefix,
    step,
    test_set,
)


@dataclass(frozen=True)
class View:
    """A view of the explorer: its name (also its URL value), group, icon, one line of help, its module (``render``
    and ``PARAMS``), and whether it needs a translated sentence."""

    name: str
    group: str
    icon: str
    help: str
    module: ModuleType
    needs_translation: bool = True
    work_share: float = 0.0  # the share of a request's work (ATTN_MAX_WORK) kept for the view's own jobs

    @property
    def render(self) -> Callable[[ViewContext], None]:
        return self.module.render

    @property
    def offline(self) -> bool:
        """Whether the offline page (``python -m app.report``) and ``app.notebook.show`` draw this view: it has a
        description in :mod:`app.parts` (what it needs of the model is computed when the page is built)."""
        return self.name in parts.BY_NAME


ATTENTION, INSIDE, BEYOND, DATA, MODELS = ("Attention", "Inside the model", "Beyond weights", "Across data",
                                           "Models and export")
VIEWS: dict[str, View] = {v.name: v for v in [
    View("Heatmap", ATTENTION, ":material/grid_on:", "One head (or the mean of a layer) as a large heatmap.", heatmap,
         work_share=0.05),
    View("All heads", ATTENTION, ":material/apps:", "Every head of one attention type at a glance; click to open one.",
         all_heads, work_share=0.05),
    View("Lines", ATTENTION, ":material/timeline:", "Token-to-token lines of one layer, one colour per head.", lines),
    View("Head table", ATTENTION, ":material/table_rows:", "Per-head numbers (entropy, focus, position), sortable.",
         head_table),
    View("Step through", INSIDE, ":material/skip_next:", "Each output step: the candidates and where it looked.",
         step),
    View("Inside a head", INSIDE, ":material/calculate:", "One head and one query, q·k to softmax, with the numbers.",
         inside_head, work_share=0.05),
    View("Layer by layer", INSIDE, ":material/layers:", "The logit lens: when each output word becomes the top guess.",
         layers, work_share=0.1),
    View("Beam tree", INSIDE, ":material/account_tree:", "Every hypothesis beam search expanded, the chosen path red.",
         beam_tree, work_share=0.5),
    View("Masks", INSIDE, ":material/visibility_off:", "The padding and causal masks, and how they combine.", masks),
    View("Positional encoding", INSIDE, ":material/waves:", "The sinusoidal position codes and the model's own table.",
         positional, needs_translation=False),
    View("What drives each word", BEYOND, ":material/bolt:", "Attribution of each output piece through the whole "
         "network.", drivers, work_share=0.5),
    View("Source or prefix", BEYOND, ":material/call_split:", "How much of each output piece comes from the source "
         "and how much from the earlier output (ALTI+).", source_prefix, work_share=0.5),
    View("How each word is built", BEYOND, ":material/route:", "The route of one output piece through every layer "
         "and head (information-flow graph).", flow, work_share=0.5),
    View("Ablation", BEYOND, ":material/content_cut:", "Switch heads off, translate again, compare.", ablation,
         work_share=0.5),
    View("Heads across the test set", DATA, ":material/query_stats:", "Head importance, pruning and roles over a "
         "test set.", heads),
    View("Whole test set", DATA, ":material/dataset:", "Every line of a test set: its translation and the signals "
         "that find bad or made-up translations; select a row to open it.", test_set, needs_translation=False,
         work_share=test_set.WORK_SHARE),
    View("Training evolution", DATA, ":material/history:", "This sentence's attention in the training snapshots.",
         evolution, work_share=0.5),
    View("Export", MODELS, ":material/download:", "The weights as JSON or NPZ, and a link to what you saw.", export),
    View("Compare models", MODELS, ":material/compare:", "The same sentence through two models side by side.",
         compare, work_share=2 / 3),
]}
GROUPS: dict[str, list[str]] = {}
for _view in VIEWS.values():
    GROUPS.setdefault(_view.group, []).append(_view.name)
    params.register(_view.name, _view.module.PARAMS)


def group_of(view: str) -> str:
    """The group a view belongs to."""
    return VIEWS[view].group
