"""``TransformerConfig``: every size and choice of the model, one dataclass saved as ``config.json`` next to the
weights and used to rebuild the model everywhere. New fields default to the paper, so old files keep loading."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

ACTIVATIONS = ("relu", "swish", "silu", "gelu")  # the feed-forward's (SiLU is Marian's "swish")
POSITIONAL_LAYOUTS = ("interleaved", "halves", "fairseq")
MAX_INT = 10**18  # a size or id at least this large is refused before any arithmetic (a config may be a stranger's)


def _shown(value: object) -> str:
    """A config value as a message repeats it: cut when long (a 4,000-digit number is never echoed)."""
    text = repr(value)
    return text if len(text) <= 40 else f"a value of {len(text):,} characters"


@dataclass
class TransformerConfig:
    """Every size of the model; saved as ``config.json`` next to the weights."""

    src_vocab_size: int = 8000
    tgt_vocab_size: int = 8000
    d_model: int = 512
    n_heads: int = 8
    n_encoder_layers: int = 6
    n_decoder_layers: int = 6
    d_ff: int = 2048
    dropout: float = 0.1
    max_len: int = 256
    norm_first: bool = False  # False: post-norm as in the paper; True: pre-norm + final LayerNorm
    share_embeddings: bool = True  # tie source embedding, target embedding and output projection
    pad_id: int = 0
    bos_id: int = 2
    eos_id: int = 3
    attention_dropout: float | None = None  # None: same as ``dropout``
    layer_norm_eps: float = 1e-5
    # What real models of this architecture do differently (OPUS-MT / Marian); the defaults are the paper's.
    activation: str = "relu"  # feed-forward activation: "relu" (the paper), "swish" (= SiLU, Marian) or "gelu"
    positional_layout: str = "interleaved"  # "interleaved" sin/cos (the paper), "halves": sin | cos (Marian) or
    # "fairseq": sin | cos with frequencies exp(-log(10000) * i / (d_model/2 - 1)) in float32 (M2M100 / NLLB)
    position_offset: int = 0  # position of the first token (M2M100 / NLLB: pad_id + 1, past the padding row)
    final_logits_bias: bool = False  # a learned bias on the output logits (Marian's ``final_logits_bias``)
    scale_embedding: bool = True  # multiply token embeddings by sqrt(d_model) (the paper)

    def __post_init__(self) -> None:
        for name in ("src_vocab_size", "tgt_vocab_size", "d_model", "n_heads", "d_ff", "max_len"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < MAX_INT:
                raise ValueError(f"{name} must be a positive integer below 10^18, not {_shown(value)}")
        for name in ("n_encoder_layers", "n_decoder_layers", "pad_id", "bos_id", "eos_id"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < MAX_INT:
                raise ValueError(f"{name} must be a non-negative integer below 10^18, not {_shown(value)}")
        for name in ("pad_id", "bos_id", "eos_id"):
            if getattr(self, name) >= self.tgt_vocab_size:
                raise ValueError(f"{name} ({getattr(self, name)}) is outside the vocabulary ({self.tgt_vocab_size})")
        for name in ("dropout", "attention_dropout"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or not 0.0 <= value < 1.0):
                raise ValueError(f"{name} must be a number in [0, 1), not {_shown(value)}")
        if isinstance(self.layer_norm_eps, bool) or not isinstance(self.layer_norm_eps, (int, float)) \
                or not self.layer_norm_eps > 0:
            raise ValueError(f"layer_norm_eps must be a positive number, not {_shown(self.layer_norm_eps)}")
        if self.d_model % self.n_heads != 0:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})")
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise ValueError("share_embeddings needs one joint vocabulary (src_vocab_size == tgt_vocab_size)")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, not {_shown(self.activation)}")
        if self.positional_layout not in POSITIONAL_LAYOUTS:
            raise ValueError(f"positional_layout must be one of {POSITIONAL_LAYOUTS}, not "
                             f"{_shown(self.positional_layout)}")
        if isinstance(self.position_offset, bool) or not isinstance(self.position_offset, int) \
                or not 0 <= self.position_offset < MAX_INT:
            raise ValueError(f"position_offset must be a non-negative integer below 10^18, not "
                             f"{_shown(self.position_offset)}")
        for name in ("norm_first", "share_embeddings", "final_logits_bias", "scale_embedding"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, not {_shown(getattr(self, name))}")

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    @classmethod
    def base(cls, **overrides: Any) -> TransformerConfig:
        """The paper's base model: 6+6 layers, d_model 512, 8 heads, d_ff 2048, dropout 0.1."""
        sizes = dict(d_model=512, n_heads=8, n_encoder_layers=6, n_decoder_layers=6, d_ff=2048, dropout=0.1)
        return cls(**{**sizes, **overrides})

    @classmethod
    def big(cls, **overrides: Any) -> TransformerConfig:
        """The paper's big model: 6+6 layers, d_model 1024, 16 heads, d_ff 4096, dropout 0.3."""
        sizes = dict(d_model=1024, n_heads=16, n_encoder_layers=6, n_decoder_layers=6, d_ff=4096, dropout=0.3)
        return cls(**{**sizes, **overrides})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TransformerConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            more = f" and {len(unknown) - 3:,} more" if len(unknown) > 3 else ""
            raise ValueError(f"unknown TransformerConfig fields: {_shown(unknown[:3])}{more}")
        return cls(**data)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> TransformerConfig:
        return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))


