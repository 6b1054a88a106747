"""A Hugging Face checkpoint as one of ours (:func:`convert`; the command, ``python -m transformer.convert --from-hf
ID_OR_DIR --out DIR``, is ``transformer/convert.py``, whose help says what is written)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from ..checkpoint.families import family_of_dir
from ..checkpoint.files import CONFIG_FILE, METADATA_FILE, WEIGHTS_FILE, CheckpointError
from ..checkpoint.hub import resolve_checkpoint_dir
from ..checkpoint.save import save_weights
from ..translator import Translator, load


def convert(source: str, out: str | Path) -> Translator:
    """Convert ``source`` (a directory or Hub id of a Hugging Face checkpoint of a registered family) into the
    checkpoint directory ``out``."""
    path = resolve_checkpoint_dir(source)
    family = family_of_dir(path)
    if not family.model_types:
        raise CheckpointError(f"{source} is not a Hugging Face checkpoint (its config.json has no model_type): "
                              "it is one of ours already")
    tr = load(path, device="cpu")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tr.config.save(out / CONFIG_FILE)
    save_weights(tr.model, out / WEIGHTS_FILE)
    for name in family.copied_files:
        if (path / name).is_file():
            shutil.copyfile(path / name, out / name)
    metadata = {**tr.metadata, "converted_from": str(source), "converted_by": "python -m transformer.convert",
                "parameters": tr.model.num_parameters()}
    (out / METADATA_FILE).write_text(json.dumps(metadata, indent=2) + "\n", encoding="utf-8")
    return load(out, device="cpu")
