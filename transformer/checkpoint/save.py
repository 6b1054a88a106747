"""Saving a checkpoint directory: ``config.json``, ``model.safetensors`` (no pickle), ``tokenizer.model``,
``metadata.json``."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from safetensors.torch import save_model

from ..network.model import Transformer
from .files import CONFIG_FILE, METADATA_FILE, TOKENIZER_FILE, WEIGHTS_FILE
from .tokenizer import Tokenizer


def save_weights(model: Transformer, path: str | Path) -> None:
    """Write ``model``'s weights to a safetensors file, atomically (tied weights are stored once; weights laid out
    column-major for decoding, ``column_major_weights``, are written contiguous and keep their layout in
    ``model``)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    strided = [p for p in model.parameters() if not p.is_contiguous()]  # shared weights listed once
    layouts = [p.data for p in strided]
    try:
        for p in strided:
            p.data = p.data.contiguous()
        save_model(model, str(tmp))
    finally:
        for p, data in zip(strided, layouts):
            p.data = data
    os.replace(tmp, path)


def save_checkpoint(path: str | Path, model: Transformer, tokenizer: Tokenizer,
                    metadata: dict[str, Any] | None = None) -> Path:
    """Write a checkpoint directory."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    model.config.save(path / CONFIG_FILE)
    save_weights(model, path / WEIGHTS_FILE)
    tokenizer.save(path / TOKENIZER_FILE)
    (path / METADATA_FILE).write_text(json.dumps(metadata or {}, indent=2, ensure_ascii=False) + "\n",
                                      encoding="utf-8")
    return path
