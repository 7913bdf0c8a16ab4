"""What the filters decided, as the export reads it: which mined pairs they kept, each judged
pair's score columns and why each dropped pair was dropped (:class:`Verdict`), from the folders
of ``combine`` (``scored.parquet`` + ``combined.json``), ``apply`` (``kept.parquet`` +
``rejected.parquet``) and ``rules`` (``<pair>/kept.parquet`` + ``dropped.parquet``), local or on
object storage (:mod:`filters.bitext.export` says which decides).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from labse_common import filesystems
from labse_common.datafiles import read_json, read_parquet
from labse_common.errors import InputError, UsageError
from labse_common.filesystems import is_remote, join

Key = tuple[str, str]

LANGS = ("src_lang", "trg_lang")


def pair_files(root: str, name: str) -> list[str]:
    """``root/<pair>/<name>``, sorted by pair folder; ``root`` local or an object-store URL."""
    if not is_remote(root):
        return [str(p) for p in sorted(Path(root).glob(f"*/{name}"))]
    base = root.rstrip("/") + "/"
    # An object store's ``*`` also matches ``/``: keep one folder level, as the local glob does.
    found = [u for u in filesystems.match(join(root, "*", name)) if u[len(base) :].count("/") == 1]
    return sorted(found, key=lambda u: u[len(base) :])


def is_file(path: str) -> bool:
    return filesystems.exists(path) if is_remote(path) else os.path.isfile(path)


def as_path(p: str | os.PathLike | None) -> str | None:
    """A folder argument as a string; a local one normalised as ``Path`` writes it."""
    if p is None or is_remote(p):
        return None if p is None else os.fspath(p)
    return str(Path(p))


def _rules_files(rules: str, name: str, pair: str | None) -> list[str]:
    """``rules/<pair>/<name>`` of every pair, or of ``pair`` only (when it is there)."""
    if pair is None:
        return pair_files(rules, name)
    f = join(rules, pair, name)
    return [f] if is_file(f) else []


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
    if filtered is not None and is_file(join(filtered, "rejected.parquet")):
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
        if not is_file(f):
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
    if not is_file(f):
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
        return cls(as_path(filtered), as_path(combined), as_path(rules), min_margin)

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
