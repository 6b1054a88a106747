"""Checkpoint directories: exact round trips, and a clear CheckpointError for every way loading can fail."""

from __future__ import annotations

import json
import shutil
import signal
import socket
import time
from pathlib import Path

import pytest
import torch

import transformer
from transformer import CheckpointError, Transformer, TransformerConfig, load_model_dir, save_checkpoint
from transformer.checkpoint import CONFIG_FILE, METADATA_FILE, REQUIRED_FILES, TOKENIZER_FILE, WEIGHTS_FILE


@pytest.fixture
def ckpt(tmp_path: Path, tiny_checkpoint: Path) -> Path:
    """A private copy of the tiny checkpoint, free to break."""
    return Path(shutil.copytree(tiny_checkpoint, tmp_path / "ckpt"))


def sample_batch(vocab: int):
    gen = torch.Generator().manual_seed(0)
    src = torch.randint(4, vocab, (3, 6), generator=gen)
    src[1, 4:] = 0
    tgt = torch.randint(4, vocab, (3, 5), generator=gen)
    tgt[:, 0] = 2
    tgt[2, 3:] = 0
    return src, tgt


@pytest.mark.parametrize("share_embeddings", [True, False])
def test_save_then_load_is_bit_exact(tmp_path, tiny_tokenizer, share_embeddings):
    v = tiny_tokenizer.vocab_size
    torch.manual_seed(1)
    model = Transformer(TransformerConfig(src_vocab_size=v, tgt_vocab_size=v, d_model=16, n_heads=2,
                                          n_encoder_layers=1, n_decoder_layers=2, d_ff=32, max_len=20,
                                          norm_first=not share_embeddings, share_embeddings=share_embeddings)).eval()
    with torch.no_grad():  # non-default values everywhere, biases and norms included
        for p in model.parameters():
            p.add_(0.01 * torch.randn_like(p))
    metadata = {"bleu": 12.5, "note": "Grüße, 世界 🙂"}
    path = save_checkpoint(tmp_path / "out", model, tiny_tokenizer, metadata)
    assert sorted(p.name for p in path.iterdir()) == sorted([*REQUIRED_FILES, METADATA_FILE])

    loaded, tokenizer, meta = load_model_dir(path)
    assert meta == metadata
    assert loaded.config == model.config
    assert not loaded.training
    assert tokenizer.model_proto == tiny_tokenizer.model_proto
    ours, theirs = model.state_dict(), loaded.state_dict()
    assert ours.keys() == theirs.keys()
    for name in ours:
        assert torch.equal(ours[name], theirs[name]), name
    if share_embeddings:  # stored once, tied again after loading
        assert loaded.generator.weight.data_ptr() == loaded.src_embed.weight.data_ptr()
        assert loaded.tgt_embed.weight.data_ptr() == loaded.src_embed.weight.data_ptr()
    else:
        assert loaded.generator.weight.data_ptr() != loaded.src_embed.weight.data_ptr()

    src, tgt = sample_batch(v)
    with torch.no_grad():
        a = model(src, tgt, return_attention=True)
        b = loaded(src, tgt, return_attention=True)
    assert torch.equal(a.logits, b.logits)
    for wa, wb in zip(a.encoder_attentions + a.decoder_attentions + a.cross_attentions,
                      b.encoder_attentions + b.decoder_attentions + b.cross_attentions):
        assert torch.equal(wa, wb)


def test_no_pickle_in_the_weights(ckpt):
    assert not (ckpt / WEIGHTS_FILE).read_bytes().startswith(b"\x80")  # a pickle stream starts with PROTO
    assert not list(ckpt.glob("*.pt")) and not list(ckpt.glob("*.bin"))


def test_load_returns_a_translator(tiny_checkpoint):
    translator = transformer.load(tiny_checkpoint, device="cpu")
    assert translator.path == tiny_checkpoint
    assert translator.metadata == {"note": "random weights, for tests"}
    assert translator.device == torch.device("cpu")
    assert not translator.model.training
    assert transformer.load(str(tiny_checkpoint), device="auto").device.type in ("cpu", "cuda")


@pytest.mark.parametrize("name", REQUIRED_FILES)
def test_missing_file(ckpt, name):
    (ckpt / name).unlink()
    with pytest.raises(CheckpointError, match=f"missing {name}"):
        load_model_dir(ckpt)
    with pytest.raises(CheckpointError, match=name):
        transformer.load(ckpt)


