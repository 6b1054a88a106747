"""Which models the explorer can open: the checkpoint directories under ``checkpoints/``, Hub ids and their
downloads, public mode's allow-list, and loading (no Streamlit here; ``app.analysis.cached`` adds the caches)."""

from __future__ import annotations

import contextlib
import functools
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import transformer
from transformer import Translator, cli, environment
from transformer.checkpoint import families
from transformer.checkpoint.files import MAX_METADATA_BYTES, METADATA_FILE, read_json, read_metadata
from transformer.checkpoint.mapped import DTYPES, resolve_dtype, weights_bytes
from transformer.decoding import DEFAULT_ALPHA
from transformer.translator import chosen_alpha


def _repo_root() -> Path:
    """Where ``checkpoints/`` lives: the source tree this package sits in (a checkout, ``pip install -e``), else
    the working directory (an installed package, as in the Space image, started from the app's folder)."""
    source = Path(__file__).resolve().parents[2]  # app/models/catalog.py -> the tree's root
    return source if (source / "checkpoints").is_dir() or not (Path.cwd() / "checkpoints").is_dir() else Path.cwd()


REPO_ROOT = _repo_root()


def resolve_checkpoint(checkpoint: str) -> str:
    """A relative directory is looked up from the working directory, then from the repository root; a name
    under one of the repository's folders (``checkpoints/...``) stays a path even when it does not exist."""
    checkpoint = checkpoint.strip()
    path = Path(checkpoint).expanduser()
    if path.is_absolute() or path.exists() or not path.parts:
        return checkpoint
    if (REPO_ROOT / path).exists() or path.parts[0] == "checkpoints" or (REPO_ROOT / path.parts[0]).is_dir():
        return str(REPO_ROOT / path)  # a path of this repository (existing or mistyped), never a Hub id
    return checkpoint


def needs_download(checkpoint: str) -> bool:
    """Whether loading ``checkpoint`` would download it: a Hub id (not a local directory) whose files are not in the
    local Hugging Face cache yet (looked up on disk only)."""
    from transformer.checkpoint.hub import looks_like_hub_id

    name = resolve_checkpoint(checkpoint)
    if not name or Path(name).expanduser().exists() or not looks_like_hub_id(name):
        return False
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        return False
    try:
        from huggingface_hub import snapshot_download

        snapshot_download(repo_id=name, local_files_only=True)
        return False
    except Exception:  # not cached (or any other lookup failure): the download will say what is wrong
        return True


def download(checkpoint: str, progress: Callable[[int, int, str], None]) -> None:
    """Fetch a Hub checkpoint into the local cache, telling ``progress(done_bytes, total_bytes, file)``; raises
    ``transformer.CheckpointError`` (too large, unknown, offline) with a clear message."""
    from transformer.checkpoint.hub import resolve_checkpoint_dir

    resolve_checkpoint_dir(resolve_checkpoint(checkpoint), progress)


DEFAULT_MAX_MODEL_MB = 3000.0  # MB of 10^6 bytes: admits NLLB-200 600M (~2,460 MB in float32), not the 1.3B ones


def max_model_mb() -> float:
    """``$ATTN_MAX_MODEL_MB``: the largest model (parameters and buffers in the server's dtype, MB of 10^6 bytes)
    this server loads; unset: :data:`DEFAULT_MAX_MODEL_MB`; ``0`` or ``inf``: no limit; anything else but a
    positive number is a ``SettingError`` naming it (``transformer.environment``). The app's limit only:
    ``transformer.load`` itself refuses only weights that cannot fit in the memory available."""
    return environment.number("ATTN_MAX_MODEL_MB", DEFAULT_MAX_MODEL_MB, unlimited=True, unit="MB")


def model_dtype() -> str:
    """``$ATTN_DTYPE``: the dtype this server keeps every model's weights in, ``float32`` (the default) or
    ``bfloat16`` (half the memory; attention weights and every interpretation still in float32); anything else is
    a ``SettingError`` naming it."""
    return environment.choice("ATTN_DTYPE", tuple(DTYPES), "float32")


