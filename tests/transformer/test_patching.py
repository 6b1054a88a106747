"""Activation and path patching (``transformer.interpret.patching``): its exact invariants, a second implementation
(a plain loop, one run per site, attention written out) on post-norm, pre-norm, Marian and M2M100 models, hooks on
transformers' own modules, zero-patching against the model's ``head_mask``, and a model built by hand whose copy head
carries the edit and whose decoy head, attending to the same piece, carries nothing."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import transformer
from transformer import Transformer, TransformerConfig
from transformer.interpret.patching import MIN_CHANGE, SITES, patch, prepare
from transformer.network.kinds import head_mask
from transformer.translator import Translator

torch.set_num_threads(1)
ACTIVATIONS = {"relu": F.relu, "swish": F.silu, "silu": F.silu, "gelu": F.gelu}
CLEAN, EDITED = "a man rides a red bike", "a dog rides a red bike"  # the tiny corpus' words, one noun swapped


# ------------------------------------------------------------------------------------------------ the plain loop


def oracle_run(model: Transformer, src_ids: list[int], tgt_ids: list[int],
               replace: dict | None = None, seen: dict | None = None) -> torch.Tensor:
    """One teacher-forced run, layer by layer, attention written out head by head, no batch and no cache: the
    logits at the last decoder position ``(V,)``. Every patchable value passes through ``at(key, value)``:
    recorded into ``seen``, replaced by ``replace[key](value)``."""
    cfg = model.config
    replace = replace or {}

    def at(key, value):
        if seen is not None:
            seen[key] = value.clone()
        return replace[key](value.clone()) if key in replace else value

    def norm(module, x):
        return F.layer_norm(x, module.normalized_shape, module.weight, module.bias, module.eps)

    def sublayer(x, module, f):
        return x + f(norm(module, x)) if cfg.norm_first else norm(module, x + f(x))

    def attention(mod, xq, xkv, causal, key):
        h, d = mod.n_heads, mod.d_head
        q = F.linear(xq, mod.q_proj.weight, mod.q_proj.bias).view(-1, h, d).transpose(0, 1)  # (Tq, D) -> (H, Tq, d)
        k = F.linear(xkv, mod.k_proj.weight, mod.k_proj.bias).view(-1, h, d).transpose(0, 1)  # (H, Tk, d)
        v = F.linear(xkv, mod.v_proj.weight, mod.v_proj.bias).view(-1, h, d).transpose(0, 1)  # (H, Tk, d)
        scores = q @ k.transpose(1, 2) / math.sqrt(d)  # (H, Tq, Tk)
        if causal:
            scores = scores.masked_fill(~torch.ones_like(scores, dtype=torch.bool).tril(), float("-inf"))
        z = at(key, scores.softmax(-1) @ v)  # (H, Tq, d)
        return F.linear(z.transpose(0, 1).reshape(xq.size(0), h * d), mod.out_proj.weight, mod.out_proj.bias)

    def ffn(mod, x):
        return F.linear(ACTIVATIONS[cfg.activation](F.linear(x, mod.linear1.weight, mod.linear1.bias)),
                        mod.linear2.weight, mod.linear2.bias)

    x = at(("enc_resid", 0), model.embed(torch.tensor([src_ids]), model.src_embed)[0])  # (S, D)
    for i, layer in enumerate(model.encoder_layers):  # (each lambda is called at once, in its own turn)
        x = sublayer(x, layer.norm1, lambda h: attention(layer.self_attn, h, h, False, ("enc_head", i)))  # noqa: B023
        x = at(("enc_resid", i + 1), sublayer(x, layer.norm2, lambda h: ffn(layer.ffn, h)))  # noqa: B023
    memory = x if model.encoder_norm is None else norm(model.encoder_norm, x)
    y = at(("dec_resid", 0), model.embed(torch.tensor([tgt_ids]), model.tgt_embed)[0])  # (T, D)
    for i, layer in enumerate(model.decoder_layers):
        y = sublayer(y, layer.norm1, lambda h: attention(layer.self_attn, h, h, True, ("dec_head", i)))  # noqa: B023
        y = sublayer(y, layer.norm2, lambda h: attention(layer.cross_attn, h, at(("cross_kv", i), memory),  # noqa: B023
                                                         False, ("cross_head", i)))  # noqa: B023
        y = at(("dec_resid", i + 1), sublayer(y, layer.norm3, lambda h: ffn(layer.ffn, h)))  # noqa: B023
    last = y[-1] if model.decoder_norm is None else norm(model.decoder_norm, y[-1])
    return F.linear(last, model.generator.weight, model.generator.bias)


def oracle_replacement(kind: str, a: int, b: int, donor: dict) -> dict[tuple, Callable]:
    """``replace`` for ``oracle_run``: site ``(kind, a, b)`` from the ``donor`` run's recorded values."""
    def put(value):
        if kind != "cross_head" and kind != "dec_head":  # position b (cross_kv: memory row b); enc_head: head b
            value[b] = donor[key][b]
        else:  # (H, T, d): head b at the last query (the step)
            value[b, -1] = donor[key][b, -1]
        return value
    key = (kind, a)
    return {key: put}


