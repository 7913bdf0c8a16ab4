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
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from filters.bitext.hf_dataset import CardInfo, PairGroup, write_hf_dataset
from labse_common import filesystems
from labse_common.datafiles import read_json, read_parquet
from labse_common.errors import InputError, UsageError
from labse_common.filesystems import is_remote, join
from labse_common.output_dir import claim_output, upload_tree
from labse_common.remote import require_local
from labse_common.stats import (
    StageCounter,
    check_balanced,
    flatten,
    merge_counts,
    to_report,
    write_report,
)

log = logging.getLogger(__name__)

STAGE = "bitext"
UNIT = "pairs"
MINED = "mined.parquet"
MINED_COLUMNS = ("src", "trg", "src_lang", "trg_lang", "margin")
LANGS = ("src_lang", "trg_lang")
# The per-pair parts of the runner's bitext stage (``--pair``), under its folder until assembled.
PARTS = "_parts"
Key = tuple[str, str]


def _pair_files(root: str, name: str) -> list[str]:
    """``root/<pair>/<name>``, sorted by pair folder; ``root`` local or an object-store URL."""
    if not is_remote(root):
        return [str(p) for p in sorted(Path(root).glob(f"*/{name}"))]
    base = root.rstrip("/") + "/"
    # An object store's ``*`` also matches ``/``: keep one folder level, as the local glob does.
    found = [u for u in filesystems.match(join(root, "*", name)) if u[len(base) :].count("/") == 1]
    return sorted(found, key=lambda u: u[len(base) :])


def _is_file(path: str) -> bool:
    return filesystems.exists(path) if is_remote(path) else os.path.isfile(path)


def _path(p: str | os.PathLike | None) -> str | None:
    """A folder argument as a string; a local one normalised as ``Path`` writes it."""
    if p is None or is_remote(p):
        return None if p is None else os.fspath(p)
    return str(Path(p))


def mined_files(mined: str | os.PathLike) -> list[str]:
    """``<pair>/mined.parquet`` under a ``mining mine-many`` output (local or an object-store
    URL), sorted by language pair."""
    root = _path(mined)
    if not is_remote(root) and not os.path.isdir(root):
        raise InputError(root, "not a folder (expected <pair>/mined.parquet inside)", "--mined")
    files = _pair_files(root, MINED)
    if not files:
        raise InputError(root, "no <pair>/mined.parquet inside (the mine-many output)", "--mined")
    return files


def check_mined_file(path: str) -> None:
    """A mined pair file opens and has the columns the export needs (its footer only: the
    InputError ``split_file`` would raise for a truncated file or a missing column)."""
    read_parquet(path, [], "--mined", required=MINED_COLUMNS)


def _rules_files(rules: str, name: str, pair: str | None) -> list[str]:
    """``rules/<pair>/<name>`` of every pair, or of ``pair`` only (when it is there)."""
    if pair is None:
        return _pair_files(rules, name)
    f = join(rules, pair, name)
    return [f] if _is_file(f) else []


def _langs(pair: str | None) -> tuple[str, ...]:
    """The language columns to read: only to pick one pair's rows."""
    return LANGS if pair is not None else ()


def _of_pair(t: pa.Table, pair: str | None) -> pa.Table:
    """The rows of language pair ``pair`` when the table says each row's languages (the
    candidates' columns); else every row (a pair's mined file only looks up its own)."""
    if pair is None or not {"src_lang", "trg_lang"} <= set(t.column_names):
        return t
    s, tr = pair.split("-", 1)
    mask = pc.and_(pc.equal(t.column("src_lang"), s), pc.equal(t.column("trg_lang"), tr))
    return t.filter(mask)


