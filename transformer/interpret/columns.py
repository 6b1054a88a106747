"""One description of each column of the corpus table (``python -m transformer.corpus``): its type, the short header
and the plain sentence every reader shows (the corpus command's manifest, ``python -m transformer.detect``, the flag's
words in ``signals``, the app's Whole test set view and its tooltips). ``transformer.interpret.table.COLUMNS`` is this
mapping; adding a signal means one function in ``signals.py``, one entry here and regenerated shipped tables.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Column:
    """One column of the corpus table.

    ``type``: its pyarrow type name; ``label``: a short table header; ``help``: one plain sentence on what it holds;
    ``signal``: whether it is a hallucination signal (a flag rule may test it); ``direction``: for a signal, which end
    is suspicious (``"low"`` or ``"high"``); ``phrase``: what the value is, in words a rule's condition reads
    ("the mean log-probability per output piece"; for a true/false column, what holds when it is true);
    ``format``: how a value is written in words (``"share"``: a percentage, ``"count"``: a whole number,
    ``"number"``: two decimals, ``"bool"``, ``"text"``); ``suggests``: for a signal, the error it points to, in words
    ("part of the source may be left untranslated")."""

    type: str
    label: str
    help: str
    signal: bool = False
    direction: str = "high"
    phrase: str = ""
    format: str = "number"
    suggests: str = ""

    def __post_init__(self) -> None:
        if self.direction not in ("low", "high"):
            raise ValueError(f"direction is 'low' or 'high', not {self.direction!r}")

    def value_text(self, x: float) -> str:
        """A value of this column in words: ``61.2%``, ``-4.11``, ``6``."""
        if self.format == "share":
            return f"{x:.1%}"
        if self.format in ("count", "bool"):
            return f"{x:.0f}"
        return f"{x:.2f}"


# The order is the table's column order. The names are a contract (the app, users' notebooks and scripts read them).
COLUMNS: dict[str, Column] = {
    "id": Column("int64", "line", "The input's line, counted from 0.", format="count"),
    "source": Column("string", "source", "The input line (empty when the table was written with --no-inputs).",
                     format="text"),
    "translation": Column("string", "translation", "The model's translation, with the table's decoding settings.",
                          format="text"),
    "reference": Column("string", "reference", "The reference translation (empty without one).", format="text"),
    "score": Column("float64", "score", "The search's own score: the log-probability over the length penalty (beam "
                                        "search), or the sum of log-probabilities (greedy)."),
    "seq_logprob": Column("float64", "log-prob", "Mean log-probability of the output pieces, the end of sentence "
                                                 "included (teacher-forced); low when the model finds its output "
                                                 "unlikely.", signal=True, direction="low",
                          phrase="the mean log-probability per output piece",
                          suggests="the output may not belong to this source"),
    "chrf": Column("float64", "chrF", "sacreBLEU's sentence chrF against the reference (0-100; empty without one)."),
    "bleu": Column("float64", "BLEU", "sacreBLEU's sentence BLEU, effective order, against the reference (0-100; "
                                      "empty without one)."),
    "source_share": Column("float64", "source share", "Share of each output piece that comes from the source (ALTI+), "
                                                      "mean over the output; low when the output ignores the source.",
                           signal=True, direction="low", phrase="the mean share taken from the source",
                           format="share", suggests="the output may come from the decoder's own prefix"),
    "source_share_min": Column("float64", "min share", "The lowest share from the source of any output piece "
                                                       "(ALTI+).", signal=True, direction="low",
                               phrase="the lowest share one piece takes from the source", format="share",
                               suggests="a word may be made up"),
    "eos_attention": Column("float64", "on </s>", "Cross-attention's mean weight on the source's </s>, where idle "
                                                  "heads park.", signal=True, direction="high",
                            phrase="the attention on the source's </s>", format="share",
                            suggests="the attention may have left the source"),
    "repetition": Column("int64", "repetition", "The most times one stretch of the output (a word, a few words or a "
                                                "few characters) repeats back to back; three of one letter, as "
                                                "German spells Schifffahrt, count as two.", signal=True,
                         direction="high", phrase="the most times one stretch of the output repeats back to back",
                         format="count", suggests="the output loops"),
    "min_piece_logprob": Column("float64", "min log-prob", "The lowest log-probability of any output piece "
                                                           "(teacher-forced): one wrong word shows here, where the "
                                                           "mean dilutes it.", signal=True, direction="low",
                                phrase="the least likely output piece's log-probability",
                                suggests="one word may be wrong"),
    "omission": Column("float64", "omission", "How unlikely the model finds it that the translation ends where it "
                                              "does (minus the log-probability of its closing punctuation and </s>; "
                                              "without closing punctuation, or cut, of the sentence ending at the "
                                              "last step with </s> or . ! ?): high when part of the source seems "
                                              "left untranslated.", signal=True, direction="high",
                       phrase="the model's surprise at the translation ending there",
                       suggests="part of the source may be left untranslated"),
    "length_ratio": Column("float64", "length ratio", "Output pieces over source pieces (special tokens left out)."),
    "hit_max_len": Column("bool", "cut", "The output stopped at the length limit without </s>.", signal=True,
                          direction="high", phrase="the output was cut at the maximum length", format="bool",
                          suggests="the output may loop or run on"),
    "unk": Column("int64", "unk", "Source pieces the vocabulary does not know (<unk>).", format="count"),
    "flag": Column("bool", "flag", "May be a hallucination: the checkpoint's rule (flag.json, chosen on the "
                                   "validation set) holds for this line.", format="bool"),
    "flag_score": Column("float64", "flag score", "How far out the line's most unusual signal is against the model's "
                                                  "ordinary translations and the references of the validation set: "
                                                  "2 means 1 in 100 of those is as far out; the line is flagged from "
                                                  "the rule's threshold up (empty for a rule without a score)."),
    "source_pieces": Column("int64", "source pieces", "Source pieces the model read (special tokens left out).",
                            format="count"),
    "output_pieces": Column("int64", "output pieces", "Output pieces (special tokens left out).", format="count"),
    "truncated": Column("bool", "source cut", "The source was cut to the model's length before translating.",
                        format="bool"),
    "note": Column("string", "note", "What was unusual about the line (empty, cut).", format="text"),
}
SIGNAL_COLUMNS = tuple(name for name, column in COLUMNS.items() if column.signal)
