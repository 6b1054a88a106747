"""Checkpoint averaging (``python -m transformer.average``): the re-exported weights are the element-wise mean of
the chosen step files, checked against each model's own state dict; bad requests are clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from transformer import Transformer, TransformerConfig, load_model_dir, save_checkpoint
from transformer.average import main
from transformer.training.average import save_step_file, unique_state


def models(tokenizer, n: int, **overrides) -> list[Transformer]:
    v = tokenizer.vocab_size
    config = TransformerConfig(**{**dict(src_vocab_size=v, tgt_vocab_size=v, d_model=16, n_heads=2,
                                         n_encoder_layers=1, n_decoder_layers=1, d_ff=32, max_len=20), **overrides})
    out = []
    for seed in range(n):
        torch.manual_seed(seed)
        out.append(Transformer(config).eval())
    return out


@pytest.fixture
def run(tmp_path: Path, tiny_tokenizer) -> tuple[Path, Path, list[Transformer]]:
    """An exported checkpoint (the first model, with a snapshot) and four step files, steps 100..400."""
    ms = models(tiny_tokenizer, 4)
    steps = tmp_path / "steps"
    steps.mkdir()
    for i, m in enumerate(ms):
        save_step_file(unique_state(m), steps / f"step{(i + 1) * 100:07d}.safetensors")
    export = save_checkpoint(tmp_path / "export", ms[0], tiny_tokenizer, {"commands_run": ["python -m x"],
                                                                          "final_validation": {"val_bleu": 1.0}})
    (export / "snapshots").mkdir()
    half = {k: v.half() for k, v in unique_state(ms[0]).items()}
    save_step_file(half, export / "snapshots" / "step0000001.safetensors")
    return export, steps, ms


def test_average_of_the_last_n_step_files(run, tmp_path: Path) -> None:
    export, steps, ms = run
    out = tmp_path / "avg3"
    assert main(["--checkpoint", str(export), "--steps-dir", str(steps), "--last", "3", "--out", str(out)]) == 0
    loaded, _, meta = load_model_dir(out)
    expected = {k: torch.stack([m.state_dict()[k] for m in ms[1:]]).mean(0) for k in ms[0].state_dict()}
    got = loaded.state_dict()
    for name, value in expected.items():  # tied embeddings included: generator.weight is the mean too
        torch.testing.assert_close(got[name], value, rtol=0, atol=1e-7, msg=name)
    w = "encoder_layers.0.ffn.linear1.weight"
    assert not torch.allclose(got[w], ms[0].state_dict()[w])  # the export's own weights are replaced
    assert meta["final_validation"] == {"averaged_checkpoints": ["step0000200.safetensors", "step0000300.safetensors",
                                                                 "step0000400.safetensors"]}
    assert meta["commands_run"][0] == "python -m x"
    assert meta["commands_run"][1].startswith("python -m transformer.average --checkpoint")
    assert (out / "snapshots" / "step0000001.safetensors").is_file()


def test_asking_for_more_step_files_than_there_are_is_an_error(run, tmp_path: Path, capsys) -> None:
    export, steps, _ = run
    assert main(["--checkpoint", str(export), "--steps-dir", str(steps), "--last", "5",
                 "--out", str(tmp_path / "avg5")]) == 1
    assert "holds 4 step files; --last 5 asks for more" in capsys.readouterr().err
    assert not (tmp_path / "avg5").exists()


def test_step_files_of_another_model_are_refused(run, tmp_path: Path, tiny_tokenizer, capsys) -> None:
    export, steps, _ = run
    other = models(tiny_tokenizer, 1, d_ff=48)[0]
    save_step_file(unique_state(other), steps / "step0000500.safetensors")
    assert main(["--checkpoint", str(export), "--steps-dir", str(steps), "--last", "1",
                 "--out", str(tmp_path / "bad")]) == 1
    assert "the step files do not match config.json" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()


def test_mixed_step_files_are_refused(run, tmp_path: Path, tiny_tokenizer, capsys) -> None:
    export, steps, _ = run
    other = models(tiny_tokenizer, 1, share_embeddings=False)[0]
    save_step_file(unique_state(other), steps / "step0000500.safetensors")
    assert main(["--checkpoint", str(export), "--steps-dir", str(steps), "--last", "2",
                 "--out", str(tmp_path / "mixed")]) == 1
    assert "holds other tensors than" in capsys.readouterr().err
    assert json.loads((export / "metadata.json").read_text())["final_validation"] == {"val_bleu": 1.0}


@pytest.mark.parametrize("stored_as", ["src_embed.weight", "tgt_embed.weight", "generator.weight"])
def test_a_tied_weight_loads_under_any_one_of_its_names(stored_as: str) -> None:
    """Step files keep the tied table under ``src_embed.weight``; ``save_checkpoint`` (safetensors' ``save_model``)
    under ``generator.weight``: either loads, and a file with none of the names is refused, naming it."""
    from conftest import tiny_model

    from transformer import CheckpointError
    from transformer.network.model import TIED_WEIGHTS
    from transformer.training.average import load_averaged

    source = tiny_model(seed=3)
    state = {k: v for k, v in source.state_dict().items() if k not in TIED_WEIGHTS}
    loaded = load_averaged(tiny_model(seed=4), {**state, stored_as: source.src_embed.weight.detach().clone()})
    for name in TIED_WEIGHTS:
        assert torch.equal(loaded.get_parameter(name), source.src_embed.weight)
    with pytest.raises(CheckpointError, match="src_embed.weight"):
        load_averaged(tiny_model(seed=4), state)
    untied = tiny_model(seed=5, share_embeddings=False)
    with pytest.raises(CheckpointError, match="generator.weight"):  # untied: each table is its own
        load_averaged(untied, {k: v for k, v in untied.state_dict().items() if k != "generator.weight"})