DEVICES = ("auto", "cpu", "cuda")


def default_device() -> str:
    """``$ATTN_DEVICE``: the Device picker's default, ``auto`` (CUDA when a GPU is present, else the CPU; the
    default), ``cpu`` (a GPU server whose models are small: one sentence runs faster on its CPU, docs/benchmarks.md,
    "On a GPU at last") or ``cuda``; anything else is a ``SettingError`` naming it."""
    return environment.choice("ATTN_DEVICE", DEVICES, "auto")


def check_model_size(path: Path, dtype: str) -> None:
    """``CheckpointError`` when the model of the checkpoint directory ``path`` (from its ``config.json``, nothing
    loaded) holds more than ``$ATTN_MAX_MODEL_MB`` in ``dtype``; nothing when its config cannot be read (the load
    then says what is wrong)."""
    from transformer.checkpoint.families import family_of_dir, read_config_json

    config_json = read_config_json(path)
    if config_json is None:
        return
    config = family_of_dir(path).config(config_json)
    size_mb, limit = weights_bytes(config, resolve_dtype(dtype)) / 1e6, max_model_mb()
    if size_mb > limit:
        raise transformer.CheckpointError(
            f"the model would take {environment.amount(size_mb)} MB (parameters and buffers, {dtype}), over this "
            f"server's limit of {environment.amount(limit)} MB (ATTN_MAX_MODEL_MB)")


def load_translator(checkpoint: str, device: str) -> Translator:
    """Load a checkpoint directory or Hub repo id on ``device`` (resolved by ``transformer.load``: ``"auto"`` takes
    CUDA when present), in the server's dtype (:func:`model_dtype`), refusing first a model over this server's
    ``$ATTN_MAX_MODEL_MB`` (:func:`check_model_size`); raises ``transformer.CheckpointError`` with a clear
    message."""
    from transformer.checkpoint.hub import resolve_checkpoint_dir

    if not checkpoint.strip():
        raise transformer.CheckpointError("no checkpoint named: give a directory or a Hugging Face Hub repo id")
    name, dtype = resolve_checkpoint(checkpoint), model_dtype()
    check_model_size(resolve_checkpoint_dir(name), dtype)  # a Hub id: from the local cache once downloaded
    tr = transformer.load(name, device=device, dtype=dtype)  # "auto" resolved there
    tr.model.eval()
    return tr


ALPHA_RANGE = (0.0, 5.0)  # the length-penalty slider's range (the post-norm models' val optimum is 3.5)


def model_alpha(checkpoint: str) -> float:
    """The length penalty a local checkpoint directory's ``metadata.json`` names (``decoding.alpha``), rounded to the
    slider's 0.1 steps and range; another family's directory without metadata: its family's default; 0.6 for
    anything else (a Hub id, no or unreadable metadata). Read from disk without loading the model, so the first
    translation of a visit already uses it."""
    stamp = _stamp(checkpoint)
    if stamp is None and checkpoint.strip():
        path = Path(resolve_checkpoint(checkpoint)).expanduser()
        if (path / "config.json").is_file():  # another family's directory: its defaults
            from transformer.checkpoint.families import family_of_dir

            with contextlib.suppress(transformer.CheckpointError):
                low, high = ALPHA_RANGE
                return round(min(max(chosen_alpha(family_of_dir(path).metadata_defaults), low), high), 1)
    return _alpha_of(stamp)


def _stamp(checkpoint: str) -> tuple[str, int, int] | None:
    """(path, mtime, size) of a local checkpoint directory's ``metadata.json``, or None."""
    if checkpoint.strip():
        path = Path(resolve_checkpoint(checkpoint)).expanduser() / "metadata.json"
        with contextlib.suppress(OSError):
            stat = path.stat()
            return (str(path), stat.st_mtime_ns, stat.st_size)
    return None


