"""``python -m transformer.corpus`` and ``table_rows``: the table's rows against ``translate_batch`` and sacreBLEU,
its files (Parquet, JSON Lines, manifest), bad input, and resuming a killed run
(tests/transformer/test_corpus_torchrun.py: several processes and machines)."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sacrebleu

from transformer.corpus import main
from transformer.interpret import corpus, flagging, signals
from transformer.interpret.table import COLUMNS, batches, read_table, table_rows

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ["A man rides a red bike.", "Two dogs play with a ball in the park.", "A girl runs.",
           "A woman and a child are walking on the beach with a blue ball.", "The boy plays.", "A dog runs.",
           "People are walking on the street.", "A red ball."]
REFERENCES = ["Ein Mann fährt ein rotes Fahrrad.", "Zwei Hunde spielen mit einem Ball im Park.", "Ein Mädchen läuft.",
              "Eine Frau und ein Kind gehen mit einem blauen Ball am Strand.", "Der Junge spielt.", "Ein Hund läuft.",
              "Leute gehen auf der Straße.", "Ein roter Ball."]


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def command(checkpoint: Path, tmp_path: Path, *extra: str, sources: list[str] = SOURCES,
            references: list[str] | None = REFERENCES, out: str = "t.parquet") -> list[str]:
    args = ["--checkpoint", str(checkpoint), "--source", str(write_lines(tmp_path / "src.txt", sources)),
            "--out", str(tmp_path / out), "--no-progress", "--batch-size", "3", "--beam", "2",
            "--device", "cpu"]  # the CPU oracles' device (tr), also where a GPU is present
    if references is not None:
        args += ["--reference", str(write_lines(tmp_path / "ref.txt", references))]
    return [*args, *extra]


def test_rows_are_translate_batch_with_sacrebleu_and_the_signals(tr):
    seen = []
    rows = table_rows(tr, SOURCES, REFERENCES, tr.settings(beam_size=2), progress=lambda d, n: seen.append((d, n)),
                      batch_size=3)
    assert [r["id"] for r in rows] == list(range(len(SOURCES)))
    assert seen[-1] == (len(SOURCES), len(SOURCES)) and len(seen) == 3  # after each batch of 3, 3, 2
    oracle = tr.translate_batch(SOURCES, beam_size=2)
    assert [r["translation"] for r in rows] == [o.text for o in oracle]
    assert [r["score"] for r in rows] == pytest.approx([o.score for o in oracle], abs=1e-5)
    assert [r["hit_max_len"] for r in rows] == [o.hit_max_len for o in oracle]
    expected = signals.pair_signals(tr, [o.source_ids for o in oracle], [o.target_ids for o in oracle])
    for row, o, ref, sig in zip(rows, oracle, REFERENCES, expected):
        assert set(row) == set(COLUMNS)
        assert row["source"] == SOURCES[row["id"]] and row["reference"] == ref
        assert row["chrf"] == pytest.approx(sacrebleu.sentence_chrf(o.text, [ref]).score)
        assert row["bleu"] == pytest.approx(sacrebleu.sentence_bleu(o.text, [ref]).score)
        for name in signals.SIGNALS:
            assert row[name] == pytest.approx(sig[name], abs=1e-5)
        assert row["repetition"] == signals.repetition(o.text)
        assert row["flag"] == flagging.flag(row, flagging.flag_rule(tr.path))
        pieces = len(o.target_ids) - (0 if o.hit_max_len else 1)
        assert row["output_pieces"] == pieces and row["source_pieces"] == len(o.source_ids) - 1
        assert row["length_ratio"] == pytest.approx(pieces / (len(o.source_ids) - 1))
    without = table_rows(tr, SOURCES[:2], settings=tr.settings(beam_size=2))
    assert [r["translation"] for r in without] == [r["translation"] for r in rows[:2]]
    assert all(r["reference"] is None and r["chrf"] is None and r["bleu"] is None for r in without)


def test_batches_depend_on_lengths_only_and_shards_cover_them_once():
    lengths = [5, 3, 9, 3, 7, 1, 4]
    groups = batches(lengths, 2)
    assert groups == [[5, 1], [3, 6], [0, 4], [2]]
    for world in (1, 2, 3, 5):
        dealt = [g for rank in range(world) for g in corpus.shard(groups, rank, world)]
        assert sorted(map(tuple, dealt)) == sorted(map(tuple, groups))
    assert corpus.shard(groups, 0, 2) == [[5, 1], [2]] and corpus.shard(groups, 1, 2) == [[3, 6], [0, 4]]


def test_command_writes_parquet_jsonl_and_manifest(tiny_checkpoint, tr, tmp_path):
    assert main(command(tiny_checkpoint, tmp_path)) == 0
    rows = read_table(tmp_path / "t.parquet")
    assert rows == table_rows(tr, SOURCES, REFERENCES, tr.settings(beam_size=2), batch_size=3)
    manifest = json.loads((tmp_path / "t.manifest.json").read_text(encoding="utf-8"))
    assert manifest["rows"] == len(SOURCES) and manifest["columns"] == list(COLUMNS)
    assert manifest["settings"]["beam"] == 2 and manifest["settings"]["alpha"] == tr.default_alpha
    assert manifest["input"]["source_file"] == "src.txt" and manifest["input"]["src_lang"] == "en"
    assert manifest["model"]["name"] == tiny_checkpoint.name and str(tmp_path) not in json.dumps(manifest)
    assert {"torch", "pyarrow", "sacrebleu"} <= set(manifest["versions"])
    assert not (tmp_path / "t.parquet.parts").exists()  # the parts are gone once merged

    assert main(command(tiny_checkpoint, tmp_path, "--no-inputs", out="n.jsonl")) == 0
    lines = (tmp_path / "n.jsonl").read_text(encoding="utf-8").splitlines()
    plain = [json.loads(line) for line in lines]
    assert [list(r) for r in plain] == [list(COLUMNS)] * len(SOURCES)
    assert plain == [{**r, "source": None, "reference": None} for r in rows]


def test_limit_data_dir_and_a_finished_table(tiny_checkpoint, tiny_corpus, tmp_path, capsys):
    def args(limit: int, *extra: str) -> list[str]:
        return ["--checkpoint", str(tiny_checkpoint), "--data-dir", str(tiny_corpus), "--split", "test", "--limit",
                str(limit), "--out", str(tmp_path / "d.jsonl"), "--no-progress", "--device", "cpu", *extra]

    assert main(args(5)) == 0
    rows = read_table(tmp_path / "d.jsonl")
    src = (tiny_corpus / "test.en").read_text(encoding="utf-8").splitlines()
    ref = (tiny_corpus / "test.de").read_text(encoding="utf-8").splitlines()
    assert [r["source"] for r in rows] == src[:5] and [r["reference"] for r in rows] == ref[:5]
    manifest = json.loads((tmp_path / "d.manifest.json").read_text(encoding="utf-8"))
    assert manifest["input"]["split"] == "test" and manifest["input"]["lines"] == 5
    assert manifest["input"]["file_lines"] == len(src)
    before = (tmp_path / "d.jsonl").stat().st_mtime_ns
    assert main(args(5)) == 0  # the same run again: nothing to do
    assert "already complete" in capsys.readouterr().err
    assert (tmp_path / "d.jsonl").stat().st_mtime_ns == before
    assert main(args(4)) == 1  # another run onto the same --out
    assert "--overwrite" in capsys.readouterr().err
    assert main(args(5, "--no-inputs")) == 1  # the same rows, but written without the inputs
    assert "--overwrite" in capsys.readouterr().err
    assert main(args(4, "--overwrite")) == 0
    assert len(read_table(tmp_path / "d.jsonl")) == 4


def test_empty_and_huge_lines_keep_their_rows(tiny_checkpoint, tr, tmp_path):
    huge = "a red dog runs " * 334  # 5,010 characters
    lines = ["A man rides.", "", huge[:5000], "  ", "The boy plays."]
    assert main(command(tiny_checkpoint, tmp_path, sources=lines, references=None)) == 0
    rows = read_table(tmp_path / "t.parquet")
    assert [r["source"] for r in rows] == lines
    assert [r["translation"] for r in rows] == [o.text for o in tr.translate_batch(lines, beam_size=2)]
    assert rows[1]["note"] == rows[3]["note"] == "empty line"
    assert rows[2]["truncated"] and rows[2]["note"].startswith("source cut to")
    assert rows[2]["source_pieces"] == tr.max_source_tokens
    assert rows[0]["note"] is None and not rows[0]["truncated"]


@pytest.mark.parametrize("case", ["fewer references", "missing", "directory", "not utf-8", "no permission"])
def test_bad_input_is_a_clear_message_and_writes_nothing(case, tiny_checkpoint, tmp_path, capsys):
    args = command(tiny_checkpoint, tmp_path)
    src = tmp_path / "src.txt"
    if case == "fewer references":
        write_lines(tmp_path / "ref.txt", REFERENCES[:-1])
        expected = f"has {len(REFERENCES) - 1} lines but"
    elif case == "missing":
        src.unlink()
        expected = "source file not found"
    elif case == "directory":
        src.unlink()
        src.mkdir()
        expected = "is a directory"
    elif case == "not utf-8":
        src.write_bytes(b"caf\xe9\n")
        expected = "not UTF-8"
    else:
        if os.geteuid() == 0:
            pytest.skip("root reads any file")
        src.chmod(0)
        expected = "cannot read the source file"
    assert main(args) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and expected in err and "Traceback" not in err
    assert not (tmp_path / "t.parquet").exists() and not (tmp_path / "t.parquet.parts").exists()


def run_command(args: list[str], **kwargs) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "transformer.corpus", *args, "--threads", "1"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)


def rows_in(part: Path) -> int:
    return max(0, len(part.read_text(encoding="utf-8").splitlines()) - 1) if part.exists() else 0


def kill_when(proc: subprocess.Popen, part: Path, rows: int, pid: int | None = None) -> None:
    """SIGKILL ``pid`` (default: ``proc``) once ``part`` holds ``rows`` rows; fails if ``proc`` ends first."""
    deadline = time.monotonic() + 120
    while rows_in(part) < rows:
        assert proc.poll() is None, f"the run ended before it was killed: {proc.communicate()[1][-2000:]}"
        assert time.monotonic() < deadline
        time.sleep(0.005)
    os.kill(pid or proc.pid, signal.SIGKILL)
    proc.communicate()


@pytest.mark.slow
def test_a_killed_run_resumes_and_equals_an_unbroken_one(tiny_checkpoint, tmp_path):
    lines = [f"{SOURCES[i % len(SOURCES)]} {' '.join(['a dog'] * (i % 5))}" for i in range(24)]
    args = command(tiny_checkpoint, tmp_path, "--batch-size", "1", sources=lines, references=None)
    whole = run_command(command(tiny_checkpoint, tmp_path, "--batch-size", "1", sources=lines, references=None,
                                out="whole.parquet"))
    assert whole.wait(timeout=300) == 0, whole.communicate()[1]
    part = tmp_path / "t.parquet.parts" / "rank0.jsonl"
    kill_when(run_command(args), part, 3)
    written = rows_in(part)
    assert 3 <= written < len(lines) and not (tmp_path / "t.parquet").exists()
    again = run_command(args)
    _, err = again.communicate(timeout=300)
    assert again.returncode == 0, err
    assert f"{written} of {len(lines)} sentences already written" in err
    assert read_table(tmp_path / "t.parquet") == read_table(tmp_path / "whole.parquet")


@pytest.mark.data
@pytest.mark.parametrize("name", ["multi30k-en-de", "multi30k-en-de-prenorm"])
def test_shipped_tables_are_what_the_command_gives(name, multi30k_dir):
    """Each shipped checkpoint's committed table: every line of test_2016_flickr, no Multi30k text in it, and its
    first batch (the 64 shortest lines) recomputed now with the manifest's settings gives the same rows (scores up to
    float rounding)."""
    import transformer
    from transformer.decoding import DecodeSettings
    from transformer.interpret.table import batch_rows, source_lengths

    folder = ROOT / "checkpoints" / name / "tables"
    rows = read_table(folder / "test_2016_flickr.parquet")
    manifest = json.loads((folder / "test_2016_flickr.manifest.json").read_text(encoding="utf-8"))
    assert manifest["input"]["split"] == "test_2016_flickr" and manifest["rows"] == len(rows) == 1000
    assert manifest["no_inputs"] and all(r["source"] is None and r["reference"] is None for r in rows)
    assert [r["id"] for r in rows] == list(range(1000)) and manifest["model"]["name"] == name
    for key, lang in (("source", "en"), ("reference", "de")):  # the whole files' sha256, as sha256sum gives it
        data = (multi30k_dir / f"test_2016_flickr.{lang}").read_bytes()
        assert manifest["input"]["files"][key] == {"name": f"test_2016_flickr.{lang}", "bytes": len(data),
                                                   "sha256": hashlib.sha256(data).hexdigest()}
    table = (folder / "test_2016_flickr.parquet").read_bytes()
    assert manifest["table"]["sha256"] == hashlib.sha256(table).hexdigest()
    tr = transformer.load(ROOT / "checkpoints" / name, device="cpu")
    s = manifest["settings"]
    settings = tr.settings(DecodeSettings(beam_size=s["beam"], alpha=s["alpha"], max_len_a=s["max_len_a"],
                                          max_len_b=s["max_len_b"], scoring=s["scoring"]))
    sources = (multi30k_dir / "test_2016_flickr.en").read_text(encoding="utf-8").splitlines()
    references = (multi30k_dir / "test_2016_flickr.de").read_text(encoding="utf-8").splitlines()
    first = batches(source_lengths(tr, sources), s["batch_size"])[0]
    rule = flagging.flag_rule(tr.path)
    fresh = batch_rows(tr, first, sources, references, settings, rule)
    # the same rows: text, ids, flags and every other discrete field exactly; the floats up to another CPU's
    # rounding. The table was written on one CPU; AVX2, AVX-512 and AMX kernels sum in different orders, which moved
    # flag_score by 5.4e-5 relative on an AMD EPYC (AVX2) against the Intel Xeon (AMX) that wrote it, the other
    # signals by up to 2.1e-5. 1e-3 relative passes any such rounding and still fails a changed signal.
    # A flag is decided by flag_score >= the rule's threshold: a line whose committed score is within that rounding
    # of the threshold may fall either side on another CPU, so its flag is held to its score's side of it only.
    threshold = rule.score.threshold if rule.score is not None else None
    for row, i in zip(fresh, first):
        tie = (threshold is not None and rows[i]["flag_score"] is not None
               and abs(rows[i]["flag_score"] - threshold) <= 1e-3 * abs(threshold) + 1e-5)
        assert_same_row({**row, "source": None, "reference": None}, rows[i], near_tie=("flag",) if tie else ())
        if tie:
            assert row["flag"] == flagging.flag(row, rule), i  # the fresh row by its own score
    assert manifest["flagged"] == sum(r["flag"] for r in rows) <= 0.05 * len(rows)


def assert_same_row(fresh: dict, committed: dict, near_tie: tuple[str, ...] = ()) -> None:
    """``fresh`` is ``committed``: the same keys, every non-float value exactly, floats to 1e-3 relative (and 1e-5
    absolute near zero), with the line's id in the message; the keys ``near_tie`` (a discrete value decided by a
    float within rounding of its threshold) are left to the caller."""
    assert fresh.keys() == committed.keys(), committed.get("id")
    for key, want in committed.items():
        got = fresh[key]
        if key in near_tie:
            continue
        if isinstance(want, float) and not isinstance(got, bool):
            assert got == pytest.approx(want, rel=1e-3, abs=1e-5, nan_ok=True), (committed["id"], key)
        else:
            assert got == want, (committed["id"], key)


def test_bench_cost_section_runs_on_the_same_batches(tiny_checkpoint):
    from bench import corpus as bench_corpus

    r = bench_corpus.cost(tiny_checkpoint, SOURCES, REFERENCES, threads=1, batch_size=3)
    assert r["corpus_sentences"] == len(SOURCES) and r["corpus_cost_goal"] == 3.0
    assert r["corpus_cost_ratio"] > 0 and r["corpus_beam"] == 4 and r["corpus_flagged"] >= 0


@pytest.mark.slow
def test_a_multilingual_model_takes_its_language_codes(tmp_path, tiny_corpus):
    pytest.importorskip("transformers")
    from m2m100_models import save_m2m100, train_spm

    import transformer

    (tmp_path / "fairseq").mkdir()
    _, _, nllb = save_m2m100(tmp_path, train_spm(tmp_path / "fairseq", tiny_corpus), "nllb")
    args = command(nllb, tmp_path, "--src-lang", "eng_Latn", "--tgt-lang", "fra_Latn", sources=SOURCES[:4],
                   references=REFERENCES[:4])
    assert main(args) == 0
    rows = read_table(tmp_path / "t.parquet")
    tr = transformer.load(nllb, device="cpu")
    oracle = tr.translate_batch(SOURCES[:4], beam_size=2, src_lang="eng_Latn", tgt_lang="fra_Latn")
    assert [r["translation"] for r in rows] == [o.text for o in oracle]
    for row, o in zip(rows, oracle):
        assert o.target_tokens[0] == "fra_Latn" and o.source_tokens[0] == "eng_Latn"
        assert row["output_pieces"] == len(o.target_ids) - 1 - (0 if o.hit_max_len else 1)  # the code left out
        assert row["source_pieces"] == len(o.source_ids) - 2  # the code and </s> left out
    manifest = json.loads((tmp_path / "t.manifest.json").read_text(encoding="utf-8"))
    assert manifest["settings"]["src_lang"] == "eng_Latn" and manifest["settings"]["tgt_lang"] == "fra_Latn"


def test_a_refused_flag_json_stops_the_command_with_one_line(tiny_checkpoint, tmp_path, capsys):
    """A flag.json with a 400-digit number (once a traceback of OverflowError) or too many conditions: the command
    says so on one line and writes nothing, rather than a table flagged by the default rule in its place."""
    import shutil

    ckpt = Path(shutil.copytree(tiny_checkpoint, tmp_path / "ckpt"))
    for planted in ('{"any": [{"column": "seq_logprob", "op": "<", "value": ' + "9" * 400 + "}]}",
                    json.dumps({"any": [{"column": "seq_logprob", "op": "<", "value": -9}] * 33})):
        (ckpt / flagging.FLAG_FILE).write_text(planted, encoding="utf-8")
        assert main(command(ckpt, tmp_path)) == 1
        said = capsys.readouterr().err.strip()
        assert said.startswith("error: the checkpoint's flag.json is refused: ") and "\n" not in said
        assert "9" * 20 not in said and not (tmp_path / "t.parquet").exists()