def oracle_patch(model, src: list[list[int]], tgt: list[int], target: int, foil: int, direction: str,
                 shapes: dict) -> dict[str, np.ndarray]:
    """Every site's patched metric by the plain loop, one run per site."""
    seen = [{}, {}]
    for run in (0, 1):
        oracle_run(model, src[run], tgt, seen=seen[run])
    receiver, donor = (1, 0) if direction == "denoise" else (0, 1)
    out = {}
    for kind, shape in shapes.items():
        m = np.zeros(shape)
        for a in range(shape[0]):
            for b in range(shape[1]):
                logits = oracle_run(model, src[receiver], tgt, oracle_replacement(kind, a, b, seen[donor]))
                m[a, b] = float(logits[target] - logits[foil])
        out[kind] = m
    return out


@torch.no_grad()
def check_against_oracle(tr, clean: str, edited: str, **kw) -> None:
    """Every array of :func:`patch`, both directions, equal to the plain loop's to 1e-5."""
    model, chosen = tr.model, {}
    for direction in ("denoise", "noise"):
        r = patch(tr, clean, edited, direction=direction, **kw, **chosen)
        chosen = {"target_ids": r.target_ids, "step": r.step, "target": r.target, "foil": r.foil}  # translated once
        assert not r.note and set(r.effect) == set(SITES)
        pair = prepare(tr, clean, edited, target_ids=r.target_ids, step=r.step, **{k: v for k, v in kw.items()
                                                                                    if k.endswith("lang")})
        src = pair.src.tolist()
        tgt = pair.tgt[0].tolist()
        ends = [oracle_run(model, s, tgt) for s in src]
        m = [float(lg[r.target] - lg[r.foil]) for lg in ends]
        assert r.m_clean == pytest.approx(m[0], abs=1e-5) and r.m_edit == pytest.approx(m[1], abs=1e-5)
        assert r.logp_clean == pytest.approx(float(ends[0].log_softmax(-1)[r.target]), abs=1e-5)
        assert r.logp_edit == pytest.approx(float(ends[1].log_softmax(-1)[r.target]), abs=1e-5)
        theirs = oracle_patch(model, src, tgt, r.target, r.foil, direction, {k: v.shape for k, v in r.metric.items()})
        for kind in SITES:
            np.testing.assert_allclose(r.metric[kind], theirs[kind], atol=1e-5, rtol=1e-5, err_msg=kind)
            e = (theirs[kind] - m[1] if direction == "denoise" else m[0] - theirs[kind]) / (m[0] - m[1])
            scale = max(1.0, 1 / abs(m[0] - m[1]))  # an effect is a metric divided by m_clean - m_edit
            np.testing.assert_allclose(r.effect[kind], e, atol=1e-5 * scale, rtol=1e-5, err_msg=kind)


# ------------------------------------------------------------------------------------------------ models


