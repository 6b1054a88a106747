"""Loading lean (``transformer.checkpoint.mapped``): weights memory-mapped into a model built on the meta device,
bfloat16, refusing only what cannot fit, one-line messages for damaged files. Tiny models; the large sizes are
measured by ``python -m bench.large``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

import transformer
from transformer import CheckpointError, Transformer, TransformerConfig, save_checkpoint
from transformer.checkpoint import mapped
from transformer.network.linear import activation_dtype

transformers = pytest.importorskip("transformers")

from m2m100_models import lang_id, save_m2m100, train_spm  # noqa: E402


@pytest.fixture(scope="module")
def spm_dir(tmp_path_factory, tiny_corpus):
    return train_spm(tmp_path_factory.mktemp("fairseq-spm"), tiny_corpus)


@pytest.fixture(scope="module")
def nllb(tmp_path_factory, spm_dir):
    return save_m2m100(tmp_path_factory.mktemp("nllb"), spm_dir, "nllb")


@pytest.fixture
def ours(tmp_path, tiny_tokenizer):
    torch.manual_seed(0)
    cfg = TransformerConfig(src_vocab_size=tiny_tokenizer.vocab_size, tgt_vocab_size=tiny_tokenizer.vocab_size,
                            d_model=32, n_heads=4, n_encoder_layers=2, n_decoder_layers=2, d_ff=64, max_len=64)
    model = Transformer(cfg).eval()
    return model, save_checkpoint(tmp_path / "ckpt", model, tiny_tokenizer, {})


def mappings_of(path: Path) -> list[tuple[int, int]]:
    """The address ranges of this process's mappings of the file ``path``."""
    spans = []
    with open(f"/proc/{os.getpid()}/maps", encoding="utf-8") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 6 and Path(parts[5]) == path.resolve():
                low, _, high = parts[0].partition("-")
                spans.append((int(low, 16), int(high, 16)))
    return spans


def mapped_from(tensor: torch.Tensor, path: Path) -> bool:
    return any(low <= tensor.data_ptr() < high for low, high in mappings_of(path))


@pytest.mark.slow  # among the slowest of the fast loop (its CPU budget: 60 s)
@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads /proc/self/maps (Linux)")
def test_our_checkpoints_weights_are_the_files_pages_not_a_copy(ours, monkeypatch):
    import transformer.network.weights as weights

    monkeypatch.setattr(weights, "COLUMN_MAJOR_MAX_BYTES", 0)  # as a large model: no column-major copy
    model, path = ours
    tr = transformer.load(path, device="cpu")
    for name, p in tr.model.named_parameters():
        assert p.dtype == torch.float32 and mapped_from(p, path / "model.safetensors"), name
        torch.testing.assert_close(p, model.state_dict()[name], atol=0, rtol=0)
    assert tr.model.tgt_embed.weight is tr.model.src_embed.weight is tr.model.generator.weight  # tied again
    assert tr.model.num_parameters() == model.num_parameters()
    torch.testing.assert_close(tr.model.pe, model.pe, atol=0, rtol=0)


@pytest.mark.slow  # among the slowest of the fast loop (its CPU budget: 60 s)
@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads /proc/self/maps (Linux)")
def test_a_transformers_directorys_weights_are_mapped_and_translate_as_transformers(nllb, monkeypatch):
    import transformer.network.weights as weights

    monkeypatch.setattr(weights, "COLUMN_MAJOR_MAX_BYTES", 0)
    hf, tok, path = nllb
    tr = transformer.load(path, device="cpu")
    assert mapped_from(tr.model.encoder_layers[0].ffn.linear1.weight, path / "model.safetensors")
    ids, _ = tr.encode_source("A man rides a red bike.", "eng_Latn")
    ours = tr.generate([ids], beam_size=1, max_len_a=0.0, max_len_b=8, tgt_lang="deu_Latn")[0][0]
    with torch.no_grad():
        theirs = hf.generate(input_ids=torch.tensor([ids]), num_beams=1, do_sample=False, max_new_tokens=8,
                             forced_bos_token_id=lang_id(tok, "deu_Latn"))[0].tolist()
    assert ours == [t for t in theirs[1:] if t not in (1, 2)]


def test_bfloat16_equals_transformers_in_bfloat16_and_returns_float32_attention(nllb):
    hf, tok, path = nllb
    tr = transformer.load(path, device="cpu", dtype="bfloat16")
    assert {p.dtype for p in tr.model.parameters()} == {torch.bfloat16}
    en, de = lang_id(tok, "eng_Latn"), lang_id(tok, "deu_Latn")
    src, tgt = torch.tensor([[en, 5, 6, 7, 8, 9, 2]]), torch.tensor([[2, de, 12, 13, 14]])
    theirs = transformers.M2M100ForConditionalGeneration.from_pretrained(path, dtype=torch.bfloat16,
                                                                         attn_implementation="eager").eval()
    with torch.no_grad():
        ref = theirs(input_ids=src, decoder_input_ids=tgt, output_attentions=True)
        full = hf(input_ids=src, decoder_input_ids=tgt, output_attentions=True)
        out = tr.model(src, tgt, return_attention=True)
    # bfloat16 activations, or float32 ones on a CPU without bfloat16 instructions (network.linear.activation_dtype)
    assert out.logits.dtype == activation_dtype(tr.model.generator.weight)
    # bfloat16 keeps 8 bits of mantissa: equal to transformers' bfloat16 model, and to float32, within its rounding
    torch.testing.assert_close(out.logits.float(), ref.logits.float(), atol=0.05, rtol=0.02)
    torch.testing.assert_close(out.logits.float(), full.logits, atol=0.08, rtol=0.05)
    for mine, f32 in zip(out.cross_attentions, full.cross_attentions):
        assert mine.dtype == torch.float32  # computed in float32 from the bfloat16 projections
        torch.testing.assert_close(mine.sum(-1), torch.ones_like(mine.sum(-1)), atol=1e-5, rtol=0)
        torch.testing.assert_close(mine, f32, atol=0.02, rtol=0.05)
    result = tr.translate("A man rides a red bike.", src_lang="eng_Latn", tgt_lang="deu_Latn", beam_size=2)
    assert all(a.dtype == torch.float32 for a in (*result.encoder_attentions, *result.cross_attentions))


