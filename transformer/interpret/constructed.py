"""The constructed set of ``python -m transformer.detect``: from a split's lines, pairs of (source, German) whose kind
is known without looking at any signal (nothing of Multi30k is stored).

Negatives (normal output):

- ``translation``: the model's own translations of the split (those that loop, by :func:`loops`, are ``loop``);
- ``reference``: the split's references with their own sources.

Both also as people type the sources (``VARIANTS``, :func:`written`; the row's ``variant``): without the final
punctuation (the reference without it too), starting in lower case, with extra spaces. Every other row is
``plain``.

Positives, each built independently of the signals it tests:

- ``detached``: each source with another sentence's reference (a fixed derangement);
- ``unrelated``: German sentences of other domains (news, law, weather, cooking, ...; written for this module, half
  for val and half for test), each with one of the split's sources;
- ``noun_own`` / ``noun_ref``: the model's translation / the reference with one noun (a capitalised word after the
  first) swapped for another noun of the split's references (:func:`swap_noun`);
- ``dropped_own`` / ``dropped_ref``: the translation / the reference with one clause or phrase left out
  (:func:`drop_clause`: from a comma, a conjunction or a preposition to the next such word or the end);
- ``loop``: an output, on a nonsense input or of a split's sentence, in which a word n-gram occurs 3 times back to
  back or that was cut at the length limit (:func:`loops`; not the ``repetition`` signal);
- ``fluent_nonsense``: an output on a nonsense input (product codes, number lists, repeated syllables) that does not
  loop and is mostly words of its own, not copied from the input (:func:`fluent`).

``copy``: the other outputs on nonsense inputs (a copied number list may be a faithful translation), left out of
the measures; how many the flag flags is reported.
"""

from __future__ import annotations

import random
import re
import sys
from collections.abc import Sequence
from typing import Any

from tqdm import tqdm

from ..decoding.settings import DecodeSettings
from ..translator import Translator
from .signals import pair_signals, repetition

NEGATIVES = ("translation", "reference")
POSITIVES = ("detached", "unrelated", "noun_own", "noun_ref", "dropped_own", "dropped_ref", "loop", "fluent_nonsense")
PAIR_KINDS = (*NEGATIVES, *POSITIVES, "copy")
PAIR_KIND_NAMES = {"translation": "own translations", "reference": "references",
              "detached": "detached: another sentence's reference", "unrelated": "unrelated German",
              "noun_own": "one noun swapped, own translation", "noun_ref": "one noun swapped, reference",
              "dropped_own": "a clause dropped, own translation", "dropped_ref": "a clause dropped, reference",
              "loop": "loops (a word n-gram 3 times back to back, or cut at max length)",
              "fluent_nonsense": "fluent, non-looping output on nonsense input",
              "copy": "copied output on nonsense input (left out)"}
NONSENSE_PER_KIND = 40
# how the negatives' sources are written: as in the split, and as people type them (written())
VARIANTS = ("plain", "no_final_punctuation", "lower_case_start", "extra_spaces")
VARIANT_NAMES = {"plain": "as in the split", "no_final_punctuation": "no final punctuation (source and reference)",
                 "lower_case_start": "source starting in lower case", "extra_spaces": "source with extra spaces"}
LOOP_TIMES = 3  # a word n-gram this many times back to back is a loop
# Where a clause or phrase may start: after a comma, or at one of these words (not the sentence's first two words)
BOUNDARIES = frozenset(("in", "im", "auf", "mit", "an", "am", "vor", "neben", "bei", "beim", "unter", "über", "durch",
                        "hinter", "zwischen", "aus", "zu", "zum", "zur", "für", "gegen", "um", "nach", "von", "vom",
                        "während", "und", "oder", "als", "wie"))
_EDGE = re.compile(r"^\W+|\W+$")

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


# ----------------------------------------------------------------------------------------------- independent kinds


def words_of(text: str) -> list[str]:
    """The words of ``text``, lower case, their leading and trailing punctuation removed (empty ones dropped)."""
    return [w for w in (_EDGE.sub("", w).casefold() for w in text.split()) if w]


