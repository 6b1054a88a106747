"""The views on the page. Each view of the registry (:mod:`app.registry`, one line each) is drawn by its module here
(``render(ctx)`` and its address parameters ``PARAMS``), or, when it has only a description in :mod:`app.parts`, by
:class:`app.page.described.Page`, which draws the same parts as the offline page and a notebook. Adding a view is
one module and its registry line."""

from __future__ import annotations

from importlib import import_module
from types import ModuleType

from ..page import described, params
from ..page.state import ViewContext
from ..registry import GROUPS, VIEWS, View, group_of

__all__ = ["GROUPS", "PAGES", "VIEWS", "View", "group_of", "render"]


def _page(view: View) -> ModuleType | described.Page:
    """What draws ``view`` on the page: its module in this package, else its description."""
    if view.page:
        return import_module(f"{__name__}.{view.key}")
    return described.Page(view.key, view.described)


PAGES: dict[str, ModuleType | described.Page] = {key: _page(view) for key, view in VIEWS.items()}  # by view key
for _key, _drawn in PAGES.items():
    params.register(_key, _drawn.PARAMS, VIEWS[_key].title)


def render(key: str, ctx: ViewContext) -> None:
    """Draw the view of the registry whose key is ``key``."""
    PAGES[key].render(ctx)
