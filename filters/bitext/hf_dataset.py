"""The final bitext as a Hugging Face ``datasets`` folder with a dataset card.

``datasets.load_dataset(folder)`` reads it as it is (Parquet shards under ``data/``, the card's
YAML header declares them as the ``train`` split), so an NMT user gets the pairs, their scores
and their provenance columns with one call, and the card says what they are: how many pairs per
language pair, the threshold each was kept at, the estimated GOOD share with its interval (from
the labelled sample of the mined pairs), and where the sentences came from.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.parquet as pq

DATA_DIR = "data"
CARD = "README.md"
ROWS_PER_SHARD = 500_000


@dataclass
class PairGroup:
    """What the card says of one language pair."""

    pairs: int
    threshold: float | None = None
    good_share: float | None = None  # estimated on the labelled sample of the mined pairs
    good_share_ci: Sequence[float] | None = None


@dataclass
class CardInfo:
    name: str = "labse-mined-bitext"
    description: str = (
        "Parallel sentences mined from monolingual web and Wikipedia text with a "
        "LaBSE encoder (FAISS kNN, margin scoring) and filtered by a calibrated "
        "pair score."
    )
    score_column: str = "combined_score"
    target: float | None = None
    labelled_pairs: int | None = None
    groups: Mapping[str, PairGroup] = field(default_factory=dict)
    extra: Mapping[str, str] = field(
        default_factory=dict
    )  # free "key: value" lines (config hash...)


def _size_category(n: int) -> str:
    for limit, name in (
        (1_000, "n<1K"),
        (10_000, "1K<n<10K"),
        (100_000, "10K<n<100K"),
        (1_000_000, "100K<n<1M"),
        (10_000_000, "1M<n<10M"),
    ):
        if n < limit:
            return name
    return "10M<n<100M"


def _fmt(v: float | None, pct: bool = True) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    return f"{v:.1%}" if pct else f"{v:.4g}"


def card_text(table: pa.Table, info: CardInfo) -> str:
    langs = sorted(
        {
            str(x)
            for c in ("src_lang", "trg_lang")
            if c in table.column_names
            for x in table.column(c).to_pylist()
            if x
        }
    )
    lines = ["---", f"pretty_name: {info.name}", "task_categories:", "- translation"]
    if langs:
        lines += ["language:", *(f"- {x}" for x in langs)]
    lines += [
        f"size_categories:\n- {_size_category(table.num_rows)}",
        "configs:",
        "- config_name: default",
        "  data_files:",
        "  - split: train",
        f"    path: {DATA_DIR}/*.parquet",
        "---",
        "",
        f"# {info.name}",
        "",
        info.description,
        "",
    ]
    lines += [
        f"{table.num_rows} pairs. Columns: {', '.join(f'`{c}`' for c in table.column_names)}.",
        "",
    ]
    if info.target is not None:
        lines += [
            f"Each pair was kept when its `{info.score_column}` reached the threshold chosen "
            f"so that {info.target:.0%} of the kept pairs of a labelled sample of the mined "
            f"pairs ({info.labelled_pairs or 'n/a'} labelled) are GOOD translations.",
            "",
        ]
    if info.groups:
        lines += [
            "| language pair | pairs | threshold | estimated GOOD share | interval |",
            "|---|---:|---:|---:|---|",
        ]
        for key, g in sorted(info.groups.items()):
            ci = (
                ("[" + ", ".join(_fmt(v) for v in g.good_share_ci) + "]")
                if g.good_share_ci
                else "n/a"
            )
            lines.append(
                f"| {key} | {g.pairs} | {_fmt(g.threshold, pct=False)} | "
                f"{_fmt(g.good_share)} | {ci} |"
            )
        lines.append("")
    sources = Counter()
    for side in ("src", "trg"):
        col = f"{side}_source"
        if col in table.column_names:
            sources.update(f"{side}: {v}" for v in table.column(col).to_pylist() if v)
    if sources:
        lines += [
            "## Sources",
            "",
            *(f"- {k}: {n} sentences" for k, n in sorted(sources.items())),
            "",
        ]
    prov = [c for c in table.column_names if c.endswith(("_url_or_title", "_doc_id", "_locator"))]
    if prov:
        lines += [
            "Every pair can be traced to its pages: "
            + ", ".join(f"`{c}`" for c in prov)
            + " name the document (URL or Wikipedia title, WARC record or page id) of each "
            "side.",
            "",
        ]
    if info.extra:
        lines += ["## Build", "", *(f"- {k}: {v}" for k, v in info.extra.items()), ""]
    return "\n".join(lines)


def write_hf_dataset(table: pa.Table, folder: str | os.PathLike, info: CardInfo) -> list[str]:
    """Write ``data/train-XXXXX-of-YYYYY.parquet`` shards and ``README.md`` into ``folder``
    (an existing, claimed temporary folder); returns the paths written."""
    os.makedirs(os.path.join(folder, DATA_DIR), exist_ok=True)
    n = max(1, math.ceil(table.num_rows / ROWS_PER_SHARD))
    paths = []
    for i in range(n):
        part = table.slice(i * ROWS_PER_SHARD, ROWS_PER_SHARD)
        p = os.path.join(folder, DATA_DIR, f"train-{i:05d}-of-{n:05d}.parquet")
        pq.write_table(part, p)
        paths.append(p)
    card = os.path.join(folder, CARD)
    with open(card, "w", encoding="utf-8") as f:
        f.write(card_text(table, info))
    return [*paths, card]