def read_metadata_or_none(path: Path) -> dict:
    """A ``metadata.json`` as ``transformer`` reads it (size, nesting and the types of its keys checked), or {}
    when it is absent or unusable (the model's check then names why)."""
    with contextlib.suppress(OSError, ValueError, transformer.CheckpointError):
        return read_metadata(path.parent) if path.name == METADATA_FILE else {}
    return {}


@functools.lru_cache(maxsize=64)
def _metadata_of(stamp: tuple[str, int, int] | None) -> object:
    """One version of one ``metadata.json`` (path, mtime, size; None: no file), parsed once per version, not
    per run of the page; {} when it is unusable (too large, nested too deeply, a key of the wrong type)."""
    return {} if stamp is None else read_metadata_or_none(Path(stamp[0]))


def _alpha_of(stamp: tuple[str, int, int] | None) -> float:
    """``model_alpha`` for one version of one ``metadata.json``."""
    low, high = ALPHA_RANGE
    return round(min(max(chosen_alpha(_metadata_of(stamp)), low), high), 1)


def alpha_chosen_on_val(checkpoint: str) -> bool:
    """Whether the checkpoint's ``metadata.json`` names a length penalty chosen on val (``decoding.alpha`` with
    ``decoding.chosen_on == "val"``); a checkpoint without one decodes with the untuned default 0.6."""
    meta = _metadata_of(_stamp(checkpoint))
    decoding = meta.get("decoding") if isinstance(meta, dict) else None
    return (isinstance(decoding, dict) and decoding.get("chosen_on") == "val"
            and chosen_alpha(meta) == decoding.get("alpha"))


def alpha_label(checkpoint: str) -> str:
    """How the app names a model's own length penalty: ``"α 1.4, chosen on val"`` only when its model card says
    so; ``"α 0.6, default 0.6 (not tuned)"`` when it names none (the value the model then decodes with)."""
    alpha = model_alpha(checkpoint)
    if alpha_chosen_on_val(checkpoint):
        return f"α {alpha:g}, chosen on the validation set"
    meta = _metadata_of(_stamp(checkpoint))
    named = isinstance(meta, dict) and isinstance(meta.get("decoding"), dict) and "alpha" in meta["decoding"]
    untuned = f"α {DEFAULT_ALPHA:g}, default {DEFAULT_ALPHA:g} (not tuned)"
    return f"α {alpha:g}, from its model card (not chosen on the validation set)" if named else untuned


@dataclass(frozen=True)
class CheckpointInfo:
    """A checkpoint directory under ``checkpoints/`` as the model picker lists it."""

    path: str  # as typed in the picker, e.g. "checkpoints/multi30k-en-de"
    language_pair: str
    layout: str  # "post-norm" (the paper) or "pre-norm"
    test_bleu: float | None
    problem: str | None  # why it cannot be opened, or None

    def label(self) -> str:
        """``"multi30k-en-de · en-de · post-norm · test BLEU 38.6"``."""
        bleu = f" · test BLEU {self.test_bleu:.1f}" if self.test_bleu is not None else ""
        return f"{Path(self.path).name} · {self.language_pair or '?'} · {self.layout}{bleu}"


def list_checkpoints() -> list[CheckpointInfo]:
    """Every directory under the repository's ``checkpoints/`` and, in public mode, every local directory
    ``$ATTN_MODELS`` names elsewhere, checked without loading the weights: whatever goes wrong while reading one (its
    files, config, safetensors header, tokenizer, metadata or heads.json) marks it unavailable with the reason,
    never breaks the list."""
    root = REPO_ROOT / "checkpoints"
    try:
        folders = sorted(p for p in root.glob("*") if p.is_dir()) if root.is_dir() else []
    except OSError:
        folders = []
    listed = [(f"checkpoints/{folder.name}", folder) for folder in folders]
    if public_mode():  # allow-listed directories outside checkpoints/ are checked the same way
        listed += [(m, local_dir(m)) for m in allowed_models()
                   if not m.startswith("checkpoints/") and local_dir(m) is not None]
    return [_checked(str(folder), name, folder_stamp(folder)) for name, folder in listed]


