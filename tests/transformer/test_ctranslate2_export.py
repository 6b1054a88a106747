"""The CTranslate2 export: same weights, same greedy tokens and scores as our own decoding."""

from __future__ import annotations

import contextlib
import dataclasses
import json

import pytest
import torch

ctranslate2 = pytest.importorskip("ctranslate2")

import transformer  # noqa: E402
from transformer import Transformer, TransformerConfig, save_checkpoint  # noqa: E402
from transformer.ctranslate2_export import main  # noqa: E402
from transformer.decoding import output_limits  # noqa: E402
from transformer.exchange.ctranslate2_export import export_ctranslate2  # noqa: E402

with contextlib.suppress(pytest.skip.Exception):  # test_marian needs transformers
    from test_marian import marian_files  # noqa: F401  (the fixture)

SENTENCES = ["A man rides a bike.", "Two people are walking on the beach.", "A girl plays with a red ball in the park.",
             "The dog runs.", "A woman in a blue street with two children", "boy"]


def limit_of(translator, src_ids):
    """Our per-sentence output budget (a * source length + b, a=1.5, b=10)."""
    return int(output_limits(translator.model, torch.tensor([src_ids]), 1.5, 10)[0])


def ct2_greedy(ct2, translator, sentences, out_dir, tgt_lang=None):
    """CTranslate2 greedy output ids and scores (summed log-probabilities), with our length budget, what our search
    never outputs suppressed and a multilingual model's target code as the prefix; pieces <-> ids through the
    exported vocabulary."""
    tok, cfg = translator.tokenizer, translator.config
    names = json.loads((out_dir / "shared_vocabulary.json").read_text())
    ids_of = {p: i for i, p in enumerate(names)}
    never = [cfg.pad_id] + ([cfg.bos_id] if cfg.bos_id != cfg.eos_id else [])  # as our search (``_never``)
    prefix = tok.pieces(tok.target_prefix(tgt_lang)) or None
    ids, scores = [], []
    for s in sentences:
        src_ids = translator.encode_source(s)[0]
        res = ct2.translate_batch([tok.pieces(src_ids[:-1])], beam_size=1,
                                  max_decoding_length=limit_of(translator, src_ids), min_decoding_length=0,
                                  length_penalty=0.0, suppress_sequences=[[names[i]] for i in never],
                                  return_scores=True, target_prefix=[prefix] if prefix else None)[0]
        ids.append([ids_of[p] for p in res.hypotheses[0]])
        scores.append(res.scores[0])
    return ids, scores


def check_same_greedy(checkpoint, out_dir, sentences=SENTENCES, tgt_lang=None):
    """Export, then CTranslate2's greedy search must give our tokens, with our model's log-probabilities."""
    export_ctranslate2(checkpoint, out_dir)
    translator = transformer.load(checkpoint, device="cpu")
    ct2 = ctranslate2.Translator(str(out_dir), device="cpu", intra_threads=1)
    sources = [translator.encode_source(s)[0] for s in sentences]
    ours_ids, _ = translator.generate(sources, beam_size=1, tgt_lang=tgt_lang)
    theirs_ids, theirs_scores = ct2_greedy(ct2, translator, sentences, out_dir, tgt_lang)
    assert theirs_ids == ours_ids
    # CTranslate2 takes the suppressed tokens out before its softmax: its score is our model's log-probability
    # of the output (EOS included where produced) with PAD and BOS out of the distribution; a forced prefix is not
    # scored
    cfg = translator.config
    forced = len(translator.tokenizer.target_prefix(tgt_lang))
    for src_ids, ids, theirs in zip(sources, ours_ids, theirs_scores):
        out = ids + [cfg.eos_id] if len(ids) < limit_of(translator, src_ids) else ids
        with torch.no_grad():
            logits = translator.model(torch.tensor([src_ids]), torch.tensor([[cfg.bos_id, *out[:-1]]])).logits[0]
        logits[:, cfg.pad_id] = float("-inf")
        if cfg.bos_id != cfg.eos_id:
            logits[:, cfg.bos_id] = float("-inf")
        logp = logits.log_softmax(-1)[torch.arange(len(out)), torch.tensor(out)]
        expected = logp[forced:].sum().item()
        assert abs(expected - theirs) < 1e-3 * max(1.0, abs(expected))
    return translator, ct2


