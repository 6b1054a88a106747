"""The views of the explorer, listed once: each one's name (also its value in the address), group, icon, line of
help, and what draws it. No Streamlit here: the page (``app.views``), the offline page (``python -m app.report``)
and a notebook (``app.notebook.show``) all read this list.

A view is drawn by one module:
- a description in :mod:`app.parts` (``described=``): the page draws its parts itself (``app.page.described``), and
  the offline page and a notebook draw the same parts;
- a module of ``app/views/`` (``page=``, its name there) with ``render(ctx)`` and ``PARAMS``: widgets of its own;
- or both, where the page adds widgets to a view that also works offline (its module then calls the description's
  functions for the same charts).

Adding a view is one module and one line in ``VIEWS``.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

from .parts import all_heads, drivers, flow, heatmap, layers, lines, masks, positional, source_prefix, step


@dataclass(frozen=True)
class View:
    """A view of the explorer: its name, group, icon, one line of help, what draws it (``page``: a module's name in
    ``app/views/``; ``described``: its description in :mod:`app.parts`; at least one), whether it needs a translated
    sentence, and the share of a request's work kept for its own jobs."""

    name: str
    group: str
    icon: str
    help: str
    page: str | None = None
    described: ModuleType | None = None
    needs_translation: bool = True
    work_share: float = 0.0  # the share of a request's work (ATTN_MAX_WORK) kept for the view's own jobs

    def __post_init__(self) -> None:
        assert self.page or self.described, f"{self.name}: nothing draws it"

    @property
    def offline(self) -> bool:
        """Whether the offline page and ``app.notebook.show`` draw this view: it has a description (what it needs
        of the model is computed when the page is built)."""
        return self.described is not None


ATTENTION, INSIDE, BEYOND, DATA, MODELS = ("Attention", "Inside the model", "Beyond weights", "Across data",
                                           "Models and export")
VIEWS: dict[str, View] = {v.name: v for v in [
    View("Heatmap", ATTENTION, ":material/grid_on:", "One head (or the mean of a layer) as a large heatmap.",
         "heatmap", heatmap, work_share=0.05),
    View("All heads", ATTENTION, ":material/apps:", "Every head of one attention type at a glance; click to open one.",
         "all_heads", all_heads, work_share=0.05),
    View("Lines", ATTENTION, ":material/timeline:", "Token-to-token lines of one layer, one colour per head.", "lines",
         lines),
    View("Head table", ATTENTION, ":material/table_rows:", "Per-head numbers (entropy, focus, position), sortable.",
         "head_table"),
    View("Step through", INSIDE, ":material/skip_next:", "Each output step: the candidates and where it looked.",
         "step", step),
    View("Inside a head", INSIDE, ":material/calculate:", "One head and one query, q·k to softmax, with the numbers.",
         "inside_head", work_share=0.05),
    View("Layer by layer", INSIDE, ":material/layers:", "The logit lens: when each output word becomes the top guess.",
         described=layers, work_share=0.1),
    View("Beam tree", INSIDE, ":material/account_tree:", "Every hypothesis beam search expanded, the chosen path red.",
         "beam_tree", work_share=0.5),
    View("Masks", INSIDE, ":material/visibility_off:", "The padding and causal masks, and how they combine.", "masks",
         masks),
    View("Positional encoding", INSIDE, ":material/waves:", "The sinusoidal position codes and the model's own table.",
         "positional", positional, needs_translation=False),
    View("What drives each word", BEYOND, ":material/bolt:", "Attribution of each output piece through the whole "
         "network.", "drivers", drivers, work_share=0.5),
    View("Source or prefix", BEYOND, ":material/call_split:", "How much of each output piece comes from the source "
         "and how much from the earlier output (ALTI+).", "source_prefix", source_prefix, work_share=0.5),
    View("How each word is built", BEYOND, ":material/route:", "The route of one output piece through every layer "
         "and head (information-flow graph).", "flow", flow, work_share=0.5),
    View("Ablation", BEYOND, ":material/content_cut:", "Switch heads off, translate again, compare.", "ablation",
         work_share=0.5),
    View("Heads across the test set", DATA, ":material/query_stats:", "Head importance, pruning and roles over a "
         "test set.", "heads"),
    View("Whole test set", DATA, ":material/dataset:", "Every line of a test set: its translation and the signals "
         "that find bad or made-up translations; select a row to open it.", "test_set", needs_translation=False,
         work_share=0.8),  # kept for a pasted list: 800 units in public mode, about 28 captions at beam 4
    View("Training evolution", DATA, ":material/history:", "This sentence's attention in the training snapshots.",
         "evolution", work_share=0.5),
    View("Export", MODELS, ":material/download:", "The weights as JSON or NPZ, and a link to what you saw.", "export"),
    View("Compare models", MODELS, ":material/compare:", "The same sentence through two models side by side.",
         "compare", work_share=2 / 3),
]}
GROUPS: dict[str, list[str]] = {}
for _view in VIEWS.values():
    GROUPS.setdefault(_view.group, []).append(_view.name)

# the descriptions by their short names (``--views``, ``show(result, "step")``), in the registry's order
DESCRIBED: dict[str, ModuleType] = {v.described.KEY: v.described for v in VIEWS.values() if v.described}
TITLES: dict[str, str] = {v.described.KEY: v.name for v in VIEWS.values() if v.described}


def group_of(view: str) -> str:
    """The group a view belongs to."""
    return VIEWS[view].group
