"""Checkpoint averaging: the mean of step files, and a checkpoint re-exported with it (the command,
``python -m transformer.average``, is ``transformer/average.py``).

Training writes the weights of each validation to ``RUN_DIR/averaging/stepNNNNNNN.safetensors`` (tied
embeddings stored once), keeps the last ``--average`` of them and exports their mean. :func:`average_into`
re-exports an exported checkpoint directory with the mean of the last N step files of any directory, so the number
of checkpoints averaged can be chosen on val after the run (Vaswani et al. average the last 5 or 20; Wu et al.
the last 10).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from ..checkpoint.families.ours import load_model_dir
from ..checkpoint.files import CheckpointError
from ..checkpoint.save import save_checkpoint
from ..network.model import Transformer, missing_weights

STEP_GLOB = "step*.safetensors"


def unique_state(model: Transformer) -> dict[str, torch.Tensor]:
    """The state dict with tied weights stored once (safetensors refuses shared storage), on the CPU."""
    seen, out = set(), {}
    for name, tensor in model.state_dict().items():
        if tensor.data_ptr() in seen:
            continue
        seen.add(tensor.data_ptr())
        out[name] = tensor.detach().cpu().contiguous().clone()
    return out


def save_step_file(tensors: dict[str, torch.Tensor], path: Path) -> None:
    """Write a step file atomically (a crash leaves the old file or none, never half of one)."""
    tmp = path.with_name(path.name + ".tmp")
    save_file(tensors, str(tmp))
    os.replace(tmp, path)


def last_step_files(steps_dir: Path, last: int) -> list[Path]:
    """The newest ``last`` step files of a directory, oldest first (names sort by step)."""
    return sorted(steps_dir.glob(STEP_GLOB))[-max(last, 1):]


def average_states(paths: Sequence[Path]) -> dict[str, torch.Tensor]:
    """The element-wise mean (in fp32, summed in file order) of step files with the same tensors."""
    if not paths:
        raise CheckpointError("no step files to average")
    states = [load_file(str(p)) for p in paths]
    keys = set(states[0])
    for p, s in zip(paths, states):
        if set(s) != keys:
            raise CheckpointError(f"{p} holds other tensors than {paths[0]}")
    return {k: sum(s[k].float() for s in states) / len(states) for k in states[0]}


def load_averaged(model: Transformer, averaged: dict[str, torch.Tensor]) -> Transformer:
    """Load a (tied-weights-once) averaged state into ``model``; every weight must be covered."""
    try:
        missing, unexpected = model.load_state_dict(averaged, strict=False)
    except RuntimeError as err:  # a shape differs
        raise CheckpointError(f"the step files do not match config.json: {str(err).splitlines()[-1].strip()}") from err
    absent = missing_weights(model.config, missing)
    if unexpected or absent:
        raise CheckpointError(f"the step files do not match config.json (missing {sorted(absent)[:3]}, "
                              f"unexpected {sorted(unexpected)[:3]})")
    return model


def average_into(checkpoint: Path, steps_dir: Path, last: int, out: Path, command: str = "") -> Path:
    """Write ``out``: the checkpoint directory ``checkpoint`` (config, tokenizer, metadata, snapshots) with its
    weights replaced by the mean of the last ``last`` step files of ``steps_dir``."""
    paths = last_step_files(steps_dir, last)
    if len(paths) < last:
        raise CheckpointError(f"{steps_dir} holds {len(paths)} step files; --last {last} asks for more")
    model, tokenizer, metadata = load_model_dir(checkpoint)
    load_averaged(model, average_states(paths))
    metadata = dict(metadata)
    metadata["final_validation"] = {"averaged_checkpoints": [p.name for p in paths]}
    if command:
        metadata["commands_run"] = [*metadata.get("commands_run", []), command]
    if out.resolve() != checkpoint.resolve() and (checkpoint / "snapshots").is_dir():
        shutil.copytree(checkpoint / "snapshots", out / "snapshots", dirs_exist_ok=True)
    save_checkpoint(out, model, tokenizer, metadata)
    return out
