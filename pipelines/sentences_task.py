"""The ``sentences`` task of ``python -m pipelines.e2e_tasks``, resumable by language.

One canonically ordered Parquet per language from the corpus jobs (``mine/<lang>/``, what is
mined) and, with the training sentences added (``--extra``), what the vocabulary learns from
(``vocab/<lang>/``); ``stats.json`` counts the sentences (in == out) per language and in all.

Each language is a shard (:mod:`labse_common.resume_shards`): ``_partial/lang-<lang>/`` holds
its ``mine.parquet``, ``vocab.parquet`` and counts, recorded with their SHA-256 once written. A
rerun after a kill, with the same input files (names, sizes and contents: a run folder fetched
back onto a fresh machine keeps its shards), keeps the languages finished and does the rest; a
shard half-written or damaged since is done again. Once every language is there its files move
into the output's layout and ``stats.json`` sums the shards' counts, with ``shards`` and
``resumed_shards``. The output is an uninterrupted run's, row for row.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from labse_common.datafiles import read_json, read_parquet
from labse_common.errors import UsageError
from labse_common.formats import PROVENANCE_COLUMNS
from labse_common.output_dir import claim_output
from labse_common.resume_shards import Shards, fingerprint, sha256
from labse_common.stats import StageCounter, check_balanced, sum_reports, write_report

log = logging.getLogger("pipelines.sentences_task")

__all__ = ["sentences"]
MINE, VOCAB = "mine", "vocab"
_SHARD = "lang-"  # shard folders never clash with the output's own names (mine, vocab, ...)
#: Bumped when a shard's files change shape: an earlier version's shards are then not taken.
_FORMAT = 1


def _canonical(table: pa.Table) -> pa.Table:
    """Rows in one order whatever the file layout the Beam job chose (reruns give equal bytes)."""
    # Provenance rides along to the mined pairs (src_*/trg_* columns of the final bitext).
    cols = [c for c in ("text", "lang", *PROVENANCE_COLUMNS) if c in table.column_names]
    table = table.select(cols)
    keys = [(c, "ascending") for c in ("text", "source", "doc_id") if c in cols]
    return table.sort_by(keys)


def _inputs(
    corpora: list[Path], extra: list[Path]
) -> tuple[dict[str, list[tuple[Path, Path]]], dict[str, list[Path]]]:
    """The files each language reads: (corpus, file) to mine, and the ``--extra`` files."""
    mine: dict[str, list[tuple[Path, Path]]] = {}
    for corpus in corpora:
        if not (corpus / "stats.json").is_file():
            raise UsageError(f"{corpus}: not a corpus job output (no stats.json)")
        for f in sorted(corpus.glob("[!_]*/*.parquet")):
            mine.setdefault(f.parent.name, []).append((corpus, f))
    more: dict[str, list[Path]] = {}
    for e in extra:
        if not e.is_dir():
            raise UsageError(f"--extra {e}: not a folder of <lang>/*.parquet")
        for d in sorted(p for p in e.iterdir() if p.is_dir()):
            more.setdefault(d.name, []).extend(sorted(d.glob("*.parquet")))
    return mine, more


def _key(mine: dict[str, list[tuple[Path, Path]]], more: dict[str, list[Path]]) -> str:
    """What makes the output what it is: every input file's place, size and content. Contents,
    not modification times: a run folder fetched onto another machine keeps its shards."""
    files = [
        [lang, corpus.name, f.relative_to(corpus).as_posix(), f.stat().st_size, sha256(str(f))]
        for lang, pairs in sorted(mine.items())
        for corpus, f in pairs
    ]
    files += [
        [lang, "--extra", f.name, f.stat().st_size, sha256(str(f))]
        for lang, paths in sorted(more.items())
        for f in paths
    ]
    return fingerprint([], {"task": "sentences", "format": _FORMAT, "files": files})


def _language(lang: str, files: list[tuple[Path, Path]], extras: list[Path], d: Path) -> dict:
    """Write one language's shard into ``d``; returns its counts (also ``d/stats.json``)."""
    counter = StageCounter()
    d.mkdir(parents=True, exist_ok=True)
    parts = []
    if files:
        tables = []
        for corpus, f in files:
            t = read_parquet(f, flag="--corpus")
            if "source" not in t.column_names:
                t = t.append_column("source", pa.array([corpus.name] * t.num_rows))
            tables.append(t)
        t = _canonical(pa.concat_tables(tables, promote_options="default"))
        counter.add_in("sentences", t.num_rows)
        counter.add_out("sentences", t.num_rows)
        pq.write_table(t, d / "mine.parquet")
        parts.append(read_parquet(d / "mine.parquet"))  # as read back: the schema vocab had
    parts += [_canonical(read_parquet(p, flag="--extra")) for p in extras]
    vocab = pa.concat_tables([p.select(["text", "lang"]) for p in parts])
    pq.write_table(vocab, d / "vocab.parquet")
    mined = parts[0].num_rows if files else None
    report = counter.to_report(
        "sentences", language=lang, sentences=mined, vocab_sentences=vocab.num_rows
    )
    write_report(str(d / "stats.json"), report)
    return report


def sentences(corpora: list[Path], extra: list[Path], out: Path, overwrite: bool = False) -> dict:
    """The task (module docstring); returns the report written to ``out/stats.json``."""
    mine, more = _inputs(corpora, extra)
    # A language folder of --extra without Parquet has nothing to learn from.
    langs = sorted(set(mine) | {lang for lang, paths in more.items() if paths})
    key = _key(mine, more)
    with claim_output(out, overwrite, resume=key, stage="sentences") as claimed:
        shards: Shards = claimed.shards
        for lang in langs:
            if shards.finished(_SHARD + lang):
                continue
            d = Path(shards.begin(_SHARD + lang))
            _language(lang, mine.get(lang, []), more.get(lang, []), d)
            shards.end(_SHARD + lang)
        return _assemble(Path(claimed.path), langs, shards)


def _assemble(root: Path, langs: list[str], shards: Shards) -> dict:
    """Move the shards' files into the output's layout and write the summed stats.json. A kill
    here costs only the languages already moved (their records no longer match: redone)."""
    for name in (MINE, VOCAB, "stats.json"):  # what a killed assembly left
        p = root / name
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()
    reports = []
    for lang in langs:
        shard = root / (_SHARD + lang)
        reports.append(read_json(shard / "stats.json"))
        for name, kind in (("mine.parquet", MINE), ("vocab.parquet", VOCAB)):
            if (shard / name).exists():
                (root / kind / lang).mkdir(parents=True)
                os.replace(shard / name, root / kind / lang / "sentences.parquet")
        shutil.rmtree(shard)
    report = sum_reports(
        "sentences",
        reports,
        sentences_per_language={
            r["language"]: r["sentences"] for r in reports if r["sentences"] is not None
        },
        vocab_sentences_per_language={r["language"]: r["vocab_sentences"] for r in reports},
        shards=len(langs),
        resumed_shards=shards.resumed,
    )
    errors = check_balanced(report)
    if errors:
        raise RuntimeError(f"unbalanced stats: {errors}")
    write_report(str(root / "stats.json"), report)
    log.info("sentences: %d languages, %d kept from an earlier attempt", len(langs), shards.resumed)
    return report
