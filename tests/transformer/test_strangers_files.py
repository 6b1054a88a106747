"""A checkpoint folder's files may come from a stranger (issue #66, section 4): flag.json and a table manifest's
``flag_rule`` are read within caps (conditions, size, numbers a float holds, known columns, knot shares), a refused
flag.json says so, a FIFO never blocks, a safetensors header is bounded by what real checkpoints need, and the
messages are one short line that repeats nothing of the file's size."""

from __future__ import annotations

import copy
import json
import os
import pickle
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest
import torch

from transformer import CheckpointError, load_model_dir
from transformer.checkpoint import WEIGHTS_FILE, check_checkpoint_dir
from transformer.checkpoint.files import MAX_HEADER_BYTES, read_json
from transformer.checkpoint.mapped import map_weights
from transformer.interpret import corpus_files
from transformer.interpret.flagging import (
    DEFAULT_RULE,
    FLAG_FILE,
    MAX_CONDITIONS,
    MAX_FLAG_BYTES,
    FlagRule,
    flag_rule,
    score_text,
)

SHIPPED = Path(__file__).resolve().parents[2] / "checkpoints" / "multi30k-en-de"


@pytest.fixture(scope="module")
def shipped_rule() -> dict:
    return json.loads((SHIPPED / FLAG_FILE).read_text(encoding="utf-8"))


@pytest.fixture
def ckpt(tmp_path: Path, tiny_checkpoint: Path) -> Path:
    """A private copy of the tiny checkpoint, free to break."""
    return Path(shutil.copytree(tiny_checkpoint, tmp_path / "ckpt"))


def planted(folder: Path, data: object) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / FLAG_FILE).write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return folder


def test_the_shipped_rule_reads_within_every_cap(shipped_rule):
    """The caps leave room: the real flag.json (about 13 kB, 6 conditions) is far inside each."""
    rule = flag_rule(SHIPPED)
    assert rule.refused is None and rule.origin.endswith(FLAG_FILE) and rule.score is not None
    assert len(rule.conditions) <= MAX_CONDITIONS // 4 and (SHIPPED / FLAG_FILE).stat().st_size <= MAX_FLAG_BYTES // 16


def test_a_rule_of_more_conditions_than_the_cap_is_refused(shipped_rule, tmp_path):
    data = copy.deepcopy(shipped_rule)
    data["any"] = [{"column": "seq_logprob", "op": "<=", "value": -5.0 - i / 1000} for i in range(60_000)]
    with pytest.raises(ValueError, match=f"at most {MAX_CONDITIONS} conditions, not 60,000"):
        FlagRule.from_json(data)
    rule = flag_rule(planted(tmp_path / "m", data))  # 3 MB: refused by its size before it is parsed
    assert rule == DEFAULT_RULE and "over the 256 kB" in rule.refused
    data["any"] = data["any"][:MAX_CONDITIONS + 1]
    rule = flag_rule(planted(tmp_path / "n", data))
    assert rule == DEFAULT_RULE and f"at most {MAX_CONDITIONS} conditions" in rule.refused
    data["any"] = data["any"][:MAX_CONDITIONS]
    assert len(FlagRule.from_json(data).conditions) == MAX_CONDITIONS


@pytest.mark.parametrize("where", ["condition", "threshold", "knot"])
def test_a_400_digit_integer_is_refused_with_a_message_not_an_overflow(shipped_rule, tmp_path, where):
    text = json.dumps(shipped_rule)
    huge = "9" * 400
    if where == "condition":
        text = text.replace('"value": 3}', f'"value": {huge}}}', 1)
    elif where == "threshold":
        text = text.replace('"threshold": ', f'"threshold": {huge}, "was": ', 1)
    else:
        text = text.replace('"values": [', f'"values": [{huge}, ', 1).replace('"tails": [', '"tails": [1.0, ', 1)
    assert huge in text
    with pytest.raises(ValueError) as err:
        FlagRule.from_json(json.loads(text))
    assert huge[:20] not in str(err.value) and len(str(err.value)) < 200
    rule = flag_rule(planted(tmp_path, text))
    assert rule == DEFAULT_RULE and rule.refused and huge[:20] not in rule.refused


def test_a_knot_share_too_small_for_a_float_score_is_refused_and_score_text_never_overflows(shipped_rule, tmp_path):
    data = copy.deepcopy(shipped_rule)
    signal = next(iter(data["score"]["signals"].values()))
    signal["tails"][-1] = 5e-324  # -log10 of it is 323.3: 10 ** 323.3 is past a float
    rule = flag_rule(planted(tmp_path, data))
    assert rule == DEFAULT_RULE and "shares fall" in rule.refused
    row = {"translation": "ein hund " * 8, "seq_logprob": -9.0, "source_share": 0.1, "eos_attention": 0.9}
    assert score_text(row, rule) is None  # the default rule has no score: nothing to say, nothing raised


