"""The demo's own small steps between the stage CLIs (each a command the runner calls):

    python -m pipelines.e2e_tasks prepare   --data DIR --output DIR [--config C] [--set run.KEY=V]
    python -m pipelines.e2e_tasks sentences --corpus DIR [--corpus DIR] --extra DIR --output DIR
    python -m pipelines.e2e_tasks embed     --sentences DIR --langs de en --model DIR --output DIR
    python -m pipelines.e2e_tasks score     --bitext DIR --gold FILE --sentences DIR --output DIR

prepare: splits the Tatoeba-layout pairs of ``--data`` into training pairs, held-out pairs
(evaluation and calibration) and the dev pairs whose sentences, both sides shuffled together,
become one WET file of monolingual web text for the corpus jobs; the dev alignment is kept as
``gold.tsv`` to measure the mined pairs. sentences: one canonically ordered Parquet per language
from the corpus jobs (what is mined) and, with the training sentences added, what the vocabulary
learns from. score: precision and recall of the final bitext (``python -m filters export``,
:mod:`filters.bitext.export`) against the known alignment. concat: several pair files as one.

prepare, sentences, embed and concat claim their output (:class:`~labse_common.output_dir.OutputDir`
for a folder; a claim beside the file for concat), write it aside and commit it at the end: a
second writer stops with exit status 2, an existing output needs ``--overwrite``. The runner
calls them into its freshly emptied stage folders.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import random
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from labse_common.cli import add_log_level_option, add_overwrite_option, run_main
from labse_common.config import load
from labse_common.datafiles import read_json, read_parquet, read_text
from labse_common.errors import InputError, UsageError
from labse_common.formats import PROVENANCE_COLUMNS
from labse_common.langs import TATOEBA_TO_LID
from labse_common.logs import setup_logging
from labse_common.output_dir import OutputDir, claimed_file
from labse_common.stats import StageCounter, check_balanced, write_report

log = logging.getLogger("pipelines.e2e_tasks")

# Tatoeba's ISO 639-3 codes -> the lid.176 labels the corpus jobs use for folder names.
LID_CODE = TATOEBA_TO_LID


def _balanced(report: dict) -> None:
    errors = check_balanced(report)
    if errors:
        raise RuntimeError(f"unbalanced stats: {errors}")


def _lines(path: Path) -> list[str]:
    if not path.is_file():
        raise InputError(path, "missing (expected beside the other Tatoeba files)", "--data")
    return (
        [s.strip() for s in read_text(path, "--data").splitlines()] if path.stat().st_size else []
    )


def tatoeba_codes(tatoeba: Path, split: str) -> list[str]:
    return sorted(p.name.split(".")[1].split("-")[0] for p in tatoeba.glob(f"{split}.*-eng.eng"))


def _write_wet(path: Path, docs: list[list[str]], url: str) -> None:
    from warcio.warcwriter import WARCWriter

    from pipelines.synthetic import fixed_headers

    buf = io.BytesIO()
    w = WARCWriter(buf, gzip=True)
    for n, doc in enumerate(docs):
        rec = w.create_warc_record(f"{url}/{n}", "conversion", warc_content_type="text/plain",
                                   payload=io.BytesIO("\n".join(doc).encode("utf-8")),
                                   warc_headers_dict=fixed_headers(f"{url}/{n}", "conversion"))  # fmt: skip
        w.write_record(rec)
    path.write_bytes(buf.getvalue())


def prepare(data: Path, out: Path, cfg, overwrite: bool = False) -> dict:
    tatoeba = data / "tatoeba"
    if not tatoeba.is_dir():
        raise UsageError(
            f"{tatoeba}: no tatoeba folder in --data (expected {{train,dev}}.XXX-eng.*)"
        )
    available = tatoeba_codes(tatoeba, "train")
    missing = [c for c in cfg.langs if c not in available or c not in LID_CODE]
    if missing:
        raise UsageError(f"run.langs {missing} have no train.XXX-eng files in {tatoeba} "
                         f"(found: {', '.join(available) or 'none'})")  # fmt: skip
    train_codes = cfg.train_languages or available
    with OutputDir(out, overwrite).open() as claimed:  # written aside, committed at the end
        return _prepare_into(tatoeba, list(train_codes), Path(claimed.tmp), cfg, data)


def pud_split(data: Path, codes: list[str], n_planted: int, seed: int) -> tuple[dict, set[int]]:
    """The PUD pairs of ``codes`` ({code: [(src, eng), ...]}, line order) and the line numbers
    planted in the web text: one sample of line numbers for every language, because line i is
    the same English sentence in every PUD file (a planted English sentence trained on through
    another language would leak)."""
    pud = data / "pud"
    pairs = {}
    for code in codes:
        if (pud / f"train.{code}-eng.{code}").is_file():
            src, eng = (
                _lines(pud / f"train.{code}-eng.{code}"),
                _lines(pud / f"train.{code}-eng.eng"),
            )
            if len(src) != len(eng):
                raise InputError(pud / f"train.{code}-eng.{code}", f"{len(src)} lines vs {len(eng)} in its .eng",
                                 "--data")  # fmt: skip
            pairs[code] = list(zip(src, eng))
    n = min((len(v) for v in pairs.values()), default=0)
    planted = set(random.Random(seed).sample(range(n), min(n_planted, n)))
    return pairs, planted


def _ud_sentences(
    data: Path, codes: list[str], exclude: set[str], counter: StageCounter
) -> dict[str, list[str]]:
    """ud/XXX.txt of ``codes`` and English, minus ``exclude`` (sentences that are mined)."""
    out = {}
    for code in [*codes, "eng"]:
        f = data / "ud" / f"{code}.txt"
        if f.is_file() and code in LID_CODE:
            lines = _lines(f)
            counter.add_in("ud_sentences", len(lines))
            out[LID_CODE[code]] = [t for t in lines if t and t not in exclude]
            counter.add_dropped("ud_sentences", "empty", sum(1 for t in lines if not t))
            counter.add_dropped(
                "ud_sentences", "mined_sentence", sum(1 for t in lines if t and t in exclude)
            )
            counter.add_out("ud_sentences", len(out[LID_CODE[code]]))
    return out


def _prepare_into(tatoeba: Path, train_codes: list[str], out: Path, cfg, data: Path) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    counter = StageCounter()
    pud, pud_planted = (
        pud_split(data, train_codes, cfg.pud_planted, cfg.shuffle_seed) if cfg.pud else ({}, set())
    )
    pairs, by_lang = [], {}
    (out / "heldout").mkdir(exist_ok=True)
    rng = random.Random(cfg.shuffle_seed)
    for code in train_codes:
        src, trg = (
            _lines(tatoeba / f"train.{code}-eng.{code}"),
            _lines(tatoeba / f"train.{code}-eng.eng"),
        )
        if len(src) != len(trg):
            raise UsageError(f"train.{code}-eng: {len(src)} vs {len(trg)} lines")
        rows = list(zip(src, trg))
        counter.add_in("pairs", len(rows))
        held = rows[-cfg.heldout :] if code in cfg.langs else []
        rows = rows[: len(rows) - len(held)]
        if held:
            counter.add_dropped("pairs", "held_out", len(held))
            (out / "heldout" / f"heldout.{code}-eng.{code}").write_text(
                "".join(s + "\n" for s, _ in held), encoding="utf-8"
            )
            (out / "heldout" / f"heldout.{code}-eng.eng").write_text(
                "".join(t + "\n" for _, t in held), encoding="utf-8"
            )
        kept = 0
        for s, t in rows:
            if not s or not t:
                counter.add_dropped("pairs", "empty_side")
            elif cfg.max_train_pairs is not None and kept >= cfg.max_train_pairs:
                counter.add_dropped("pairs", "over_cap")
            else:
                kept += 1
                pairs.append((s, t, LID_CODE[code], "en"))
                by_lang.setdefault(LID_CODE[code], []).append(s)
                by_lang.setdefault("en", []).append(t)
        counter.add_out("pairs", kept)
    # PUD: the lines not planted train every PUD language (news/Wikipedia, closer to web text).
    for code, rows in pud.items():
        counter.add_in("pud_pairs", len(rows))
        for i, (s, t) in enumerate(rows):
            if i in pud_planted:
                counter.add_dropped(
                    "pud_pairs", "planted" if code in cfg.langs else "planted_elsewhere"
                )
            elif not s or not t:
                counter.add_dropped("pud_pairs", "empty_side")
            else:
                counter.add_out("pud_pairs")
                pairs.append((s, t, LID_CODE[code], "en"))
                by_lang.setdefault(LID_CODE[code], []).append(s)
                by_lang.setdefault("en", []).append(t)
    (out / "train_pairs.tsv").write_text(
        "".join("\t".join(p) + "\n" for p in pairs), encoding="utf-8"
    )
    # The CDS scorer's trusted data: an even sample, so its training time stays bounded.
    step = max(1, -(-len(pairs) // cfg.cds_trusted_pairs))
    (out / "trusted_pairs.tsv").write_text(
        "".join("\t".join(p) + "\n" for p in pairs[::step]), encoding="utf-8"
    )
    # UD: real monolingual text of every language for the vocabulary and MLM, never a sentence
    # that is mined (the dev and planted PUD sentences).
    mined = {x for code in cfg.langs for x in _lines(tatoeba / f"dev.{code}-eng.{code}")}
    mined |= {x for code in cfg.langs for x in _lines(tatoeba / f"dev.{code}-eng.eng")}
    mined |= {x for rows in pud.values() for i, p in enumerate(rows) if i in pud_planted for x in p}
    ud = _ud_sentences(data, train_codes, mined, counter) if cfg.ud else {}
    for lang, texts in ud.items():
        (out / "train_sentences" / lang).mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({"text": texts, "lang": [lang] * len(texts), "source": ["ud"] * len(texts)}),
                       out / "train_sentences" / lang / "ud.parquet")  # fmt: skip
    for lang, texts in by_lang.items():
        (out / "train_sentences" / lang).mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({"text": texts, "lang": [lang] * len(texts), "source": ["train"] * len(texts)}),
                       out / "train_sentences" / lang / "train.parquet")  # fmt: skip
    # The dev pairs become monolingual web text: both sides of every language, shuffled.
    gold, mono = [], []
    for code in cfg.langs:
        src, trg = (
            _lines(tatoeba / f"dev.{code}-eng.{code}"),
            _lines(tatoeba / f"dev.{code}-eng.eng"),
        )
        for s, t in zip(src, trg):
            counter.add_in("dev_sentences", 2)
            if s and t:
                gold.append((LID_CODE[code], "en", s, t))
                mono += [s, t]
                counter.add_out("dev_sentences", 2)
            else:
                counter.add_dropped("dev_sentences", "empty_side", 2)
        for i, (s, t) in enumerate(pud.get(code, [])):
            if i in pud_planted:
                counter.add_in("pud_planted_sentences", 2)
                if s and t:
                    gold.append((LID_CODE[code], "en", s, t))
                    mono += [s, t]
                    counter.add_out("pud_planted_sentences", 2)
                else:
                    counter.add_dropped("pud_planted_sentences", "empty_side", 2)
    rng.shuffle(mono)
    docs = [mono[i : i + cfg.doc_sentences] for i in range(0, len(mono), cfg.doc_sentences)]
    _write_wet(out / "tatoeba-dev.warc.wet.gz", docs, "https://tatoeba.example/doc")
    # A header, so every pair reader (`filters sample --planted`, `score`) reads it by name.
    (out / "gold.tsv").write_text("\t".join(GOLD_HEADER) + "\n" + "".join("\t".join(g) + "\n" for g in gold),
                                  encoding="utf-8")  # fmt: skip
    report = counter.to_report("prepare", train_languages=list(train_codes), mined_languages=list(cfg.langs),
                               web_documents=len(docs))  # fmt: skip
    _balanced(report)
    write_report(str(out / "stats.json"), report)
    return report


def _canonical(table: pa.Table) -> pa.Table:
    """Rows in one order whatever the file layout the Beam job chose (reruns give equal bytes)."""
    # Provenance rides along to the mined pairs (src_*/trg_* columns of the final bitext).
    cols = [c for c in ("text", "lang", *PROVENANCE_COLUMNS) if c in table.column_names]
    table = table.select(cols)
    keys = [(c, "ascending") for c in ("text", "source", "doc_id") if c in cols]
    return table.sort_by(keys)


def sentences(corpora: list[Path], extra: list[Path], out: Path, overwrite: bool = False) -> dict:
    with OutputDir(out, overwrite).open() as claimed:  # written aside, committed at the end
        return _sentences_into(corpora, extra, Path(claimed.tmp))


def _sentences_into(corpora: list[Path], extra: list[Path], out: Path) -> dict:
    counter = StageCounter()
    per_lang: dict[str, list[pa.Table]] = {}
    for corpus in corpora:
        if not (corpus / "stats.json").is_file():
            raise UsageError(f"{corpus}: not a corpus job output (no stats.json)")
        for f in sorted(corpus.glob("[!_]*/*.parquet")):
            t = read_parquet(f, flag="--corpus")
            if "source" not in t.column_names:
                t = t.append_column("source", pa.array([corpus.name] * t.num_rows))
            per_lang.setdefault(f.parent.name, []).append(t)
    langs = {}
    for lang, tables in sorted(per_lang.items()):
        t = _canonical(pa.concat_tables(tables, promote_options="default"))
        counter.add_in("sentences", t.num_rows)
        counter.add_out("sentences", t.num_rows)
        (out / "mine" / lang).mkdir(parents=True, exist_ok=True)
        pq.write_table(t, out / "mine" / lang / "sentences.parquet")
        langs[lang] = t.num_rows
    vocab_langs = dict(langs)
    for lang in sorted(set(langs) | {p.name for e in extra for p in e.iterdir() if p.is_dir()}):
        parts = [read_parquet(out / "mine" / lang / "sentences.parquet")] if lang in langs else []
        parts += [
            _canonical(read_parquet(p, flag="--extra"))
            for e in extra
            for p in sorted((e / lang).glob("*.parquet"))
        ]
        t = pa.concat_tables([p.select(["text", "lang"]) for p in parts])
        (out / "vocab" / lang).mkdir(parents=True, exist_ok=True)
        pq.write_table(t, out / "vocab" / lang / "sentences.parquet")
        vocab_langs[lang] = t.num_rows
    report = counter.to_report("sentences", sentences_per_language=langs,
                               vocab_sentences_per_language=vocab_langs)  # fmt: skip
    _balanced(report)
    write_report(str(out / "stats.json"), report)
    return report


GOLD_HEADER = ("src_lang", "trg_lang", "src", "trg")
PR_KEYS = ("gold", "reachable", "kept", "judged", "correct")


def read_gold(gold_file: Path) -> list[tuple[str, str, str, str]]:
    """The planted pairs of ``prepare``: (src_lang, trg_lang, src, trg) per line after the header."""
    lines = read_text(gold_file, "--gold").splitlines()
    if lines and tuple(lines[0].split("\t")) == GOLD_HEADER:
        lines = lines[1:]
    gold = [tuple(line.split("\t")) for line in lines if line]
    bad = [i for i, g in enumerate(gold, 2) if len(g) != 4]
    if bad:
        raise InputError(gold_file, f"line {bad[0]}: expected src_lang<TAB>trg_lang<TAB>src<TAB>trg",
                         "--gold")  # fmt: skip
    return gold  # type: ignore[return-value]


def _pr_rows(gold: list, kept: list[dict], present: dict[str, set[str]]) -> dict:
    gold_set = {(g[0], g[2], g[3]) for g in gold}
    gold_src = {(g[0], g[2]) for g in gold}
    gold_trg = {(g[0], g[3]) for g in gold}
    per: dict[str, Counter] = {}
    for g in gold:
        c = per.setdefault(f"{g[0]}-{g[1]}", Counter())
        c["gold"] += 1
        if g[2] in present.get(g[0], ()) and g[3] in present.get(g[1], ()):
            c["reachable"] += 1
    for r in kept:
        c = per.setdefault(f"{r['src_lang']}-{r['trg_lang']}", Counter())
        c["kept"] += 1
        key = r["src_lang"]
        if (key, r["src"], r["trg"]) in gold_set:
            c["correct"] += 1
            c["judged"] += 1
        elif (key, r["src"]) in gold_src or (key, r["trg"]) in gold_trg:
            c["judged"] += 1
    tot = Counter()
    for c in per.values():
        tot.update(c)
    rows = {}
    for pair, c in [*sorted(per.items()), ("all", tot)]:
        rows[pair] = {**{k: c[k] for k in PR_KEYS},
                      "precision": c["correct"] / c["judged"] if c["judged"] else 0.0,
                      # Kept pairs of two web sentences cannot be judged; counted BAD here.
                      "precision_strict": c["correct"] / c["kept"] if c["kept"] else 0.0,
                      "recall": c["correct"] / c["gold"] if c["gold"] else 0.0,
                      "recall_reachable": c["correct"] / c["reachable"] if c["reachable"] else 0.0}  # fmt: skip
    return rows


def score(
    bitext_dir: Path, gold_file: Path, sentences_dir: Path, out: Path, half: int | None = 1
) -> dict:
    """Precision: correct pairs among the kept pairs that touch a gold sentence (pairs between
    two web sentences cannot be judged; ``precision_strict`` counts them BAD); recall: correct
    pairs among all gold pairs, and among the gold pairs whose two sides both survived the corpus
    cleaning (``reachable``).

    ``half``: only the pairs whose source sentence falls in that half of the stable split of
    :func:`filters.bitext.sample.half_of` count (the other half labelled the sample the filter was
    calibrated on, so it cannot measure it); the figures over every pair are kept under
    ``all_pairs`` for comparison. ``None``: every pair."""
    from filters.bitext.sample import half_of

    gold = read_gold(gold_file)
    present: dict[str, set[str]] = {}
    for p in sentences_dir.glob("*/sentences.parquet"):
        present[p.parent.name] = set(
            read_parquet(p, ["text"], "--sentences", required=["text"]).column("text").to_pylist()
        )
    kept = read_parquet(bitext_dir / "bitext.parquet", ["src", "trg", "src_lang", "trg_lang"], "--bitext",
                        required=["src", "trg", "src_lang", "trg_lang"]).to_pylist()  # fmt: skip
    kept = [r for r in kept if r.get("src")]
    rows = _pr_rows(gold, kept, present)
    if half is not None:
        every = rows
        rows = _pr_rows([g for g in gold if half_of(g[2]) == half],
                        [r for r in kept if half_of(r["src"]) == half], present)  # fmt: skip
        rows["all_pairs"] = every["all"]
        rows["half"] = half
    out.mkdir(parents=True, exist_ok=True)
    (out / "mined_pr.json").write_text(json.dumps(rows, indent=1), encoding="utf-8")
    scope = (f"pairs whose source is in evaluation half {half} (the calibration sample was drawn from the other)"
             if half is not None else "every pair")  # fmt: skip
    md = [f"Scope: {scope}.", "",
          "| pair | gold | reachable | kept | judged | correct | precision | precision (strict) | recall | recall (reachable) |",
          "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    table = {k: v for k, v in rows.items() if isinstance(v, dict)}
    for pair, r in table.items():
        md.append(f"| {pair} | {r['gold']} | {r['reachable']} | {r['kept']} | {r['judged']} | {r['correct']} "
                  f"| {r['precision']:.3f} | {r['precision_strict']:.3f} | {r['recall']:.3f} | {r['recall_reachable']:.3f} |")  # fmt: skip
    (out / "mined_pr.md").write_text("\n".join(md) + "\n", encoding="utf-8")
    return rows


def concat(inputs: list[Path], out: Path, overwrite: bool = False) -> dict:
    counter = StageCounter()
    with claimed_file(out, overwrite) as tmp:
        tables = []
        for f in inputs:
            tables.append(read_parquet(f, flag="inputs"))
            counter.add_in("pairs", tables[-1].num_rows)
            counter.add_out("pairs", tables[-1].num_rows)
        pq.write_table(pa.concat_tables(tables, promote_options="default"), tmp)
    return counter.to_report("concat")


def embed(sentences_dir: Path, langs: list[str], model: str, out: Path, batch_size: int,
          overwrite: bool = False) -> None:  # fmt: skip
    """One store per language (``OUT/<lang>``) through the one embedding path
    (:func:`labse_model.embed_store.embed_to_store`, what ``mining embed`` runs), in one process:
    the encoder is loaded (and torch imported) once for every language. ``OUT`` as a whole is
    claimed and the stores are written under its temporary folder, so a second run into it
    stops (exit 2) and a failed run leaves no half set of stores."""
    from labse_model.embed_store import embed_to_store, load_model

    langs = list(dict.fromkeys(langs))  # a language named twice is embedded once
    missing = [str(sentences_dir / lang) for lang in langs if not (sentences_dir / lang).exists()]
    if missing:  # every language checked before the first is embedded
        raise UsageError(f"--sentences {sentences_dir}: no sentences for {', '.join(missing)}")
    with OutputDir(out, overwrite).open() as claimed:  # claimed before the slow model load
        encoder = load_model(model)
        for lang in langs:
            store = Path(claimed.tmp) / lang
            embed_to_store(encoder, str(sentences_dir / lang), str(store), dtype="float16",
                           batch_size=batch_size, flag="--sentences")  # fmt: skip
            _name_final_store(store / "stats.json", out / lang)


def _name_final_store(stats: Path, final: Path) -> None:
    """The store's stats.json names where it was written (the temporary folder): name where it
    will be once committed."""
    report = read_json(stats)
    if "output" in report:
        report["output"] = str(final)
        write_report(str(stats), report)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m pipelines.e2e_tasks", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    sub = ap.add_subparsers(dest="task", required=True)
    p = sub.add_parser("prepare", help="split the Tatoeba-layout pairs; dev sentences -> web text")
    p.add_argument("--data", required=True, help="folder with tatoeba/{train,dev}.XXX-eng.*")
    p.add_argument("--output", required=True, help="folder to write")
    p.add_argument("--config", default="demo", help="preset or YAML file (its run: section)")
    p.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override a run: key"
    )
    add_overwrite_option(p)
    s = sub.add_parser("sentences", help="per-language Parquet to mine and to learn the vocabulary")
    s.add_argument("--corpus", action="append", required=True, help="a corpus job's output folder")
    s.add_argument(
        "--extra", action="append", default=[], help="more <lang>/*.parquet for the vocabulary"
    )
    s.add_argument("--output", required=True, help="folder to write (mine/, vocab/)")
    add_overwrite_option(s)
    c = sub.add_parser("score", help="precision/recall of the bitext against the known alignment")
    c.add_argument(
        "--bitext", required=True, help="the final bitext folder (python -m filters export)"
    )
    c.add_argument("--gold", required=True, help="gold.tsv of the prepare task")
    c.add_argument("--sentences", required=True, help="sentences task's mine/ folder")
    c.add_argument("--output", required=True, help="folder to write mined_pr.{json,md}")
    c.add_argument(
        "--half",
        type=int,
        choices=(0, 1),
        default=1,
        help="score only the pairs whose source is in this half of the stable split "
        "(the filter was calibrated on the other; default 1)",
    )
    c.add_argument(
        "--every-pair",
        action="store_true",
        help="score every pair (no half): for runs whose filter used no planted sample",
    )
    k = sub.add_parser(
        "concat", help="several pair Parquet files as one (the filters take one file)"
    )
    k.add_argument("inputs", nargs="+", help="Parquet files with src, trg")
    k.add_argument("--output", required=True, help="Parquet file to write")
    add_overwrite_option(k, "the output file")
    e = sub.add_parser("embed", help="embedding stores of several languages, one encoder load")
    e.add_argument("--sentences", required=True, help="folder of <lang>/ Parquet sentences")
    e.add_argument("--langs", nargs="+", required=True, help="languages to embed")
    e.add_argument("--model", required=True, help="LaBSE checkpoint directory")
    e.add_argument("--output", required=True, help="folder receiving one store per language")
    e.add_argument("--batch-size", type=int, default=64, help="encoding batch size (64)")
    add_overwrite_option(e)
    add_log_level_option(ap)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.log_level)
    return run_main(lambda: _run_task(args), log, args=args)


def _run_task(args: argparse.Namespace) -> int:
    if args.task == "prepare":
        cfg = load("run", args.config, args.set)
        rep = prepare(Path(args.data), Path(args.output), cfg, args.overwrite)
    elif args.task == "sentences":
        rep = sentences([Path(c) for c in args.corpus], [Path(e) for e in args.extra],
                        Path(args.output), args.overwrite)  # fmt: skip
    elif args.task == "concat":
        rep = concat([Path(p) for p in args.inputs], Path(args.output), args.overwrite)
    elif args.task == "embed":
        embed(Path(args.sentences), args.langs, args.model, Path(args.output), args.batch_size,
              args.overwrite)  # fmt: skip
        return 0
    else:
        rep = score(
            Path(args.bitext),
            Path(args.gold),
            Path(args.sentences),
            Path(args.output),
            None if args.every_pair else args.half,
        )
    log.info("%s: %s", args.task, json.dumps(rep.get("counts", rep))[:300])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
