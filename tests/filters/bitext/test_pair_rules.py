"""Hard rules for pairs, the pair file reader/writer, and the `rules` / `margin-score` commands."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from filters.__main__ import main as filters_main
from filters.bitext.pair_io import PairFileError, read_pairs, write_pairs
from filters.bitext.pair_rules import RULES, PairRulesRunner, numbers
from filters.bitext.scripts import LengthUnits, base_lang, script_ratio, scripts_of
from labse_common.config import ConfigError, load
from labse_common.sections.pair_rules import PairRulesConfig
from labse_common.stats import StageCounter, check_balanced
from tests.support.paths import REPO

TATOEBA = REPO.parent / "shared" / "data" / "tatoeba"

GOOD = (
    "The city council approved the new budget on Monday.",
    "Der Stadtrat hat am Montag den neuen Haushalt beschlossen.",
)

# One crafted pair per rule: (pair, expected step, expected reason), declared en -> de.
CRAFTED = [
    (("   ", "Hallo Welt"), "empty", "empty_src"),
    (("Hello world", ""), "empty", "empty_trg"),
    (("Berlin, Germany", "berlin germany!"), "identical", "identical"),
    (("Hi", "Hallo"), "length", "too_short_src"),
    (("A sentence of normal length.", "x" * 1200), "length", "too_long_trg"),
    (
        ("This is a much longer sentence with many words in it, indeed.", "Kurz, ja."),
        "ratio",
        "length_ratio",
    ),
    (("https://example.com/a/b", "Siehe die Seite unten."), "markup", "markup_only_src"),
    (("Write to us today!", "<b>info@example.org</b>"), "markup", "markup_only_trg"),
    (("--- *** ---", "Das ist ein Satz."), "markup", "no_letters_src"),
    (
        ("It cost 1,000 euros in 2019.", "Es kostete 1000 Euro im Jahr 2020."),
        "numbers",
        "number_mismatch",
    ),
    (
        ("buy now buy now buy now buy now", "Jetzt kaufen, sofort."),
        "repeats",
        "repeated_tokens_src",
    ),
    (
        (
            "The European Parliament adopted the resolution",
            "The European Parliament adopted the resolution today",
        ),
        "copy",
        "untranslated_copy",
    ),
    (
        ("Это предложение написано по-русски.", "Dieser Satz ist auf Deutsch."),
        "script",
        "wrong_script_src",
    ),
    (
        ("I like to read books in the evening.", "J'aime lire des livres le soir, vraiment."),
        "lang",
        "wrong_lang_trg",
    ),
]


@pytest.fixture(scope="module")
def cfg():
    return load("pair_rules", "demo")


@pytest.fixture(scope="module")
def runner(cfg):
    return PairRulesRunner(cfg, "en", "de")


def batch(pairs, **cols) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {"src": [a for a, _ in pairs], "trg": [b for _, b in pairs], **cols}
    )


def test_registry_matches_config_and_presets(cfg):
    assert set(RULES) == set(PairRulesConfig().steps)
    assert set(load("pair_rules", "paper").steps) == set(RULES) == set(cfg.steps)
    with pytest.raises(ConfigError, match="unknown rule"):
        load("pair_rules", "demo", ["steps=[empty, nope]"])
    with pytest.raises(ConfigError, match="max_ratio"):
        load("pair_rules", "demo", ["max_ratio=0.5"])


@pytest.mark.parametrize(("pair", "step", "reason"), CRAFTED, ids=[c[2] for c in CRAFTED])
def test_each_rule_drops_its_crafted_pair_with_its_reason(runner, pair, step, reason):
    kept, dropped = runner.filter_batch(batch([pair, GOOD]), want_dropped=True)
    assert kept.column("src").to_pylist() == [GOOD[0]]
    assert dropped.to_pylist() == [{"src": pair[0], "trg": pair[1], "step": step, "reason": reason}]


def test_rules_keep_what_they_should(runner):
    fine = [
        GOOD,
        ("He has three children.", "Er hat 3 Kinder."),  # a number spelled out on one side
        ("Today is June 18th.", "今天是６月１８号。"),  # full-width digits, month spelled out
        ("See https://example.com for details.", "Details unter https://example.com."),
        ("Yes.", "Ja."),  # short pairs: no ratio verdict below ratio_min_length
    ]
    kept, dropped = PairRulesRunner(runner.cfg, "en", "").filter_batch(
        batch(fine), want_dropped=True
    )
    assert dropped.num_rows == 0, dropped.to_pylist()


def test_cjk_length_units_keep_real_chinese_pairs(cfg):
    """Per-script units: Tatoeba cmn-eng pairs pass the ratio rule; in plain characters many fail."""
    if not (TATOEBA / "train.cmn-eng.cmn").is_file():
        pytest.skip(f"Tatoeba sample not found under {TATOEBA}")
    zh = (TATOEBA / "train.cmn-eng.cmn").read_text(encoding="utf-8").splitlines()
    en = (TATOEBA / "train.cmn-eng.eng").read_text(encoding="utf-8").splitlines()
    only_ratio = load("pair_rules", "demo", ["steps=[ratio]"])
    plain = load("pair_rules", "demo", ["steps=[ratio]", "script_units={}"])
    kept_units = (
        PairRulesRunner(only_ratio, "zh", "en").filter_batch(batch(list(zip(zh, en))))[0].num_rows
    )
    kept_chars = (
        PairRulesRunner(plain, "zh", "en").filter_batch(batch(list(zip(zh, en))))[0].num_rows
    )
    assert kept_units >= 0.99 * len(zh)
    assert kept_chars < 0.9 * len(zh)


def test_all_rules_keep_almost_all_real_tatoeba_pairs(cfg):
    if not (TATOEBA / "train.deu-eng.deu").is_file():
        pytest.skip(f"Tatoeba sample not found under {TATOEBA}")
    total = kept = 0
    for lang in ("deu", "jpn", "rus", "ara"):
        xx = (TATOEBA / f"train.{lang}-eng.{lang}").read_text(encoding="utf-8").splitlines()
        en = (TATOEBA / f"train.{lang}-eng.eng").read_text(encoding="utf-8").splitlines()
        total += len(xx)
        kept += PairRulesRunner(cfg, lang, "eng").filter_batch(batch(list(zip(xx, en))))[0].num_rows
    assert kept >= 0.98 * total


def test_language_columns_win_and_summary_by_lang_pair_and_length(cfg):
    r = PairRulesRunner(cfg, "en", "de")
    pairs = [
        GOOD,
        ("Это предложение написано по-русски.", "This sentence is written in Russian."),
        ("Hi", "Hallo"),
    ]
    kept, _ = r.filter_batch(batch(pairs, src_lang=["en", "ru", ""], trg_lang=["de", "en", ""]))
    assert kept.num_rows == 2  # the Russian row declared ru-en is fine
    rep = r.report("pair_rules")
    assert not check_balanced(rep) and not check_balanced({"counts": rep["steps"]})
    s = rep["summary"]
    assert set(s["by_lang_pair"]) == {"en-de", "ru-en"}
    assert s["by_lang_pair"]["en-de"]["in"] == 2 and s["by_lang_pair"]["en-de"]["steps"][
        "length"
    ] == {"in": 2, "out": 1}
    assert s["by_length"]["0-9"]["in"] == 1 and s["by_length"]["0-9"]["out"] == 0


def test_scripts_units_and_numbers_helpers():
    assert (
        base_lang("cmn_Hani") == "zh" and base_lang("eng") == "en" and base_lang("zh-Hans") == "zh"
    )
    assert scripts_of("ja") == ("Han", "Hiragana", "Katakana") and scripts_of("xx") is None
    assert scripts_of("srp_Latn") == ("Latin",)
    assert script_ratio("Hello", ("Cyrillic",)) == 0.0 and script_ratio("123", ("Latin",)) is None
    assert LengthUnits()("中文") == 6.0 and LengthUnits({})("中文") == 2.0
    assert numbers("1,000 and ٣ and 007") == ["1000", "3", "7"]


# --- pair files ----------------------------------------------------------------------------------


def test_pair_io_reads_tsv_with_bad_lines_bom_and_mining_layout(tmp_path):
    p = tmp_path / "p.tsv"
    p.write_bytes(
        "\ufeffa b\tc d\n\nonly one field\nx\ty\tz\n".encode()
        + b"\xff\xfe bad\tutf8\n"
        + b"e f\tg h"
    )
    c = StageCounter()
    t = read_pairs(p, c)
    assert t.to_pylist() == [{"src": "a b", "trg": "c d"}, {"src": "e f", "trg": "g h"}]
    assert c.to_report("x")["counts"]["lines"] == {
        "in": 6,
        "out": 2,
        "dropped": {"blank": 1, "malformed": 2, "bad_utf8": 1},
    }
    first_bad = tmp_path / "first_bad.tsv"
    first_bad.write_text("a first line without a tab\nx\ty\n", encoding="utf-8")
    assert read_pairs(first_bad).to_pylist() == [{"src": "x", "trg": "y"}]
    mined = tmp_path / "mined.tsv.gz"
    with gzip.open(mined, "wt", encoding="utf-8") as f:
        f.write("1.25\tHallo Welt\tHello world\tde\ten\ts1\tt1\t0.8\n")
    t = read_pairs(mined)
    assert t.column_names[:2] == ["src", "trg"] and t.column("margin").to_pylist() == [1.25]
    assert t.column("src_lang").to_pylist() == ["de"]
    pq_path, tsv_path = write_pairs(t, tmp_path / "out")
    assert read_pairs(pq_path).equals(t)
    assert read_pairs(tsv_path, layout="src-trg").column("trg").to_pylist() == ["Hello world"]
    with pytest.raises(PairFileError, match="no src"):
        pq.write_table(pa.table({"text": ["a"]}), tmp_path / "bad.parquet")
        read_pairs(tmp_path / "bad.parquet")


def test_pair_io_truncated_gzip_keeps_the_readable_part(tmp_path):
    full = tmp_path / "full.tsv.gz"
    with gzip.open(full, "wt", encoding="utf-8") as f:
        for i in range(20000):
            f.write(f"sentence number {i} here\tSatz Nummer {i} hier\n")
    cut = tmp_path / "cut.tsv.gz"
    cut.write_bytes(full.read_bytes()[: full.stat().st_size // 2])
    c = StageCounter()
    t = read_pairs(cut, c)
    rep = c.to_report("x")["counts"]["lines"]
    assert 1000 < t.num_rows < 20000 and rep["events"] == {"truncated_gzip": 1}
    assert not check_balanced(c.to_report("x"))
    last = t.slice(t.num_rows - 1).to_pylist()[0]
    assert last["src"].replace("sentence number ", "").replace(" here", "") == str(t.num_rows - 1)


# --- the rules command -----------------------------------------------------------------------------


def test_rules_cli_writes_kept_dropped_and_stats(tmp_path, capsys):
    pairs = [GOOD] + [p for p, _, _ in CRAFTED]
    src = tmp_path / "pairs.tsv.gz"
    with gzip.open(src, "wt", encoding="utf-8") as f:
        f.writelines(f"{a}\t{b}\n" for a, b in pairs)
        f.write("a malformed line without a tab\n")
    out = tmp_path / "out"
    rc = filters_main(
        [
            "rules",
            "--pairs",
            str(src),
            "--src-lang",
            "en",
            "--trg-lang",
            "de",
            "--output",
            str(out),
            "--write-dropped",
        ]
    )
    assert rc == 0
    kept = pq.read_table(out / "kept.parquet")
    assert kept.column("src").to_pylist() == [GOOD[0]]
    with gzip.open(out / "kept.tsv.gz", "rt", encoding="utf-8") as f:
        assert f.read() == f"{GOOD[0]}\t{GOOD[1]}\n"
    dropped = pq.read_table(out / "dropped.parquet").to_pylist()
    assert sorted(d["reason"] for d in dropped) == sorted(r for _, _, r in CRAFTED)
    rep = json.loads((out / "stats.json").read_text())
    assert rep["counts"]["lines"]["dropped"] == {"malformed": 1}
    assert rep["counts"]["pairs"]["in"] == len(pairs) and rep["counts"]["pairs"]["out"] == 1
    assert list(rep["steps"]) == list(load("pair_rules", "demo").steps)
    assert rep["steps"]["lang"]["dropped"] == {"wrong_lang_trg": 1}
    assert rep["summary"]["by_lang_pair"]["en-de"]["out"] == 1
    assert not check_balanced(rep)
    assert "kept" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--pairs", "{tmp}/missing.tsv"], "not found"),
        (["--pairs", "{tmp}/empty.tsv"], "no readable pair"),
        (["--pairs", "{tmp}/ok.tsv", "--set", "max_ratio=abc"], "max_ratio"),
        (["--pairs", "{tmp}/ok.tsv", "--set", "nope=1"], "unknown config key"),
        (["--pairs", "{tmp}/ok.tsv", "--config", "{tmp}/none.yaml"], "config file not found"),
    ],
)
def test_rules_cli_bad_input_is_a_clear_error(tmp_path, capsys, caplog, args, message):
    (tmp_path / "empty.tsv").write_text("")
    (tmp_path / "ok.tsv").write_text(f"{GOOD[0]}\t{GOOD[1]}\n")
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    rc = filters_main(
        ["rules", *args, "--src-lang", "en", "--trg-lang", "de", "--output", str(tmp_path / "o")]
    )
    assert rc == 2
    err = capsys.readouterr().err + caplog.text
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()  # the claim is released, the folder it made removed


def test_rules_cli_needs_languages_for_script_and_lid(tmp_path, caplog):
    (tmp_path / "ok.tsv").write_text(f"{GOOD[0]}\t{GOOD[1]}\n")
    assert (
        filters_main(
            ["rules", "--pairs", str(tmp_path / "ok.tsv"), "--output", str(tmp_path / "o")]
        )
        == 2
    )
    assert "--src-lang" in caplog.text
    rc = filters_main(
        [
            "rules",
            "--pairs",
            str(tmp_path / "ok.tsv"),
            "--output",
            str(tmp_path / "o"),
            "--set",
            "steps=[empty, length]",
        ]
    )
    assert rc == 0


# --- margin-score ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    if not (TATOEBA / "train.deu-eng.deu").is_file():
        pytest.skip(f"Tatoeba sample not found under {TATOEBA}")
    from labse_model.tiny import make_tiny_checkpoint

    de = (TATOEBA / "train.deu-eng.deu").read_text(encoding="utf-8").splitlines()[:60]
    en = (TATOEBA / "train.deu-eng.eng").read_text(encoding="utf-8").splitlines()[:60]
    d = tmp_path_factory.mktemp("tiny")
    return make_tiny_checkpoint(str(d / "model"), de + en, hidden=32, layers=1), de, en


def _brute_margin(x: np.ndarray, y: np.ndarray, pairs: list[tuple[int, int]], k: int) -> np.ndarray:
    """LaBSE/LASER ratio margin of given pairs by brute force: all cosines, top-k means."""
    x = x / np.linalg.norm(x, axis=1, keepdims=True)
    y = y / np.linalg.norm(y, axis=1, keepdims=True)
    sims = x @ y.T
    fwd = np.sort(sims, axis=1)[:, -k:].mean(axis=1)
    bwd = np.sort(sims, axis=0)[-k:, :].mean(axis=0)
    return np.array([sims[i, j] / ((fwd[i] + bwd[j]) / 2) for i, j in pairs])


def test_margin_of_given_pairs_matches_brute_force():
    from filters.bitext.margin_score import score_vectors

    rng = np.random.default_rng(3)
    base = rng.standard_normal((50, 16))
    x = np.vstack(
        [base + 0.3 * rng.standard_normal((50, 16)), rng.standard_normal((20, 16))]
    ).astype(np.float32)
    y = np.vstack(
        [base + 0.3 * rng.standard_normal((50, 16)), rng.standard_normal((30, 16))]
    ).astype(np.float32)
    pairs = (
        [(i, i) for i in range(50)] + [(i, (i + 1) % 50) for i in range(50)] + [(60, 70), (-1, 3)]
    )
    s, t = np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])
    margin, cos = score_vectors(x, y, s, t)  # the mining section's defaults: k=4, ratio
    np.testing.assert_allclose(margin[:-1], _brute_margin(x, y, pairs[:-1], 4), rtol=1e-5)
    assert np.isnan(margin[-1]) and np.isnan(cos[-1])
    assert margin[:50].min() > margin[50:100].max()  # true pairs above shifted ones


def test_margin_score_cli_on_a_real_encoder(tiny_model, tmp_path):
    """margin-score encodes with the checkpoint and scores with mining's kNN/margin code: equal
    to the brute force on the same encoder's vectors; extra sentences join the neighbourhood."""
    model, de, en = tiny_model
    rows = list(zip(de, en)) + [("", "an empty source side")]
    src = tmp_path / "pairs.tsv"
    src.write_text("".join(f"{a}\t{b}\t{i}\n" for i, (a, b) in enumerate(rows)), encoding="utf-8")
    out = tmp_path / "scored"
    rc = filters_main(
        ["margin-score", "--model", model, "--pairs", str(src), "--output", str(out), "--k", "3"]
    )
    assert rc == 0
    assert sorted(p.name for p in out.iterdir()) == [
        "scored.parquet",
        "scored.tsv.gz",
        "stats.json",
    ]
    t = pq.read_table(out / "scored.parquet")
    assert t.column_names == ["src", "trg", "col2", "margin", "cosine"]
    from labse_model.encode import Encoder

    enc = Encoder.from_pretrained(model)
    assert len(set(de)) == len(de) and len(set(en)) == len(en)  # rows == distinct sentences here
    x, y = enc.encode(de), enc.encode(en)
    diag = [(i, i) for i in range(len(de))]
    np.testing.assert_allclose(
        t.column("margin").to_numpy()[:-1], _brute_margin(x, y, diag, 3), rtol=1e-4
    )
    np.testing.assert_allclose(
        t.column("cosine").to_numpy()[:-1], np.einsum("nd,nd->n", x, y), atol=1e-4
    )
    assert np.isnan(t.column("margin").to_numpy()[-1])
    rep = json.loads((out / "stats.json").read_text())
    assert rep["counts"]["pairs"] == {
        "in": 61,
        "out": 61,
        "dropped": {},
        "events": {"empty_side_not_scored": 1},
    }
    assert rep["k"] == 3 and rep["neighbourhood"] == {"src_sentences": 60, "trg_sentences": 61}

    extra = tmp_path / "more.de"
    more = (TATOEBA / "train.deu-eng.deu").read_text(encoding="utf-8").splitlines()[100:130]
    extra.write_text("\n".join(more) + "\n", encoding="utf-8")
    # --overwrite replaces the folder whole: the new stats.json describes the new scores.
    assert (
        filters_main(
            [
                "margin-score",
                "--model",
                model,
                "--pairs",
                str(src),
                "--output",
                str(out),
                "--k",
                "3",
                "--src-sentences",
                str(extra),
                "--overwrite",
            ]
        )
        == 0
    )
    x2 = np.vstack([x, enc.encode([m for m in more if m not in set(de)])])
    m2 = pq.read_table(out / "scored.parquet").column("margin").to_numpy()[:-1]
    np.testing.assert_allclose(m2, _brute_margin(x2, y, diag, 3), rtol=1e-4)
    assert json.loads((out / "stats.json").read_text())["neighbourhood"]["src_sentences"] == len(x2)


