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
"""

from __future__ import annotations

import gzip
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from filters.bitext.hf_dataset import CardInfo, PairGroup, write_hf_dataset
from labse_common.datafiles import read_json, read_parquet
from labse_common.errors import InputError, UsageError
from labse_common.output_dir import claim_output
from labse_common.remote import require_local
from labse_common.stats import StageCounter, check_balanced, write_report

log = logging.getLogger(__name__)

STAGE = "bitext"
UNIT = "pairs"
Key = tuple[str, str]


def mined_files(mined: str | os.PathLike) -> list[Path]:
    """``<pair>/mined.parquet`` under a ``mining mine-many`` output, sorted."""
    root = Path(mined)
    if not root.is_dir():
        raise InputError(root, "not a folder (expected <pair>/mined.parquet inside)", "--mined")
    files = sorted(root.glob("*/mined.parquet"))
    if not files:
        raise InputError(root, "no <pair>/mined.parquet inside (the mine-many output)", "--mined")
    return files


def _drop_reasons(filtered: Path | None, rules: Path | None) -> dict[Key, str]:
    """Why the filters dropped each pair: ``rules:<reason>`` or ``cds:<reason>``."""
    why: dict[Key, str] = {}
    files = [
        ("rules", f, "--rules") for f in (sorted(rules.glob("*/dropped.parquet")) if rules else [])
    ]
    if filtered is not None and (filtered / "rejected.parquet").is_file():
        files.append(("cds", filtered / "rejected.parquet", "--filtered"))
    for step, f, flag in files:
        t = read_parquet(f, ["src", "trg", "reason"], flag, required=("src", "trg"))
        reasons = (
            t.column("reason").to_pylist() if "reason" in t.column_names else [None] * t.num_rows
        )
        for s, tr, r in zip(t.column("src").to_pylist(), t.column("trg").to_pylist(), reasons):
            why.setdefault((s, tr), f"{step}:{r or 'dropped'}")
    return why


def _kept_by_filters(
    filtered: Path | None, rules: Path | None
) -> tuple[set[Key] | None, dict[Key, float]]:
    """The pairs the filters kept (None: no filter ran) and their CDS scores."""
    if filtered is not None:
        f = filtered / "kept.parquet"
        if not f.is_file():
            raise InputError(filtered, "no kept.parquet (the apply command's output)", "--filtered")
        t = read_parquet(f, ["src", "trg", "cds_score"], "--filtered", required=("src", "trg"))
        keys = list(zip(t.column("src").to_pylist(), t.column("trg").to_pylist()))
        scores = (
            t.column("cds_score").to_pylist()
            if "cds_score" in t.column_names
            else [None] * len(keys)
        )
        return set(keys), dict(zip(keys, scores))
    if rules is not None:
        files = sorted(rules.glob("*/kept.parquet"))
        if not files:
            raise InputError(
                rules, "no <pair>/kept.parquet inside (the rules command's output)", "--rules"
            )
        kept: set[Key] = set()
        for f in files:
            t = read_parquet(f, ["src", "trg"], "--rules", required=("src", "trg"))
            kept |= set(zip(t.column("src").to_pylist(), t.column("trg").to_pylist()))
        return kept, {}
    return None, {}


COMBINED_COLUMNS = (
    "combined_score",
    "combined_threshold",
    "cds_score",
    "cds_score_bwd",
    "dual_xent",
)


def _kept_by_combined(combined: Path) -> tuple[set[Key], dict[Key, dict], dict[Key, str], dict]:
    """The pairs ``combine`` kept, the score columns of every pair it judged, why it dropped the
    others, and its summary (combined.json)."""
    f = combined / "scored.parquet"
    if not f.is_file():
        raise InputError(combined, "no scored.parquet (the combine command's output)", "--combined")
    summary = read_json(combined / "combined.json", "--combined", expect=dict)
    t = read_parquet(
        f,
        ["src", "trg", "keep", *COMBINED_COLUMNS],
        "--combined",
        required=("src", "trg", "keep", "combined_score"),
    )
    cols = [c for c in COMBINED_COLUMNS if c in t.column_names]
    rows = t.select(["src", "trg", "keep", *cols]).to_pylist()
    kept, scores, why = set(), {}, {}
    for r in rows:
        key = (r.pop("src"), r.pop("trg"))
        keep = r.pop("keep")
        scores[key] = r
        if keep:
            kept.add(key)
        else:
            why.setdefault(key, "combined:below_threshold")
    return kept, scores, why, summary


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
    if filtered is not None and combined is not None:
        raise UsageError("give --filtered (apply) or --combined (combine), not both")
    filtered_p = Path(filtered) if filtered is not None else None
    combined_p = Path(combined) if combined is not None else None
    rules_p = Path(rules) if rules is not None else None
    files = mined_files(mined)
    verdict = _verdict(filtered_p, combined_p, rules_p)
    counter = StageCounter()
    kept_all, rejected_all = _split_mined(files, verdict, min_margin, counter)
    by_pair: dict[tuple[str, str], list[dict]] = {}
    for r in kept_all:
        by_pair.setdefault((r["src_lang"], r["trg_lang"]), []).append(r)
    source = _source(filtered_p, combined_p, rules_p, min_margin)
    report = counter.to_report(
        STAGE,
        source=source,
        **_target_note(verdict.summary, combined_p is not None),
        pairs_per_language_pair={f"{s}-{t}": len(v) for (s, t), v in by_pair.items()},
    )
    problems = check_balanced(report)
    if problems:  # a bug here, not a user mistake
        raise RuntimeError(f"unbalanced bitext stats: {problems}")
    with claim_output(output, overwrite) as out:
        _write(Path(out.tmp), kept_all, rejected_all, by_pair, report)
        write_hf_dataset(
            _table(kept_all), Path(out.tmp) / "hf", card_info(verdict.summary, by_pair, source)
        )
    log.info(
        "bitext: %d of %d mined pairs kept (%s) in %s",
        len(kept_all),
        len(kept_all) + len(rejected_all),
        source,
        output,
    )
    return report


@dataclass
class _Verdict:
    """What the filters said: the pairs kept (None: no filter ran), each judged pair's score
    columns, why each dropped pair was dropped, and combine's summary (combined.json)."""

    kept: set[Key] | None
    scores: dict[Key, dict]
    why: dict[Key, str]
    summary: dict
    judged: bool  # a final filter (apply or combine) judged the pairs: no margin floor


