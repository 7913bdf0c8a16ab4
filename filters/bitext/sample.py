"""A labelled sample drawn from the mined pairs, as the paper's annotators labelled them.

The threshold of the final filter must be chosen on pairs like the ones it will judge: mined
candidates, with the miner's errors, not held-out translations with random partners. So:

1. :func:`draw_sample` draws a stratified sample of the mined candidates: strata are the
   language pair and margin quantile buckets within it, and each stratum gets a share of the
   sample proportional to its size (largest remainder), so the sample is self-weighting: its
   GOOD share estimates the GOOD share of the candidates it was drawn from, while every margin
   range is represented. Each row keeps ``stratum`` and ``weight`` (candidates per sampled row).
   :func:`in_labelling_order` then orders the rows for the person labelling them (only the order:
   the rows and their weights stay): round-robin over the language pairs and, within each, over
   its margin strata, random within a stratum (fixed by the seed), so every prefix of the file is
   a stratified sample. Someone who labels only the first 30 rows has labelled every language
   pair and every margin stratum, not the high-margin pairs of one language pair.
2. :func:`write_for_labelling` writes it as a TSV a person labels (``label`` column: GOOD/BAD),
   and :func:`read_labels` reads it back, refusing anything but GOOD/BAD or blank (blank rows
   are counted as unlabelled and left out).
3. Where the true alignment is known (the demo's planted pairs), :func:`split_halves` assigns
   every source sentence to half 0 or 1 by a stable hash, :func:`auto_label` labels a sample
   from it, and only candidates of the calibration half are sampled: the other half is kept for
   the final evaluation, never seen by training or calibration.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from filters.bitext.calibrate import BAD, GOOD
from filters.bitext.label_match import key_of, unique_labels

# The labelling format (below this module and label_match); re-exported, its names here since
# the sample was first written.
from filters.bitext.label_sheet import LABEL, Sheet, read_sheet, tsv_cell  # noqa: F401
from labse_common.stats import StageCounter

#: Columns of the labelling TSV, in order (the text columns last: they are the long ones).
TSV_COLUMNS = (
    "sample_id",
    "src_lang",
    "trg_lang",
    "margin",
    "stratum",
    "weight",
    LABEL,
    "src",
    "trg",
)


def half_of(text: str) -> int:
    """0 or 1, stable across runs and machines (not Python's salted ``hash``)."""
    return hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()[0] & 1


def split_halves(texts: Iterable[str]) -> np.ndarray:
    return np.fromiter((half_of(t) for t in texts), dtype=np.int8)


def _buckets(margin: np.ndarray, n: int) -> np.ndarray:
    if len(margin) == 0 or n <= 1:
        return np.zeros(len(margin), dtype=np.int64)
    edges = np.quantile(margin, np.linspace(0, 1, n + 1)[1:-1])
    return np.searchsorted(edges, margin, side="right")


def _allocate(sizes: np.ndarray, n: int) -> np.ndarray:
    """Largest-remainder proportional allocation of ``n`` over strata of ``sizes``."""
    total = int(sizes.sum())
    if total == 0:
        return np.zeros_like(sizes)
    n = min(n, total)
    exact = sizes * (n / total)
    take = np.floor(exact).astype(np.int64)
    rest = n - int(take.sum())
    order = np.argsort(-(exact - take), kind="stable")
    take[order[:rest]] += 1
    return np.minimum(take, sizes)


def draw_sample(
    table: pa.Table,
    n: int,
    margin_buckets: int = 4,
    pair_columns: Sequence[str] = ("src_lang", "trg_lang"),
    seed: int = 0,
) -> pa.Table:
    """``n`` rows of ``table`` (mined pairs), stratified by language pair and margin bucket.

    Adds ``sample_id`` (row index in ``table``), ``stratum`` and ``weight``."""
    if n <= 0:
        raise ValueError("the sample size must be positive")
    cols = [c for c in pair_columns if c in table.column_names]
    keys = (
        ["|".join(str(v) for v in row) for row in zip(*(table.column(c).to_pylist() for c in cols))]
        if cols
        else ["all"] * table.num_rows
    )
    margin = (
        np.asarray(table.column("margin").to_numpy(zero_copy_only=False), dtype=np.float64)
        if "margin" in table.column_names
        else np.zeros(table.num_rows)
    )
    keys_arr = np.asarray(keys, dtype=object)
    strata = np.empty(table.num_rows, dtype=object)
    for key in set(keys):
        m = np.flatnonzero(keys_arr == key)
        b = _buckets(margin[m], margin_buckets)
        for i, bi in zip(m, b):
            strata[i] = f"{key}|m{int(bi)}"
    names = sorted(set(strata.tolist()))
    sizes = np.array([(strata == s).sum() for s in names], dtype=np.int64)
    take = _allocate(sizes, n)
    rng = np.random.default_rng(seed)
    rows, stratum, weight = [], [], []
    for s, size, k in zip(names, sizes, take):
        if k == 0:
            continue
        members = np.flatnonzero(strata == s)
        pick = np.sort(rng.choice(members, size=int(k), replace=False))
        rows += pick.tolist()
        stratum += [s] * int(k)
        weight += [float(size) / float(k)] * int(k)
    order = np.argsort(rows, kind="stable")
    rows = np.asarray(rows, dtype=np.int64)[order]
    out = table.take(pa.array(rows))
    out = out.append_column("sample_id", pa.array(rows))
    out = out.append_column("stratum", pa.array(np.asarray(stratum, dtype=object)[order].tolist()))
    return out.append_column("weight", pa.array(np.asarray(weight)[order]))


def pair_of_stratum(stratum: str) -> str:
    """The language pair part of a stratum name (``de|en|m2`` -> ``de|en``)."""
    return stratum.rsplit("|", 1)[0]


def labelling_order(strata: Sequence[str], seed: int = 0) -> np.ndarray:
    """A permutation of the rows (given by their stratum names) in which every prefix is a
    stratified sample: round-robin over the language pairs (by name), each pair's turn
    taking the next stratum of its own round-robin over its margin strata; a stratum's rows in a
    random order fixed by ``seed``. A pair or stratum that runs out is skipped."""
    # Its own random stream: the draw with the same seed (draw_sample) is not disturbed.
    rng = np.random.default_rng([seed, 47])
    by_pair: dict[str, dict[str, list[int]]] = {}
    for i, s in enumerate(strata):
        by_pair.setdefault(pair_of_stratum(str(s)), {}).setdefault(str(s), []).append(i)
    queues = [_stratum_round_robin(by_pair[p], rng) for p in sorted(by_pair)]
    return np.asarray(_interleave(queues), dtype=np.int64)


def _stratum_round_robin(groups: dict[str, list[int]], rng: np.random.Generator) -> list[int]:
    """One language pair's rows: one of each stratum in turn (strata by name), each stratum's
    rows shuffled."""
    return _interleave([rng.permutation(groups[s]).tolist() for s in sorted(groups)])


def _interleave(queues: Sequence[Sequence[int]]) -> list[int]:
    """The first of each queue, then the second of each, ...; exhausted queues are skipped."""
    out: list[int] = []
    for k in range(max((len(q) for q in queues), default=0)):
        out += [q[k] for q in queues if k < len(q)]
    return out


def in_labelling_order(sample: pa.Table, seed: int = 0) -> pa.Table:
    """``sample`` (from :func:`draw_sample`) reordered by :func:`labelling_order`: the same rows,
    strata and weights, so everything that reads the sample as a set sees no change."""
    if "stratum" not in sample.column_names or sample.num_rows == 0:
        return sample
    order = labelling_order(sample.column("stratum").to_pylist(), seed)
    return sample.take(pa.array(order))


def auto_label(sample: pa.Table, planted: Iterable[tuple[str, str]]) -> pa.Table:
    """Label each sampled pair GOOD when (src, trg) is a planted pair, else BAD."""
    gold = set(planted)
    labels = [
        GOOD if (s, t) in gold else BAD
        for s, t in zip(sample.column("src").to_pylist(), sample.column("trg").to_pylist())
    ]
    if LABEL in sample.column_names:
        sample = sample.drop_columns([LABEL])
    return sample.append_column(LABEL, pa.array(labels))


def write_for_labelling(sample: pa.Table, path: str | os.PathLike) -> None:
    """A TSV with a header for a person to fill the ``label`` column (GOOD or BAD)."""
    cols = [c for c in TSV_COLUMNS if c in sample.column_names or c == LABEL]
    data = {
        c: (sample.column(c).to_pylist() if c in sample.column_names else [""] * sample.num_rows)
        for c in cols
    }
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write("\t".join(cols) + "\n")
        for i in range(sample.num_rows):
            f.write("\t".join(tsv_cell(data[c][i]) for c in cols) + "\n")


def read_labels(
    path: str | os.PathLike,
    counter: StageCounter | None = None,
    unit: str = "labelled_pairs",
    flag: str | None = "--labels",
) -> tuple[pa.Table, int]:
    """The labelled rows of a labelling TSV (label GOOD/BAD) and the count of blank ones. A pair
    labelled twice counts once and one labelled both ways is left out, by the rule the runner's
    labels stage uses (:func:`filters.bitext.label_match.unique_labels`); ``counter`` gets every
    row in, the used ones out, the others dropped ``unlabelled``, ``duplicate_label`` or
    ``conflicting_label``."""
    counter = StageCounter() if counter is None else counter
    sheet = read_sheet(path, flag)
    counter.add_in(unit, len(sheet.rows))
    labelled = [(n, row, lab) for n, (row, lab) in enumerate(zip(sheet.rows, sheet.labels)) if lab]
    blank = len(sheet.rows) - len(labelled)
    if blank:
        counter.add_dropped(unit, "unlabelled", blank)
    isrc, itrg = sheet.header.index("src"), sheet.header.index("trg")
    keep = unique_labels(
        [key_of(row[isrc], row[itrg]) for _, row, _ in labelled],
        [lab for _, _, lab in labelled],
        counter,
        unit,
        path,
        flag,
        rows=[sheet.lines[n] for n, _, _ in labelled],
    )
    counter.add_out(unit, len(keep))
    cols: dict[str, list] = {h: [] for h in sheet.header}
    for i in keep:
        _, row, lab = labelled[i]
        for h, v in zip(sheet.header, row):
            cols[h].append(lab if h == LABEL else v)
    table = pa.table(cols)
    for num in ("margin", "weight"):
        if num in table.column_names:
            table = table.set_column(
                table.column_names.index(num), num, pc.cast(table.column(num), pa.float64())
            )
    return table, blank


def labels_bool(table: pa.Table) -> np.ndarray:
    return np.asarray([v == GOOD for v in table.column(LABEL).to_pylist()], dtype=bool)
