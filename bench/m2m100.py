"""The M2M100-418M-sized section of ``python -m bench`` (also ``python -m bench.m2m100``).

An M2M100-418M-sized model (1024 / 12+12 / 16 heads / 4096, pre-norm, vocabulary 128,112; random weights, no
download) is saved with transformers (``M2M100ForConditionalGeneration`` and ``M2M100Tokenizer`` over a
sentencepiece model trained on the workload) and run two ways on the same weights, threads and sentences, beam 4,
English to German (``forced_bos_token_id``): ours (opened by ``transformer.load`` from that directory) and
transformers' ``generate``. Random weights ramble, so both stop at the same output length. Also one 20-word
sentence, greedy, with every attention returned: ours against transformers with ``output_attentions=True``.
``--quick`` shrinks the model and the workload to seconds.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import torch

from .common import batch_throughput_vs_hf, family_bench_main, greedy_latency_vs_hf


def m2m100_dir(directory: Path, sentences: list[str], quick: bool) -> Path:
    """A random M2M100 model with a sentencepiece tokenizer trained on ``sentences``, saved with transformers."""
    import sentencepiece as spm
    from transformers import M2M100Config, M2M100ForConditionalGeneration, M2M100Tokenizer

    text = directory / "corpus.txt"
    text.write_text("\n".join(sentences) + "\n", encoding="utf-8")
    spm.SentencePieceTrainer.train(input=str(text), model_prefix=str(directory / "sp"), vocab_size=2000 if quick
                                   else 8000, model_type="bpe", minloglevel=2, hard_vocab_limit=False)
    sp = spm.SentencePieceProcessor(model_file=str(directory / "sp.model"))
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    for i in range(sp.get_piece_size()):
        vocab.setdefault(sp.id_to_piece(i), len(vocab))
    size = 3000 if quick else 128112 - 108  # M2M100-418M's 128,112 ids: pieces, then 100 codes and 8 made-up words
    while len(vocab) < size:  # pieces the workload never uses
        vocab[f"▁extra{len(vocab)}"] = len(vocab)
    (directory / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    d, layers, heads, ff = (64, 2, 4, 128) if quick else (1024, 12, 16, 4096)
    cfg = M2M100Config(vocab_size=len(vocab) + 108, d_model=d, encoder_layers=layers, decoder_layers=layers,
                       encoder_attention_heads=heads, decoder_attention_heads=heads, encoder_ffn_dim=ff,
                       decoder_ffn_dim=ff, max_position_embeddings=1024, attn_implementation="eager")
    torch.manual_seed(0)
    with torch.device("meta"):  # skip transformers' slow init: fill the weights once, below
        model = M2M100ForConditionalGeneration(cfg)
    model = model.to_empty(device="cpu").eval()
    model.tie_weights()  # the shared table, both embeddings and the output projection: one tensor again
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.randn_like(p) * 0.02 if p.dim() > 1 else
                    torch.ones_like(p) if "norm" in name and name.endswith("weight") else torch.zeros_like(p))
    out = directory / "m2m100"
    model.save_pretrained(out)
    M2M100Tokenizer(vocab_file=str(directory / "vocab.json"), spm_file=str(directory / "sp.model"), src_lang="en",
                    tgt_lang="de").save_pretrained(out)
    return out


def run(sentences: list[str], quick: bool = False, threads: int = 2, max_new: int = 20,
        corpus: list[str] | None = None) -> dict[str, Any]:
    """The section's keys (see the module docstring); the tokenizer is trained on ``corpus`` (default: the
    sentences)."""
    import transformer

    torch.set_num_threads(threads)
    result: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-m2m100-") as tmp:
        path = m2m100_dir(Path(tmp), corpus or sentences, quick)
        from transformers import M2M100ForConditionalGeneration, M2M100Tokenizer

        hf = M2M100ForConditionalGeneration.from_pretrained(path, attn_implementation="eager").eval()
        tok = M2M100Tokenizer.from_pretrained(path, src_lang="en", tgt_lang="de")
        forced = tok.get_lang_id("de")
        ours = transformer.load(path, device="cpu")
        batch = 64 if not quick else 8

        def hf_batch(group: list[str]) -> None:
            with torch.inference_mode():
                hf.generate(**tok(group, return_tensors="pt", padding=True), num_beams=4, max_new_tokens=max_new,
                            forced_bos_token_id=forced, bad_words_ids=[[1]], early_stopping=False)

        result.update(batch_throughput_vs_hf(
            "m2m100", sentences, batch,
            lambda group: ours.translate_batch(group, beam_size=4, alpha=1.0, max_len_a=0.0, max_len_b=max_new,
                                               src_lang="en", tgt_lang="de"),
            hf_batch, digits=3))
        result["m2m100_hf_ratio"] = round(result["m2m100_batch_sent_s"] / result["m2m100_batch_sent_s_hf"], 2)
        sentence = next((s for s in sentences if len(s.split()) == 20), sentences[0])
        repeat = 3
        enc = tok(sentence, return_tensors="pt")

        def hf_greedy() -> None:
            with torch.inference_mode():
                out = hf.generate(**enc, num_beams=1, max_new_tokens=max_new, forced_bos_token_id=forced,
                                  bad_words_ids=[[1]])
                hf(**enc, decoder_input_ids=out, output_attentions=True)  # every attention, as ours returns

        result.update(greedy_latency_vs_hf(
            "m2m100", lambda: ours.translate(sentence, beam_size=1, max_len_a=0.0, max_len_b=max_new,
                                             return_attention=True, src_lang="en", tgt_lang="de"),
            hf_greedy, repeat, hf.config))
        result["m2m100_sentences"] = len(sentences)
    return result


def main(argv: list[str] | None = None) -> int:
    return family_bench_main("python -m bench.m2m100", __doc__, run, "m2m100", 64, 8, argv)


if __name__ == "__main__":
    raise SystemExit(main())
