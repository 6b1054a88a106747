"""Checkpoint directories: ``config.json``, ``model.safetensors``, ``tokenizer.model``, ``metadata.json``; no
pickle anywhere. ``transformer.load`` takes a local directory or a Hugging Face Hub repo id.

    files.py      the file names, size limits and low-level readers (config, weights, metadata, device)
    mapped.py     loading lean: weights memory-mapped into a model built on the meta device; dtype; memory check
    tokenizer.py  the sentencepiece tokenizer a checkpoint carries (``TokenizerProtocol`` for every family)
    save.py       writing a checkpoint directory
    families/     checking and opening one: our own format, Marian / OPUS-MT, NLLB-200 / M2M100 (the registry)
    hub.py        Hub downloads: the files a load reads, size limit, progress

This package's names are the public entry point (``from transformer.checkpoint import check_checkpoint_dir``).
"""

from .families import missing_files
from .families.ours import check_checkpoint_dir, load_model_dir, read_config
from .files import (
    CONFIG_FILE,
    METADATA_FILE,
    REQUIRED_FILES,
    TOKENIZER_FILE,
    WEIGHTS_FILE,
    CheckpointError,
    resolve_device,
)
from .save import save_checkpoint, save_weights

__all__ = [
    "CONFIG_FILE", "METADATA_FILE", "REQUIRED_FILES", "TOKENIZER_FILE", "WEIGHTS_FILE", "CheckpointError",
    "check_checkpoint_dir", "load_model_dir", "missing_files", "read_config", "resolve_device", "save_checkpoint",
    "save_weights",
]
