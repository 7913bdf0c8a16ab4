"""The labelling sheet in memory: every row of a labelling TSV, and the one place that changes
its labels and saves them.

:class:`LabelSheet` reads a labelling TSV (as :func:`filters.bitext.sample.write_for_labelling`
writes it, possibly with extra columns such as the provenance of both sides) with every row,
labelled or not. Each label given is saved at once: the whole file is rewritten atomically
(:func:`filters.bitext.label_sheet.replace_text`: a temporary file beside it, then
``os.replace``; a symbolic link stays one and the file it points to is rewritten), keeping the
header, every column and the row order, so :func:`filters.bitext.sample.read_labels` reads it as
before and a spreadsheet still opens it. A lock serialises the requests.
:mod:`filters.bitext.label_page` serves it as a web page.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa

from filters.bitext.calibrate import BAD, GOOD
from filters.bitext.label_match import key_of
from filters.bitext.label_sheet import LABEL, read_sheet, replace_text, tsv_cell
from filters.bitext.label_view import LabelJudge, margin_text, source_view, strata_counts
from labse_common.errors import InputError
from labse_common.sections.combine import CombineConfig

#: Columns the page shows in their own place; every other column is shown as provenance (the
#: ``src_*``/``trg_*`` ones next to their side) or in the details line.
SHOWN = ("src", "trg", LABEL, "src_lang", "trg_lang", "margin")


class SheetChanged(Exception):
    """The file was changed on disk by something else since it was read: not overwritten."""


class LabelSheet:
    """Every row of a labelling TSV, and the one place that changes and saves its labels."""

    def __init__(
        self,
        path: str | os.PathLike,
        cfg: CombineConfig | None = None,
        pairs: pa.Table | None = None,
        earlier: dict[tuple[str, str], str] | None = None,
    ) -> None:
        """``cfg``: the ``combine:`` settings the run uses (what "enough" and the estimate are
        judged by; its ``label_guideline`` heads the page); ``pairs``: the mined pairs
        ``combine`` fits on, for the live estimate (None: no estimate); ``earlier``: the labels
        of ``combine.labels``, which the run adds to the person's."""
        self.path = Path(path)
        self.lock = threading.Lock()
        self.cfg = cfg if cfg is not None else CombineConfig()
        self.version = 0  # bumped by every change of a label: the estimate's cache key
        self.bom = ""
        self.header: list[str] = []
        self.rows: list[list[str]] = []
        self.labels: list[str] = []
        self.history: list[tuple[int, str]] = []
        self._load()
        self.label_col = self.header.index(LABEL)
        self._col = {h: i for i, h in reversed(list(enumerate(self.header)))}
        self.judge = LabelJudge(self.cfg, self._keys(), pairs, earlier)

    def use_pairs(
        self, pairs: pa.Table | None, earlier: dict[tuple[str, str], str] | None = None
    ) -> None:
        """Judge the labels against ``pairs`` (and ``earlier`` labels) from now on."""
        with self.lock:
            self.judge = LabelJudge(self.cfg, self._keys(), pairs, earlier)

    # --- reading -----------------------------------------------------------------------------

    def _load(self) -> None:
        path = self.path
        if not path.exists():
            if path.is_symlink():
                raise InputError(path, f"a link to {os.readlink(path)}, which does not exist")
            raise InputError(path, "no such file")
        if not path.is_file():
            raise InputError(path, "not a file")
        try:
            sheet = read_sheet(path)
        except PermissionError as e:
            raise InputError(path, "not readable (permission denied)") from e
        self.bom = "\ufeff" if sheet.bom else ""  # a spreadsheet's UTF-8 export: kept as it came
        header = sheet.header
        self.rows, self.labels = sheet.rows, sheet.labels
        if not self.rows:
            raise InputError(path, "no rows to label (only a header)")
        folder = path.resolve().parent
        if not os.access(folder, os.W_OK | os.X_OK):
            raise InputError(
                path,
                f"its folder {folder} is not writable: each label is saved "
                "by writing a new copy of the file there",
            )
        self.header = header
        self._stamp = self._stat()

    def _stat(self) -> tuple[int, int, int]:
        st = os.stat(self.path)
        return st.st_ino, st.st_size, st.st_mtime_ns

    def _get(self, row: list[str], column: str) -> str:
        i = self._col.get(column)
        return row[i] if i is not None else ""

    # --- what the page shows -----------------------------------------------------------------

    def _keys(self) -> list[tuple[str, str]]:
        return [key_of(self._get(r, "src"), self._get(r, "trg")) for r in self.rows]

    def label_rows(self) -> list[dict[str, str]]:
        """Every row as the readers of labels see it (label upper-cased, blank ones too)."""
        return [
            {**dict(zip(self.header, row)), LABEL: lab} for row, lab in zip(self.rows, self.labels)
        ]

    def pair_of(self, index: int) -> str:
        row = self.rows[index]
        src, trg = self._get(row, "src_lang"), self._get(row, "trg_lang")
        return f"{src}-{trg}" if (src or trg) else "all"

    def row_json(self, index: int) -> dict[str, Any]:
        row = self.rows[index]
        side: dict[str, dict[str, str]] = {"src": {}, "trg": {}, "other": {}}
        for h, v in zip(self.header, row):
            if h in SHOWN:
                continue
            key = h.split("_", 1)[0] if h.startswith(("src_", "trg_")) else "other"
            side[key][h] = v
        return {
            "index": index,
            "label": self.labels[index],
            "src": self._get(row, "src"),
            "trg": self._get(row, "trg"),
            "src_lang": self._get(row, "src_lang"),
            "trg_lang": self._get(row, "trg_lang"),
            "margin": self._get(row, "margin"),
            "margin_text": margin_text(self._get(row, "margin")),
            "pair": self.pair_of(index),
            "stratum": self._get(row, "stratum"),
            "src_provenance": side["src"],
            "trg_provenance": side["trg"],
            "src_source": source_view(side["src"], "src", self._get(row, "src_lang")),
            "trg_source": source_view(side["trg"], "trg", self._get(row, "trg_lang")),
            "other": side["other"],
        }

    def progress(self) -> dict[str, int]:
        done = sum(1 for lab in self.labels if lab)
        return {"labelled": done, "total": len(self.labels)}

    def pair_counts(self) -> list[dict[str, Any]]:
        """Per language pair (first-seen order): GOOD, BAD, unlabelled and total rows."""
        counts: dict[str, dict[str, Any]] = {}
        for i, lab in enumerate(self.labels):
            pair = self.pair_of(i)
            c = counts.setdefault(pair, {"pair": pair, GOOD: 0, BAD: 0, "unlabelled": 0})
            c[lab or "unlabelled"] += 1
        for c in counts.values():
            c["total"] = c[GOOD] + c[BAD] + c["unlabelled"]
        return list(counts.values())

    def strata_counts(self) -> list[dict[str, Any]]:
        """Per language pair and margin stratum (the ``stratum`` column): :func:`strata_counts`."""
        get = self._get
        return strata_counts(
            (self.pair_of(i), get(r, "stratum"), lab, get(r, "margin"))
            for i, (r, lab) in enumerate(zip(self.rows, self.labels))
        )

    def summary(self) -> dict[str, Any]:
        """What the page shows after every label: progress, counts per pair and per stratum,
        and whether the labels are enough to continue."""
        return {
            "progress": self.progress(),
            "pairs": self.pair_counts(),
            "strata": self.strata_counts(),
            "enough": self.judge.enough(self.label_rows(), self.pair_of, self.path),
            "version": self.version,
        }

    def estimate(self) -> dict[str, Any]:
        """The estimate ``combine`` would make on the labels as they are now (cached per
        version; fitted outside the sheet's lock, so labelling never waits for it)."""
        with self.lock:
            version, rows = self.version, self.label_rows()
        return {**self.judge.estimate(version, rows, self.path), "version": version}

    def state(self) -> dict[str, Any]:
        with self.lock:
            return {
                "file": str(self.path),
                "guideline": self.cfg.label_guideline,
                "has_pairs": self.judge.pairs is not None,
                "columns": list(self.header),
                "rows": [self.row_json(i) for i in range(len(self.rows))],
                "can_undo": bool(self.history),
                **self.summary(),
            }

    # --- changing it -------------------------------------------------------------------------

    def set_label(self, index: int, label: str) -> dict[str, Any]:
        """Set row ``index``'s label (``""`` clears it) and save; remembered for :meth:`undo`."""
        with self.lock:
            previous = self.labels[index]
            self._apply(index, label)
            self.history.append((index, previous))
            return {
                "index": index,
                "label": label,
                "previous": previous,
                "can_undo": True,
                **self.summary(),
            }

    def undo(self) -> dict[str, Any] | None:
        """Give the last labelled row back the label it had before; None when nothing to undo."""
        with self.lock:
            if not self.history:
                return None
            index, previous = self.history[-1]
            undone = self.labels[index]
            self._apply(index, previous)
            self.history.pop()
            return {
                "index": index,
                "label": previous,
                "undone": undone,
                "can_undo": bool(self.history),
                **self.summary(),
            }

    def _apply(self, index: int, label: str) -> None:
        """Under the lock: change one label and save; on failure nothing changes in memory."""
        row = self.rows[index]
        old_cell, old_label = row[self.label_col], self.labels[index]
        if old_label == label:
            return
        row[self.label_col], self.labels[index] = label, label
        try:
            self._save()
        except BaseException:
            row[self.label_col], self.labels[index] = old_cell, old_label
            raise
        self.version += 1

    def _save(self) -> None:
        """Rewrite the whole file atomically, as write_for_labelling writes it."""
        if self._stat() != self._stamp:
            raise SheetChanged(
                f"{self.path} was changed on disk by something else since this page read it; "
                "the label was not saved: stop python -m filters label and start it again "
                "to label the file as it is now"
            )
        text = self.bom + "".join(
            "\t".join(tsv_cell(v) for v in row) + "\n" for row in [self.header, *self.rows]
        )
        replace_text(self.path, text)  # through a link, onto the file it points to
        self._stamp = self._stat()


def summary_lines(sheet: LabelSheet) -> list[str]:
    """Labelled rows per language pair, for the log when the server stops."""
    p = sheet.progress()
    lines = [f"{sheet.path}: {p['labelled']} of {p['total']} pairs labelled"]
    for c in sheet.pair_counts():
        lines.append(f"  {c['pair']}: {c[GOOD]} GOOD, {c[BAD]} BAD, {c['unlabelled']} unlabelled")
    return lines
