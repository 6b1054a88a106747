"""The CTranslate2 export: same weights, same greedy tokens and scores as our own decoding."""

from __future__ import annotations

import json

import pytest
import torch

ctranslate2 = pytest.importorskip("ctranslate2")

import transformer  # noqa: E402
from transformer import Transformer, TransformerConfig, save_checkpoint  # noqa: E402
from transformer.decoding import output_limits  # noqa: E402
from transformer.exchange.ctranslate2_export import export_ctranslate2, main  # noqa: E402

SENTENCES = ["A man rides a bike.", "Two people are walking on the beach.", "A girl plays with a red ball in the park.",
             "The dog runs.", "A woman in a blue street with two children", "boy"]


def limit_of(translator, src_ids):
    """Our per-sentence output budget (a * source length + b, a=1.5, b=10)."""
    return int(output_limits(translator.model, torch.tensor([src_ids]), 1.5, 10)[0])


def ct2_greedy(ct2, translator, sentences):
    """CTranslate2 greedy output ids and scores (summed log-probabilities), with our length budget."""
    tok, cfg = translator.tokenizer, translator.config
    suppress = [[tok.pieces([cfg.pad_id])[0]], [tok.pieces([cfg.bos_id])[0]]]  # never outputs, as in ours
    ids, scores = [], []
    for s in sentences:
        src_ids = translator.encode_source(s)[0]
        res = ct2.translate_batch([tok.pieces(src_ids[:-1])], beam_size=1,
                                  max_decoding_length=limit_of(translator, src_ids), min_decoding_length=0,
                                  length_penalty=0.0, suppress_sequences=suppress, return_scores=True)[0]
        ids.append([tok.sp.piece_to_id(p) for p in res.hypotheses[0]])
        scores.append(res.scores[0])
    return ids, scores


def check_same_greedy(checkpoint, out_dir, sentences=SENTENCES):
    """Export, then CTranslate2's greedy search must give our tokens, with our model's log-probabilities."""
    export_ctranslate2(checkpoint, out_dir)
    translator = transformer.load(checkpoint, device="cpu")
    ct2 = ctranslate2.Translator(str(out_dir), device="cpu", intra_threads=1)
    ours_ids, _ = translator.generate([translator.encode_source(s)[0] for s in sentences], beam_size=1)
    theirs_ids, theirs_scores = ct2_greedy(ct2, translator, sentences)
    assert theirs_ids == ours_ids
    # CTranslate2 takes the suppressed tokens out before its softmax: its score is our model's log-probability
    # of the output (EOS included where produced) with PAD and BOS out of the distribution
    cfg = translator.config
    for s, ids, theirs in zip(sentences, ours_ids, theirs_scores):
        src_ids = translator.encode_source(s)[0]
        out = ids + [cfg.eos_id] if len(ids) < limit_of(translator, src_ids) else ids
        with torch.no_grad():
            logits = translator.model(torch.tensor([src_ids]), torch.tensor([[cfg.bos_id, *out[:-1]]])).logits[0]
        logits[:, [cfg.pad_id, cfg.bos_id]] = float("-inf")
        expected = logits.log_softmax(-1)[torch.arange(len(out)), torch.tensor(out)].sum().item()
        assert abs(expected - theirs) < 1e-3 * max(1.0, abs(expected))
    return translator, ct2


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


def test_pre_norm_untied_model_exports_too(tiny_tokenizer, tmp_path):
    torch.manual_seed(1)
    v = tiny_tokenizer.vocab_size
    cfg = TransformerConfig(src_vocab_size=v, tgt_vocab_size=v, d_model=32, n_heads=4, n_encoder_layers=2,
                            n_decoder_layers=3, d_ff=48, max_len=64, norm_first=True, share_embeddings=False)
    model = Transformer(cfg).eval()
    with torch.no_grad():  # non-trivial norms and biases, so that a wrong mapping would show
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    ckpt = save_checkpoint(tmp_path / "pre", model, tiny_tokenizer)
    check_same_greedy(ckpt, tmp_path / "ct2")


def test_command_line(tiny_checkpoint, tmp_path, capsys):
    assert main(["--checkpoint", str(tiny_checkpoint), "--out", str(tmp_path / "ct2")]) == 0
    assert (tmp_path / "ct2" / "model.bin").is_file()
    assert main(["--checkpoint", str(tiny_checkpoint), "--out", str(tmp_path / "ct2"), "--force",
                 "--quantization", "int8"]) == 0
    ct2 = ctranslate2.Translator(str(tmp_path / "ct2"), device="cpu", intra_threads=1)
    assert ct2.translate_batch([["▁a"]], beam_size=2, max_decoding_length=5)[0].hypotheses


@pytest.mark.data
def test_shipped_checkpoint_greedy_equals_ours(tmp_path, multi30k_dir):
    from pathlib import Path

    ckpt = Path(__file__).resolve().parents[1] / "checkpoints" / "multi30k-en-de"
    if not (ckpt / "config.json").is_file():
        pytest.skip("no shipped checkpoint")
    lines = (multi30k_dir / "test_2016_flickr.en").read_text(encoding="utf-8").splitlines()[:8]
    check_same_greedy(ckpt, tmp_path / "ct2", lines)