def loops(text: str, hit_max_len: bool = False) -> bool:
    """A loop by a definition of its own (not :func:`~transformer.interpret.signals.repetition`): cut at the length
    limit, or some word n-gram occurs ``LOOP_TIMES`` times back to back."""
    if hit_max_len:
        return True
    w = words_of(text)
    for n in range(1, len(w) // LOOP_TIMES + 1):
        for i in range(len(w) - LOOP_TIMES * n + 1):
            if all(w[i + k * n:i + (k + 1) * n] == w[i:i + n] for k in range(1, LOOP_TIMES)):
                return True
    return False


def fluent(source: str, text: str) -> bool:
    """Whether an output reads as words of its own: at least 2 words of letters only (2 or more), and at least half
    of its words such words that the source does not hold."""
    given = set(words_of(source))
    out = words_of(text)
    own = [w for w in out if len(w) >= 2 and w.isalpha() and w not in given]
    return len(own) >= 2 and len(own) >= len(out) / 2


def written(source: str, reference: str, variant: str) -> tuple[str, str]:
    """A (source, reference) pair as people may type the source (one of ``VARIANTS``): ``plain`` as given;
    ``no_final_punctuation`` both without their closing marks (".", "!", "?"); ``lower_case_start`` the source's
    first letter in lower case; ``extra_spaces`` the source with two spaces between words, spaces at both ends and
    one before its final mark."""
    if variant == "no_final_punctuation":
        return source.rstrip().rstrip(".!?").rstrip(), reference.rstrip().rstrip(".!?").rstrip()
    if variant == "lower_case_start":
        return source[:1].lower() + source[1:], reference
    if variant == "extra_spaces":
        words, end = _split_end(source)
        return "  " + "  ".join(words) + (f" {end}" if end else "") + "  ", reference
    if variant != "plain":
        raise ValueError(f"a variant is one of {', '.join(VARIANTS)}, not {variant!r}")
    return source, reference


def _split_end(text: str) -> tuple[list[str], str]:
    """The words of ``text`` and its final punctuation mark (".", "!", "?" or "")."""
    w = text.split()
    if w and len(w[-1]) > 1 and w[-1][-1] in ".!?":
        return [*w[:-1], w[-1][:-1]], w[-1][-1]
    if w and w[-1] in (".", "!", "?"):
        return w[:-1], w[-1]
    return w, ""


def drop_clause(text: str, rng: random.Random) -> str | None:
    """``text`` with one clause or phrase left out, drawn with ``rng``: the words from a boundary (after a comma, or a
    word of ``BOUNDARIES``, not among the first two) to the next boundary or the end, at least 2 words, leaving at
    least 3; the final punctuation kept. None when there is no such span."""
    w, end = _split_end(text)
    starts = [i for i in range(2, len(w)) if w[i].casefold() in BOUNDARIES or w[i - 1].endswith(",")]
    spans = [(a, b) for a, b in zip(starts, [*starts[1:], len(w)]) if b - a >= 2 and len(w) - (b - a) >= 3]
    if not spans:
        return None
    a, b = rng.choice(spans)
    kept = w[:a] + w[b:]
    kept[-1] = kept[-1].rstrip(",")
    return " ".join(kept) + end


def nouns_of(texts: Sequence[str]) -> list[str]:
    """The capitalised words of letters after each text's first word: German nouns, sorted."""
    return sorted({_EDGE.sub("", x) for t in texts for x in t.split()[1:] if _EDGE.sub("", x)[:1].isupper()
                   and _EDGE.sub("", x).isalpha()})


def swap_noun(text: str, nouns: Sequence[str], rng: random.Random) -> str | None:
    """``text`` with one noun (a capitalised word of letters after the first word) replaced by another of
    ``nouns``, both drawn with ``rng``; None when it has none."""
    w = text.split()
    at = [i for i in range(1, len(w)) if _EDGE.sub("", w[i])[:1].isupper() and _EDGE.sub("", w[i]).isalpha()]
    if not at or len(nouns) < 2:
        return None
    i = rng.choice(at)
    old = _EDGE.sub("", w[i])
    w[i] = w[i].replace(old, rng.choice([n for n in nouns if n != old]))
    return " ".join(w)


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
                    nonsense_per_kind: int = NONSENSE_PER_KIND, progress: bool = False,
                    variants: Sequence[str] = VARIANTS) -> list[dict[str, Any]]:
    """The constructed set of one split (see the module's docstring): one row per pair with ``kind``, ``label``
    (1 positive, 0 negative, None left out), ``variant`` (how its source is written: the negatives in each of
    ``variants``, every other row ``plain``), ``source``, ``translation`` (the German side), the signals of
    :func:`pair_signals`, ``repetition`` and ``hit_max_len``."""
    if len(sources) != len(references) or len(sources) < 2:
        raise ValueError("a split needs at least 2 sentences, as many references as sources")
    settings = tr.settings(settings)
    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    pairs: list[tuple[Any, Any]] = []

    def add(kind: str, source: str, text: str, source_side: Any, target_side: Any, cut: bool = False,
            variant: str = "plain") -> None:
        label = 0 if kind in NEGATIVES else 1 if kind in POSITIVES else None
        rows.append({"kind": kind, "label": label, "variant": variant, "source": source, "translation": text,
                     "repetition": repetition(text), "hit_max_len": bool(cut)})
        pairs.append((source_side, target_side))

    nouns = nouns_of(references)
    own = _translate(tr, sources, settings, batch_size, progress)
    for s, r in zip(sources, own):
        add("loop" if loops(r.text, r.hit_max_len) else "translation", s, r.text, r.source_ids, r.target_ids,
            r.hit_max_len)
    for s, ref in zip(sources, references):
        add("reference", s, ref, s, ref)
    for i, j in enumerate(derangement(len(sources), seed)):
        add("detached", sources[i], references[j], sources[i], references[j])
    for text in german:
        s = rng.choice(list(sources))
        add("unrelated", s, text, s, text)
    normal = [(s, r.text) for s, r in zip(sources, own) if not loops(r.text, r.hit_max_len)]
    for kind, change in (("noun", lambda t: swap_noun(t, nouns, rng)), ("dropped", lambda t: drop_clause(t, rng))):
        for side, texts in (("own", normal), ("ref", list(zip(sources, references)))):
            for s, text in texts:
                changed = change(text)
                if changed is not None and changed != text:
                    add(f"{kind}_{side}", s, changed, s, changed)
    odd = nonsense_inputs(nonsense_per_kind, seed)
    for s, r in zip(odd, _translate(tr, odd, settings, batch_size, progress)):
        kind = "loop" if loops(r.text, r.hit_max_len) else "fluent_nonsense" if fluent(s, r.text) else "copy"
        add(kind, s, r.text, r.source_ids, r.target_ids, r.hit_max_len)
    for variant in (v for v in variants if v != "plain"):  # the negatives as people type the sources
        typed = [written(s, ref, variant) for s, ref in zip(sources, references)]
        for (s, _), r in zip(typed, _translate(tr, [s for s, _ in typed], settings, batch_size, progress)):
            add("loop" if loops(r.text, r.hit_max_len) else "translation", s, r.text, r.source_ids, r.target_ids,
                r.hit_max_len, variant)
        for s, ref in typed:
            add("reference", s, ref, s, ref, variant=variant)
    lang = {"src_lang": settings.src_lang, "tgt_lang": settings.tgt_lang}
    step = 256
    for start in tqdm(range(0, len(pairs), step), desc="signals", unit="chunk", disable=not progress,
                      file=sys.stderr):
        chunk = pairs[start:start + step]
        for row, sig in zip(rows[start:start + step],
                            pair_signals(tr, [a for a, _ in chunk], [b for _, b in chunk], **lang)):
            row.update(sig)
    return rows
