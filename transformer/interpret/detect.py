"""``python -m transformer.detect``: a checkpoint's hallucination ``flag`` chosen on val, measured on a held-back
constructed set.

The constructed set of a split (built here from its lines; nothing of Multi30k is stored):

- ``translation``: the model's own translations of the split (negatives: normal output);
- ``reference``: the split's references with their own sources (negatives);
- ``swapped``: each source with another sentence's reference (a fixed derangement; positives);
- ``out_of_domain``: German sentences of other domains (news, law, weather, cooking, ...; written for this module,
  half for val and half for test) with the split's sources (positives);
- ``looping`` / ``nonsense``: the model's own outputs on nonsense inputs (product codes, number lists, repeated
  syllables; drawn with a seed per split); an output that loops (:func:`~transformer.interpret.signals.looping`) is
  a positive, ``looping``; the others, ``nonsense``, are left out of the AUCs (a copied number list may be a
  faithful translation) and their flag rate is reported.

Each pair gets :func:`~transformer.interpret.signals.pair_signals`, ``repetition`` and ``hit_max_len``. On the
calibration split (val) the rule is chosen: ``repetition >= 6`` (every looping output) or, for each signal, a
threshold at a low percentile of the negatives (normal translations and references), the combination that finds
the most of the three positive kinds (their mean recall) while flagging at most ``--budget`` of the normal
translations and of the normal references. On the
held-back split (test) the command reports each signal's ROC AUC and the flag's, and writes the rule with both
reports to ``<checkpoint>/flag.json`` (``--write``), where :func:`~transformer.interpret.signals.flag_rule` reads it.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from ..checkpoint.files import CheckpointError
from ..cli import add_decoding_arguments, non_negative
from ..decoding.settings import DecodeSettings
from ..training.data import DataError, read_parallel
from ..translator import Translator, load
from .signals import (
    LOOP_CONDITION,
    SIGNALS,
    Condition,
    FlagRule,
    flag,
    looping,
    pair_signals,
    repetition,
    write_flag_rule,
)

POSITIVES = ("swapped", "out_of_domain", "looping")
NEGATIVES = ("translation", "reference")
PAIR_KINDS = (*NEGATIVES, *POSITIVES, "nonsense")  # the constructed pairs (not network.kinds.KINDS)
# higher = more likely a hallucination; fixed before looking at any data (Guerreiro et al., 2023; Dale et al., 2023)
DIRECTION = {"seq_logprob": -1.0, "source_share": -1.0, "source_share_min": -1.0, "eos_attention": 1.0,
             "repetition": 1.0, "hit_max_len": 1.0}
CANDIDATES = {"seq_logprob": "<", "source_share": "<", "source_share_min": "<", "eos_attention": ">"}
PERCENTILES = (0.25, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0)  # thresholds tried: these percentiles of the negatives' values
BUDGET = 0.03  # at most this share of each negative kind of the calibration split flagged (the goal on test: 5%)
NONSENSE_PER_KIND = 40

# Out-of-domain German, written for this module (not from any corpus): even lines for val, odd lines for test.
GERMAN = (
    "Die Bundesregierung hat am Mittwoch einen neuen Haushaltsentwurf vorgelegt.",
    "Der Zinssatz der Zentralbank bleibt vorerst unverändert bei vier Prozent.",
    "Morgen ziehen von Westen her kräftige Schauer und einzelne Gewitter auf.",
    "Das Gericht wies die Klage als unbegründet ab und ließ keine Revision zu.",
    "Man schlage drei Eier in eine Schüssel und verrühre sie mit etwas Milch.",
    "Die Software aktualisiert sich automatisch, sobald eine Verbindung besteht.",
    "Nach Angaben der Polizei wurde bei dem Unfall niemand schwer verletzt.",
    "Die Aktie verlor im frühen Handel mehr als sieben Prozent an Wert.",
    "Bitte bewahren Sie das Arzneimittel für Kinder unzugänglich auf.",
    "Der Vertrag kann mit einer Frist von drei Monaten gekündigt werden.",
    "In der Nacht sinken die Temperaturen auf Werte um den Gefrierpunkt.",
    "Die Forscher veröffentlichten ihre Ergebnisse in einer Fachzeitschrift.",
    "Der Zug nach Hamburg hat voraussichtlich zwanzig Minuten Verspätung.",
    "Die Gemeinde plant den Bau einer neuen Grundschule am Stadtrand.",
    "Zur Installation benötigen Sie Administratorrechte auf Ihrem Rechner.",
    "Die Inflation ist im vergangenen Quartal deutlich zurückgegangen.",
    "Das Parlament stimmte dem Gesetz mit knapper Mehrheit zu.",
    "Lassen Sie den Teig mindestens eine Stunde an einem warmen Ort ruhen.",
    "Der Kunde hat das Recht, die Ware innerhalb von vierzehn Tagen zurückzugeben.",
    "Die Verhandlungen über einen neuen Tarifvertrag wurden abgebrochen.",
    "Im Süden des Landes herrscht seit Wochen große Trockenheit.",
    "Der Minister kündigte eine umfassende Reform des Rentensystems an.",
    "Das Passwort muss mindestens zwölf Zeichen und eine Ziffer enthalten.",
    "Die Ausstellung ist bis Ende des Monats täglich außer montags geöffnet.",
    "Der Angeklagte bestreitet sämtliche Vorwürfe der Staatsanwaltschaft.",
    "Die Studie untersucht den Einfluss von Schlafmangel auf das Gedächtnis.",
    "Wegen Bauarbeiten ist die Autobahn am Wochenende voll gesperrt.",
    "Die Umsätze des Unternehmens stiegen im Vergleich zum Vorjahr leicht.",
    "Geben Sie die Zwiebeln in die Pfanne und braten Sie sie glasig an.",
    "Der Datenschutzbeauftragte prüft die Beschwerde der Verbraucher.",
    "Für das Wochenende erwarten die Meteorologen sonniges und mildes Wetter.",
    "Die Opposition fordert eine unabhängige Untersuchung der Vorgänge.",
    "Nach dem Neustart des Servers waren alle Dienste wieder erreichbar.",
    "Die Mieten in den Großstädten sind erneut kräftig gestiegen.",
    "Der Impfstoff wurde von der zuständigen Behörde zugelassen.",
    "Die Sitzung des Ausschusses wurde auf nächsten Dienstag verschoben.",
    "Wir bitten um Verständnis für mögliche Einschränkungen im Betriebsablauf.",
    "Die Regierung will den Ausbau der erneuerbaren Energien beschleunigen.",
    "Der Antrag muss bis spätestens zum dreißigsten Juni eingereicht werden.",
    "Das Orchester spielte zum Abschluss eine Sinfonie von Brahms.",
    "Die Arbeitslosenquote sank im Herbst auf den niedrigsten Stand seit Jahren.",
    "Bei Nebenwirkungen wenden Sie sich bitte an Ihren Arzt oder Apotheker.",
    "Die Datei konnte nicht gespeichert werden, weil der Speicher voll ist.",
    "Der Bürgermeister eröffnete das Stadtfest mit einer kurzen Rede.",
    "Laut Satzung wählt die Mitgliederversammlung den Vorstand für zwei Jahre.",
    "Die Suppe bei schwacher Hitze zwanzig Minuten köcheln lassen.",
    "Im Norden ist mit Sturmböen und hohem Wellengang zu rechnen.",
    "Die Ermittlungen gegen den ehemaligen Geschäftsführer dauern an.",
    "Der Roman erzählt die Geschichte einer Familie über drei Generationen.",
    "Die Lieferung verzögert sich aufgrund von Engpässen bei den Zulieferern.",
    "Die Abgeordneten debattierten bis tief in die Nacht über den Antrag.",
    "Schalten Sie das Gerät aus, bevor Sie den Akku wechseln.",
    "Die Preise für Heizöl sind im Januar spürbar gesunken.",
    "Der Verein sucht ehrenamtliche Helfer für die Jugendarbeit.",
    "Die Landesregierung stellt zusätzliche Mittel für Schulen bereit.",
    "Der Flughafen meldet wegen des Streiks zahlreiche Ausfälle.",
    "Diese Rechnung ist innerhalb von dreißig Tagen ohne Abzug zu begleichen.",
    "Die Sonde erreichte nach siebenjährigem Flug ihre Umlaufbahn.",
    "Das Museum erhielt eine großzügige Spende eines privaten Sammlers.",
    "Die Gewerkschaft ruft für Donnerstag zu einem Warnstreik auf.",
    "Der Akku lässt sich über den mitgelieferten Adapter aufladen.",
    "Die Behörde warnt vor betrügerischen Anrufen angeblicher Mitarbeiter.",
    "Zum Schluss den Kuchen mit Puderzucker bestäuben und servieren.",
    "Die Koalition einigte sich nach langen Verhandlungen auf einen Kompromiss.",
    "Die Frist für die Steuererklärung wurde um zwei Monate verlängert.",
    "Das Hochdruckgebiet sorgt in den kommenden Tagen für stabiles Wetter.",
    "Der Vorstand legte den Aktionären den Jahresabschluss zur Prüfung vor.",
    "Die Anwendung stürzt ab, wenn der Cache nicht geleert wird.",
    "Der Rechnungshof kritisiert die hohen Kosten des Projekts.",
    "Das Theater zeigt in dieser Spielzeit drei Uraufführungen.",
    "Die Bank erhöht zum ersten April die Gebühren für Girokonten.",
    "Die Verordnung tritt am Tag nach ihrer Verkündung in Kraft.",
    "Laut Prognose wächst die Wirtschaft im nächsten Jahr nur schwach.",
    "Der Patient wurde nach der Operation auf die Intensivstation verlegt.",
    "Die Stadtwerke kündigten eine Erhöhung der Strompreise an.",
    "Bitte geben Sie bei Rückfragen stets Ihre Kundennummer an.",
    "Die Wahlbeteiligung lag deutlich unter dem Wert der letzten Wahl.",
    "Das neue Betriebssystem unterstützt ältere Geräte nicht mehr.",
    "Die Kommission legte einen Bericht zur Lage der Landwirtschaft vor.",
    "Der Schnee hat in den Bergen zu erheblicher Lawinengefahr geführt.",
)


# ----------------------------------------------------------------------------------------------- the set


def nonsense_inputs(n_per_kind: int, seed: int) -> list[str]:
    """Nonsense English input, ``n_per_kind`` of each kind, drawn with ``seed``: product-code lists ("SKU
    4471-AX 9930 ..."), number lists ("1 2 3 ... 20", or random numbers), repeated syllables ("zzz zzz zzz ...")."""
    rng = random.Random(seed)
    letters = "ABCDEFGHJKLMNPQRSTUVWXYZ"
    out = []
    for _ in range(n_per_kind):
        parts = [rng.choice(["SKU", "REF", "ID", "LOT", "NR"])]
        for _ in range(rng.randint(4, 10)):
            code = str(rng.randint(10, 99999))
            if rng.random() < 0.5:
                code += "-" + "".join(rng.choice(letters) for _ in range(rng.randint(1, 3)))
            parts.append(code)
        out.append(" ".join(parts))
    for _ in range(n_per_kind):
        if rng.random() < 0.5:
            start = rng.randint(0, 50)
            numbers = range(start, start + rng.randint(8, 30))
        else:
            numbers = [rng.randint(0, 999) for _ in range(rng.randint(6, 20))]
        out.append(" ".join(map(str, numbers)))
    for _ in range(n_per_kind):
        syllable = rng.choice(["zzz", "la", "bla", "ha", "na", "da", "ku", "lo", "mi", "ta", "zz", "hm", "ba"])
        if rng.random() < 0.5:
            syllable = rng.choice("bdfgklmnprstwz") + rng.choice("aeiou") + rng.choice(["", "", "n", "r", "z"])
        out.append(" ".join([syllable] * rng.randint(4, 16)))
    return out


def derangement(n: int, seed: int) -> list[int]:
    """A permutation of ``range(n)`` with no fixed point (``n >= 2``): a shuffled cycle."""
    order = list(range(n))
    random.Random(seed).shuffle(order)
    perm = [0] * n
    for a, b in zip(order, order[1:] + order[:1]):
        perm[a] = b
    return perm


def _translate(tr: Translator, texts: Sequence[str], settings: DecodeSettings, batch_size: int,
               progress: bool) -> list[Any]:
    """``translate_batch`` in length-sorted batches, results in input order."""
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    results: list[Any] = [None] * len(texts)
    for start in tqdm(range(0, len(order), batch_size), desc="translate", unit="batch", disable=not progress,
                      file=sys.stderr):
        chunk = order[start:start + batch_size]
        for i, r in zip(chunk, tr.translate_batch([texts[i] for i in chunk], settings)):
            results[i] = r
    return results


def constructed_set(tr: Translator, sources: Sequence[str], references: Sequence[str], german: Sequence[str],
                    seed: int, settings: DecodeSettings | None = None, batch_size: int = 64,
                    nonsense_per_kind: int = NONSENSE_PER_KIND, progress: bool = False) -> list[dict[str, Any]]:
    """The constructed set of one split (see the module's docstring): one row per pair with ``kind``, ``label``
    (1 positive, 0 negative, None left out), ``source``, ``translation`` (the German side), the signals of
    :func:`pair_signals`, ``repetition`` and ``hit_max_len``."""
    if len(sources) != len(references) or len(sources) < 2:
        raise ValueError("a split needs at least 2 sentences, as many references as sources")
    settings = tr.settings(settings)
    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    pairs: list[tuple[Any, Any]] = []

    def add(kind: str, source: str, text: str, source_side: Any, target_side: Any, cut: bool = False) -> None:
        label = 0 if kind in NEGATIVES else 1 if kind in POSITIVES else None
        rows.append({"kind": kind, "label": label, "source": source, "translation": text,
                     "repetition": repetition(text), "hit_max_len": bool(cut)})
        pairs.append((source_side, target_side))

    for s, r in zip(sources, _translate(tr, sources, settings, batch_size, progress)):
        add("translation", s, r.text, r.source_ids, r.target_ids, r.hit_max_len)
    for s, ref in zip(sources, references):
        add("reference", s, ref, s, ref)
    for i, j in enumerate(derangement(len(sources), seed)):
        add("swapped", sources[i], references[j], sources[i], references[j])
    for text in german:
        s = rng.choice(list(sources))
        add("out_of_domain", s, text, s, text)
    odd = nonsense_inputs(nonsense_per_kind, seed)
    for s, r in zip(odd, _translate(tr, odd, settings, batch_size, progress)):
        add("looping" if looping(r.text) else "nonsense", s, r.text, r.source_ids, r.target_ids, r.hit_max_len)
    lang = {"src_lang": settings.src_lang, "tgt_lang": settings.tgt_lang}
    step = 256
    for start in tqdm(range(0, len(pairs), step), desc="signals", unit="chunk", disable=not progress,
                      file=sys.stderr):
        chunk = pairs[start:start + step]
        for row, sig in zip(rows[start:start + step],
                            pair_signals(tr, [a for a, _ in chunk], [b for _, b in chunk], **lang)):
            row.update(sig)
    return rows


# ----------------------------------------------------------------------------------------------- measuring


def roc_auc(scores: Sequence[float], labels: Sequence[int]) -> float:
    """ROC AUC by the rank formula (Mann-Whitney U; ties count one half): the chance that a random positive scores
    above a random negative. NaN without both classes."""
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels, dtype=bool)
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if not n_pos or not n_neg:
        return float("nan")
    _, inverse, counts = np.unique(s, return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)
    ranks = (ends - (counts - 1) / 2.0)[inverse]  # the mean 1-based rank of each tied group
    return float((ranks[y].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def _column(rows: Sequence[dict[str, Any]], name: str) -> np.ndarray:
    return np.array([float(r[name]) if r.get(name) is not None else np.nan for r in rows], dtype=np.float64)


def score_of(rows: Sequence[dict[str, Any]], name: str) -> np.ndarray:
    """A signal oriented so that higher means more likely a hallucination (``DIRECTION``), NaN (no step) lowest."""
    x = _column(rows, name) * DIRECTION[name]
    return np.nan_to_num(x, nan=-np.inf)


def _rounded(x: float) -> float | None:
    """``x`` to 4 decimals; None for NaN (JSON has no NaN)."""
    return None if np.isnan(x) else round(float(x), 4)


def evaluate(rows: Sequence[dict[str, Any]], rule: FlagRule) -> dict[str, Any]:
    """Each signal's ROC AUC and the flag's (all positives against all negatives, and each positive kind against
    the negatives), the share flagged of each kind, and how many looping outputs are flagged."""
    flags = np.array([flag(r, rule) for r in rows], dtype=np.float64)
    kinds = np.array([r["kind"] for r in rows])
    negative = np.isin(kinds, NEGATIVES)
    auc: dict[str, dict[str, float]] = {}
    for name in (*SIGNALS, "repetition", "flag"):
        score = flags if name == "flag" else score_of(rows, name)
        groups = {"all": np.isin(kinds, POSITIVES), **{k: kinds == k for k in POSITIVES}}
        auc[name] = {g: _rounded(roc_auc(score[pos | negative], pos[pos | negative])) for g, pos in groups.items()}
    counts = {k: int((kinds == k).sum()) for k in PAIR_KINDS}
    flagged = {k: round(float(flags[kinds == k].mean()), 4) if counts[k] else None for k in PAIR_KINDS}
    loops = kinds == "looping"
    return {"auc": auc, "flagged": flagged, "counts": counts,
            "looping_flagged": f"{int(flags[loops].sum())}/{int(loops.sum())}"}


def choose_rule(rows: Sequence[dict[str, Any]], budget: float = BUDGET) -> tuple[FlagRule, dict[str, Any]]:
    """The rule: ``repetition >= 6`` or any of the signals past a threshold, each threshold one of ``PERCENTILES``
    of the negatives' values (the normal translations and references together), or the signal unused. Of the
    combinations that flag at most ``budget`` of the normal translations and at most ``budget`` of the normal
    references, the one with the highest mean recall over the three positive kinds (ties: the fewest conditions,
    then the fewest negatives flagged)."""
    kinds = np.array([r["kind"] for r in rows])
    negatives = {k: kinds == k for k in NEGATIVES}
    pooled = np.isin(kinds, NEGATIVES)
    loop = np.array([LOOP_CONDITION.holds(r) for r in rows])
    options: list[list[tuple[Condition, np.ndarray] | None]] = []
    for name, op in CANDIDATES.items():
        x = _column(rows, name)
        ref = x[pooled & ~np.isnan(x)]
        choices: list[tuple[Condition, np.ndarray] | None] = [None]
        for p in PERCENTILES if len(ref) else ():
            value = round(float(np.percentile(ref, p if op == "<" else 100 - p)), 4)
            fires = np.nan_to_num(x < value if op == "<" else x > value, nan=0).astype(bool)
            choices.append((Condition(name, op, value), fires))
        options.append(choices)
    best, best_key = None, None
    for combo in itertools.product(*options):
        fires = loop.copy()
        for c in combo:
            if c is not None:
                fires |= c[1]
        rates = [float(fires[m].mean()) for m in negatives.values() if m.any()]
        if max(rates, default=0.0) > budget:
            continue
        recall = float(np.mean([fires[kinds == k].mean() for k in POSITIVES if (kinds == k).any()]))
        key = (round(recall, 6), -sum(c is not None for c in combo), -sum(rates))
        if best_key is None or key > best_key:
            best, best_key = combo, key
    conditions = (LOOP_CONDITION, *(c[0] for c in best or () if c is not None))
    return FlagRule(conditions), {"mean_recall": best_key[0] if best_key else None}


# ----------------------------------------------------------------------------------------------- the command


def markdown(report: dict[str, Any]) -> str:
    """The AUC table of an evaluation (:func:`evaluate`) in Markdown."""
    lines = ["| signal | all | swapped references | out-of-domain German | looping outputs |", "|---|---|---|---|---|"]
    for name, row in report["auc"].items():
        lines.append(f"| `{name}` | " + " | ".join("–" if row[g] is None else f"{row[g]:.3f}"
                                                  for g in ("all", *POSITIVES)) + " |")
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m transformer.detect", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_decoding_arguments(p)
    p.add_argument("--calibration-split", default="val", help="the split the rule is chosen on (default: val)")
    p.add_argument("--budget", type=float, default=BUDGET,
                   help="the most of the calibration split's normal translations (and references) the rule may flag")
    p.add_argument("--limit", type=non_negative, default=0, help="only the first N sentences of each split (0: all)")
    p.add_argument("--nonsense", type=non_negative, default=NONSENSE_PER_KIND,
                   help="nonsense inputs of each kind (codes, numbers, syllables) per split")
    p.add_argument("--seed", type=int, default=0, help="the calibration set's seed (the held-back set's: seed + 1)")
    p.add_argument("--write", action="store_true", help="write the rule and both reports to <checkpoint>/flag.json")
    p.add_argument("--rows", help="write every row of both sets (JSON lines) to this file")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        splits = {}
        for split in (args.calibration_split, args.split):
            sources, refs = read_parallel(args.data_dir, split, args.src, args.tgt)
            splits[split] = (sources[: args.limit], refs[: args.limit]) if args.limit else (sources, refs)
        tr = load(args.checkpoint, device=args.device)
    except (DataError, CheckpointError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    if args.write and not Path(args.checkpoint).is_dir():
        print(f"error: --write needs a checkpoint directory, not {args.checkpoint}", file=sys.stderr)
        return 1
    settings = tr.settings(DecodeSettings(beam_size=args.beam, alpha=args.alpha))
    start = time.perf_counter()
    sets = {}
    for part, split in enumerate((args.calibration_split, args.split)):
        sources, refs = splits[split]
        sets[split] = constructed_set(tr, sources, refs, GERMAN[part::2], args.seed + part, settings,
                                      args.batch_size, args.nonsense, progress=not args.no_progress)
    rule, chosen = choose_rule(sets[args.calibration_split], args.budget)
    command = "python -m transformer.detect " + " ".join(sys.argv[1:] if argv is None else argv)
    calibration = {"split": args.calibration_split, "budget": args.budget, "percentiles": list(PERCENTILES),
                   **chosen, "report": evaluate(sets[args.calibration_split], rule)}
    held_back = {"split": args.split, **evaluate(sets[args.split], rule)}
    rule = FlagRule(rule.conditions, calibration={
        **calibration, "held_back": held_back, "beam": settings.beam_size, "alpha": settings.alpha,
        "seed": args.seed, "nonsense_per_kind": args.nonsense,
        "sentences": {k: len(v[0]) for k, v in splits.items()}, "command": command,
        "seconds": round(time.perf_counter() - start, 1), "directions": DIRECTION,
        "note": "flagged when any condition holds; thresholds at percentiles of the calibration split's negatives "
                "(the model's own translations and the references); AUCs of held_back on the constructed test set "
                "(transformer.detect)"})
    print(f"rule (chosen on {args.calibration_split}): {rule.describe()}")
    for name, report in ((args.calibration_split, calibration["report"]), (args.split, held_back)):
        print(f"\n{name}: flagged {json.dumps(report['flagged'])}; looping outputs flagged "
              f"{report['looping_flagged']}; counts {json.dumps(report['counts'])}")
        print(markdown(report))
    if args.rows:
        with open(args.rows, "w", encoding="utf-8") as f:
            for split, rows in sets.items():
                for r in rows:
                    f.write(json.dumps({"split": split, **r, "flag": flag(r, rule)}, ensure_ascii=False) + "\n")
    if args.write:
        print(f"\nwrote {write_flag_rule(args.checkpoint, rule)}")
    if args.json:
        print(json.dumps(rule.to_json(), ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
