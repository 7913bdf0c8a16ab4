"""The final NMT-ready bitext: the mined pairs that every filter kept, in the formats NMT
toolkits read, and every other mined pair with the reason it was dropped.

Which pairs are kept, by what ran before:

* ``combined`` (the ``combine`` command's folder: ``scored.parquet`` with ``keep``, and
  ``combined.json``): the pairs it kept (hard rules + the combined score's calibrated
  threshold); its score columns and the estimated GOOD share go into the bitext and its card;
* ``filtered`` (the ``apply`` command's folder, ``kept.parquet`` + ``rejected.parquet``): the
  pairs it kept (hard rules + calibrated CDS threshold);
* else ``rules`` (the ``rules`` command's output, one ``<pair>/kept.parquet`` +
  ``dropped.parquet`` per language pair): the pairs the rules kept whose margin is at least
  ``min_margin``;
* else the mined pairs whose margin is at least ``min_margin``.

Written into ``output`` (claimed, written aside, committed at the end: :mod:`labse_common.output_dir`):

* ``bitext.parquet``: src, trg, src_lang, trg_lang, margin, every other column of the mined
  pairs (src_id, trg_id, cosine and the provenance of each side: ``src_url_or_title``,
  ``src_locator`` (WARC file@offset or dump@stream offset), ``src_doc_id``, ``src_dup_count``...)
  and the filter's scores where known; ``bitext.tsv.gz``:
  ``src<TAB>trg<TAB>src_lang<TAB>trg_lang<TAB>margin``;
* ``hf/``: the same pairs as a Hugging Face ``datasets`` folder (Parquet shards + a dataset card
  with counts, thresholds, the estimated GOOD share and the sources): ``load_dataset("OUTPUT/hf")``;
* Moses files ``bitext.SRC-TRG.SRC`` / ``bitext.SRC-TRG.TRG``: line i of one translates line i
  of the other;
* ``rejected.parquet``: every other mined pair with ``reason`` (``rules:<reason>``,
  ``cds:<reason>``, ``combined:below_threshold``, ``below_min_margin``, or ``filtered`` when a
  filter dropped it without saying why);
* ``stats.json``: pairs in = out + dropped per reason (balanced), pairs per language pair.

What the filters decided is read by :mod:`filters.bitext.export_verdict`; the runner's export one
language pair at a time (``--pair``) and the assembly of its parts are
:mod:`filters.bitext.export_parts`.
"""

from __future__ import annotations

import gzip
import logging
import os
from collections.abc import Mapping
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from filters.bitext.export_verdict import Inputs, Key, Verdict, as_path, load_verdict, pair_files
from filters.bitext.hf_dataset import CardInfo, PairGroup, write_hf_dataset
from labse_common.datafiles import read_parquet
from labse_common.errors import InputError
from labse_common.filesystems import is_remote
from labse_common.output_dir import claim_output
from labse_common.remote import require_local
from labse_common.stats import (
    StageCounter,
    check_balanced,
    to_report,
    write_report,
)

log = logging.getLogger(__name__)

STAGE = "bitext"

UNIT = "pairs"

MINED = "mined.parquet"

MINED_COLUMNS = ("src", "trg", "src_lang", "trg_lang", "margin")


def mined_files(mined: str | os.PathLike) -> list[str]:
    """``<pair>/mined.parquet`` under a ``mining mine-many`` output (local or an object-store
    URL), sorted by language pair."""
    root = as_path(mined)
    if not is_remote(root) and not os.path.isdir(root):
        raise InputError(root, "not a folder (expected <pair>/mined.parquet inside)", "--mined")
    files = pair_files(root, MINED)
    if not files:
        raise InputError(root, "no <pair>/mined.parquet inside (the mine-many output)", "--mined")
    return files


def check_mined_file(path: str) -> None:
    """A mined pair file opens and has the columns the export needs (its footer only: the
    InputError ``split_file`` would raise for a truncated file or a missing column)."""
    read_parquet(path, [], "--mined", required=MINED_COLUMNS)


def export_bitext(
    mined: str | os.PathLike,
    output: str | os.PathLike,
    *,
    filtered: str | os.PathLike | None = None,
    combined: str | os.PathLike | None = None,
    rules: str | os.PathLike | None = None,
    min_margin: float = 1.05,
    overwrite: bool = False,
) -> dict:
    """Write the final bitext into ``output`` (module docstring); returns the stats report."""
    require_local(os.fspath(output), "--output", "filters export")
    inputs = Inputs.of(filtered, combined, rules, min_margin)
    files = mined_files(mined)
    verdict = load_verdict(inputs)
    counter = StageCounter()
    kept_all: list[dict] = []
    rejected_all: list[dict] = []
    for f in files:
        kept, rejected, counts = split_file(f, verdict, min_margin)
        kept_all += kept
        rejected_all += rejected
        counter.merge(counts)
    report, by_pair = bitext_report(counter.counts, kept_all, verdict.summary, inputs)
    with claim_output(output, overwrite) as out:
        write_bitext(out.tmp, kept_all, rejected_all, by_pair, report, verdict.summary)
    log.info(
        "bitext: %d of %d mined pairs kept (%s) in %s",
        len(kept_all),
        len(kept_all) + len(rejected_all),
        inputs.source,
        output,
    )
    return report


