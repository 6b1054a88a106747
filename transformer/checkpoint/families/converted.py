"""The families whose Hugging Face checkpoints we open and convert, told apart by ``config.json``'s ``model_type``.

Adding a family = its module with a ``FAMILY`` object meeting :class:`~.shared.Family` + one line in
:data:`CONVERTED` + its tests (see ``docs/families.md``). A directory with no ``model_type`` is one of ours
(:mod:`.ours`).
"""

from __future__ import annotations

from typing import Any

from ..files import CheckpointError
from . import m2m100, marian
from .shared import Family

CONVERTED: tuple[Family, ...] = (marian.FAMILY, m2m100.FAMILY)


def converted_family(config_json: dict[str, Any] | None) -> Family | None:
    """The converted family a checkpoint's ``config.json`` names by ``model_type``; None without one (ours). An
    unknown ``model_type`` is a ``CheckpointError`` naming the ones we open."""
    model_type = (config_json or {}).get("model_type")
    if model_type is None:
        return None
    for family in CONVERTED:
        if model_type in family.model_types:
            return family
    known = sorted(t for f in CONVERTED for t in f.model_types)
    raise CheckpointError(f"model_type {model_type!r} is not a family this explorer opens (it opens our own "
                          f"checkpoints and model_type {', '.join(map(repr, known))})")
