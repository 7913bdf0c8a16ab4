"""The runner's small steps between the stage CLIs (each a command the runner calls):

    python -m pipelines.e2e_tasks inputs    --pairs GLOB --eval GLOB --text GLOB --output DIR
    python -m pipelines.e2e_tasks labels    --sample S --candidates P --file LABELS.tsv --output DIR
    python -m pipelines.e2e_tasks sentences --corpus DIR [--corpus DIR] --extra DIR --output DIR
    python -m pipelines.e2e_tasks embed     --sentences DIR --langs de en --model DIR --output DIR
    python -m pipelines.e2e_tasks score     --bitext DIR --gold FILE --sentences DIR --output DIR

inputs: the ``sources`` globs read into what the run trains on and measures against (training
pairs, the CDS scorer's trusted pairs, the known alignment ``gold.tsv``, training sentences per
language). labels: the gate before the final filter: the sample in the file a person labels,
prefilled by pair text from earlier labels; exit status 3 until enough are labelled. sentences:
one canonically ordered Parquet per language from the corpus jobs (what is mined) and, with the
training sentences added, what the vocabulary learns from (pipelines/sentences_task.py; a rerun
after a kill keeps the languages finished). score: precision and recall of the
final bitext (``python -m filters export``) against the known alignment. concat: several pair
files as one.

inputs, labels, sentences, embed and concat claim their output
(:func:`~labse_common.output_dir.claim_output` for a folder, and for concat's file),
write it aside and commit it at the end: a second writer stops with exit status 2, an existing
output needs ``--overwrite``. The runner calls them into its freshly emptied stage folders.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from labse_common.cli import (
    add_log_level_option,
    add_overwrite_option,
    add_quantize_option,
    exit_with,
    run_main,
)
from labse_common.datafiles import read_json, read_parquet, read_text
from labse_common.errors import InputError, UsageError
from labse_common.logs import setup_logging
from labse_common.output_dir import claim_output
from labse_common.remote_cache import local_copy
from labse_common.resume_shards import fingerprint
from labse_common.stats import StageCounter, check_balanced, sum_reports, write_report
from pipelines.sentences_task import sentences

log = logging.getLogger("pipelines.e2e_tasks")


def _balanced(report: dict) -> None:
    errors = check_balanced(report)
    if errors:
        raise RuntimeError(f"unbalanced stats: {errors}")


def inputs(
    pairs: list[str],
    evals: list[str],
    texts: list[str],
    out: Path,
    trusted: int,
    lid_model: str | None = None,
    lid_threshold: float = 0.5,
    overwrite: bool = False,
    demo: Path | None = None,
) -> dict:
    """What the run trains on and measures against, from the ``sources`` globs: the training pairs
    as one TSV (src, trg, src_lang, trg_lang), an even sample of them as the CDS scorer's trusted
    pairs, the known alignment as ``gold.tsv``, and the training sentences per language (both
    sides of the pairs and the plain text) for the vocabulary and MLM."""
    if demo is not None:  # the demo builder's output; it has text only where --data has UD
        from pipelines import demo_data

        pairs = [*pairs, str(demo / demo_data.PAIRS)]
        evals = [*evals, str(demo / demo_data.EVAL)]
        texts = [
            *texts,
            *([str(demo / demo_data.TEXT)] if list((demo / "text").glob("*.txt")) else []),
        ]
    with claim_output(out, overwrite) as claimed:  # written aside, committed at the end
        return _inputs_into(
            pairs, evals, texts, Path(claimed.tmp), trusted, lid_model, lid_threshold
        )


def _inputs_into(
    pairs: list[str],
    evals: list[str],
    texts: list[str],
    out: Path,
    trusted: int,
    lid_model: str | None,
    lid_threshold: float,
) -> dict:
    counter = StageCounter()
    files: list[dict] = []  # one entry per file read, for stats.json
    rows, by_lang, groups = _training_pairs(pairs, counter, files)
    (out / "train_pairs.tsv").write_text(
        "".join("\t".join(p) + "\n" for p in rows), encoding="utf-8"
    )
    # The same pairs as one folder per <source>.<src>-<trg>: the trainer mixes them by the
    # documented rule (train.source_weights between sources, mix_alpha between languages).
    for group, ranges in groups.items():
        (out / TRAIN_GROUPS / group).mkdir(parents=True)
        with open(out / TRAIN_GROUPS / group / "pairs.tsv", "w", encoding="utf-8") as f:
            for start, stop in ranges:
                f.writelines("\t".join(p) + "\n" for p in rows[start:stop])
    # The CDS scorer's trusted data: an even sample, so its training time stays bounded.
    step = max(1, -(-len(rows) // trusted))
    (out / "trusted_pairs.tsv").write_text(
        "".join("\t".join(p) + "\n" for p in rows[::step]), encoding="utf-8"
    )
    gold = _eval_pairs(evals, counter, files)
    # A header, so every pair reader (`filters sample --planted`, `score`) reads it by name.
    (out / "gold.tsv").write_text(
        "\t".join(GOLD_HEADER) + "\n" + "".join("\t".join(g) + "\n" for g in gold), encoding="utf-8"
    )
    text_by_lang = _text_sentences(texts, counter, files, lid_model, lid_threshold)
    for name, table in (("pairs", by_lang), ("text", text_by_lang)):
        for lang, sents in table.items():
            (out / "train_sentences" / lang).mkdir(parents=True, exist_ok=True)
            pq.write_table(
                pa.table(
                    {"text": sents, "lang": [lang] * len(sents), "source": [name] * len(sents)}
                ),
                out / "train_sentences" / lang / f"{name}.parquet",
            )
    (out / "train_sentences").mkdir(exist_ok=True)
    report = counter.to_report(
        "inputs",
        files=files,
        training_pairs=len(rows),
        eval_pairs=len(gold),
        trusted_pairs=len(rows[::step]),
    )
    _balanced(report)
    write_report(str(out / "stats.json"), report)
    return report


#: The training pairs again, one folder per ``<source>.<src>-<trg>`` (the train stage's input).
TRAIN_GROUPS = "train_groups"
_EXTENSIONS = (".tsv.gz", ".txt.gz", ".tsv", ".txt", ".parquet")


def train_group(pf) -> str:
    """The training group of a pair file: ``<source>.<src>-<trg>``, the source being what its
    file name holds before the language pair (``pud.de-en.tsv``: ``pud``; ``de-en.tsv``: none,
    the group is ``de-en``). ``train.source_weights`` weighs the sources by these names."""
    name = os.path.basename(pf.paths[0])
    if pf.fmt == "moses":
        name = name.rsplit(".", 1)[0]  # the side's own language suffix
    else:
        name = next((name[: -len(e)] for e in _EXTENSIONS if name.endswith(e)), name)
    pair = re.search(r"[A-Za-z0-9_]+-[A-Za-z0-9_]+$", name)
    source = re.sub(r"[^A-Za-z0-9_-]+", "_", name[: pair.start()] if pair else name).strip("_-")
    return f"{source}.{pf.src_lang}-{pf.trg_lang}" if source else f"{pf.src_lang}-{pf.trg_lang}"


def _training_pairs(
    pairs: list[str], counter: StageCounter, files: list[dict]
) -> tuple[list[tuple[str, str, str, str]], dict[str, list[str]], dict[str, list[tuple[int, int]]]]:
    """The training pairs of ``--pairs`` as (src, trg, src_lang, trg_lang), each side's
    sentences by language, and the row ranges of each training group (:func:`train_group`)."""
    from labse_common.sources import expand_pairs, read_pairs_file

    rows: list[tuple[str, str, str, str]] = []
    by_lang: dict[str, list[str]] = {}
    groups: dict[str, list[tuple[int, int]]] = {}
    for pf in expand_pairs(pairs, None, "--pairs") if pairs else []:
        n0 = len(rows)
        for s, t in read_pairs_file(pf, counter, "pairs"):
            rows.append((s, t, pf.src_lang, pf.trg_lang))
            by_lang.setdefault(pf.src_lang, []).append(s)
            by_lang.setdefault(pf.trg_lang, []).append(t)
        if len(rows) > n0:
            groups.setdefault(train_group(pf), []).append((n0, len(rows)))
        files.append(
            {
                "kind": "pairs",
                "paths": list(pf.paths),
                "pair": f"{pf.src_lang}-{pf.trg_lang}",
                "rows": len(rows) - n0,
            }
        )
    if pairs and not rows:
        raise InputError(pairs[0], "no usable training pair in any file it matches", "--pairs")
    return rows, by_lang, groups


def _eval_pairs(
    evals: list[str], counter: StageCounter, files: list[dict]
) -> list[tuple[str, str, str, str]]:
    """The known alignment of ``--eval`` as (src_lang, trg_lang, src, trg)."""
    from labse_common.sources import expand_pairs, read_pairs_file

    gold = []
    for pf in expand_pairs(evals, None, "--eval") if evals else []:
        n0 = len(gold)
        gold += [
            (pf.src_lang, pf.trg_lang, s, t) for s, t in read_pairs_file(pf, counter, "eval_pairs")
        ]
        files.append(
            {
                "kind": "eval",
                "paths": list(pf.paths),
                "pair": f"{pf.src_lang}-{pf.trg_lang}",
                "rows": len(gold) - n0,
            }
        )
    return gold


def _text_sentences(
    texts: list[str],
    counter: StageCounter,
    files: list[dict],
    lid_model: str | None,
    lid_threshold: float,
) -> dict[str, list[str]]:
    """The sentences of ``--text`` by language (the file's, else detected per line)."""
    from filters.langid import detect_lines
    from labse_common.sources import expand_texts

    text_by_lang: dict[str, list[str]] = {}
    for tf in expand_texts(texts, None, "--text") if texts else []:
        lines = [ln.strip() for ln in read_text(tf.path, "--text").splitlines()]
        counter.add_in("text_sentences", len(lines))
        kept = [ln for ln in lines if ln]
        counter.add_dropped("text_sentences", "empty", len(lines) - len(kept))
        langs = [tf.lang] * len(kept) if tf.lang else detect_lines(kept, lid_model, lid_threshold)
        for ln, lang in zip(kept, langs):
            if lang is None:
                counter.add_dropped("text_sentences", "language_unsure")
            else:
                counter.add_out("text_sentences")
                text_by_lang.setdefault(lang, []).append(ln)
        files.append(
            {"kind": "text", "paths": [tf.path], "lang": tf.lang or "detected", "rows": len(kept)}
        )
    return text_by_lang


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
        raise InputError(
            gold_file, f"line {bad[0]}: expected src_lang<TAB>trg_lang<TAB>src<TAB>trg", "--gold"
        )
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
        rows[pair] = {
            **{k: c[k] for k in PR_KEYS},
            "precision": c["correct"] / c["judged"] if c["judged"] else 0.0,
            # Kept pairs of two web sentences cannot be judged; counted BAD here.
            "precision_strict": c["correct"] / c["kept"] if c["kept"] else 0.0,
            "recall": c["correct"] / c["gold"] if c["gold"] else 0.0,
            "recall_reachable": c["correct"] / c["reachable"] if c["reachable"] else 0.0,
        }
    return rows


def score(
    bitext_dir: Path,
    gold_file: Path,
    sentences_dir: Path,
    out: Path,
    half: int | None = 1,
    mined_dir: Path | None = None,
) -> dict:
    """Precision: correct pairs among the kept pairs that touch a gold sentence (pairs between
    two web sentences cannot be judged; ``precision_strict`` counts them BAD); recall: correct
    pairs among all gold pairs, and among the gold pairs whose two sides both survived the corpus
    cleaning (``reachable``).

    ``half``: only the pairs whose source sentence falls in that half of the stable split of
    :func:`filters.bitext.sample.half_of` count (the other half labelled the sample the filter was
    calibrated on, so it cannot measure it); the figures over every pair are kept under
    ``all_pairs`` for comparison. ``None``: every pair.

    ``mined_dir``: the same figures for the miner's pairs before any filter, over every pair (the
    miner saw no label), in ``miner_pr.json``: its recall is the most the filter can keep."""
    from filters.bitext.sample import half_of

    gold = read_gold(gold_file)
    present: dict[str, set[str]] = {}
    for p in sentences_dir.glob("*/sentences.parquet"):
        present[p.parent.name] = set(
            read_parquet(p, ["text"], "--sentences", required=["text"]).column("text").to_pylist()
        )
    kept = read_parquet(
        bitext_dir / "bitext.parquet",
        ["src", "trg", "src_lang", "trg_lang"],
        "--bitext",
        required=["src", "trg", "src_lang", "trg_lang"],
    ).to_pylist()
    kept = [r for r in kept if r.get("src")]
    rows = _pr_rows(gold, kept, present)
    if half is not None:
        every = rows
        rows = _pr_rows(
            [g for g in gold if half_of(g[2]) == half],
            [r for r in kept if half_of(r["src"]) == half],
            present,
        )
        rows["all_pairs"] = every["all"]
        rows["half"] = half
    out.mkdir(parents=True, exist_ok=True)
    if mined_dir is not None:
        mined = [
            r
            for f in sorted(mined_dir.glob("*/mined.parquet"))
            for r in read_parquet(
                f,
                ["src", "trg", "src_lang", "trg_lang"],
                "--mined",
                required=["src", "trg", "src_lang", "trg_lang"],
            ).to_pylist()
        ]
        miner = _pr_rows(gold, mined, present)
        (out / "miner_pr.json").write_text(json.dumps(miner, indent=1), encoding="utf-8")
    (out / "mined_pr.json").write_text(json.dumps(rows, indent=1), encoding="utf-8")
    scope = (
        f"pairs whose source is in evaluation half {half} (the calibration sample was drawn from the other)"
        if half is not None
        else "every pair"
    )
    md = [
        f"Scope: {scope}.",
        "",
        "| pair | gold | reachable | kept | judged | correct | precision | precision (strict) | recall | recall (reachable) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    table = {k: v for k, v in rows.items() if isinstance(v, dict)}
    for pair, r in table.items():
        md.append(
            f"| {pair} | {r['gold']} | {r['reachable']} | {r['kept']} | {r['judged']} | {r['correct']} "
            f"| {r['precision']:.3f} | {r['precision_strict']:.3f} | {r['recall']:.3f} | {r['recall_reachable']:.3f} |"
        )
    (out / "mined_pr.md").write_text("\n".join(md) + "\n", encoding="utf-8")
    return rows


def concat(inputs: list[Path], out: Path, overwrite: bool = False) -> dict:
    counter = StageCounter()
    with claim_output(out, overwrite, files=("",)) as claimed:
        tmp = claimed.path
        tables = []
        for f in inputs:
            tables.append(read_parquet(f, flag="inputs"))
            counter.add_in("pairs", tables[-1].num_rows)
            counter.add_out("pairs", tables[-1].num_rows)
        pq.write_table(pa.concat_tables(tables, promote_options="default"), tmp)
    return counter.to_report("concat")


def labels(
    sample: Path,
    candidates: Path,
    person_file: Path,
    earlier: Path | str | None,  # a local path or an object-store URL (combine.labels)
    out: Path,
    min_labelled: int,
    min_per_label: int,
    overwrite: bool = False,
) -> int:
    """The gate before the final filter: the sample's rows in ``person_file`` (created, or
    extended when the sample changed), prefilled from ``earlier`` labels and the person's own by
    pair text; every labelled pair matched to ``candidates`` by its text. With enough labels
    (``min_labelled``, ``min_per_label`` of GOOD and of BAD) ``OUT/labels.tsv`` is what
    ``filters combine`` reads; else one line says what to label and the exit status is
    :data:`~labse_common.cli.EXIT_NEEDS_LABELS`."""
    import sys

    from filters.bitext import label_match as lm
    from filters.bitext import round_marks as rm
    from filters.bitext.calibrate import BAD, GOOD
    from filters.bitext.sample import LABEL, TSV_COLUMNS
    from labse_common.cli import EXIT_NEEDS_LABELS, LABELS_NEEDED

    counter = StageCounter()
    smp = read_parquet(sample, flag="--sample", required=["src", "trg"])
    header = [c for c in TSV_COLUMNS if c in smp.column_names or c == LABEL]
    header += [c for c in LABEL_PROVENANCE if c in smp.column_names and c not in header]
    sample_rows = [{h: ("" if h == LABEL else r.get(h)) for h in header} for r in smp.to_pylist()]
    earlier_labels = {}
    if earlier is not None:
        earlier_rows = lm.read_rows(local_copy(earlier, "combine.labels"), "combine.labels")[1]
        earlier_labels = lm.known_labels(earlier_rows, counter, "earlier_labels", earlier)
    person_header, person_rows = (
        lm.read_rows(person_file, "labels file") if person_file.is_file() else (header, [])
    )
    person = lm.known_labels(person_rows, counter, "person_labels", person_file)
    # The person's marks (round two's, filters.bitext.round_marks) stay on their rows.
    merged = rm.carry_marks(lm.merge_labels(sample_rows, earlier_labels, person), person_rows)
    # The person's labels of pairs outside this sample stay in the file: a rerun may mine them
    # again; so do the rows of round two, labelled or not, in their order.
    extra = rm.kept_extra(person_rows, {lm.key_of(r["src"], r["trg"]) for r in merged})
    if lm.write_rows(
        person_file, header + [h for h in person_header if h not in header], merged + extra
    ):
        log.info(
            "%s: %d sampled pairs (%d prefilled)",
            person_file,
            len(merged),
            sum(bool(r[LABEL]) for r in merged),
        )
    cand = read_parquet(candidates, flag="--candidates", required=["src", "trg"])
    ids, labs = lm.match_to_pairs(cand, {**earlier_labels, **person}, counter, "labels")
    good, bad = labs.count(GOOD), labs.count(BAD)
    if len(ids) < min_labelled or good < min_per_label or bad < min_per_label:
        done = sum(bool(r[LABEL]) for r in merged)
        sys.stderr.write(
            f"{LABELS_NEEDED} {done} of the {len(merged)} sampled pairs in {person_file} are labelled and "
            f"{len(ids)} labels match mined pairs ({good} GOOD, {bad} BAD); the filter needs at least "
            f"{min_labelled}, with {min_per_label} of each: label them with `python -m filters label "
            f"{person_file}` (or fill its label column with GOOD or BAD in any editor)\n"
        )
        return EXIT_NEEDS_LABELS
    with claim_output(out, overwrite) as claimed:
        # With round two's marks when the file has them: combine reports its estimate.
        rm.write_labels(Path(claimed.tmp) / "labels.tsv", cand, ids, labs, person_rows)
        report = counter.to_report(
            "labels",
            person_file=str(person_file),
            good=good,
            bad=bad,
            earlier=str(earlier) if earlier else None,
        )
        _balanced(report)
        write_report(str(Path(claimed.tmp) / "stats.json"), report)
    return 0


#: Provenance shown to the person labelling (the label page lists both sides' origins).
LABEL_PROVENANCE = tuple(
    f"{side}_{name}"
    for side in ("src", "trg")
    for name in ("url_or_title", "source", "doc_id", "locator")
)


def embed(
    sentences_dir: Path,
    langs: list[str],
    model: str,
    out: Path,
    batch_size: int,
    overwrite: bool = False,
    quantize: str = "none",
) -> None:
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
    # One shard per language: a rerun after a kill keeps the stores an earlier attempt with the
    # same encoder, sentences and settings finished (labse_common/resume_shards.py).
    settings = {"langs": langs, "batch_size": batch_size, "quantize": quantize}
    key = fingerprint([model, *(sentences_dir / lang for lang in langs)], settings)
    with claim_output(out, overwrite, resume=key, stage="embed") as claimed:
        shards = claimed.shards
        encoder = None  # loaded (slow) only when a language is left to embed
        for lang in langs:
            if shards.finished(lang):
                continue
            encoder = encoder or load_model(model, quantize=quantize)
            store = Path(shards.begin(lang))
            embed_to_store(
                encoder,
                str(sentences_dir / lang),
                str(store),
                dtype="float16",
                batch_size=batch_size,
                flag="--sentences",
            )
            _name_final_store(store / "stats.json", out / lang)
            shards.end(lang)
        # The stores' counts summed (what the report shows for the stage), and the shards.
        parts = [read_json(Path(claimed.path) / lang / "stats.json") for lang in langs]
        report = sum_reports("embed", parts, shards=len(langs), resumed_shards=shards.resumed)
        write_report(str(Path(claimed.path) / "stats.json"), report)


def _name_final_store(stats: Path, final: Path) -> None:
    """The store's stats.json names where it was written (the temporary folder): name where it
    will be once committed."""
    report = read_json(stats)
    if "output" in report:
        report["output"] = str(final)
        write_report(str(stats), report)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m pipelines.e2e_tasks",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = ap.add_subparsers(dest="task", required=True)
    _add_inputs_parser(sub)
    _add_labels_parser(sub)
    _add_sentences_parser(sub)
    _add_score_parser(sub)
    _add_concat_parser(sub)
    _add_embed_parser(sub)
    add_log_level_option(ap)
    return ap


def _add_inputs_parser(sub: argparse._SubParsersAction) -> None:
    """Add the ``inputs`` task: training pairs, eval alignment and text from the sources."""
    p = sub.add_parser(
        "inputs", help="training pairs, eval alignment, training text from sources globs"
    )
    p.add_argument(
        "--pairs",
        action="append",
        default=[],
        metavar="GLOB",
        help="training pairs, {src}-{trg} in the name (TSV, Parquet, Moses {lang})",
    )
    p.add_argument(
        "--eval",
        action="append",
        default=[],
        metavar="GLOB",
        help="known alignments, the same formats",
    )
    p.add_argument(
        "--text",
        action="append",
        default=[],
        metavar="GLOB",
        help="plain text; {lang} in the name, else each line's language is detected",
    )
    p.add_argument("--demo", help="the demo builder's folder (python -m pipelines.demo_data)")
    p.add_argument(
        "--trusted", type=int, default=2000, help="trusted pairs for the CDS scorer (2000)"
    )
    p.add_argument("--lid-model", help="fastText LID model (default: the bundled lid.176.ftz)")
    p.add_argument(
        "--lid-threshold",
        type=float,
        default=0.5,
        help="a detected line below this probability is dropped (0.5)",
    )
    p.add_argument("--output", required=True, help="folder to write")
    add_overwrite_option(p)


def _add_labels_parser(sub: argparse._SubParsersAction) -> None:
    """Add the ``labels`` task: the person's labels matched to the mined pairs."""
    g = sub.add_parser("labels", help="the person's labels, matched to the mined pairs by text")
    g.add_argument("--sample", required=True, help="sample.parquet of `filters sample`")
    g.add_argument("--candidates", required=True, help="the pairs the sample was drawn from")
    g.add_argument("--file", required=True, help="the labelling TSV a person fills (created)")
    g.add_argument("--earlier", help="labels of an earlier run (combine.labels), matched by text")
    g.add_argument("--min-labelled", type=int, default=30, help="labels needed to go on (30)")
    g.add_argument("--min-per-label", type=int, default=5, help="GOOD and BAD labels needed (5)")
    g.add_argument(
        "--output", required=True, help="folder to write labels.tsv for `filters combine`"
    )
    add_overwrite_option(g)


def _add_sentences_parser(sub: argparse._SubParsersAction) -> None:
    """Add the ``sentences`` task: per-language sentences to mine and to learn from."""
    s = sub.add_parser("sentences", help="per-language Parquet to mine and to learn the vocabulary")
    s.add_argument("--corpus", action="append", required=True, help="a corpus job's output folder")
    s.add_argument(
        "--extra", action="append", default=[], help="more <lang>/*.parquet for the vocabulary"
    )
    s.add_argument("--output", required=True, help="folder to write (mine/, vocab/)")
    add_overwrite_option(s)


def _add_score_parser(sub: argparse._SubParsersAction) -> None:
    """Add the ``score`` task: precision/recall against the known alignment."""
    c = sub.add_parser("score", help="precision/recall of the bitext against the known alignment")
    c.add_argument(
        "--bitext", required=True, help="the final bitext folder (python -m filters export)"
    )
    c.add_argument(
        "--gold", required=True, help="gold.tsv of the inputs task (src_lang, trg_lang, src, trg)"
    )
    c.add_argument("--sentences", required=True, help="sentences task's mine/ folder")
    c.add_argument("--output", required=True, help="folder to write mined_pr.{json,md}")
    c.add_argument(
        "--mined",
        help="the mine stage's folder (<pair>/mined.parquet): also write miner_pr.json, what the "
        "miner found before any filter, over every pair",
    )
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


def _add_concat_parser(sub: argparse._SubParsersAction) -> None:
    """Add the ``concat`` task: several pair files as one."""
    k = sub.add_parser(
        "concat", help="several pair Parquet files as one (the filters take one file)"
    )
    k.add_argument("inputs", nargs="+", help="Parquet files with src, trg")
    k.add_argument("--output", required=True, help="Parquet file to write")
    add_overwrite_option(k, "the output file")


def _add_embed_parser(sub: argparse._SubParsersAction) -> None:
    """Add the ``embed`` task: embedding stores of several languages."""
    e = sub.add_parser("embed", help="embedding stores of several languages, one encoder load")
    e.add_argument("--sentences", required=True, help="folder of <lang>/ Parquet sentences")
    e.add_argument("--langs", nargs="+", required=True, help="languages to embed")
    e.add_argument("--model", required=True, help="LaBSE checkpoint directory")
    e.add_argument("--output", required=True, help="folder receiving one store per language")
    e.add_argument("--batch-size", type=int, default=64, help="encoding batch size (64)")
    add_quantize_option(e)
    add_overwrite_option(e)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.log_level)
    return run_main(lambda: _run_task(args), log, args=args)


def _run_task(args: argparse.Namespace) -> int:
    if args.task == "inputs":
        rep = inputs(
            args.pairs,
            args.eval,
            args.text,
            Path(args.output),
            args.trusted,
            args.lid_model,
            args.lid_threshold,
            args.overwrite,
            Path(args.demo) if args.demo else None,
        )
    elif args.task == "labels":
        return labels(
            Path(args.sample),
            Path(args.candidates),
            Path(args.file),
            args.earlier,
            Path(args.output),
            args.min_labelled,
            args.min_per_label,
            args.overwrite,
        )
    elif args.task == "sentences":
        rep = sentences(
            [Path(c) for c in args.corpus],
            [Path(e) for e in args.extra],
            Path(args.output),
            args.overwrite,
        )
    elif args.task == "concat":
        rep = concat([Path(p) for p in args.inputs], Path(args.output), args.overwrite)
    elif args.task == "embed":
        embed(
            Path(args.sentences),
            args.langs,
            args.model,
            Path(args.output),
            args.batch_size,
            args.overwrite,
            args.quantize,
        )
        return 0
    else:
        rep = score(
            Path(args.bitext),
            Path(args.gold),
            Path(args.sentences),
            Path(args.output),
            None if args.every_pair else args.half,
            Path(args.mined) if args.mined else None,
        )
    log.info("%s: %s", args.task, json.dumps(rep.get("counts", rep))[:300])
    return 0


if __name__ == "__main__":
    exit_with(main)
