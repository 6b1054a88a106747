"""``transformer.interpret.signals``: each signal of ``pair_signals`` against a one-sentence-at-a-time loop written
out by hand, a padded batch against one sentence at a time, ``repetition`` against brute force, and the flag rule
read from beside a checkpoint."""

from __future__ import annotations

import itertools
import json
import math
import random
import re

import pytest
import torch

from transformer import Translator
from transformer.interpret import contributions
from transformer.interpret.flagging import (
    DEFAULT_RULE,
    FLAG_FILE,
    Condition,
    FlagRule,
    flag,
    flag_rule,
    write_flag_rule,
)
from transformer.interpret.signals import looping, pair_signals, repetition, step_signals


def random_pairs(tr: Translator, n: int, seed: int = 0) -> tuple[list[list[int]], list[list[int]]]:
    """Random source ids (EOS last) and output ids of different lengths, some ending in EOS (an ended translation),
    some not (cut at the length limit), one of a single piece; the vocabulary's last id never among the outputs."""
    rng = random.Random(seed)
    cfg = tr.config
    low = max(cfg.pad_id, cfg.bos_id, cfg.eos_id, tr.tokenizer.unk_id) + 1
    sources, targets = [], []
    for i in range(n):
        sources.append([rng.randrange(low, cfg.src_vocab_size) for _ in range(rng.randint(1, 12))] + [cfg.eos_id])
        out = [rng.randrange(low, cfg.tgt_vocab_size - 1) for _ in range(rng.randint(0, 14))]  # the last: a code
        targets.append(out + [cfg.eos_id] if i % 3 else out or [low])
    targets[0] = [cfg.eos_id]  # a translation that ends at once: one step
    return sources, targets


def sentence_ends(tr: Translator) -> list[int]:
    """The pieces that end a sentence, read off the decoded vocabulary: </s>, and a piece that is . ! ? alone."""
    return [i for i in range(tr.tokenizer.vocab_size)
            if i == tr.config.eos_id or re.fullmatch(r"[.!?]+", tr.tokenizer.decode([i]).strip())]


@torch.no_grad()
def oracle(tr: Translator, source: list[int], target: list[int], skip: int = 0) -> dict[str, float]:
    """The signals of one pair, written out: each step's log-probability from its own forward pass over the
    prefix (no teacher-forced batch), ALTI+ of the one pair, the cross-attention on </s> in plain loops, and the
    ending's surprise from the decoded text of each closing piece."""
    model, cfg = tr.model, tr.config
    src = torch.tensor([source])
    ends = sentence_ends(tr)
    logps, last_end = [], math.nan
    for t in range(skip, len(target)):
        logits = model(src, torch.tensor([[cfg.bos_id, *target[:t]]])).logits[0, -1].double()
        logps.append(float(logits.log_softmax(-1)[target[t]]))
        last_end = math.log(sum(float(p) for p in logits.softmax(-1)[ends]))
    n = 1  # the closing pieces: </s> and the pieces before it whose text is punctuation
    while target[-1] == cfg.eos_id and n < len(logps) and re.fullmatch(r"[\W_]*",
                                                                    tr.tokenizer.decode([target[-n - 1]])):
        n += 1
    if n > 1:
        omission = -sum(logps[-n:])
    else:  # no closing punctuation, or cut: how unlikely the sentence was to end at the last step, in any way
        omission = -last_end
    if n == 1 and target[-1] == cfg.eos_id:  # </s> right after a word: the piece read as ending there in any way
        logps[-1] = last_end
    tgt = torch.tensor([[cfg.bos_id, *target[:-1]]])
    shares = contributions(model, src, tgt).source_share[0].tolist()[skip:]
    cross = model(src, tgt, return_attention=True).cross_attentions
    on_eos, count = 0.0, 0
    for layer in cross:
        for h in range(layer.size(1)):
            for t in range(skip, len(target)):
                on_eos += sum(float(layer[0, h, t, j]) for j in range(len(source)) if source[j] == cfg.eos_id)
                count += 1
    return {"seq_logprob": sum(logps) / len(logps), "min_piece_logprob": min(logps),
            "source_share": sum(shares) / len(shares), "source_share_min": min(shares),
            "eos_attention": on_eos / count, "omission": omission}