# ------------------------------------------------------------------------------------------------ loading bounds
# What a checkpoint's config.json may ask for, checked before anything is allocated (``check_loadable``): each
# size's bounds. They bound what a stranger's file can make a process compute from the config; they are no limit on
# the model's size (NLLB-200-3.3B: d_model 2048, 24 + 24 layers, d_ff 8192, 256,206 pieces, is well inside). A
# library load refuses only weights that cannot fit in the memory available (``checkpoint.mapped.check_fits``);
# the app's own limit, ``ATTN_MAX_MODEL_MB``, is applied by the app (``app.models.catalog``).
LOAD_BOUNDS: dict[str, tuple[int, int]] = {
    "src_vocab_size": (1, 1_000_000), "tgt_vocab_size": (1, 1_000_000), "d_model": (1, 16_384),
    "n_heads": (1, 1_024), "n_encoder_layers": (0, 64), "n_decoder_layers": (0, 64), "d_ff": (1, 65_536),
    "max_len": (1, 65_536), "position_offset": (0, 65_536),
}


def model_bytes(config: TransformerConfig) -> int:
    """The bytes of the float32 parameters and buffers ``Transformer(config)`` holds, from the config alone
    (nothing built): embeddings (one table when tied), each layer's attention (q, k, v, out: a d_model x d_model
    matrix and a bias each), feed-forward and LayerNorms, the output projection and the positional table."""
    d, f = config.d_model, config.d_ff
    attention = 4 * (d * d + d)
    ffn = d * f + f + f * d + d
    norm = 2 * d
    encoder_layer = attention + ffn + 2 * norm
    decoder_layer = 2 * attention + ffn + 3 * norm
    embeddings = config.src_vocab_size * d
    if not config.share_embeddings:
        embeddings += 2 * config.tgt_vocab_size * d  # the target table and the output projection
    params = (embeddings + config.n_encoder_layers * encoder_layer + config.n_decoder_layers * decoder_layer
              + (2 * norm if config.norm_first else 0) + (config.tgt_vocab_size if config.final_logits_bias else 0))
    buffers = (config.max_len + config.position_offset) * d  # the positional table (a view of its full storage)
    return 4 * (params + buffers)


def check_loadable(config: TransformerConfig) -> None:
    """Refuse (``ValueError`` saying which field) a config with a size outside :data:`LOAD_BOUNDS`. Nothing is
    allocated; call it before ``Transformer(config)``."""
    for name, (low, high) in LOAD_BOUNDS.items():
        value = getattr(config, name)
        if not low <= value <= high:
            raise ValueError(f"{name} = {value:,} is outside what a checkpoint may ask for ({low:,} to {high:,})")