@functools.lru_cache(maxsize=256)
def _checked(folder: str, name: str, stamp: tuple[tuple[str, int, int, int], ...] | None) -> CheckpointInfo:
    """:func:`_checkpoint_info` once per version of a folder's files (``stamp``, :func:`folder_stamp`): the model
    list's refresh re-reads a folder only when a file in it changed (a planted header is parsed once, not every
    30 s)."""
    try:
        return _checkpoint_info(Path(folder), name)
    except Exception as err:  # any damage is one "unavailable" line
        return CheckpointInfo(name, "", "?", None, f"{type(err).__name__}: {str(err)[:300]}")


def local_dir(checkpoint: str) -> Path | None:
    """The local directory ``checkpoint`` names, or None (a Hub id, or nothing there)."""
    path = Path(resolve_checkpoint(checkpoint)).expanduser()
    try:
        return path if path.is_dir() else None
    except OSError:
        return None


def _checkpoint_info(folder: Path, name: str) -> CheckpointInfo:
    """One checkpoint directory as the picker lists it, as ``name`` (its problem, when the check fails)."""
    from transformer.checkpoint import check_checkpoint_dir
    from transformer.checkpoint.families import family_of_dir
    from transformer.checkpoint.families.ours import FAMILY as OURS

    meta = read_metadata_or_none(folder / METADATA_FILE)  # unusable metadata: listed without scores
    test = meta.get("test_2016_flickr")
    bleu = test.get("bleu") if isinstance(test, dict) and isinstance(test.get("bleu"), (int, float)) else None
    try:
        family = family_of_dir(folder)
        config = check_checkpoint_dir(folder) if family is OURS else family.check(folder)
        layout, problem = ("pre-norm" if config.norm_first else "post-norm"), _heads_problem(folder)
    except transformer.CheckpointError as err:
        layout, problem = "?", str(err)
    return CheckpointInfo(name, str(meta.get("language_pair", "")), layout,
                          float(bleu) if bleu is not None else None, problem)


def files_stamp(checkpoint: str) -> tuple[tuple[str, int, int, int], ...] | None:
    """:func:`folder_stamp` of a local checkpoint directory; None for anything else (a Hub id)."""
    path = local_dir(checkpoint)
    return None if path is None else folder_stamp(path)


def folder_stamp(path: Path) -> tuple[tuple[str, int, int, int], ...]:
    """(name, mtime, size, inode) of the files in a directory (the first 256 by name), to tell when they changed
    (a file replaced by another of the same size and time has another inode); () when it cannot be listed."""
    try:
        with os.scandir(path) as entries:
            names = sorted(e.name for e in entries)[:256]
        return tuple((n, (st := (path / n).stat()).st_mtime_ns, st.st_size, st.st_ino) for n in names)
    except OSError:
        return ()


def short_name(checkpoint: str) -> str:
    """How the page names a model: ``checkpoints/...`` and a Hub id as written (what a link names), any other local
    directory by its last part (never the server's path)."""
    from transformer.checkpoint.hub import looks_like_hub_id

    if checkpoint.startswith("checkpoints/") and ".." not in checkpoint:
        return checkpoint
    if local_dir(checkpoint) is not None or not looks_like_hub_id(checkpoint):
        return Path(checkpoint.rstrip("/")).name or checkpoint
    return checkpoint


def _heads_problem(folder: Path) -> str | None:
    """Why the directory's ``heads.json`` (when there) cannot be used, or None."""
    path = folder / "heads.json"
    if not path.is_file():
        return None
    try:
        data = read_json(path, MAX_METADATA_BYTES)  # size and nesting bounded as metadata.json's
    except (OSError, ValueError) as err:
        return f"heads.json is not valid JSON: {err}"
    return None if isinstance(data, dict) and "importance" in data else "heads.json holds no head importance"