def _drop_reasons(
    filtered: str | None, rules: str | None, pair: str | None = None
) -> dict[Key, str]:
    """Why the filters dropped each pair: ``rules:<reason>`` or ``cds:<reason>``."""
    why: dict[Key, str] = {}
    files = [
        ("rules", f, "--rules")
        for f in (_rules_files(rules, "dropped.parquet", pair) if rules else [])
    ]
    if filtered is not None and _is_file(join(filtered, "rejected.parquet")):
        files.append(("cds", join(filtered, "rejected.parquet"), "--filtered"))
    for step, f, flag in files:
        t = read_parquet(f, ["src", "trg", "reason", *_langs(pair)], flag, required=("src", "trg"))
        t = _of_pair(t, pair)
        reasons = (
            t.column("reason").to_pylist() if "reason" in t.column_names else [None] * t.num_rows
        )
        for s, tr, r in zip(t.column("src").to_pylist(), t.column("trg").to_pylist(), reasons):
            why.setdefault((s, tr), f"{step}:{r or 'dropped'}")
    return why


def _kept_by_filters(
    filtered: str | None, rules: str | None, pair: str | None = None
) -> tuple[set[Key] | None, dict[Key, float]]:
    """The pairs the filters kept (None: no filter ran) and their CDS scores."""
    if filtered is not None:
        f = join(filtered, "kept.parquet")
        if not _is_file(f):
            raise InputError(filtered, "no kept.parquet (the apply command's output)", "--filtered")
        t = read_parquet(
            f, ["src", "trg", "cds_score", *_langs(pair)], "--filtered", required=("src", "trg")
        )
        t = _of_pair(t, pair)
        keys = list(zip(t.column("src").to_pylist(), t.column("trg").to_pylist()))
        scores = (
            t.column("cds_score").to_pylist()
            if "cds_score" in t.column_names
            else [None] * len(keys)
        )
        return set(keys), dict(zip(keys, scores))
    if rules is not None:
        files = _rules_files(rules, "kept.parquet", pair)
        if not files:
            where = "<pair>/kept.parquet" if pair is None else f"{pair}/kept.parquet"
            raise InputError(rules, f"no {where} inside (the rules command's output)", "--rules")
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


def _kept_by_combined(
    combined: str, pair: str | None = None
) -> tuple[set[Key], dict[Key, dict], dict[Key, str], dict]:
    """The pairs ``combine`` kept, the score columns of every pair it judged, why it dropped the
    others, and its summary (combined.json)."""
    f = join(combined, "scored.parquet")
    if not _is_file(f):
        raise InputError(combined, "no scored.parquet (the combine command's output)", "--combined")
    summary = read_json(join(combined, "combined.json"), "--combined", expect=dict)
    t = read_parquet(
        f,
        ["src", "trg", "keep", *COMBINED_COLUMNS, *_langs(pair)],
        "--combined",
        required=("src", "trg", "keep", "combined_score"),
    )
    t = _of_pair(t, pair)
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


@dataclass(frozen=True)
class Inputs:
    """What the export reads besides the mined pairs, and its margin floor; paths local or
    object-store URLs."""

    filtered: str | None = None
    combined: str | None = None
    rules: str | None = None
    min_margin: float = 1.05

    @classmethod
    def of(
        cls,
        filtered: str | os.PathLike | None = None,
        combined: str | os.PathLike | None = None,
        rules: str | os.PathLike | None = None,
        min_margin: float = 1.05,
    ) -> Inputs:
        if filtered is not None and combined is not None:
            raise UsageError("give --filtered (apply) or --combined (combine), not both")
        return cls(_path(filtered), _path(combined), _path(rules), min_margin)

    @property
    def source(self) -> str:
        """Which filter decided, in words (stats.json and the dataset card)."""
        if self.combined is not None:
            return "hard rules + combined score at its calibrated threshold"
        if self.filtered is not None:
            return "hard rules + calibrated CDS threshold"
        if self.rules is not None:
            return f"hard rules + margin >= {self.min_margin}"
        return f"margin >= {self.min_margin}"


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


@dataclass
class Verdict:
    """What the filters said: the pairs kept (None: no filter ran), each judged pair's score
    columns, why each dropped pair was dropped, and combine's summary (combined.json)."""

    kept: set[Key] | None
    scores: dict[Key, dict]
    why: dict[Key, str]
    summary: dict
    judged: bool  # a final filter (apply or combine) judged the pairs: no margin floor