def close(a: dict[str, float], b: dict[str, float], tol: float = 2e-5) -> bool:
    return a.keys() == b.keys() and all(abs(a[k] - b[k]) <= tol * max(1.0, abs(b[k])) for k in a)


def test_every_signal_equals_a_hand_written_loop_and_a_padded_batch_one_sentence_at_a_time(tr):
    sources, targets = random_pairs(tr, 9)
    batched = pair_signals(tr, sources, targets)  # one batch, padded on both sides
    alone = pair_signals(tr, sources, targets, max_batch_tokens=1)  # every pair on its own
    for s, t, got, one in zip(sources, targets, batched, alone):
        want = oracle(tr, s, t)
        assert close(got, want), (got, want)
        assert close(one, got, 1e-5), (one, got)
    assert len({round(r["source_share"], 6) for r in batched}) > 5  # the pairs differ: a real check


def test_a_missing_full_stop_is_not_an_unlikely_piece():
    """An output ending in "</s>" right after a word is read as ending there in any way, in the mean and the lowest
    piece as in ``omission``: the same words with or without the full stop score alike when the model would have
    ended either way (by hand: "</s>" at -3.0 after a word, ending in any way at -0.1)."""
    words, end_any, eos_alone = [-0.5, -1.0], -0.1, -3.0
    shares = eos = [0.5, 0.5, 0.5]
    bare = step_signals([*words, eos_alone], shares, eos, [-9.0, -9.0, end_any], closing=1)
    assert bare["seq_logprob"] == pytest.approx((-0.5 - 1.0 - 0.1) / 3)
    assert bare["min_piece_logprob"] == pytest.approx(-1.0)
    assert bare["omission"] == pytest.approx(0.1)
    stopped = step_signals([*words, -0.1, -0.05], [*shares, 0.5], [*eos, 0.5], [-9.0] * 4, closing=2)
    assert stopped["seq_logprob"] == pytest.approx((-0.5 - 1.0 - 0.1 - 0.05) / 4)  # ". </s>": the pieces as they are
    cut = step_signals([*words, eos_alone], shares, eos, [-9.0, -9.0, end_any], closing=0)  # no "</s>": a word
    assert cut["min_piece_logprob"] == pytest.approx(eos_alone)


@pytest.mark.parametrize("layout", [dict(norm_first=True), dict(bos_id=0)])  # pre-norm; Marian's start token <pad>
def test_other_layouts_in_a_padded_batch_equal_the_loop(tr, layout):
    from conftest import tiny_model

    model = tiny_model(seed=3, **layout)
    other = Translator(model, tr.tokenizer, {}, None)
    sources, targets = random_pairs(other, 6, seed=2)
    for s, t, got in zip(sources, targets, pair_signals(other, sources, targets)):
        assert close(got, oracle(other, s, t)), (got, layout)


def test_texts_are_encoded_as_the_translator_does_and_references_end_in_eos(tr):
    text, reference = "a man rides a red bike .", "ein mann fährt ein rotes fahrrad ."
    [got] = pair_signals(tr, [text], [reference])
    ids = [*tr.tokenizer.encode_target(reference), tr.config.eos_id]
    assert close(got, oracle(tr, tr.encode_source(text)[0], ids))
    result = tr.translate(text, beam_size=2)
    [own] = pair_signals(tr, [result.source_ids], [result.target_ids])
    assert close(own, oracle(tr, result.source_ids, result.target_ids))


class Prefixed:
    """The tiny tokenizer with a forced first output token, as a multilingual model's target-language code."""

    def __init__(self, inner, code: int) -> None:
        self.inner, self.code = inner, code

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def target_prefix(self, lang=None):
        return [self.code]

    def encode_target(self, text, lang=None):
        return [self.code, *self.inner.encode(text)]


def test_a_forced_language_code_is_put_first_and_not_scored(tr):
    code = tr.config.tgt_vocab_size - 1
    multi = Translator(tr.model, Prefixed(tr.tokenizer, code), tr.metadata, tr.path)
    sources, targets = random_pairs(tr, 5, seed=1)
    bare = pair_signals(multi, sources, targets)
    given = pair_signals(multi, sources, [[code, *t] for t in targets])
    for s, t, a, b in zip(sources, targets, bare, given):
        assert close(a, b, 1e-6)
        assert close(a, oracle(tr, s, [code, *t], skip=1))
    [nothing] = pair_signals(multi, [sources[0]], [[code]])  # only the forced code: no step to score
    assert all(math.isnan(v) for v in nothing.values())