def load_heads(path: str | Path | None) -> dict | None:
    """The checkpoint's ``heads.json``, or None."""
    if path is None or not (Path(path) / "heads.json").is_file():
        return None
    try:
        data = read_json(Path(path) / "heads.json", MAX_METADATA_BYTES)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and "importance" in data else None


def hub_models() -> list[str]:
    """The Hub ids the picker suggests: every family's (``transformer.checkpoint.families``), in registry order."""
    return list(dict.fromkeys(families.hub_models()))


def _sized_hub_models() -> dict[str, tuple[str, int]]:
    """The suggested Hub models whose download the registry sizes (NLLB-200 / M2M100's): id -> (what, MB)."""
    return {m.repo_id: (m.what, m.download_mb) for f in families.families() for m in f.hub
            if m.download_mb is not None}


# the suggested Hub models the picker names with their download size (multilingual: offered for local use, in
# public mode only when $ATTN_MODELS names them)
MULTILINGUAL = _sized_hub_models()


def hub_label(repo_id: str) -> str:
    """How the picker shows a suggested Hub id: what its family says it is, and for a download over
    ``$ATTN_MAX_DOWNLOAD_MB`` why it will not open (unless already in the local cache)."""
    from transformer.checkpoint.hub import max_download_mb

    model = families.hub_model(repo_id)
    if model is None:
        return f"{repo_id} (from the Hub)"
    if model.download_mb is None:
        return f"{repo_id} ({model.what}, from the Hub)"
    limit = max_download_mb()
    if model.download_mb > limit and needs_download(repo_id):
        return f"{repo_id} ({model.what}; about {model.download_mb:,} MB: over the {environment.amount(limit)} MB " \
               "download limit, " \
               "raise ATTN_MAX_DOWNLOAD_MB)"
    return f"{repo_id} ({model.what}, about {model.download_mb:,} MB, from the Hub)"


def public_mode() -> bool:
    """``ATTN_PUBLIC=1``: the hosted demo (only the allow-listed models, no free-form field)."""
    return os.environ.get("ATTN_PUBLIC", "").strip().lower() in ("1", "true", "yes", "on")


def allowed_models() -> list[str]:
    """The models a public server offers: ``$ATTN_MODELS`` (comma-separated directories and Hub ids), else what
    ships with it: the default checkpoint and every checkpoint directory under ``checkpoints/`` (no Hub model is
    downloaded unless ``ATTN_MODELS`` names it)."""
    listed = [m.strip() for m in os.environ.get("ATTN_MODELS", "").split(",") if m.strip()]
    if listed:
        return list(dict.fromkeys(listed))
    root = REPO_ROOT / "checkpoints"
    shipped = [f"checkpoints/{p.name}" for p in sorted(root.glob("*")) if p.is_dir()] if root.is_dir() else []
    return list(dict.fromkeys([default_checkpoint(), *shipped]))


def model_allowed(checkpoint: str) -> bool:
    """Whether this server may open ``checkpoint`` (always, unless in public mode)."""
    return not public_mode() or checkpoint.strip() in allowed_models()


def default_checkpoint() -> str:
    """``$ATTN_CHECKPOINT`` or ``checkpoints/multi30k-en-de``."""
    return os.environ.get("ATTN_CHECKPOINT", "").strip() or cli.DEFAULT_CHECKPOINT


_URL = re.compile(r"\b(?:https?|ftp|file|wss?)://[^\s'\"<>)\]]+", re.IGNORECASE)
_PATH = re.compile(r"(?<![\w.:/-])(?:~|\.{1,2})?/(?:[\w.@+-]+/)*([\w.@+-]+)")


def visitor_message(error: BaseException | str) -> str:
    """An error as a visitor of a public server may read it: no URLs (the Hub endpoint, a mirror) and no paths of
    this machine (a path is cut to its last part). Outside public mode the message is kept whole."""
    text = str(error) if isinstance(error, str) else f"{error}" or type(error).__name__
    if not public_mode():
        return text
    text = _URL.sub("(an address)", text)
    return _PATH.sub(lambda m: m.group(1), text)