@pytest.fixture(scope="module")
def prenorm_tr(tiny_tokenizer):
    from conftest import tiny_model

    v = tiny_tokenizer.vocab_size
    model = tiny_model(3, src_vocab_size=v, tgt_vocab_size=v, norm_first=True, max_len=64, n_encoder_layers=3)
    with torch.no_grad():  # non-zero biases and norms, so a misplaced one shows
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(torch.randn_like(p) * 0.1)
    return Translator(model, tiny_tokenizer)


@torch.no_grad()
def test_the_recorded_runs_are_the_models_own(tr, prenorm_tr):
    for t in (tr, prenorm_tr):
        pair = prepare(t, CLEAN, EDITED)
        logits = t.model(pair.src, pair.tgt.expand(2, -1)).logits[:, -1]  # (2, V)
        for run in (0, 1):
            assert pair.m(run) == pytest.approx(float(logits[run, pair.target] - logits[run, pair.foil]), abs=1e-5)
            assert pair.logp[run] == pytest.approx(float(logits[run].log_softmax(-1)[pair.target]), abs=1e-5)


@pytest.mark.parametrize("layout", ["post-norm", "pre-norm"])
def test_every_array_equals_a_plain_loop(tr, prenorm_tr, layout):
    check_against_oracle(tr if layout == "post-norm" else prenorm_tr, CLEAN, EDITED)


def test_the_exact_invariants(tr, prenorm_tr):
    for t in (tr, prenorm_tr):
        r = patch(t, CLEAN, EDITED)
        cfg = t.config
        unedited = [j for j in range(r.effect["enc_resid"].shape[1]) if j not in r.edited_positions]
        assert r.edited_positions == [1] and unedited  # "man" -> "dog", one piece each
        np.testing.assert_allclose(r.effect["enc_resid"][0, unedited], 0, atol=1e-5)
        np.testing.assert_allclose(r.effect["dec_resid"][0], 0, atol=1e-5)  # the same decoder input
        assert r.effect["dec_resid"][cfg.n_decoder_layers, r.step] == pytest.approx(1, abs=1e-5)
        assert r.effect["dec_resid"].shape == (cfg.n_decoder_layers + 1, r.step + 1)
        pair = prepare(t, CLEAN, EDITED, target_ids=r.target_ids, step=r.step)
        s = pair.src.size(1)
        rows = [[("enc_resid", row, j) for j in range(s)] for row in range(cfg.n_encoder_layers + 1)]
        rows.append([("cross_kv", layer, j) for layer in range(cfg.n_decoder_layers) for j in range(s)])
        for direction in ("denoise", "noise"):
            np.testing.assert_allclose(pair.effects(pair.metrics(rows, direction), direction), 1, atol=1e-5)


@torch.no_grad()
def test_zero_patching_a_head_is_the_models_head_mask(tr):
    """Zero-patching an encoder head (every position) is the Ablation view's head_mask; a decoder or cross head at
    step 0 (its only query) too."""
    cfg = tr.config
    for step in (0, 2):
        pair = prepare(tr, CLEAN, EDITED, step=step)
        kinds = {"enc_head": "encoder"} if step else {"dec_head": "decoder", "cross_head": "cross"}
        for site, kind in kinds.items():
            for layer in range(cfg.n_decoder_layers):
                for head in range(cfg.n_heads):
                    for direction, run in (("denoise", 1), ("noise", 0)):
                        m = pair.metrics([[(site, layer, head)]], direction, zero=True)[0]
                        out = tr.model(pair.src[run:run + 1], pair.tgt,
                                       head_mask=head_mask(cfg, [(kind, layer, head)])).logits[0, -1]
                        assert m == pytest.approx(float(out[pair.target] - out[pair.foil]), abs=1e-5)


