"""``transformer.heads``: head importance, statistics, roles and the pruning curve, on tiny models."""

from __future__ import annotations

import json
import math
import random

import torch
import torch.nn.functional as F

import transformer
from transformer import Tokenizer, Transformer, TransformerConfig
from transformer.evaluate import score, translate_all
from transformer.heads import KINDS, analyse_heads, head_mask_off, main, run

torch.set_num_threads(1)


def corpus(directory, split: str = "test") -> tuple[list[str], list[str]]:
    src = (directory / f"{split}.en").read_text().splitlines()
    tgt = (directory / f"{split}.de").read_text().splitlines()
    return src, tgt


def test_a_head_with_a_zero_output_slice_has_no_importance_and_no_effect(tiny_checkpoint, tiny_corpus):
    tr = transformer.load(tiny_checkpoint, device="cpu")
    attn = tr.model.encoder_layers[0].self_attn
    with torch.no_grad():
        attn.out_proj.weight[:, attn.d_head:2 * attn.d_head] = 0.0  # head 2 of encoder layer 1 writes nothing
    sources, refs = corpus(tiny_corpus)
    result = analyse_heads(tr, sources, refs, batch_size=8)
    assert result["importance"]["encoder"][0][1] == 0.0
    others = [v for k in KINDS for row in result["importance"][k] for v in row]
    assert sum(v > 0 for v in others) == len(others) - 1
    for k in KINDS:  # normalised per layer: each layer's vector has unit l2 norm
        for row in result["importance"][k]:
            assert math.isclose(sum(v * v for v in row), 1.0, rel_tol=1e-5)
    plain = translate_all(tr, sources, beam=3, batch_size=8, alpha=0.6, progress=False)
    off = translate_all(tr, sources, beam=3, batch_size=8, alpha=0.6, progress=False,
                        head_mask=head_mask_off(tr, [("encoder", 0, 1)]))
    assert off == plain


def test_importance_is_the_mean_absolute_gradient_of_the_gate(tiny_checkpoint, tiny_corpus):
    tr = transformer.load(tiny_checkpoint, device="cpu")
    sources, refs = corpus(tiny_corpus)
    sources, refs = sources[:6], refs[:6]
    result = analyse_heads(tr, sources, refs, batch_size=64)  # one batch
    # by hand: finite differences of the loss with respect to one gate
    cfg = tr.config
    src = transformer.data.pad_sequences([tr.encode_source(s)[0] for s in sources], cfg.pad_id)
    tgt = transformer.data.pad_sequences([[cfg.bos_id] + tr.tokenizer.encode(r) + [cfg.eos_id] for r in refs],
                                         cfg.pad_id)

    def loss(head: int, gate: float) -> float:
        mask = head_mask_off(tr, [])
        mask["cross"][1, head] = gate
        with torch.no_grad():
            logits = tr.model(src, tgt[:, :-1], head_mask=mask).logits
        return float(F.cross_entropy(logits.reshape(-1, logits.size(-1)), tgt[:, 1:].reshape(-1),
                                     ignore_index=cfg.pad_id))

    eps = 1e-2
    grads = [abs(loss(h, 1 + eps) - loss(h, 1 - eps)) / (2 * eps) for h in range(cfg.n_heads)]
    raw = torch.tensor(result["importance"]["cross"][1])  # normalised per layer: compare directions
    layer = torch.tensor(grads)
    torch.testing.assert_close(raw, layer / layer.norm(), atol=2e-3, rtol=2e-2)