def _verdict(filtered: Path | None, combined: Path | None, rules: Path | None) -> _Verdict:
    if combined is not None:
        kept, scores, why, summary = _kept_by_combined(combined)
        for k, v in _drop_reasons(None, rules).items():
            why.setdefault(k, v)
        return _Verdict(kept, scores, why, summary, True)
    kept, cds = _kept_by_filters(filtered, rules)
    scores = {k: {"cds_score": v} for k, v in cds.items()}
    return _Verdict(kept, scores, _drop_reasons(filtered, rules), {}, filtered is not None)


def _split_mined(
    files: list[Path], verdict: _Verdict, min_margin: float, counter: StageCounter
) -> tuple[list[dict], list[dict]]:
    """Every mined pair, kept or rejected with its reason (counted in ``counter``)."""
    kept_all: list[dict] = []
    rejected_all: list[dict] = []
    for f in files:
        # Every column: the provenance of each side travels to the final bitext.
        t = read_parquet(
            f, None, "--mined", required=("src", "trg", "src_lang", "trg_lang", "margin")
        )
        rows = t.to_pylist()
        counter.add_in(UNIT, len(rows))
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
                kept_all.append(r)
                counter.add_out(UNIT)
            else:
                rejected_all.append({**r, "reason": reason})
                counter.add_dropped(UNIT, reason)
    return kept_all, rejected_all


def _source(
    filtered: Path | None, combined: Path | None, rules: Path | None, min_margin: float
) -> str:
    """Which filter decided, in words (stats.json and the dataset card)."""
    if combined:
        return "hard rules + combined score at its calibrated threshold"
    if filtered:
        return "hard rules + calibrated CDS threshold"
    if rules:
        return f"hard rules + margin >= {min_margin}"
    return f"margin >= {min_margin}"


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