def split_file(
    path: str, verdict: Verdict, min_margin: float
) -> tuple[list[dict], list[dict], dict[str, int]]:
    """One mined pair file's pairs: those kept, those rejected (with ``reason``), and the
    counts (pairs in, out, dropped per reason), in the file's order."""
    # Every column: the provenance of each side travels to the final bitext.
    t = read_parquet(path, None, "--mined", required=MINED_COLUMNS)
    rows = t.to_pylist()
    counter = StageCounter()
    counter.add_in(UNIT, len(rows))
    kept: list[dict] = []
    rejected: list[dict] = []
    for r in rows:
        key = (r["src"], r["trg"])
        if verdict.judged:
            r.update(verdict.scores.get(key) or {})
        reason = None
        if verdict.kept is not None and key not in verdict.kept:
            reason = verdict.why.get(key, "filtered")
        elif not verdict.judged and r["margin"] < min_margin:
            reason = "below_min_margin"
        if reason is None:
            kept.append(r)
            counter.add_out(UNIT)
        else:
            rejected.append({**r, "reason": reason})
            counter.add_dropped(UNIT, reason)
    return kept, rejected, counter.drain()


def bitext_report(
    counts: Mapping[str, int], kept: list[dict], summary: dict, inputs: Inputs
) -> tuple[dict, dict[Key, list[dict]]]:
    """stats.json (checked balanced) and the kept pairs by language pair, in the bitext's
    order, from every file's counts, the kept pairs in file order and combine's summary."""
    by_pair: dict[Key, list[dict]] = {}
    for r in kept:
        by_pair.setdefault((r["src_lang"], r["trg_lang"]), []).append(r)
    report = to_report(
        STAGE,
        counts,
        source=inputs.source,
        **_target_note(summary, inputs.combined is not None),
        pairs_per_language_pair={f"{s}-{t}": len(v) for (s, t), v in by_pair.items()},
    )
    problems = check_balanced(report)
    if problems:  # a bug here, not a user mistake
        raise RuntimeError(f"unbalanced bitext stats: {problems}")
    return report, by_pair


def write_bitext(
    folder: str | os.PathLike,
    kept: list[dict],
    rejected: list[dict],
    by_pair: dict[Key, list[dict]],
    report: dict,
    summary: dict,
) -> None:
    """Every file of the bitext folder into the local ``folder`` (module docstring)."""
    tmp = Path(folder)
    _write(tmp, kept, rejected, by_pair, report)
    write_hf_dataset(_table(kept), tmp / "hf", card_info(summary, by_pair, report["source"]))


def _target_note(summary: dict, combined: bool) -> dict:
    """Whether combine reached its target, and its warning when it did not."""
    if not combined:
        return {}
    note = {
        "target_reached": bool(
            summary.get("target_reached", summary.get("calibration") is not None)
        )
    }
    if not note["target_reached"]:
        note["warning"] = summary.get("message", "the combined score did not reach its target")
    return note


def _table(kept: list[dict]) -> pa.Table:
    schema_rows = kept or [{"src": "", "trg": "", "src_lang": "", "trg_lang": "", "margin": 0.0}]
    return pa.Table.from_pylist(kept, schema=pa.Table.from_pylist(schema_rows).schema)


def card_info(summary: dict, by_pair: dict, source: str) -> CardInfo:
    """What the dataset card says: per language pair the count, the threshold it was kept at and
    the GOOD share estimated on the labelled sample (with its interval), from combined.json."""
    cal = summary.get("calibration") or {}
    reach = summary.get("reachable") or {}
    per = summary.get("per_pair") or {}
    groups = {}
    for (s, t), rows in sorted(by_pair.items()):
        own = per.get(s) if isinstance(per.get(s), dict) and "threshold" in per.get(s, {}) else None
        c = own or cal or {}
        groups[f"{s}-{t}"] = PairGroup(
            pairs=len(rows),
            threshold=c.get("threshold", reach.get("threshold")),
            good_share=c.get("precision", reach.get("precision")),
            good_share_ci=c.get("precision_ci", reach.get("precision_ci")),
        )
    extra = {"filter": source}
    if summary and not summary.get("target_reached", bool(cal)):
        extra["WARNING"] = summary.get("message", "target not reached")
    return CardInfo(
        target=summary.get("target"), labelled_pairs=cal.get("labelled"), groups=groups, extra=extra
    )


def _write(tmp: Path, kept: list[dict], rejected: list[dict], by_pair: dict, report: dict) -> None:
    pq.write_table(_table(kept), tmp / "bitext.parquet")
    pq.write_table(
        pa.Table.from_pylist(rejected)
        if rejected
        else pa.table({"src": pa.array([], pa.string()), "reason": pa.array([], pa.string())}),
        tmp / "rejected.parquet",
    )
    with gzip.open(tmp / "bitext.tsv.gz", "wt", encoding="utf-8") as f:
        for r in kept:
            f.write(
                f"{r['src']}\t{r['trg']}\t{r['src_lang']}\t{r['trg_lang']}\t{r['margin']:.6f}\n"
            )
    for (s, t), rows in by_pair.items():
        (tmp / f"bitext.{s}-{t}.{s}").write_text(
            "".join(r["src"] + "\n" for r in rows), encoding="utf-8"
        )
        (tmp / f"bitext.{s}-{t}.{t}").write_text(
            "".join(r["trg"] + "\n" for r in rows), encoding="utf-8"
        )
    write_report(str(tmp / "stats.json"), report)