def load_verdict(inputs: Inputs, pair: str | None = None) -> Verdict:
    """Read what the filters of ``inputs`` decided (their folders' files); with ``pair``, only
    about that language pair where the files say (the rules' folder of the pair, the rows with
    its src_lang and trg_lang), so one pair's export does not read every pair's verdict."""
    filtered, combined, rules = inputs.filtered, inputs.combined, inputs.rules
    if combined is not None:
        kept, scores, why, summary = _kept_by_combined(combined, pair)
        for k, v in _drop_reasons(None, rules, pair).items():
            why.setdefault(k, v)
        return Verdict(kept, scores, why, summary, True)
    kept, cds = _kept_by_filters(filtered, rules, pair)
    scores = {k: {"cds_score": v} for k, v in cds.items()}
    return Verdict(kept, scores, _drop_reasons(filtered, rules, pair), {}, filtered is not None)


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


# The runner's bitext stage runs one export per language pair (``--pair``: a part a killed run
# keeps) and then assembles the parts into the folder above, file for file.


def check_pair(pair: str) -> str:
    """``--pair``: two language codes joined by ``-`` (a mine-many pair folder's name)."""
    parts = pair.split("-")
    if len(parts) != 2 or not all(parts) or "/" in pair:
        raise UsageError(f"--pair {pair!r}: expected SRC-TRG, e.g. de-en")
    return pair


def pair_file(mined: str | os.PathLike, pair: str) -> str:
    """``mined/<pair>/mined.parquet``, which must be there (local or an object-store URL)."""
    f = join(_path(mined), pair, MINED)
    if not _is_file(f):
        raise InputError(f, f"not found (the mine-many output of {pair})", "--mined")
    return f


def part_report(
    pair: str,
    counts: Mapping[str, int],
    kept: list[dict],
    rejected: list[dict],
    summary: dict,
    inputs: Inputs,
) -> dict:
    """A part's stats.json: the pair's counts (balanced), and what the assembly needs to write
    what the whole export writes: what decided, combine's summary and each table's first row's
    keys (the final tables take their columns from the first row, as ``_table`` does)."""
    report = to_report(
        STAGE,
        counts,
        pair=pair,
        source=inputs.source,
        inputs=asdict(inputs),
        summary=summary,
        first_keys={
            "kept": list(kept[0]) if kept else None,
            "rejected": list(rejected[0]) if rejected else None,
        },
    )
    problems = check_balanced(report)
    if problems:  # a bug here, not a user mistake
        raise RuntimeError(f"unbalanced bitext stats of {pair}: {problems}")
    return report


def _rows_table(rows: list[dict]) -> pa.Table:
    """Every key any row has (a missing one as null): a part keeps each row's values whole."""
    keys = list(dict.fromkeys(k for r in rows for k in r))
    return pa.Table.from_pylist([{k: r.get(k) for k in keys} for r in rows])


def write_part(
    folder: str | os.PathLike, kept: list[dict], rejected: list[dict], report: dict
) -> None:
    """One pair's part into the local ``folder``: kept.parquet, rejected.parquet, stats.json."""
    tmp = Path(folder)
    pq.write_table(_rows_table(kept), tmp / "kept.parquet")
    pq.write_table(_rows_table(rejected), tmp / "rejected.parquet")
    write_report(str(tmp / "stats.json"), report)


def export_pair(
    mined: str | os.PathLike,
    pair: str,
    output: str | os.PathLike,
    *,
    filtered: str | os.PathLike | None = None,
    combined: str | os.PathLike | None = None,
    rules: str | os.PathLike | None = None,
    min_margin: float = 1.05,
    overwrite: bool = False,
) -> dict:
    """One language pair's part of the bitext into ``output`` (read back by
    :func:`assemble_parts`); returns its stats report."""
    require_local(os.fspath(output), "--output", "filters export")
    inputs = Inputs.of(filtered, combined, rules, min_margin)
    f = pair_file(mined, pair)
    verdict = load_verdict(inputs, pair)
    kept, rejected, counts = split_file(f, verdict, min_margin)
    report = part_report(pair, counts, kept, rejected, verdict.summary, inputs)
    with claim_output(output, overwrite) as out:
        write_part(out.tmp, kept, rejected, report)
    log.info("bitext %s: %d of %d mined pairs kept", pair, len(kept), len(kept) + len(rejected))
    return report


