"""The views of the explorer, listed once: each one's key (the code's and the address's name for it: ``view=heatmap``;
a link that names a title instead still opens it, :func:`view_key`), title (what people read), group, icon, line of
help, and what draws it. No Streamlit here: the page (``app.views``), the offline page (``python -m app.report``)
and a notebook (``app.notebook.show``) all read this list.

A view is drawn by one module:
- a description in :mod:`app.parts` (``described=``): the page draws its parts itself (``app.page.described``), and
  the offline page and a notebook draw the same parts;
- a module of ``app/views/`` (``page=True``; the module is named by the view's key) with ``render(ctx)`` and
  ``PARAMS``: widgets of its own;
- or both, where the page adds widgets to a view that also works offline (its module then calls the description's
  functions for the same charts).

Adding a view is one module and one line in ``VIEWS``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from types import ModuleType

from .parts import (
    all_heads,
    heatmap,
    how_each_word_is_built,
    layer_by_layer,
    lines,
    masks,
    positional_encoding,
    source_or_prefix,
    step_through,
    what_carries_the_change,
    what_drives_each_word,
)


@dataclass(frozen=True)
class View:
    """A view of the explorer: its key (the code's and the address's name for it, lower case and stable:
    ``heatmap``, ``whole_test_set``) and its title (what people read: "Whole test set"), group, icon, one line of
    help, what draws it (``page``: its module in ``app/views/``, named by its key; ``described``: its description in
    :mod:`app.parts`, the module named by its key too; at least one), whether it needs a translated sentence, and the
    share of a request's work kept for its own jobs."""

    key: str
    title: str
    group: str
    icon: str
    help: str
    page: bool = False
    described: ModuleType | None = None
    needs_translation: bool = True
    work_share: float = 0.0  # the share of a request's work (ATTN_MAX_WORK) kept for the view's own jobs

    def __post_init__(self) -> None:
        assert self.page or self.described, f"{self.key}: nothing draws it"
        assert re.fullmatch(r"[a-z][a-z0-9_]*", self.key), f"{self.key}: a key is lower case, words joined by _"
        assert not self.described or self.described.__name__.rpartition(".")[2] == self.key, f"{self.key}: one name"

    @property
    def offline(self) -> bool:
        """Whether the offline page and ``app.notebook.show`` draw this view: it has a description (what it needs
        of the model is computed when the page is built)."""
        return self.described is not None


ATTENTION, INSIDE, BEYOND, DATA, MODELS = ("Attention", "Inside the model", "Beyond weights", "Across data",
                                           "Models and export")