def test_bad_input_says_what_is_wrong(tr):
    with pytest.raises(ValueError, match="2 sources but 1 targets"):
        pair_signals(tr, ["a", "b"], ["c"])
    with pytest.raises(ValueError, match="no ids"):
        pair_signals(tr, [[]], [[tr.config.eos_id]])
    [empty] = pair_signals(tr, ["a dog ."], [[]])
    assert all(math.isnan(v) for v in empty.values())
    assert pair_signals(tr, [], []) == []


# ------------------------------------------------------------------------------------------------ looping


def brute_runs(items: list, shortest: int = 1) -> int:
    """Every unit of every length (``shortest`` or more) at every start, repeated as long as it goes on."""
    best = min(len(items), 1)
    for start in range(len(items)):
        for size in range(shortest, len(items) - start + 1):
            unit = items[start:start + size]
            k = 0
            while items[start + k * size:start + (k + 1) * size] == unit:
                k += 1
            best = max(best, k)
    return best


def brute_repetition(text: str) -> int:
    """The words without their edge punctuation, lower case; the characters with each stretch of white space as
    one space: a unit of 2 or more characters as it is, a run of one character 2 when it is 2 or 3 long."""
    words = [w.strip(".,;:!?-\"'()").lower() for w in text.split()]
    chars = list(" ".join(text.split()))
    run = max((len(list(group)) for _, group in itertools.groupby(chars)), default=0)
    return max(run if run > 3 else min(run, 2), brute_runs(chars, 2), brute_runs([w for w in words if w]))


def test_repetition_counts_a_unit_of_any_length_in_characters_and_words():
    rng = random.Random(0)
    texts = ["1 1 1 1 1 1", "zzzzzzzz", "Einzzzzzzzzzz...-Bzz-Bzz-Bzz-", "2 1 1 1 1 1", "", " ", "abcabcab",
             "Ein Mann fährt auf einem roten Fahrrad.", "Vier1 77 1 1 1999 7 1 199999111111 7 7 11111",
             "Menschen Menschen Menschen Menschen Menschen Menschen.", "Ein Hund, ein Hund, ein Hund rennt.",
             "a  b\tb \n b", "Schifffahrt", "sss", "ssss"]
    texts += ["".join(rng.choice("ab c") for _ in range(rng.randint(0, 40))) for _ in range(300)]
    texts += ["".join(rng.choice("xyz-") for _ in range(rng.randint(0, 12))) * rng.randint(1, 9) for _ in range(100)]
    texts += ["".join(rng.choice("aab ") for _ in range(rng.randint(0, 8))) * rng.randint(1, 5) for _ in range(100)]
    words = ["Hund", "hund,", "ein", "läuft", "im", "Schnee."]
    texts += [" ".join(rng.choice(words) for _ in range(rng.randint(0, 12))) for _ in range(200)]
    texts += [" ".join([rng.choice(words) for _ in range(rng.randint(1, 4))] * rng.randint(1, 7)) for _ in range(100)]
    for text in texts:
        assert repetition(text) == brute_repetition(text), text
    assert (repetition("1 1 1 1 1 1"), repetition("zzzzzzzz"), repetition("abcabcab")) == (6, 8, 2)
    assert repetition("Menschen Menschen Menschen Menschen Menschen Menschen.") == 6  # a unit of 8 characters
    assert repetition("Ein Hund, ein Hund, ein Hund rennt.") == 3  # in words: punctuation and case set aside
    assert looping("1 1 1 1 1 1") and looping("Bzz-Bzz-Bzz-Bzz-Bzz-Bzz-") and not looping("1 1 1")
    assert looping("Eine Frau mit einem Hut, einem Hut, einem Hut, einem Hut.")
    assert not looping("Zwei Hunde spielen im Schnee.")