def test_bad_input_gets_one_clear_message(tr):
    longer = "a man rides a red bicycle today"
    with pytest.raises(ValueError, match="same number of pieces") as error:
        patch(tr, CLEAN, longer)
    for text in (CLEAN, longer):  # both piece lists named
        assert str(tr.tokenizer.pieces(tr.encode_source(text)[0])) in str(error.value)
    with pytest.raises(ValueError, match="differ somewhere"):
        patch(tr, CLEAN, CLEAN)
    with pytest.raises(ValueError, match="direction"):
        patch(tr, CLEAN, EDITED, direction="sideways")
    with pytest.raises(ValueError, match="unknown sites"):
        patch(tr, CLEAN, EDITED, sites=["enc_resid", "mlp"])
    with pytest.raises(ValueError, match="step must be"):
        patch(tr, CLEAN, EDITED, step=99)
    with pytest.raises(ValueError, match="two pieces"):
        patch(tr, CLEAN, EDITED, step=0, target=5, foil=5)


@torch.no_grad()
def test_the_default_step_target_and_foil(tr):
    r = patch(tr, CLEAN, EDITED, sites="cross_kv")
    assert list(r.effect) == list(r.metric) == ["cross_kv"]
    clean, edited = (t.target_ids for t in tr.translate_batch([CLEAN, EDITED]))
    assert r.target_ids == clean and r.target == clean[r.step]
    differs = [t for t in range(len(clean)) if t >= len(edited) or clean[t] != edited[t]]
    if differs:
        assert r.step == differs[0]
    pair = prepare(tr, CLEAN, EDITED, target_ids=r.target_ids, step=r.step, target=r.target)
    logits = tr.model.generator(pair.runs[1].final)
    top = logits.topk(2).indices.tolist()
    assert r.foil == (top[1] if top[0] == r.target else top[0])
    if not differs:  # the same translation: the step where the two runs' next-piece distributions differ most
        tgt = torch.tensor([[tr.config.bos_id, *clean[:-1]]] * 2)
        logp = tr.model(pair.src, tgt).logits.log_softmax(-1)  # (2, T, V)
        assert r.step == int((logp[0].exp() * (logp[0] - logp[1])).sum(-1).argmax())



def test_a_given_edited_translation_sets_the_step_and_nothing_is_translated(tr, monkeypatch):
    """``edited_target_ids``: the edited text's translation as the caller has it (the page's, under its own
    settings): the default step is the first where it differs from ``target_ids``, and neither text is translated
    again; the translator's own translation given gives what it gives when left out."""
    clean, edited = (t.target_ids for t in tr.translate_batch([CLEAN, EDITED]))
    plain = patch(tr, CLEAN, EDITED, sites="cross_kv")
    given = patch(tr, CLEAN, EDITED, sites="cross_kv", target_ids=clean, edited_target_ids=edited)
    assert (given.step, given.target, given.foil) == (plain.step, plain.target, plain.foil)
    np.testing.assert_array_equal(given.effect["cross_kv"], plain.effect["cross_kv"])

    def no_translation(*args, **kwargs):
        raise AssertionError("translated again")

    monkeypatch.setattr(tr, "translate_batch", no_translation)
    for at in range(1, len(clean)):  # an edited translation that first differs from the clean one at step `at`
        other = [*clean[:at], (clean[at] + 1) % tr.config.tgt_vocab_size, *clean[at + 1:]]
        assert prepare(tr, CLEAN, EDITED, target_ids=clean, edited_target_ids=other).step == at
    with pytest.raises(ValueError, match="edited_target_ids"):
        prepare(tr, CLEAN, EDITED, target_ids=clean, edited_target_ids=[tr.config.tgt_vocab_size])

def test_too_small_to_normalise_says_so_and_computes_nothing(tiny_tokenizer):
    """A model whose output ignores the source (cross-attention writes nothing): m is the same in both runs."""
    from conftest import tiny_model

    v = tiny_tokenizer.vocab_size
    model = tiny_model(5, src_vocab_size=v, tgt_vocab_size=v, max_len=64)
    with torch.no_grad():
        for layer in model.decoder_layers:
            layer.cross_attn.out_proj.weight.zero_()
    r = patch(Translator(model, tiny_tokenizer), CLEAN, EDITED, target_ids=[5, 6, 3], step=1, target=7, foil=8)
    assert abs(r.m_clean - r.m_edit) < MIN_CHANGE and r.effect == {} and r.metric == {}
    assert "too small to normalise" in r.note and r.direction == "denoise" and r.edited_positions == [1]


