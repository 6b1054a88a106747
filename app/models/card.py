"""What the sidebar and Training evolution say about a loaded model, from its model card (``README.md``) and
``metadata.json``: its sizes and scores in plain words, and how its weights were really made (the resumed training
runs, the averaged checkpoints, the decoding chosen on val)."""

from __future__ import annotations

import re
from pathlib import Path

from transformer import Translator


def model_facts(tr: Translator) -> dict[str, object]:
    """Sizes and scores for the sidebar (scores from the model card, ``metadata.json``)."""
    cfg = tr.config
    facts: dict[str, object] = {
        "d_model": cfg.d_model, "heads": cfg.n_heads, "encoder layers": cfg.n_encoder_layers,
        "decoder layers": cfg.n_decoder_layers, "d_ff": cfg.d_ff, "vocabulary": cfg.tgt_vocab_size,
        "max tokens": cfg.max_len, "parameters": f"{tr.model.num_parameters():,}", "device": str(tr.device),
    }
    meta = tr.metadata or {}
    if meta.get("language_pair"):
        facts["languages"] = str(meta["language_pair"])
    return facts


SPLIT_NAMES = {"final_validation": "validation, end of training", "val_beam5": "validation",
               "test_2016_flickr": "test (Flickr 2016)", "test_2017_flickr": "test (Flickr 2017)",
               "test_2017_mscoco": "test (MSCOCO 2017)", "test_2018_flickr": "test (Flickr 2018)"}
METRIC_NAMES = {"bleu": "BLEU", "chrf": "chrF", "bleu_lc_tok": "BLEU, lowercased and tokenized", "beam": "beam size",
                "alpha": "length penalty α", "sentences": "sentences", "seconds": "seconds", "val_bleu": "BLEU",
                "val_loss": "loss", "loss": "loss"}


DATA_SETS = {"val": "the validation set", "train": "the training set"}  # "chosen on ..."
DATA_SPLITS = {"val": "the validation sentences", "train": "the training sentences",
               **{k: f"the {v} sentences" for k, v in SPLIT_NAMES.items() if k.startswith("test")}}


def split_words(split: object) -> str:
    """A data set's split in plain words: "the validation sentences" for ``val``, "the test (Flickr 2016)
    sentences" for ``test_2016_flickr``; another name as it is."""
    return DATA_SPLITS.get(str(split), str(split))


def percentile_words(percentile: float) -> str:
    """``1`` -> "the lowest 1%": a percentile of the scores as the share of them below it."""
    return f"the lowest {percentile:g}%"


def _plain(key: str, names: dict[str, str]) -> str:
    return names.get(key, key.replace("_", " "))


def model_scores(tr: Translator) -> dict[str, float]:
    """Numeric scores in the model card, named in plain words ("test (Flickr 2016): BLEU"): validation at the end of
    training (``final_validation``), the val scores of the shipped decoding (``val_beam5``) and any test scores."""
    meta = tr.metadata or {}
    scores: dict[str, float] = {}
    for key, value in (meta.get("final_validation") or {}).items():
        if isinstance(value, (int, float)) and not isinstance(value, bool) and key.startswith("val"):
            scores[f"{SPLIT_NAMES['final_validation']}: {_plain(key, METRIC_NAMES)}"] = float(value)
    for key, value in meta.items():
        if "test" in key.lower() or key == "val_beam5":
            split = _plain(key, SPLIT_NAMES)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                scores[split] = float(value)
            elif isinstance(value, dict):
                for k2, v2 in value.items():
                    if isinstance(v2, (int, float)) and not isinstance(v2, bool):
                        scores[f"{split}: {_plain(k2, METRIC_NAMES)}"] = float(v2)
    return scores


def _step_of(name: object) -> int | None:
    match = re.search(r"step0*(\d+)", str(name))
    return int(match.group(1)) if match else None


def averaged_steps(meta: object) -> list[int]:
    """The training steps of the checkpoints the shipped weights are the mean of (``final_validation``'s
    ``averaged_checkpoints``, ``stepNNNNNNN.safetensors``); empty when the weights are one checkpoint's."""
    final = meta.get("final_validation") if isinstance(meta, dict) else None
    names = final.get("averaged_checkpoints") if isinstance(final, dict) else None
    steps = [_step_of(n) for n in names] if isinstance(names, list) else []
    return sorted(s for s in steps if s is not None)


def final_label(meta: object) -> str:
    """What the shipped weights are, in a few words: ``"final (mean of steps 11926–14340)"`` or
    ``"final (step 14340)"`` (the Training evolution view's name for them, and the sidebar's)."""
    averaged = averaged_steps(meta)
    if len(averaged) > 1:
        return f"final (mean of steps {averaged[0]}–{averaged[-1]})"
    steps = meta.get("steps") if isinstance(meta, dict) else None
    return f"final (step {steps})" if steps else "final"


def training_recipe(meta: object) -> list[tuple[str, str]]:
    """How the shipped weights were made, from ``metadata.json``, as (caption, text) pairs: the training command
    that finished the run (the last of ``commands_run``; a run stopped and resumed with raised limits repeats it),
    how many times it ran, the averaging and the decoding chosen on val."""
    if not isinstance(meta, dict):
        return []
    runs = [str(c) for c in meta.get("commands_run") or [] if c] or \
        ([str(meta["training_command"])] if meta.get("training_command") else [])
    out: list[tuple[str, str]] = []
    if runs:
        steps = meta.get("steps")
        until = f", up to step {steps}" if steps else ""
        if len(runs) == 1:
            out.append((f"Trained with (one run{until})", runs[-1]))
        else:
            out.append((f"Trained with: {len(runs)} runs of the training command, each resuming the one before; "
                        f"the last one{until}", runs[-1]))
    averaged = averaged_steps(meta)
    if len(averaged) > 1:
        out.append(("Weights", f"the mean of {len(averaged)} checkpoints, steps {averaged[0]} to {averaged[-1]}"))
    decoding = meta.get("decoding")
    if isinstance(decoding, dict) and decoding.get("alpha") is not None:
        chosen = f", chosen on {DATA_SETS.get(str(decoding['chosen_on']), decoding['chosen_on'])}" \
            if decoding.get("chosen_on") else ""
        out.append(("Decoding", f"beam {decoding.get('beam', '?')}, length penalty α {decoding['alpha']}{chosen}"))
    return out


def model_card(tr: Translator, limit: int = 20_000) -> str | None:
    """The checkpoint's ``README.md`` (its model card) without YAML front matter, or None."""
    if tr.path is None or not (Path(tr.path) / "README.md").is_file():
        return None
    try:
        text = (Path(tr.path) / "README.md").read_text(encoding="utf-8", errors="replace")[:limit]
    except OSError:
        return None
    if text.startswith("---"):
        end = text.find("\n---", 3)
        text = text[end + 4:] if end != -1 else text
    return text.strip() or None