def test_curve_starts_at_the_baseline_that_evaluate_gives(tiny_checkpoint, tiny_corpus):
    tr = transformer.load(tiny_checkpoint, device="cpu")
    sources, refs = corpus(tiny_corpus)
    result = run(tr, sources, refs, "de", beam=2, batch_size=8)
    expected = score(translate_all(tr, sources, beam=2, batch_size=64, alpha=0.6, progress=False), refs, "de")["bleu"]
    assert result["pruning"][0]["heads_off"] == 0 and result["pruning"][0]["bleu"] == result["baseline_bleu"]
    assert result["baseline_bleu"] == expected
    total = sum(len(row) for k in KINDS for row in result["importance"][k])
    counts = [p["heads_off"] for p in result["pruning"]]
    assert counts[-1] == total and all(b - a <= total / 10 for a, b in zip(counts, counts[1:]))
    for kind in KINDS:
        assert result["pruning_by_type"][kind][-1]["heads_off"] == sum(len(r) for r in result["importance"][kind])
    # least important first
    off = result["pruning"][2]["off"]
    imp = [result["importance"][k][layer][h] for k, layer, h in off]
    rest = [result["importance"][k][layer][h] for k in KINDS for layer, row in enumerate(result["importance"][k])
            for h in range(len(row)) if [k, layer, h] not in off]
    assert max(imp) <= min(rest)


def test_a_copy_model_has_a_positional_head(tmp_path):
    rng = random.Random(0)
    words = ["red", "blue", "green", "dog", "cat", "man", "sun", "car"]
    lines = [" ".join(rng.choice(words) for _ in range(rng.randint(3, 7))) for _ in range(400)]
    (tmp_path / "copy.txt").write_text("\n".join(lines) + "\n")
    tok = Tokenizer.train([tmp_path / "copy.txt"], vocab_size=40)
    torch.manual_seed(0)
    cfg = TransformerConfig(src_vocab_size=tok.vocab_size, tgt_vocab_size=tok.vocab_size, d_model=32, n_heads=2,
                            n_encoder_layers=1, n_decoder_layers=1, d_ff=64, dropout=0.0, max_len=64)
    model = Transformer(cfg)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3, betas=(0.9, 0.98))
    ids = [tok.encode(s) for s in lines]
    for _ in range(250):
        rows = [ids[rng.randrange(len(ids))] for _ in range(32)]
        src = transformer.data.pad_sequences([r + [cfg.eos_id] for r in rows], cfg.pad_id)
        tgt = transformer.data.pad_sequences([[cfg.bos_id] + r + [cfg.eos_id] for r in rows], cfg.pad_id)
        logits = model(src, tgt[:, :-1]).logits
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), tgt[:, 1:].reshape(-1), ignore_index=cfg.pad_id)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    tr = transformer.Translator(model.eval(), tok)
    held_out = [" ".join(rng.choice(words) for _ in range(5)) for _ in range(30)]
    assert sum(r.text == s for r, s in zip(tr.translate_batch(held_out, beam_size=1), held_out)) >= 25  # it copies
    result = analyse_heads(tr, held_out, held_out, batch_size=16)
    roles = [r for row in result["roles"]["cross"] for r in row]
    assert "positional (+0)" in roles, result["roles"]  # output piece t reads source piece t
    assert "positional" in result["role_rules"]


def test_command_writes_every_key(tiny_checkpoint, tiny_corpus, tmp_path, capsys):
    out = tmp_path / "heads.json"
    code = main(["--checkpoint", str(tiny_checkpoint), "--data-dir", str(tiny_corpus), "--split", "test",
                 "--limit", "8", "--beam", "2", "--out", str(out), "--json", "--no-progress"])
    assert code == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    written = json.loads(out.read_text())
    assert printed == written
    for key in ("sentences", "split", "checkpoint", "importance", "importance_note", "stats", "baseline_bleu",
                "pruning", "pruning_by_type", "roles", "role_rules", "most_confident"):
        assert key in written, key
    assert written["sentences"] == 8 and written["split"] == "test"
    for kind in KINDS:
        for name in ("entropy", "max_weight", "on_end_token", "on_start_token", "on_previous", "on_same", "on_next"):
            assert len(written["stats"][kind][name]) == 2 and len(written["stats"][kind][name][0]) == 4
    assert len(written["stats"]["cross"]["alignment_agreement"]) == 2
    assert main(["--checkpoint", str(tiny_checkpoint), "--data-dir", str(tmp_path / "none")]) == 1