def _first_row(rows: list[dict], keys: list[str] | None) -> None:
    """The first row back with only the keys it had (the part stored every row's keys)."""
    if rows and keys is not None:
        rows[0] = {k: rows[0].get(k) for k in keys}


def read_parts(folder: str, pairs: Sequence[str]) -> tuple[list[dict], list[dict], list[dict]]:
    """The kept rows, rejected rows and stats.json of ``folder/_parts/<pair>``, in the whole
    export's order (its mined files' order: by pair folder); ``folder`` local or a URL."""
    order = sorted(dict.fromkeys(pairs), key=lambda p: f"{p}/{MINED}")
    kept: list[dict] = []
    rejected: list[dict] = []
    reports: list[dict] = []
    firsts: dict[str, list | None] = {"kept": None, "rejected": None}
    for p in order:
        part = join(folder, PARTS, p)
        if not _is_file(join(part, "stats.json")):
            raise InputError(part, "no stats.json (filters export --pair did not finish)", "DIR")
        report = read_json(join(part, "stats.json"), "DIR", expect=dict)
        if not {"first_keys", "inputs", "summary"} <= set(report):
            raise InputError(join(part, "stats.json"), "not a part (filters export --pair)", "DIR")
        for name, rows in (("kept", kept), ("rejected", rejected)):
            got = read_parquet(join(part, f"{name}.parquet"), None, "DIR").to_pylist()
            if got and not rows:
                firsts[name] = report["first_keys"][name]
            rows += got
        reports.append(report)
    _first_row(kept, firsts["kept"])
    _first_row(rejected, firsts["rejected"])
    return kept, rejected, reports


def assemble_parts(folder: str | os.PathLike, pairs: Sequence[str]) -> dict:
    """The bitext folder (module docstring) from the parts ``folder/_parts/<pair>`` that
    ``export --pair`` wrote, the files the whole export writes from the same inputs; the parts
    are removed. ``folder`` local or an object-store URL. Returns the stats report."""
    folder = _path(folder)
    kept, rejected, reports = read_parts(folder, pairs)
    first = reports[0]
    inputs = Inputs(**first["inputs"])
    counts = merge_counts(flatten(r) for r in reports)
    report, by_pair = bitext_report(counts, kept, first["summary"], inputs)
    if is_remote(folder):
        with tempfile.TemporaryDirectory(prefix="labse-bitext-") as local:
            write_bitext(local, kept, rejected, by_pair, report, first["summary"])
            upload_tree(local, folder)
        filesystems.delete(filesystems.match(join(folder, PARTS, "**")))
    else:
        _replace_into(Path(folder), kept, rejected, by_pair, report, first["summary"])
    log.info(
        "bitext: %d of %d mined pairs kept, %d parts -> %s",
        len(kept),
        len(kept) + len(rejected),
        len(reports),
        folder,
    )
    return report


def _replace_into(
    folder: Path,
    kept: list[dict],
    rejected: list[dict],
    by_pair: dict[Key, list[dict]],
    report: dict,
    summary: dict,
) -> None:
    """Written aside in ``folder``, then moved into place: no file is ever half written."""
    staging = Path(tempfile.mkdtemp(prefix="_assemble.", dir=folder))
    try:
        write_bitext(staging, kept, rejected, by_pair, report, summary)
        for entry in sorted(staging.iterdir()):
            target = folder / entry.name
            if target.is_dir():
                shutil.rmtree(target)
            os.replace(entry, target)
        shutil.rmtree(folder / PARTS, ignore_errors=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