# ------------------------------------------------------------------------------------------------ Marian and M2M100

transformers = pytest.importorskip("transformers")

from m2m100_models import save_m2m100, train_spm  # noqa: E402
from test_marian import marian_files, save_marian  # noqa: E402, F401  (marian_files: a fixture)


def same_length_pair(tr, src_lang: str | None = None) -> tuple[str, str]:
    """``CLEAN`` and the first swap of its noun, from the tiny corpus' words, with the same piece count."""
    n = len(tr.encode_source(CLEAN, src_lang)[0])
    for word in ("dog", "woman", "child", "girl", "boy", "ball", "park", "beach"):
        edited = CLEAN.replace("man", word, 1)
        if len(tr.encode_source(edited, src_lang)[0]) == n:
            return CLEAN, edited
    raise AssertionError("no swap of the same piece count")


def louder(hf, path):
    """``hf`` with its matrices drawn at d_model^-0.5 (transformers' 0.02 leaves a tiny model's output nearly
    deaf to its source: no edit would change it), saved again; and ours loaded from it."""
    torch.manual_seed(7)
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if p.dim() > 1 and "embed_positions" not in name:  # (Marian's sinusoidal table is a parameter)
                p.normal_(0, hf.config.d_model ** -0.5)
    hf.save_pretrained(path)
    return hf.eval(), transformer.load(path, device="cpu")


@pytest.fixture(scope="module")
def marian(tmp_path_factory, marian_files):  # noqa: F811
    return louder(*save_marian(tmp_path_factory.mktemp("patch-marian"), marian_files[1], files=marian_files))


@pytest.fixture(scope="module")
def m2m100(tmp_path_factory, tiny_corpus):
    spm_dir = train_spm(tmp_path_factory.mktemp("patch-spm"), tiny_corpus)
    hf, _, path = save_m2m100(tmp_path_factory.mktemp("patch-m2m100"), spm_dir, "m2m100")
    return louder(hf, path)


LANGS = {"marian": {}, "m2m100": {"src_lang": "en", "tgt_lang": "de"}}


@pytest.mark.slow  # the two models' tokenizers and checkpoints: ~15 s for the module
@pytest.mark.parametrize("family", ["marian", "m2m100"])
def test_every_array_equals_a_plain_loop_on_converted_models(marian, m2m100, family):
    _, tr = marian if family == "marian" else m2m100
    check_against_oracle(tr, *same_length_pair(tr, LANGS[family].get("src_lang")), **LANGS[family])


@pytest.mark.slow
def test_a_forced_language_code_is_never_a_step(m2m100):
    _, tr = m2m100
    clean, edited = same_length_pair(tr, "en")
    r = patch(tr, clean, edited, src_lang="en", tgt_lang="de", sites="dec_resid")
    assert r.step >= 1 and r.target_ids[0] == tr.tokenizer.target_prefix("de")[0]
    with pytest.raises(ValueError, match="language code is no step"):
        patch(tr, clean, edited, src_lang="en", tgt_lang="de", step=0)