def test_bfloat16_of_our_checkpoint_and_a_wrong_dtype(ours):
    model, path = ours
    tr = transformer.load(path, device="cpu", dtype=torch.bfloat16)
    for name, p in tr.model.named_parameters():
        torch.testing.assert_close(p, model.state_dict()[name].to(torch.bfloat16), atol=0, rtol=0)
    result = tr.translate("A man rides a bike.", beam_size=3)
    assert result.target_ids and all(a.dtype == torch.float32 for a in result.decoder_attentions)
    with pytest.raises(CheckpointError, match="float16.*not one the model runs in"):
        transformer.load(path, device="cpu", dtype="float16")


def test_weights_that_cannot_fit_are_refused_with_the_numbers_before_anything_is_built(ours, nllb, monkeypatch):
    built = []
    monkeypatch.setattr(mapped, "available_bytes", lambda: 10_000)
    monkeypatch.setattr(mapped, "build_model", lambda *a, **k: built.append(a))
    for path in (ours[1], nllb[2]):
        with pytest.raises(CheckpointError, match=r"refused: its weights need [\d,.]+ MB in float32 but this "
                                                  r"machine has 0 MB available"):
            transformer.load(path, device="cpu")
    assert not built
    monkeypatch.setattr(mapped, "available_bytes", lambda: None)  # unknown: no check
    assert mapped.weights_bytes(ours[0].config, torch.bfloat16) * 2 == mapped.weights_bytes(ours[0].config)


@pytest.mark.parametrize("damage", ["truncated", "garbage"])
def test_a_damaged_transformers_safetensors_file_is_one_line(tmp_path, nllb, damage):
    import shutil

    path = tmp_path / "copy"
    shutil.copytree(nllb[2], path)
    weights = path / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) - 1000] if damage == "truncated" else b"\x00" * 64)
    with pytest.raises(CheckpointError, match="model.safetensors is truncated or corrupt") as err:
        transformer.load(path, device="cpu")
    assert "\n" not in str(err.value)


def test_the_converted_pages_are_handed_back(tmp_path):
    """After a dtype conversion the source's whole pages leave the resident set (``mincore`` is not needed:
    the values read after ``release`` come back from the file, so they must equal what it holds)."""
    from safetensors.torch import save_file

    save_file({"w": torch.arange(1 << 20, dtype=torch.float32)}, str(tmp_path / "w.safetensors"))
    state = mapped.load_file(str(tmp_path / "w.safetensors"))
    before = state["w"].clone()
    mapped.release(state["w"], mapped.file_mappings())
    torch.testing.assert_close(state["w"], before, atol=0, rtol=0)  # re-read from the file, unchanged


def test_decoding_without_the_fused_projection_is_the_same(ours, monkeypatch):
    """Models wider than ``FUSE_QKV_MAX_D`` project Q, K and V by three matmuls (no per-search copy of the
    weights): the same outputs as the fused path the tiny model takes."""
    from transformer.network import attention

    tr = transformer.load(ours[1], device="cpu")
    fused = tr.translate_batch(["A man rides a bike.", "Two dogs."], beam_size=3, return_attention=False)
    monkeypatch.setattr(attention, "FUSE_QKV_MAX_D", 0)
    plain = tr.translate_batch(["A man rides a bike.", "Two dogs."], beam_size=3, return_attention=False)
    assert [r.target_ids for r in plain] == [r.target_ids for r in fused]
    for a, b in zip(plain, fused):
        assert abs(a.score - b.score) < 1e-4


def test_the_app_loads_in_its_dtype_and_applies_its_own_limit(ours, monkeypatch):
    from app.models import catalog

    monkeypatch.setenv("ATTN_DTYPE", "bfloat16")
    tr = catalog.load_translator(str(ours[1]), "cpu")
    assert {p.dtype for p in tr.model.parameters()} == {torch.bfloat16}
    monkeypatch.setenv("ATTN_MAX_MODEL_MB", "0.01")
    with pytest.raises(CheckpointError, match=r"MB \(parameters and buffers, bfloat16\), over this server's limit"):
        catalog.load_translator(str(ours[1]), "cpu")
    monkeypatch.setenv("ATTN_DTYPE", "float16")  # not one the model runs in: refused, never a silent float32
    with pytest.raises(ValueError, match="ATTN_DTYPE='float16' is not understood: give float32 or bfloat16"):
        catalog.model_dtype()