def layout_checkpoint(tokenizer, directory, seed=1, **layout):
    """A random model of ``layout`` (config fields) on ``tokenizer``, with non-trivial norms and biases (so that a
    wrong mapping would show), saved as one of our checkpoints."""
    torch.manual_seed(seed)
    v = tokenizer.vocab_size
    cfg = TransformerConfig(**{**dict(src_vocab_size=v, tgt_vocab_size=v, d_model=32, n_heads=4, n_encoder_layers=2,
                                      n_decoder_layers=3, d_ff=48, max_len=64), **layout})
    model = Transformer(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
        if cfg.final_logits_bias:
            model.generator.bias.normal_(0, 0.5)
    return save_checkpoint(directory, model, tokenizer)


# Each family's layout as our config fields (the tiny tokenizer's ids: <pad> 0, <s> 2, </s> 3)
LAYOUTS = {
    "paper, pre-norm, untied": dict(norm_first=True, share_embeddings=False),
    "Marian / OPUS-MT": dict(activation="swish", positional_layout="halves", final_logits_bias=True, bos_id=0),
    "NLLB-200 / M2M100": dict(norm_first=True, positional_layout="fairseq", position_offset=1, bos_id=3),
    "unscaled gelu": dict(activation="gelu", scale_embedding=False, norm_first=True),
    "unscaled swish": dict(activation="swish", scale_embedding=False),
}


def test_export_writes_a_ctranslate2_model(tiny_checkpoint, tmp_path):
    out = export_ctranslate2(tiny_checkpoint, tmp_path / "ct2")
    assert {"model.bin", "config.json", "shared_vocabulary.json", "tokenizer.model"} <= {p.name for p in out.iterdir()}
    config = json.loads((out / "config.json").read_text())
    assert config["add_source_eos"] and not config["add_source_bos"]
    assert (config["bos_token"], config["eos_token"], config["decoder_start_token"]) == ("<s>", "</s>", "<s>")
    vocab = json.loads((out / "shared_vocabulary.json").read_text())
    tok = transformer.Tokenizer(tiny_checkpoint / "tokenizer.model")
    assert vocab == tok.pieces(range(tok.vocab_size))
    with pytest.raises(FileExistsError):
        export_ctranslate2(tiny_checkpoint, out)
    export_ctranslate2(tiny_checkpoint, out, force=True)


def test_greedy_tokens_equal_ours(tiny_checkpoint, tmp_path):
    check_same_greedy(tiny_checkpoint, tmp_path / "ct2")


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_every_familys_layout_gives_our_greedy_tokens(tiny_tokenizer, tmp_path, layout):
    check_same_greedy(layout_checkpoint(tiny_tokenizer, tmp_path / "ckpt", **LAYOUTS[layout]), tmp_path / "ct2")


def test_every_config_field_is_mapped_or_refused():
    """A new TransformerConfig field must say where it goes in CTranslate2 (or be refused when not at its
    default); the activations are CTranslate2's."""
    from ctranslate2.specs.common_spec import Activation

    from transformer.exchange.ctranslate2_export import CONFIG_FIELDS, CT2_ACTIVATIONS
    from transformer.network.config import ACTIVATIONS as OURS

    assert set(CONFIG_FIELDS) == {f.name for f in dataclasses.fields(TransformerConfig)}
    assert set(CT2_ACTIVATIONS) == set(OURS)
    assert all(name in Activation.__members__ for name in CT2_ACTIVATIONS.values())


@dataclasses.dataclass
class _RotaryConfig(TransformerConfig):
    """A config with a field the export does not know (as a future one would be)."""

    rotary: bool = False


def test_what_ctranslate2_cannot_express_is_refused_by_name(tiny_tokenizer, tiny_checkpoint, tmp_path, capsys):
    from transformer.exchange.ctranslate2_export import build_spec

    v = tiny_tokenizer.vocab_size
    sizes = dict(src_vocab_size=v, tgt_vocab_size=v, d_model=16, n_heads=2, n_encoder_layers=1, n_decoder_layers=1,
                 d_ff=16, max_len=32)
    build_spec(Transformer(_RotaryConfig(**sizes)), tiny_tokenizer)  # at its default: nothing to express
    with pytest.raises(ValueError, match="rotary = True"):
        build_spec(Transformer(_RotaryConfig(**sizes, rotary=True)), tiny_tokenizer)
    with pytest.raises(ValueError, match="at least one encoder"):
        build_spec(Transformer(TransformerConfig(**{**sizes, "n_encoder_layers": 0})), tiny_tokenizer)
    small = dict(sizes, src_vocab_size=v - 1, tgt_vocab_size=v - 1)
    with pytest.raises(ValueError, match=f"{v} ids but the model only {v - 1} rows"):
        build_spec(Transformer(TransformerConfig(**small)), tiny_tokenizer)
    # the command line says it in one line, without a traceback, and writes nothing
    big = layout_checkpoint(tiny_tokenizer, tmp_path / "ckpt", n_encoder_layers=0)
    assert main(["--checkpoint", str(big), "--out", str(tmp_path / "ct2")]) == 2
    assert "at least one encoder" in capsys.readouterr().err and not (tmp_path / "ct2").exists()


def test_a_larger_model_vocabulary_gets_unused_names(tiny_tokenizer):
    """Rows past the tokenizer's ids (a converted NLLB-200 has 2) are named, so the vocabulary fits the tables."""
    from transformer.exchange.ctranslate2_export import vocabulary

    v = tiny_tokenizer.vocab_size
    assert vocabulary(tiny_tokenizer, v + 2) == tiny_tokenizer.pieces(range(v)) + [f"<unused:{v}>", f"<unused:{v + 1}>"]


@pytest.mark.slow  # among the slowest of the fast loop (its CPU budget: 60 s)
def test_a_marian_directory_exports_as_it_is(tmp_path, request):
    """A Marian / OPUS-MT ``save_pretrained`` directory (swish, sin | cos positions, a logits bias, decoding from
    <pad>, its split tokenizer): CTranslate2 gives our greedy tokens, and the tokenizer's files come along."""
    pytest.importorskip("transformers")
    from test_marian import SENTENCES as MARIAN_SENTENCES
    from test_marian import save_marian

    marian_files = request.getfixturevalue("marian_files")
    _, path = save_marian(tmp_path, marian_files[1], files=marian_files)
    translator, _ = check_same_greedy(path, tmp_path / "ct2", MARIAN_SENTENCES)
    assert translator.config.activation == "swish" and translator.config.final_logits_bias
    assert {"source.spm", "target.spm", "vocab.json"} <= {p.name for p in (tmp_path / "ct2").iterdir()}


@pytest.mark.parametrize("name", ["nllb", "gelu-unscaled-untied"])
def test_an_nllb_or_m2m100_directory_exports_with_its_languages(tmp_path, tiny_corpus, name):
    """NLLB-200 / M2M100 (pre-norm, fairseq positions past the padding row, decoding from </s>, two unused rows past
    the tokenizer's ids; also gelu, unscaled and untied), straight from transformers and converted to ours: the
    target language's code as CTranslate2's target prefix gives our greedy tokens."""
    pytest.importorskip("transformers")
    from m2m100_models import CONFIGS, LANGS, save_m2m100, train_spm

    from transformer.convert import main as convert

    spm_dir = train_spm(tmp_path, tiny_corpus)
    _, _, path = save_m2m100(tmp_path, spm_dir, name)
    src, _, tgt = LANGS[CONFIGS[name][0]]
    converted = tmp_path / "converted"
    assert convert(["--from-hf", str(path), "--out", str(converted)]) == 0
    for i, checkpoint in enumerate((path, converted)):
        translator, _ = check_same_greedy(checkpoint, tmp_path / f"ct2-{i}", SENTENCES[:4], tgt_lang=tgt)
        assert translator.config.position_offset == 2 and translator.config.bos_id == translator.config.eos_id
        assert (tmp_path / f"ct2-{i}" / "sentencepiece.bpe.model").is_file()


def test_command_line(tiny_checkpoint, tmp_path, capsys):
    assert main(["--checkpoint", str(tiny_checkpoint), "--out", str(tmp_path / "ct2")]) == 0
    assert (tmp_path / "ct2" / "model.bin").is_file()
    capsys.readouterr()
    assert main(["--checkpoint", str(tiny_checkpoint), "--out", str(tmp_path / "ct2")]) == 1  # exists, no --force
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "--force" in err and err.count("\n") == 1 and "Traceback" not in err
    assert main(["--checkpoint", str(tmp_path / "missing"), "--out", str(tmp_path / "other")]) == 1
    assert capsys.readouterr().err.count("\n") == 1
    assert main(["--checkpoint", str(tiny_checkpoint), "--out", str(tmp_path / "ct2"), "--force",
                 "--quantization", "int8"]) == 0
    ct2 = ctranslate2.Translator(str(tmp_path / "ct2"), device="cpu", intra_threads=1)
    assert ct2.translate_batch([["▁a"]], beam_size=2, max_decoding_length=5)[0].hypotheses


@pytest.mark.data
def test_shipped_checkpoint_greedy_equals_ours(tmp_path, multi30k_dir):
    from pathlib import Path

    ckpt = Path(__file__).resolve().parents[2] / "checkpoints" / "multi30k-en-de"
    if not (ckpt / "config.json").is_file():
        pytest.skip("no shipped checkpoint")
    lines = (multi30k_dir / "test_2016_flickr.en").read_text(encoding="utf-8").splitlines()[:8]
    check_same_greedy(ckpt, tmp_path / "ct2", lines)