VIEWS: dict[str, View] = {v.key: v for v in [
    View("heatmap", "Heatmap", ATTENTION, ":material/grid_on:",
         "One head (or the mean of a layer) as a large heatmap.", page=True, described=heatmap, work_share=0.05),
    View("all_heads", "All heads", ATTENTION, ":material/apps:",
         "Every head of one attention type at a glance; click to open one.", page=True, described=all_heads,
         work_share=0.05),
    View("lines", "Lines", ATTENTION, ":material/timeline:",
         "Token-to-token lines of one layer, one colour per head.", page=True, described=lines),
    View("head_table", "Head table", ATTENTION, ":material/table_rows:",
         "Per-head numbers (entropy, focus, position), sortable.", page=True),
    View("step_through", "Step through", INSIDE, ":material/skip_next:",
         "Each output step: the candidates and where it looked.", page=True, described=step_through),
    View("inside_a_head", "Inside a head", INSIDE, ":material/calculate:",
         "One head and one query, q·k to softmax, with the numbers.", page=True, work_share=0.05),
    View("layer_by_layer", "Layer by layer", INSIDE, ":material/layers:",
         "The logit lens: when each output word becomes the top guess.", described=layer_by_layer, work_share=0.1),
    View("beam_tree", "Beam tree", INSIDE, ":material/account_tree:",
         "Every hypothesis beam search expanded, the chosen path red.", page=True, work_share=0.5),
    View("masks", "Masks", INSIDE, ":material/visibility_off:",
         "The padding and causal masks, and how they combine.", page=True, described=masks),
    View("positional_encoding", "Positional encoding", INSIDE, ":material/waves:",
         "The sinusoidal position codes and the model's own table.", page=True,
         described=positional_encoding,
         needs_translation=False),
    View("what_drives_each_word", "What drives each word", BEYOND, ":material/bolt:",
         "Attribution of each output piece through the whole network.", page=True,
         described=what_drives_each_word, work_share=0.5),
    View("source_or_prefix", "Source or prefix", BEYOND, ":material/call_split:",
         "How much of each output piece comes from the source and how much from the earlier output (ALTI+).",
         page=True, described=source_or_prefix, work_share=0.5),
    View("how_each_word_is_built", "How each word is built", BEYOND, ":material/route:",
         "The route of one output piece through every layer and head (information-flow graph).", page=True,
         described=how_each_word_is_built, work_share=0.5),
    View("what_carries_the_change", "What carries the change", BEYOND, ":material/swap_horiz:",
         "Swap one source word: which layers, positions and heads carry the change to the output (activation "
         "patching).", page=True, described=what_carries_the_change,
         work_share=0.5),
    View("ablation", "Ablation", BEYOND, ":material/content_cut:",
         "Switch heads off, translate again, compare.", page=True, work_share=0.5),
    View("heads_across_the_test_set", "Heads across the test set", DATA, ":material/query_stats:",
         "Head importance, pruning and roles over a test set.", page=True),
    View("whole_test_set", "Whole test set", DATA, ":material/dataset:",
         "Every line of a test set: its translation and the signals that find bad or made-up translations; select a "
         "row to open it.", page=True, needs_translation=False,
         work_share=0.8),  # kept for a pasted list: 800 units in public mode, about 28 captions at beam 4
    View("training_evolution", "Training evolution", DATA, ":material/history:",
         "This sentence's attention in the training snapshots.", page=True, work_share=0.5),
    View("export", "Export", MODELS, ":material/download:",
         "The weights as JSON or NPZ, and a link to what you saw.", page=True),
    View("compare_models", "Compare models", MODELS, ":material/compare:",
         "The same sentence through two models side by side.", page=True, work_share=2 / 3),
]}
GROUPS: dict[str, list[str]] = {}  # each group's views, by key
for _view in VIEWS.values():
    GROUPS.setdefault(_view.group, []).append(_view.key)
_BY_TITLE = {v.title.casefold(): v.key for v in VIEWS.values()}
# the short names the descriptions had before each view had one name (``show(result, "step")``, ``--views lens``,
# an old link's ``view=step``): still accepted, each resolved to its view's key by :func:`view_key`, never shown
ALIASES: dict[str, str] = {"step": "step_through", "lens": "layer_by_layer", "attribution": "what_drives_each_word",
                           "positional": "positional_encoding", "source_prefix": "source_or_prefix",
                           "flow": "how_each_word_is_built", "patching": "what_carries_the_change"}
assert set(ALIASES.values()) <= set(VIEWS) and not set(ALIASES) & set(VIEWS)

# the views with a description (the offline page's, ``--views``, ``show(result, "step_through")``), by key, in the
# registry's order
DESCRIBED: dict[str, ModuleType] = {v.key: v.described for v in VIEWS.values() if v.described}
TITLES: dict[str, str] = {v.key: v.title for v in VIEWS.values() if v.described}


def view_key(text: str) -> str | None:
    """The key of the view ``text`` names: its key, an old short name (:data:`ALIASES`: ``step``), or its title (a
    link written before the keys, or by hand: ``view=Whole+test+set``; any case); None for anything else."""
    text = str(text).strip()
    if text in VIEWS:
        return text
    return ALIASES.get(text) or _BY_TITLE.get(text.casefold())


def group_of(view: str) -> str:
    """The group a view (its key) belongs to."""
    return VIEWS[view].group