def test_a_condition_on_a_column_the_table_lacks_is_refused(shipped_rule):
    data = copy.deepcopy(shipped_rule)
    data["any"].append({"column": "made_up_signal", "op": ">=", "value": 1})
    with pytest.raises(ValueError, match="one of the table's, not 'made_up_signal'"):
        FlagRule.from_json(data)


def test_a_refused_flag_json_says_it_is_there_and_why(tmp_path):
    assert flag_rule(tmp_path).refused is None  # no file: the default rule, nothing refused
    rule = flag_rule(planted(tmp_path, "{not json"))
    assert rule == DEFAULT_RULE and rule.refused and "\n" not in rule.refused


def test_a_fifo_flag_json_is_refused_at_once(tmp_path):
    os.mkfifo(tmp_path / FLAG_FILE)
    found: list[FlagRule] = []
    reader = threading.Thread(target=lambda: found.append(flag_rule(tmp_path)), daemon=True)
    reader.start()
    reader.join(5)
    assert found, "reading a FIFO flag.json blocked"
    assert found[0] == DEFAULT_RULE and "not a regular file" in found[0].refused


@pytest.mark.parametrize("name", ["config.json", "metadata.json"])
def test_no_checkpoint_json_file_blocks_as_a_fifo(tmp_path, name):
    os.mkfifo(tmp_path / name)
    errors: list[BaseException] = []

    def read() -> None:
        try:
            read_json(tmp_path / name, 10_000)
        except BaseException as err:  # noqa: BLE001 (what was raised is the answer)
            errors.append(err)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(5)
    assert errors and isinstance(errors[0], ValueError) and "not a regular file" in str(errors[0])


def header_file(path: Path, header_bytes: int) -> None:
    """A safetensors file whose header says it is ``header_bytes`` long (the rest of it spaces: JSON whitespace)."""
    body = b'{"__metadata__":{"format":"pt"}}'
    with open(path, "wb") as f:
        f.write(header_bytes.to_bytes(8, "little") + body)
        f.truncate(8 + header_bytes)
    with open(path, "r+b") as f:  # the sparse tail as spaces, so that the header parses if it is read
        f.seek(8 + len(body))
        f.write(b" " * (header_bytes - len(body)))


def test_a_safetensors_header_over_what_checkpoints_need_is_refused_unread(ckpt, monkeypatch):
    """A header of 8 MB (the attack's was 94 MB) is refused from its first 8 bytes, without parsing it."""
    header_file(ckpt / WEIGHTS_FILE, 2 * MAX_HEADER_BYTES)
    parsed, loads = [], json.loads
    monkeypatch.setattr(json, "loads", lambda text, *a, **k: parsed.append(len(text)) or loads(text, *a, **k))
    with pytest.raises(CheckpointError, match=r"a header of 8\.0 MB, over the 4\.0 MB a checkpoint needs"):
        check_checkpoint_dir(ckpt)
    with pytest.raises(CheckpointError, match="over the 4.0 MB"):
        map_weights(ckpt)  # loading says the same before safetensors maps the file
    assert parsed and max(parsed) < 10_000  # config.json's, never the header


def test_the_header_cap_holds_nllb_3_3b_with_room_to_spare():
    """NLLB-200 3.3B's header (1,016 tensors, float32), built as safetensors writes it from transformers' M2M100 at its
    sizes on the meta device: about 123 kB, a thirtieth of the cap."""
    transformers = pytest.importorskip("transformers")
    config = transformers.M2M100Config(vocab_size=256206, d_model=2048, encoder_layers=24, decoder_layers=24,
                                       encoder_ffn_dim=8192, decoder_ffn_dim=8192, encoder_attention_heads=16,
                                       decoder_attention_heads=16)
    with torch.device("meta"):
        state = transformers.M2M100ForConditionalGeneration(config).state_dict()
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, tensor in state.items():
        end = offset + 4 * tensor.numel()
        header[name] = {"dtype": "F32", "shape": list(tensor.shape), "data_offsets": [offset, end]}
        offset = end
    size = len(json.dumps(header, separators=(",", ":")))
    assert 100_000 < size < MAX_HEADER_BYTES / 25


