"""Positional encoding: the sinusoidal table, its waves, similarity between positions, the model's own table."""

from __future__ import annotations

import numpy as np

from transformer import Translator

from ..analysis import probes
from ..analysis.inference import Analysis
from ..drawing import positional as pe
from . import Chart, Part, Source

INTRO = ("The sinusoidal positional encoding added to every token embedding: PE[pos, 2i] = sin(pos / 10000^(2i/d)), "
         "PE[pos, 2i+1] = cos(pos / 10000^(2i/d)). Each pair of dimensions is a wave; wavelengths grow geometrically "
         "from 2π to 10000·2π, so nearby positions get similar codes.")
OFFLINE_POSITIONS = 64
SIMILARITY = ("Cosine similarity between the codes of two positions: it depends only on their distance (the bands run "
              "parallel to the diagonal), which lets attention use relative positions.")


MODEL_TABLE_HELP = "tr.model.pe: a buffer of the module (saved and moved with it, never trained)."


FLOAT_PRECISION = 1e-5  # float32 sines and cosines computed two ways agree this closely (a few ulps of 1)


def same_as_formula(diff: float) -> str:
    """How the model's table compares with the formula, given their largest difference."""
    if diff <= FLOAT_PRECISION:
        return "it equals the formula above, to float precision."
    return f"it differs from the formula above by {diff:.1e} at most."


def model_table(tr: Translator, positions: int | None = None, steps: tuple[int, int] = (1, 1)) -> Chart:
    """The model's own table (its first ``positions`` rows; None: all; drawn at every ``steps`` position and
    dimension) and how far it is from the formula."""
    own = probes.model_pe(tr)
    diff = float(np.abs(own - probes.positional_table(*own.shape)).max())
    own = own[:positions]
    return Chart(pe.pe_heatmap(own[::steps[0], ::steps[1]],
                                    title=f"The model's own table ({own.shape[0]} × {own.shape[1]})",
                                    position_step=steps[0], dim_step=steps[1]),
                 "The table the model itself adds to its embeddings (stored with the model, not learned); "
                 + same_as_formula(diff),
                 "model-pe")


def sizes(tr: Translator, a: Analysis, vocab: np.ndarray | None = None) -> Chart:
    """The length of each source piece's scaled embedding beside its positional code's."""
    norms = probes.embedding_norms(tr, a.source_ids)
    pe_norms = np.linalg.norm(probes.model_pe(tr)[: len(a.source_ids)], axis=1)
    return Chart(pe.norms_figure(a.source_tokens, norms, pe_norms, vocab),
                 f"Every positional code has length √(d_model/2) = {np.sqrt(tr.config.d_model / 2):.2f}. The "
                 "embeddings are multiplied by √d_model before the code is added, so a token's identity is not "
                 "drowned by its position.", "pe-vs-embeddings")


def describe(src: Source) -> list[Part]:
    tr = src.tr
    d_model, length = int(tr.config.d_model), int(min(OFFLINE_POSITIONS, max(tr.config.max_len, 8)))
    table = probes.positional_table(length, d_model)  # (P, D)
    return [Chart(pe.pe_heatmap(table), f"d_model = {d_model}, {length} positions.", "positional-encoding"),
            Chart(pe.pe_waves(table, pe.wave_dims(d_model, length)), name="pe-waves"),
            Chart(pe.pe_similarity(table), SIMILARITY, "pe-similarity"),
            model_table(tr, length), sizes(tr, src.analysis, probes.vocab_embedding_norms(tr))]