def test_margin_score_bad_input_is_a_clear_error(tmp_path, caplog):
    (tmp_path / "ok.tsv").write_text(f"{GOOD[0]}\t{GOOD[1]}\n")
    out = str(tmp_path / "s")
    rc = filters_main(
        [
            "margin-score",
            "--model",
            str(tmp_path),
            "--pairs",
            str(tmp_path / "ok.tsv"),
            "--output",
            out,
        ]
    )
    assert rc == 2 and "config.json" in caplog.text and "--model" in caplog.text
    caplog.clear()
    rc = filters_main(
        [
            "margin-score",
            "--model",
            str(tmp_path / "no"),
            "--pairs",
            str(tmp_path / "ok.tsv"),
            "--output",
            out,
        ]
    )
    assert rc == 2 and "not found" in caplog.text
    caplog.clear()
    # The old form (--output FILE) is refused with the folder to give instead.
    rc = filters_main(
        [
            "margin-score",
            "--model",
            str(tmp_path),
            "--pairs",
            str(tmp_path / "ok.tsv"),
            "--output",
            str(tmp_path / "s.parquet"),
        ]
    )
    assert rc == 2 and "--output is a folder now" in caplog.text
    assert not (tmp_path / "s").exists() and not (tmp_path / "s.parquet").exists()