def hf_metrics(hf, pair, direction: str, sites: dict[str, tuple[int, int]]) -> dict[str, np.ndarray]:
    """``enc_resid`` and ``cross_kv`` by hooks on transformers' own encoder layers and cross-attention modules
    (this test's own model object): each site one row of a batched run of ``hf`` (a kind's sites in one run), the
    donor's values recorded by the same hooks."""
    encoder, decoder = hf.model.encoder, hf.model.decoder
    n_enc = len(encoder.layers)

    def run(src: torch.Tensor, patches: dict, seen: dict | None = None) -> np.ndarray:
        """One run of ``hf`` on the rows ``src (N, S)``, ``m`` of each ``(N,)``; ``patches[(kind, layer)]``: the
        ``(row, position, value)`` written into the hooked tensors ``(N, S, D)``."""
        def change(key, hidden):
            if seen is not None:
                seen[key] = hidden[0].clone()
            if key in patches:
                hidden = hidden.clone()
                for i, j, value in patches[key]:
                    hidden[i, j] = value
            return hidden

        def pre(key, name):
            def hook(module, args, kwargs):
                if name in kwargs:
                    return args, {**kwargs, name: change(key, kwargs[name])}
                return (change(key, args[0]), *args[1:]), kwargs
            return hook

        handles = [layer.register_forward_pre_hook(pre(("enc_resid", i), "hidden_states"), with_kwargs=True)
                   for i, layer in enumerate(encoder.layers)]
        handles.append(encoder.layers[-1].register_forward_hook(
            lambda module, args, out: change(("enc_resid", n_enc), out)))
        handles += [layer.encoder_attn.register_forward_pre_hook(pre(("cross_kv", i), "key_value_states"),
                                                                 with_kwargs=True)
                    for i, layer in enumerate(decoder.layers)]
        try:
            logits = hf(input_ids=src, attention_mask=torch.ones_like(src),
                        decoder_input_ids=pair.tgt.repeat(len(src), 1), use_cache=False).logits[:, -1]  # (N, V)
        finally:
            for h in handles:
                h.remove()
        return (logits[:, pair.target] - logits[:, pair.foil]).double().numpy()

    receiver, donor = (1, 0) if direction == "denoise" else (0, 1)
    seen: dict = {}
    run(pair.src[donor:donor + 1], {}, seen)
    out = {}
    for kind, (rows, cols) in sites.items():
        patches: dict = {}
        for i, (a, b) in enumerate(np.ndindex(rows, cols)):  # row i of the batch: site (a, b)
            patches.setdefault((kind, a), []).append((i, b, seen[(kind, a)][b]))
        out[kind] = run(pair.src[receiver:receiver + 1].repeat(rows * cols, 1), patches).reshape(rows, cols)
    return out


@pytest.mark.slow
@torch.no_grad()
@pytest.mark.parametrize("family", ["marian", "m2m100"])
def test_hooks_on_transformers_modules_give_the_same_enc_resid_and_cross_kv(marian, m2m100, family):
    hf, tr = marian if family == "marian" else m2m100
    clean, edited = same_length_pair(tr, LANGS[family].get("src_lang"))
    for direction in ("denoise", "noise"):
        r = patch(tr, clean, edited, direction=direction, sites=["enc_resid", "cross_kv"], **LANGS[family])
        pair = prepare(tr, clean, edited, target_ids=r.target_ids, step=r.step, target=r.target, foil=r.foil,
                       **LANGS[family])
        theirs = hf_metrics(hf, pair, direction, {k: v.shape for k, v in r.metric.items()})
        for kind in r.metric:
            np.testing.assert_allclose(r.metric[kind], theirs[kind], atol=1e-4, rtol=1e-4, err_msg=kind)


# ------------------------------------------------------------------------------------------------ a model by hand


class Words:
    """A tokenizer of three words, A, B and C (ids 3, 4, 5); sources end in </s>."""

    pad_id, bos_id, eos_id, unk_id = 0, 1, 2, 0
    WORDS = ("<pad>", "<s>", "</s>", "A", "B", "C")
    vocab_size, languages = 6, ()

    def encode(self, text: str) -> list[int]:
        return [self.WORDS.index(w) for w in text.split()]

    def source_frame(self, lang: str | None = None) -> tuple[list[int], list[int]]:
        return [], [self.eos_id]

    def target_prefix(self, lang: str | None = None) -> list[int]:
        return []

    def pieces(self, ids) -> list[str]:
        return [self.WORDS[i] for i in ids]

    def decode(self, ids) -> str:
        return " ".join(self.pieces(ids))