def test_missing_metadata_is_fine(ckpt):
    (ckpt / METADATA_FILE).unlink()
    _, _, metadata = load_model_dir(ckpt)
    assert metadata == {}


def test_missing_directory(tmp_path, monkeypatch):
    import huggingface_hub

    def no_network(*args, **kwargs):
        raise AssertionError("a path must never be looked up on the Hub")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", no_network)
    with pytest.raises(CheckpointError, match="No such directory"):
        transformer.load(tmp_path / "nope")
    with pytest.raises(CheckpointError, match="No such directory"):
        transformer.load("./nope/not/here")
    # a mistyped path under an existing folder is a path, not a Hub id ("user/name" has the same shape)
    (tmp_path / "checkpoints").mkdir()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(CheckpointError, match="No such directory"):
        transformer.load("checkpoints/does-not-exist")
    with pytest.raises(CheckpointError, match="missing"):
        load_model_dir(tmp_path)  # exists, but empty


def test_a_file_instead_of_a_directory(ckpt):
    with pytest.raises(CheckpointError, match="is a file"):
        transformer.load(ckpt / CONFIG_FILE)


@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty"])
def test_corrupt_weights(ckpt, damage):
    weights = ckpt / WEIGHTS_FILE
    data = weights.read_bytes()
    weights.write_bytes({"garbage": b"this is not a safetensors file" * 10,
                         "truncated": data[: len(data) // 2], "empty": b""}[damage])
    with pytest.raises(CheckpointError, match=WEIGHTS_FILE) as err:
        load_model_dir(ckpt)
    assert "corrupt" in str(err.value)


def test_corrupt_tokenizer(ckpt):
    (ckpt / TOKENIZER_FILE).write_bytes(b"\x00\x01 not a sentencepiece model")
    with pytest.raises(CheckpointError, match=TOKENIZER_FILE):
        load_model_dir(ckpt)


@pytest.mark.parametrize("text", ["{ not json", "[1, 2, 3]", '{"d_model": 32, "n_layers": 2}', '{"d_model": 30}'])
def test_corrupt_config(ckpt, text):
    (ckpt / CONFIG_FILE).write_text(text)
    with pytest.raises(CheckpointError, match=CONFIG_FILE):
        load_model_dir(ckpt)


def test_corrupt_metadata(ckpt):
    (ckpt / METADATA_FILE).write_text("{ nope")
    with pytest.raises(CheckpointError, match=METADATA_FILE):
        load_model_dir(ckpt)


@pytest.mark.parametrize("change", [{"d_ff": 48}, {"n_decoder_layers": 1}, {"n_encoder_layers": 3},
                                    {"d_model": 16, "n_heads": 4}, {"share_embeddings": False},
                                    {"norm_first": True}])
def test_config_that_does_not_match_the_weights(ckpt, change):
    config = json.loads((ckpt / CONFIG_FILE).read_text())
    config.update(change)
    (ckpt / CONFIG_FILE).write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="do not match config.json"):
        load_model_dir(ckpt)


HOSTILE_CONFIGS = {  # issue #37, 2: each took the server down (memory) or minutes before failing
    "max_len": {"max_len": 1_000_000_000},
    "encoder layers": {"n_encoder_layers": 5000},
    "decoder layers": {"n_decoder_layers": 100_000},
    "d_model": {"d_model": 1 << 20, "n_heads": 4},
    "d_ff": {"d_ff": 100_000_000},
    "vocabulary": {"src_vocab_size": 50_000_000, "tgt_vocab_size": 50_000_000},
    "position offset": {"position_offset": 10**12},
    "within bounds, over the memory limit": {"d_model": 8192, "n_heads": 8, "d_ff": 32768,
                                             "n_encoder_layers": 48, "n_decoder_layers": 48},
}


@pytest.mark.parametrize("name", HOSTILE_CONFIGS)
def test_a_hostile_config_is_refused_before_anything_is_allocated(ckpt, monkeypatch, name):
    import transformer.network.positional as positional_module
    from transformer.checkpoint import check_checkpoint_dir

    built = []

    def spy(*args, **kwargs):  # the first allocation Transformer(config) makes after its embeddings
        built.append(args)
        raise RuntimeError("the model was built")

    monkeypatch.setattr(positional_module, "positional_encoding", spy)
    config = json.loads((ckpt / CONFIG_FILE).read_text())
    (ckpt / CONFIG_FILE).write_text(json.dumps({**config, **HOSTILE_CONFIGS[name]}))
    for attempt in (lambda: transformer.load(ckpt, device="cpu"), lambda: check_checkpoint_dir(ckpt)):
        with pytest.raises(CheckpointError, match="refused") as err:
            attempt()
        assert CONFIG_FILE in str(err.value)
    assert not built


@pytest.mark.parametrize("change", [{"norm_first": "yes"}, {"share_embeddings": 1}, {"position_offset": 1.5},
                                    {"activation": ["relu"]}, {"max_len": True}])
def test_config_fields_of_the_wrong_type(ckpt, change):
    config = json.loads((ckpt / CONFIG_FILE).read_text())
    (ckpt / CONFIG_FILE).write_text(json.dumps({**config, **change}))
    with pytest.raises(CheckpointError, match=next(iter(change))):
        transformer.load(ckpt, device="cpu")


def test_an_oversized_or_deeply_nested_config_is_refused(ckpt):
    config = (ckpt / CONFIG_FILE).read_text()
    (ckpt / CONFIG_FILE).write_text(config + " " * 2_000_000)
    with pytest.raises(CheckpointError, match="over the"):
        transformer.load(ckpt, device="cpu")
    (ckpt / CONFIG_FILE).write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(CheckpointError, match="nested too deeply"):
        transformer.load(ckpt, device="cpu")


@pytest.mark.parametrize("config", [
    dict(src_vocab_size=100, tgt_vocab_size=100, d_model=32, n_heads=4, n_encoder_layers=2, n_decoder_layers=3,
         d_ff=48, max_len=40),
    dict(src_vocab_size=100, tgt_vocab_size=120, share_embeddings=False, d_model=24, n_heads=3, n_encoder_layers=1,
         n_decoder_layers=0, d_ff=16, max_len=7, norm_first=True, final_logits_bias=True, position_offset=3,
         positional_layout="fairseq"),
])
def test_model_bytes_is_what_the_model_holds(config):
    from transformer.network.config import model_bytes

    cfg = TransformerConfig(**config)
    with torch.device("meta"):
        model = Transformer(cfg)
    held = sum(p.numel() * 4 for p in model.parameters()) + sum(b.untyped_storage().nbytes() for b in model.buffers())
    assert model_bytes(cfg) == held


def test_the_apps_model_limit_admits_the_real_models_it_offers_and_a_library_load_ignores_it(ckpt, monkeypatch):
    from app.models.catalog import check_model_size, max_model_mb
    from transformer.checkpoint.families.m2m100 import config_from_m2m100
    from transformer.checkpoint.families.marian import config_from_marian
    from transformer.network.config import model_bytes

    monkeypatch.delenv("ATTN_MAX_MODEL_MB", raising=False)
    nllb = config_from_m2m100({"vocab_size": 256206, "d_model": 1024, "encoder_layers": 12, "decoder_layers": 12,
                               "encoder_attention_heads": 16, "decoder_attention_heads": 16, "encoder_ffn_dim": 4096,
                               "decoder_ffn_dim": 4096, "max_position_embeddings": 1024, "pad_token_id": 1,
                               "eos_token_id": 2, "decoder_start_token_id": 2, "scale_embedding": True})
    assert 2_400 < model_bytes(nllb) / 1e6 < max_model_mb()  # NLLB-200 distilled 600M: ~615M parameters
    opus = config_from_marian({"vocab_size": 58101, "d_model": 512, "encoder_layers": 6, "decoder_layers": 6,
                               "encoder_attention_heads": 8, "decoder_attention_heads": 8, "encoder_ffn_dim": 2048,
                               "decoder_ffn_dim": 2048, "max_position_embeddings": 512, "pad_token_id": 58100,
                               "eos_token_id": 0, "decoder_start_token_id": 58100})
    assert model_bytes(opus) / 1e6 < 400
    with pytest.raises(CheckpointError, match="refused"):
        config_from_marian({**{"vocab_size": 58101, "d_model": 512, "encoder_layers": 6, "decoder_layers": 5000,
                               "encoder_attention_heads": 8, "decoder_attention_heads": 8, "encoder_ffn_dim": 2048,
                               "decoder_ffn_dim": 2048, "pad_token_id": 58100, "eos_token_id": 0}})
    for wrong in ([1], float("inf"), "x"):  # a field of the wrong type is a CheckpointError too
        with pytest.raises(CheckpointError):
            config_from_marian({"vocab_size": 58101, "d_model": wrong, "encoder_layers": 6, "decoder_layers": 6,
                                "pad_token_id": 58100, "eos_token_id": 0})
    monkeypatch.setenv("ATTN_MAX_MODEL_MB", "0.01")  # the tiny checkpoint is ~0.1 MB
    assert max_model_mb() == 0.01
    with pytest.raises(CheckpointError, match="ATTN_MAX_MODEL_MB"):  # the app's limit, applied by the app
        check_model_size(ckpt, "float32")
    assert transformer.load(ckpt, device="cpu").model is not None  # a library call loads what it is asked
    monkeypatch.setenv("ATTN_MAX_MODEL_MB", "inf")  # no limit, as 0 (transformer.environment's rule)
    check_model_size(ckpt, "float32")
    monkeypatch.setenv("ATTN_MAX_MODEL_MB", "nonsense")
    with pytest.raises(ValueError, match="ATTN_MAX_MODEL_MB='nonsense' is not understood"):
        check_model_size(ckpt, "float32")


@pytest.mark.parametrize("metadata", [
    '{"final_validation": [1]}', '{"language_pair": {"a": 1}}', '{"steps": "many"}', '{"history": [1, 2]}',
    '{"history": [{"step": "x"}]}', '{"test_2016_flickr": "38"}',
    '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}", '{"a": ' + "[" * 40 + "]" * 40 + "}",
    '{"pad": "' + "x" * 5_000_000 + '"}',
], ids=["final_validation-list", "language_pair-object", "steps-text", "history-numbers", "history-step-text",
        "test-text", "nested-100000", "nested-40", "5MB"])
def test_metadata_of_the_wrong_shape_is_a_clear_error(ckpt, metadata):
    from transformer.checkpoint import check_checkpoint_dir

    (ckpt / METADATA_FILE).write_text(metadata)
    for attempt in (lambda: transformer.load(ckpt, device="cpu"), lambda: check_checkpoint_dir(ckpt)):
        with pytest.raises(CheckpointError, match=METADATA_FILE):
            attempt()


def test_config_vocabulary_that_does_not_match_the_tokenizer(ckpt):
    config = json.loads((ckpt / CONFIG_FILE).read_text())
    config["src_vocab_size"] = config["tgt_vocab_size"] = config["tgt_vocab_size"] + 5
    (ckpt / CONFIG_FILE).write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="tokenizer has"):
        load_model_dir(ckpt)


def test_unknown_hub_repo_offline_fails_fast_and_clearly(monkeypatch, tmp_path):
    from huggingface_hub import constants, snapshot_download  # noqa: F401  (loaded before the variable is set)

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    attempts = []

    def no_network(*args, **kwargs):
        attempts.append(args)
        raise OSError("network use in offline mode")

    monkeypatch.setattr(socket, "getaddrinfo", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)

    def hang(signum, frame):
        raise TimeoutError("transformer.load hung on an offline Hub lookup")

    previous = signal.signal(signal.SIGALRM, hang)
    signal.alarm(60)
    start = time.monotonic()
    try:
        with pytest.raises(CheckpointError) as err:
            transformer.load("some-owner/some-repo-that-does-not-exist")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert time.monotonic() - start < 30
    message = str(err.value)
    assert "some-owner/some-repo-that-does-not-exist" in message
    assert "Hugging Face Hub" in message
    assert "offline" in message.lower()
    assert not attempts, "HF_HUB_OFFLINE=1 must mean no network access at all"


def test_device_resolver_names_the_problem():
    assert transformer.resolve_device("cpu") == torch.device("cpu")
    assert transformer.resolve_device("auto").type in ("cpu", "cuda")
    with pytest.raises(CheckpointError, match="unknown device"):
        transformer.resolve_device("gpu please")
    if not torch.cuda.is_available():
        with pytest.raises(CheckpointError, match="no GPU"):
            transformer.resolve_device("cuda")