def test_a_malicious_bin_is_refused_in_one_short_line_without_torchs_advice(tmp_path):
    class Payload:
        def __reduce__(self):
            return (print, ("ran",))

    torch.save({"w": Payload()}, tmp_path / "pytorch_model.bin")
    with pytest.raises(CheckpointError) as err:
        map_weights(tmp_path)
    message = str(err.value)
    assert "\n" not in message and len(message) < 120 and "weights_only" not in message
    assert isinstance(err.value.__cause__, pickle.UnpicklingError)


def test_a_4000_digit_size_in_config_json_is_not_echoed(ckpt):
    config = json.loads((ckpt / "config.json").read_text())
    config["d_model"] = int("9" * 4000)
    (ckpt / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError) as err:
        load_model_dir(ckpt)
    assert "9" * 30 not in str(err.value) and len(str(err.value)) < 300 and "d_model" in str(err.value)


def test_the_corpus_command_never_writes_a_manifest_the_app_refuses(tmp_path):
    out = tmp_path / "t.parquet"
    corpus_files.write_manifest(out, {"model": {"flag_rule": {"any": []}}, "padding": "x" * 1000})
    assert corpus_files.read_manifest(out)["padding"] == "x" * 1000
    with pytest.raises(corpus_files.CorpusError, match="over the 1,048,576 the app reads"):
        corpus_files.write_manifest(tmp_path / "u.parquet", {"padding": "x" * corpus_files.MAX_MANIFEST_BYTES})
    assert not corpus_files.manifest_path(tmp_path / "u.parquet").exists()


def test_the_largest_rule_the_reader_takes_fits_every_cap(shipped_rule):
    """A rule of MAX_CONDITIONS conditions and every signal's 64 knots is a flag.json under MAX_FLAG_BYTES and, in
    a manifest as the corpus command writes it, under MAX_MANIFEST_BYTES: what it writes, the app reads."""
    from transformer.interpret.columns import COLUMNS, SIGNAL_COLUMNS
    from transformer.interpret.flagging import MAX_KNOTS

    data = copy.deepcopy(shipped_rule)
    data["any"] = [{"column": "seq_logprob", "op": "<=", "value": -1.234567890123 - i} for i in range(MAX_CONDITIONS)]
    tails = [float(t) for t in np.logspace(0, -8.9, MAX_KNOTS)]
    data["score"]["signals"] = {
        name: {"values": [(-1 if COLUMNS[name].direction == "low" else 1) * (0.123456789012 + k) for k in
                          range(MAX_KNOTS)], "tails": tails} for name in SIGNAL_COLUMNS}
    rule = FlagRule.from_json(data)
    text = json.dumps(rule.to_json(), indent=1, ensure_ascii=False)
    assert len(text.encode()) + 13_000 < MAX_FLAG_BYTES  # with a calibration report as large as the shipped one's
    manifest = json.dumps({"model": {"flag_rule": rule.to_json()}}, indent=1)
    assert len(manifest.encode()) * 4 < corpus_files.MAX_MANIFEST_BYTES


def returns_within(call, seconds: float = 5.0) -> BaseException | object:
    """What ``call()`` returned or raised, or fail when it blocks (a FIFO opened for reading waits for a writer)."""
    done: list = []

    def run() -> None:
        try:
            done.append(call())
        except BaseException as err:  # noqa: BLE001 (what was raised is the answer)
            done.append(err)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert done, "blocked on a FIFO"
    return done[0]


@pytest.mark.parametrize("name", ["tokenizer.model", "vocab.json", "source.spm"])
def test_no_tokenizer_file_blocks_as_a_fifo_or_is_read_past_its_bound(tmp_path, name):
    from transformer.checkpoint.tokenizer import MAX_TOKENIZER_BYTES, read_tokenizer_file

    os.mkfifo(tmp_path / name)
    got = returns_within(lambda: read_tokenizer_file(tmp_path / name))
    assert isinstance(got, ValueError) and "not a regular file" in str(got)
    big = tmp_path / "big"
    with open(big, "wb") as f:
        f.truncate(MAX_TOKENIZER_BYTES + 1)  # sparse: nothing written, nothing read
    with pytest.raises(ValueError, match="over the 64 MB"):
        read_tokenizer_file(big)


def test_a_checkpoint_whose_tokenizer_is_a_fifo_is_refused_at_once(ckpt):
    (ckpt / "tokenizer.model").unlink()
    os.mkfifo(ckpt / "tokenizer.model")
    got = returns_within(lambda: check_checkpoint_dir(ckpt))
    assert isinstance(got, CheckpointError) and "tokenizer.model" in str(got)