@pytest.mark.parametrize(("text", "expected"), [
    ("Eine Frau geht durch den Tiefschnee einen steilen Abhang hinunter.", 2),  # "eee" across a word boundary
    ("Ein Mann nimmt ein Foto auf.", 2),  # "nnn" across a word boundary
    ("Seeleute stehen an einem Schiff führt.", 2),  # "fff" across a word boundary
    ("Ein Bassspieler trinkt Kaffee im Fitnessstudio an einem Imbissstand.", 2),  # German's triple letters
    ("Kinder machen Schneeengel auf der Schifffahrt.", 2),
    ("Ein Schild: „Come on now ... what's gayer than tea.“", 2),  # an ellipsis
    ("Es ist sonnige sonnige sonnige Wetter.", 3),  # the two val loops the rule of repetition >= 4 missed
    ("Ein glücklich glücklich glücklich Hund.", 3),
    ("Ein Mann in einem Trikot BronBronBroniss.", 3),  # a stretch of 4 letters 3 times inside a word
    ("Ein Mann auf einem Gewässsssi.", 5),  # one letter more than German spells it: a loop
    ("Ein Hund sitzt.", 1),
])
def test_repetition_sets_aside_word_boundaries_and_german_spelling_but_not_a_word_said_three_times(text, expected):
    assert repetition(text) == expected


def test_every_word_ngram_said_three_times_back_to_back_counts_three():
    """The loop of ``python -m transformer.detect`` (:func:`transformer.interpret.constructed.loops`, its own
    definition) always has ``repetition >= 3``, whatever the n-gram and its punctuation or case."""
    from transformer.interpret import constructed

    rng = random.Random(1)
    vocab = ["Ein", "ein", "Hund,", "Mann", "läuft.", "im", "Schnee", "sonnige", "glücklich", "„Bron“", "-"]
    found = 0
    for _ in range(400):
        gram = [rng.choice(vocab) for _ in range(rng.randint(1, 4))]
        before, after = [rng.choice(vocab) for _ in range(rng.randint(0, 3))], [rng.choice(vocab) for _ in range(3)]
        text = " ".join(before + gram * rng.randint(2, 4) + after)
        if constructed.loops(text):
            found += 1
            assert repetition(text) >= 3, text
    assert found > 200


@pytest.mark.data
def test_no_reference_of_val_or_test_reaches_three(multi30k_dir):
    """A rule ``repetition >= 3`` costs nothing on the references the flag is chosen and reported on."""
    for split in ("val", "test_2016_flickr"):
        lines = (multi30k_dir / f"{split}.de").read_text(encoding="utf-8").splitlines()
        assert max(repetition(line) for line in lines) <= 2, split


# ------------------------------------------------------------------------------------------------ the flag


def test_the_flag_is_any_condition_and_a_missing_value_never_holds():
    rule = FlagRule((Condition("repetition", ">=", 6), Condition("seq_logprob", "<", -2.0),
                     Condition("hit_max_len", ">=", 1)))
    assert flag({"repetition": 6, "seq_logprob": -1.0}, rule)
    assert flag({"repetition": 1, "seq_logprob": -2.5}, rule)
    assert flag({"repetition": 1, "hit_max_len": True}, rule)
    assert not flag({"repetition": 5, "seq_logprob": -2.0, "hit_max_len": False}, rule)
    assert not flag({"repetition": None, "seq_logprob": float("nan")}, rule)
    assert flag({"translation": "2 1 1 1 1 1 1"}, DEFAULT_RULE)  # repetition from the text when not given
    assert not flag({"translation": "Ein Hund läuft.", "seq_logprob": -9.0}, DEFAULT_RULE)
    with pytest.raises(ValueError, match="op must be one of"):
        Condition("seq_logprob", "=<", 1.0)


def test_the_rule_lives_beside_the_checkpoint(tmp_path):
    assert flag_rule(tmp_path) == DEFAULT_RULE  # none there: looping outputs only
    assert flag_rule(None) == DEFAULT_RULE and flag_rule("Helsinki-NLP/opus-mt-en-de") == DEFAULT_RULE
    rule = FlagRule((Condition("repetition", ">=", 6), Condition("source_share", "<", 0.5)),
                    calibration={"split": "val"})
    path = write_flag_rule(tmp_path, rule)
    read = flag_rule(tmp_path)
    assert read == rule and read.origin == str(path) and read.calibration == {"split": "val"}
    assert json.loads(path.read_text())["rule"] == "repetition >= 6 or source_share < 0.5"
    for broken in ("{", '{"any": 3}', '{"any": [{"column": "x", "op": "<"}]}', '{"any": [{"column": "x", '
                   '"op": "==", "value": 1}]}'):
        (tmp_path / FLAG_FILE).write_text(broken)
        assert flag_rule(tmp_path).origin == "default", broken


