"""Marian / OPUS-MT checkpoints: moved to ``transformer.families.marian`` (the family registry); the names stay
importable from here."""

from .families.marian import (  # noqa: F401
    FAMILY,
    config_from_marian,
    is_marian_dir,
    load_marian_model,
    read_marian_weights,
    state_dict_from_marian,
)