def hand_built(second: str) -> Translator:
    """d_model 8: dimensions 0-2 the words A, B, C, 3-6 the positions 0-3, 7 a sink that keeps every vector's mean
    at 0; pre-norm with a LayerNorm epsilon so large (and weight its square root) that each norm only centres.
    Every sub-layer writes nothing but the decoder's cross-attention: head 0 attends from output position 0 to
    source position 1 and copies its word into the stream, which the output projection reads as that word's logit.
    Head 1 (``second``): a ``"decoy"`` with the same attention and values whose output projection is zero, or a
    ``"copy"`` identical to head 0."""
    eps, s, c = 1e6, 60.0, 4.0
    cfg = TransformerConfig(src_vocab_size=6, tgt_vocab_size=6, d_model=8, n_heads=2, n_encoder_layers=1,
                            n_decoder_layers=1, d_ff=4, dropout=0.0, max_len=4, norm_first=True, pad_id=0, bos_id=1,
                            eos_id=2, layer_norm_eps=eps, scale_embedding=False, share_embeddings=False)
    model = Transformer(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.zero_()
            if "norm" in name and name.endswith("weight"):
                p.fill_(math.sqrt(eps))
        for word in range(3):
            model.src_embed.weight[3 + word, word], model.src_embed.weight[3 + word, 7] = 1.0, -1.0
            model.generator.weight[3 + word, word] = 1.0
        model.pe.zero_()
        for pos in range(4):
            model.pe[pos, 3 + pos], model.pe[pos, 7] = 1.0, -1.0
        attn = model.decoder_layers[0].cross_attn
        for head in range(2):
            first = 4 * head  # the head's dimensions in Q, K, V
            attn.q_proj.weight[first, 3] = s  # output position 0 asks for ...
            attn.k_proj.weight[first, 4] = 1.0  # ... source position 1
            for word in range(3):
                attn.v_proj.weight[first + word, word] = 1.0  # its value: the word
                if head == 0 or second == "copy":
                    attn.out_proj.weight[word, first + word], attn.out_proj.weight[7, first + word] = c, -c
    return Translator(model, Words())


@torch.no_grad()
def test_a_copy_head_carries_the_edit_and_a_decoy_attending_to_it_carries_nothing():
    tr = hand_built("decoy")
    out = tr.model(torch.tensor([[5, 3, 5, 2]]), torch.tensor([[1]]), return_attention=True)
    np.testing.assert_allclose(out.cross_attentions[0][0, :, 0, 1], 1.0, atol=1e-6)  # both heads on the edit
    for direction in ("denoise", "noise"):
        r = patch(tr, "C A C", "C B C", target_ids=[3, 2], step=0, target=3, direction=direction)
        assert (r.target, r.foil, r.edited_positions) == (3, 4, [1])  # foil: the edited run's top piece, B
        assert r.m_clean == pytest.approx(4.0, abs=1e-4) and r.m_edit == pytest.approx(-4.0, abs=1e-4)
        e = r.effect
        np.testing.assert_allclose(e["cross_head"], [[1.0, 0.0]], atol=1e-5)  # the copy head; the decoy: nothing
        np.testing.assert_allclose(e["cross_kv"], [[0.0, 1.0, 0.0, 0.0]], atol=1e-5)
        np.testing.assert_allclose(e["enc_resid"], [[0.0, 1.0, 0.0, 0.0]] * 2, atol=1e-5)
        np.testing.assert_allclose(e["dec_resid"], [[0.0], [1.0]], atol=1e-5)
        np.testing.assert_allclose(e["enc_head"], 0.0, atol=1e-5)
        np.testing.assert_allclose(e["dec_head"], 0.0, atol=1e-5)


@torch.no_grad()
def test_two_copy_heads_share_the_effect_and_back_each_other_up():
    """Denoise: restoring one copy head restores half of the change (they share it); noise: corrupting one head
    changes half (the other backs it up); together, either way, the whole."""
    tr = hand_built("copy")
    for direction in ("denoise", "noise"):
        r = patch(tr, "C A C", "C B C", target_ids=[3, 2], step=0, target=3, direction=direction)
        assert r.m_clean == pytest.approx(8.0, abs=1e-4)
        np.testing.assert_allclose(r.effect["cross_head"], [[0.5, 0.5]], atol=1e-5)
        pair = prepare(tr, "C A C", "C B C", target_ids=[3, 2], step=0, target=3)
        both = pair.metrics([[("cross_head", 0, 0), ("cross_head", 0, 1)]], direction)
        np.testing.assert_allclose(pair.effects(both, direction), [1.0], atol=1e-5)


# ------------------------------------------------------------------------------------------------ first order


@torch.no_grad()
def test_first_order_is_the_derivative_of_exact_patching(tr, prenorm_tr):
    """Attribution patching's estimate for a site is the slope of exact patching along the way from the receiving
    run's value to the donor's: exact patching of ``receiver + eps (donor - receiver)`` (every value of the donor
    record moved that far, one site patched at a time) changes m by eps times the first-order change."""
    from transformer.interpret.patching import Record, first_order, patched_metrics

    eps = 1e-3
    for t in (tr, prenorm_tr):
        pair = prepare(t, CLEAN, EDITED)
        for direction in ("denoise", "noise"):
            receiver, donor = pair.receiver_donor(direction)
            near = Record(*[[a + eps * (b - a) for a, b in zip(x, y)] if isinstance(x, list) else x + eps * (y - x)
                            for x, y in zip(vars(receiver).values(), vars(donor).values())])
            sites = pair.sites()
            slope = (patched_metrics(t.model, pair.src[:1], pair.tgt, receiver, near, [[s] for s in sites],
                                     pair.direction_m, pair.bias_m) - pair.m(1 if direction == "denoise" else 0)) / eps
            estimate = first_order(pair, direction) - pair.m(1 if direction == "denoise" else 0)
            np.testing.assert_allclose(estimate, slope, atol=5e-3 * max(1.0, np.abs(slope).max()), rtol=1e-2)


def test_the_preview_patches_its_top_sites_exactly():
    from transformer.interpret.patching import preview

    tr = hand_built("decoy")
    p = preview(tr, "C A C", "C B C", target_ids=[3, 2], step=0, target=3, top=3, sites=["cross_head", "cross_kv"])
    assert set(p.estimate.effect) == {"cross_head", "cross_kv"} and len(p.sites) == 3
    assert p.sites[0] in {("cross_head", 0, 0), ("cross_kv", 0, 1)}  # the copy head or the edited memory row
    exact = patch(tr, "C A C", "C B C", target_ids=[3, 2], step=0, target=3, sites=["cross_head", "cross_kv"])
    for site, value in zip(p.sites, p.exact):
        assert value == pytest.approx(float(exact.effect[site[0]][site[1], site[2]]), abs=1e-5)
    # the copy head's path is linear but for the centring norms: its first-order effect is its exact one
    np.testing.assert_allclose(p.estimate.effect["cross_head"], exact.effect["cross_head"], atol=1e-3)


def test_rows_in_smaller_batches_give_the_same_arrays(tr, monkeypatch):
    from transformer.interpret.patching import pair

    whole = patch(tr, CLEAN, EDITED, direction="noise")
    monkeypatch.setattr(pair, "PATCH_BYTES", 1)  # one row a batch (read where Pair.metrics reads it)
    alone = patch(tr, CLEAN, EDITED, direction="noise")
    for kind in SITES:
        np.testing.assert_allclose(alone.metric[kind], whole.metric[kind], atol=1e-5, err_msg=kind)


def test_numpy_integers_are_ids_and_a_bad_piece_is_named(tr):
    r = patch(tr, CLEAN, EDITED, sites="dec_resid")
    again = patch(tr, CLEAN, EDITED, target_ids=np.array(r.target_ids), step=np.int64(r.step),
                  target=np.int64(r.target), foil=np.int64(r.foil), sites="dec_resid")
    np.testing.assert_array_equal(again.metric["dec_resid"], r.metric["dec_resid"])
    assert type(again.step) is int and all(type(t) is int for t in again.target_ids)
    with pytest.raises(ValueError, match="foil must be piece ids"):
        patch(tr, CLEAN, EDITED, step=0, foil=10 ** 6)
    with pytest.raises(ValueError, match="target_ids must be piece ids"):
        patch(tr, CLEAN, EDITED, target_ids=[1, -3], step=0)