def test_the_row_of_a_translation_at_hand_equals_pair_signals(tr):
    from transformer.decoding.settings import DecodeSettings
    from transformer.interpret.signals import translation_row

    for settings in (DecodeSettings(beam_size=3), DecodeSettings(beam_size=1, max_len_a=0.0, max_len_b=3)):
        result = tr.translate("two people are walking on the beach .", settings)
        src = torch.tensor([result.source_ids])
        tgt = torch.tensor([[tr.config.bos_id, *result.target_ids[:-1]]])
        with torch.no_grad():
            log_softmax = tr.model(src, tgt).logits[0].log_softmax(-1)  # (T, V)
        logp = log_softmax[range(len(result.target_ids)), result.target_ids]
        share = contributions(tr.model, src, tgt).source_share[0]
        cross = torch.stack(result.cross_attentions)  # (L, H, T, S)
        row = translation_row(tr, result.source_ids, result.target_ids, "la la la la la la", logp, share.numpy(),
                              cross.numpy(), log_softmax[:, sentence_ends(tr)].logsumexp(-1),
                              hit_max_len=result.hit_max_len)
        [want] = pair_signals(tr, [result.source_ids], [result.target_ids])
        assert close({k: row[k] for k in want}, want, 1e-5)
        assert row["repetition"] == 6 and row["hit_max_len"] is result.hit_max_len
        if result.hit_max_len:  # cut: the surprise at the sentence not ending at the last step
            assert row["omission"] == pytest.approx(-float(log_softmax[-1, sentence_ends(tr)].logsumexp(-1)), abs=1e-5)
    assert result.hit_max_len and len(result.target_ids) == 3


def test_a_rule_and_its_reasons_read_in_words():
    from transformer.interpret.flagging import reason_text, reasons, rule_text

    rule = FlagRule((Condition("repetition", ">=", 6), Condition("seq_logprob", "<", -4.1107),
                     Condition("source_share", "<", 0.5731), Condition("eos_attention", ">", 0.4),
                     Condition("hit_max_len", ">=", 1), Condition("chrf", "<", 20)))
    assert rule_text(rule) == ("the most times one stretch of the output repeats back to back is at least 6 or the "
                               "mean log-probability per output piece is below -4.11 or the mean share taken from the "
                               "source is below 57.3% or the attention on the source's </s> is above 40.0% or the "
                               "output was cut at the maximum length or chrf < 20")
    row = {"repetition": 9, "seq_logprob": -1.0, "source_share": 0.5, "eos_attention": 0.1, "hit_max_len": True,
           "chrf": 55.0}
    why = reasons(row, rule)
    assert [c.column for c in why] == ["repetition", "source_share", "hit_max_len"]
    assert [reason_text(c, row) for c in why] == [
        "the output loops: the most times one stretch of the output repeats back to back is 9 (at least 6)",
        "the output may come from the decoder's own prefix: the mean share taken from the source is 50.0% (below "
        "57.3%)",
        "the output may loop or run on: the output was cut at the maximum length"]


def test_a_rule_names_columns_only_so_its_words_never_carry_markup(tmp_path):
    good = {"any": [{"column": "source_share", "op": "<", "value": 0.5}]}
    assert FlagRule.from_json(good).conditions[0].column == "source_share"
    for column in ("[en](https://evil.example)", "www.evil.example", "Source share", ""):
        with pytest.raises(ValueError):
            FlagRule.from_json({"any": [{"column": column, "op": "<", "value": 0.5}]})
    (tmp_path / "flag.json").write_text(json.dumps({"any": [{"column": "<b>x</b>", "op": "<", "value": 1}]}))
    assert flag_rule(tmp_path) == flag_rule(None)  # a planted rule is refused: the default, looping only
