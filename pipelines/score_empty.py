"""An empty language pair on the engine's ``cds_score`` (``pipelines.filter_pairs --same-as
cds-score --allow-empty``): what ``filters cds-score --allow-empty`` writes for a pair the rules
kept nothing of, an empty ``scored.parquet`` with the columns a non-empty one has and zero pairs
in and out, through Beam's filesystems (the run folder may be on object storage)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from filters.bitext.score_file import with_scores


def _open(path: str):
    return FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)


def _no_rows(path: str) -> bool:
    if not path.endswith(".parquet"):
        return False
    try:
        with _open(path) as f:
            return pq.read_metadata(f).num_rows == 0
    except (OSError, ValueError):  # unreadable: the job's own error says why
        return False


def no_rows(paths: list[str]) -> bool:
    """Whether every file is a Parquet file that opens and holds no row."""
    return bool(paths) and all(map(_no_rows, paths))


def write_empty_scored(model: str, output: str, path: str, cfg: dict, report: dict) -> None:
    """``output/scored.parquet`` with no row: the columns of ``path`` plus the scores of the
    CDS ``model`` (a local folder); ``report``'s counts get zero pairs in and out."""
    from filters.bitext.cds.score import CdsScorer

    scorer = CdsScorer.load(
        model, device=cfg["device"], batch_size=cfg["score_batch_size"], progress=False
    )
    with _open(path) as f:
        schema = pq.read_schema(f)
    empty = pa.RecordBatch.from_arrays([pa.array([], t.type) for t in schema], schema=schema)
    scored = with_scores(empty, scorer.score_all([], []))
    with FileSystems.create(f"{output}/scored.parquet") as f:  # no part: the assembly adds none
        pq.write_table(pa.Table.from_batches([scored]), f)
    report["counts"]["pairs"] = {"in": 0, "out": 0, "dropped": {}}
    report["devices"] = [str(scorer.device)]
