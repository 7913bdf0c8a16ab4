"""The lexicon file (``lexicon.parquet``): :func:`save` writes the dictionaries that
:mod:`mining.lexicon` fits, :func:`load` reads them back, and :func:`check_for_pairs` checks,
before any output is claimed, that a file covers the language pairs to mine.

One dictionary pair per language pair (column ``pair``; a file written before that, without it,
holds one table shared by every pair it was fitted on); the schema metadata records the pairs
fitted (``langs``, pair -> pairs fitted), the pairs composed (``pivots``, pair -> the pivot
language) and the pairs asked for that neither covers (``absent``). :func:`load` refuses a table
that is not a lexicon this module wrote (:func:`check_table`): a wrong probability would silently
change every score and so the mined pairs.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from labse_common.errors import InputError, UsageError
from labse_common.langs import normalize_lang, parse_pair
from mining.lexicon import DIRECTIONS, NULL, Lexicon, LexiconSet, _reverse, _Table

log = logging.getLogger(__name__)


def _table_rows(table: _Table, given: list[str], explained: list[str], min_prob: float):
    probs = table.probs.astype(np.float32)
    keep = (table.probs >= min_prob) & (probs > 0)  # an entry that rounds to 0 explains nothing
    keys = table.keys[keep]
    return (
        [given[i] for i in keys // table.n_trg],
        [explained[i] for i in keys % table.n_trg],
        probs[keep],
    )


def _columns(lexicon: Lexicon, min_prob: float, pair: str | None) -> dict[str, list]:
    src_words = _words(lexicon.src_vocab)
    trg_words = _words(lexicon.trg_vocab)
    cols: dict[str, list] = {"direction": [], "given": [], "explained": [], "prob": []}
    for name, table, given, explained in (
        ("fwd", lexicon.fwd, src_words, trg_words),
        ("bwd", lexicon.bwd, trg_words, src_words),
    ):
        g, e, p = _table_rows(table, given, explained, min_prob)
        if not g:
            which = f"{pair} " if pair else ""
            raise ValueError(
                f"no {which}{name} entry has a probability >= {min_prob:g}: lower lexicon.min_prob"
            )
        cols["direction"] += [name] * len(g)
        cols["given"] += g
        cols["explained"] += e
        cols["prob"] += p.tolist()
    if pair is not None:
        cols["pair"] = [pair] * len(cols["prob"])
    return cols


def save(lexicon: Lexicon | LexiconSet, path: str | Path, min_prob: float = 1e-4) -> int:
    """Write ``path`` (Parquet: direction, given, explained, prob, and with a
    :class:`LexiconSet` pair; schema metadata ``pairs``, ``langs``, ``pivots``, ``absent``),
    dropping entries below ``min_prob``; returns the entries written. ValueError when
    ``min_prob`` leaves a direction empty (:func:`load` would refuse it)."""
    if isinstance(lexicon, Lexicon):
        cols = _columns(lexicon, min_prob, None)
        langs, pivots, absent = lexicon.langs, {}, []
    else:
        parts = [_columns(lex, min_prob, key) for key, lex in lexicon.tables.items()]
        cols = {name: [v for part in parts for v in part[name]] for name in parts[0]}
        langs, pivots, absent = lexicon.langs, lexicon.pivots, lexicon.absent
    meta = {"pairs": str(lexicon.pairs)}
    if langs:
        meta["langs"] = json.dumps(dict(sorted(langs.items())))
    if pivots:
        meta["pivots"] = json.dumps(dict(sorted(pivots.items())))
    if absent:
        meta["absent"] = json.dumps(sorted(absent))
    arrays = {
        "direction": pa.array(cols["direction"], pa.string()),
        "given": pa.array(cols["given"], pa.string()),
        "explained": pa.array(cols["explained"], pa.string()),
        "prob": pa.array(cols["prob"], pa.float32()),
    }
    if "pair" in cols:
        arrays["pair"] = pa.array(cols["pair"], pa.string())
    t = pa.table(arrays).replace_schema_metadata(meta)
    pq.write_table(t, str(path))
    return t.num_rows


def _words(vocab: dict[str, int]) -> list[str]:
    words = [""] * len(vocab)
    for w, i in vocab.items():
        words[i] = w
    return words


REQUIRED = ("direction", "given", "explained", "prob")


def _vocab_list(*columns: pa.ChunkedArray) -> pa.Array:
    import pyarrow.compute as pc

    chunks = [chunk.cast(pa.string()) for c in columns for chunk in c.chunks]
    words = pa.chunked_array(chunks, pa.string()).unique()  # one Array, first-seen order
    return pa.concat_arrays(
        [pa.array([NULL], pa.string()), words.filter(pc.not_equal(words, NULL))]
    )


def _table_of(part: pa.Table, given: pa.Array, explained: pa.Array) -> _Table:
    import pyarrow.compute as pc

    g = pc.index_in(part.column("given"), value_set=given).to_numpy(zero_copy_only=False)
    e = pc.index_in(part.column("explained"), value_set=explained).to_numpy(zero_copy_only=False)
    keys = g.astype(np.int64) * len(explained) + e.astype(np.int64)
    order = np.argsort(keys)
    probs = part.column("prob").to_numpy().astype(np.float64)
    return _Table(keys[order], probs[order], len(explained))


def _is_text(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def check_table(t: pa.Table) -> None:
    """ValueError, one line saying what is wrong, unless ``t`` is a lexicon :func:`save` could
    have written: the four columns with their types, at least one entry each way, only known
    directions, no null word, every probability finite and in (0, 1]."""
    import pyarrow.compute as pc

    missing = [c for c in REQUIRED if c not in t.column_names]
    if missing:
        raise ValueError(f"not a lexicon (no column {', '.join(missing)})")
    for name in REQUIRED[:3]:
        if not _is_text(t.schema.field(name).type):
            raise ValueError(f"column {name} is {t.schema.field(name).type}, not text")
    if "pair" in t.column_names and not _is_text(t.schema.field("pair").type):
        raise ValueError(f"column pair is {t.schema.field('pair').type}, not text")
    ptype = t.schema.field("prob").type
    if not (pa.types.is_floating(ptype) or pa.types.is_integer(ptype)):
        raise ValueError(f"column prob is {ptype}, not a number (probabilities in (0, 1])")
    if t.num_rows == 0:
        raise ValueError("empty: no dictionary entry")
    problems = []
    counts = {
        d.get("values"): d.get("counts") for d in pc.value_counts(t.column("direction")).to_pylist()
    }
    unknown = {d: n for d, n in counts.items() if d not in DIRECTIONS}
    if unknown:
        shown = ", ".join(
            f"{'null' if d is None else repr(d)} ({_entries(n)})"
            for d, n in list(unknown.items())[:3]
        )
        problems.append(f"unknown direction {shown}; known: {', '.join(DIRECTIONS)}")
    problems += [f"no {d} entry" for d in DIRECTIONS if d not in counts]
    for name in ("given", "explained", "pair"):
        if name not in t.column_names:
            continue
        if t.column(name).null_count:
            problems.append(
                f"{_entries(t.column(name).null_count)} with a null word in column {name}"
            )
    problems += _prob_problems(t.column("prob"))
    if problems:
        raise ValueError("; ".join(problems))


def _prob_problems(col: pa.ChunkedArray) -> list[str]:
    if col.null_count:
        return [f"{_entries(col.null_count)} without a probability (null)"]
    p = col.to_numpy().astype(np.float64)
    bad_f = ~np.isfinite(p)
    if bad_f.any():
        return [f"{_entries(int(bad_f.sum()))} with a probability that is not finite (NaN or inf)"]
    out = (p <= 0) | (p > 1)
    if out.any():
        return [
            f"{_entries(int(out.sum()))} with a probability outside (0, 1] (e.g. {p[out][0]:g})"
        ]
    return []


def _entries(n: int) -> str:
    return f"{n} entry" if n == 1 else f"{n} entries"


def recorded_langs(meta: dict[bytes, bytes] | None) -> dict[str, int]:
    """The language pairs of the schema metadata (``{"de-en": pairs fitted}``); {} when the
    file records none. ValueError when the record is not that."""
    raw = (meta or {}).get(b"langs")
    if raw is None:
        return {}
    try:
        langs = json.loads(raw)
        if not isinstance(langs, dict) or not langs:
            raise ValueError("not a non-empty mapping")
        return {"-".join(parse_pair(k)): int(v) for k, v in langs.items()}
    except (ValueError, TypeError) as e:
        raise ValueError(f"schema metadata langs is not a list of language pairs ({e})") from None


def recorded_pivots(meta: dict[bytes, bytes] | None) -> tuple[dict[str, str], list[str]]:
    """The pivoted pairs (pair -> pivot language) and the absent pairs the schema metadata
    records; ValueError when the record is not that."""
    meta = meta or {}
    try:
        pivots = json.loads(meta.get(b"pivots", b"{}"))
        absent = json.loads(meta.get(b"absent", b"[]"))
        if not isinstance(pivots, dict) or not isinstance(absent, list):
            raise ValueError("not a mapping and a list")
        return (
            {"-".join(parse_pair(k)): normalize_lang(v) for k, v in pivots.items()},
            ["-".join(parse_pair(k)) for k in absent],
        )
    except (ValueError, TypeError, AttributeError) as e:
        raise ValueError(
            f"schema metadata pivots/absent is not a list of language pairs ({e})"
        ) from None


def _load_part(t: pa.Table, pairs: int, langs: dict[str, int]) -> Lexicon:
    import pyarrow.compute as pc

    fwd = t.filter(pc.equal(t.column("direction"), "fwd"))
    bwd = t.filter(pc.equal(t.column("direction"), "bwd"))
    # Each side's words, NULL first (id 0) as when fitted; ids are positions in these lists.
    src_words = _vocab_list(fwd.column("given"), bwd.column("explained"))
    trg_words = _vocab_list(fwd.column("explained"), bwd.column("given"))
    tables = {
        name: _table_of(part, given, explained)
        for name, part, given, explained in (
            ("fwd", fwd, src_words, trg_words),
            ("bwd", bwd, trg_words, src_words),
        )
    }
    src_vocab = {w: i for i, w in enumerate(src_words.to_pylist())}
    trg_vocab = {w: i for i, w in enumerate(trg_words.to_pylist())}
    return Lexicon(src_vocab, trg_vocab, tables["fwd"], tables["bwd"], pairs, langs)


def load(path: str | Path) -> LexiconSet:
    """A lexicon :func:`save` wrote; ValueError saying what is wrong otherwise
    (:func:`check_table`)."""
    import pyarrow.compute as pc

    t = pq.read_table(str(path))
    check_table(t)
    meta = t.schema.metadata or {}
    langs = recorded_langs(meta)
    pivots, absent = recorded_pivots(meta)
    try:
        pairs = int(meta.get(b"pairs", b"0"))
    except ValueError:
        raise ValueError(f"schema metadata pairs is not a number ({meta[b'pairs']!r})") from None
    if "pair" not in t.column_names:  # written before pairs were fitted apart: one shared table
        return LexiconSet({"": _load_part(t, pairs, langs)}, langs, pivots, absent)
    tables = {}
    for key in t.column("pair").unique().to_pylist():
        part = t.filter(pc.equal(t.column("pair"), key))
        fitted = {key: langs[key]} if key in langs else {}
        tables[key] = _load_part(part.drop_columns(["pair"]), langs.get(key, 0), fitted)
    return LexiconSet(tables, langs, pivots, absent)


def check_for_pairs(
    path: str | os.PathLike,
    pairs: Sequence[tuple[str, str]],
    flag: str = "--lexicon",
    absent_ok: bool = False,
) -> list[str]:
    """Before any output is claimed: ``path`` is a valid lexicon with dictionaries for every
    language pair of ``pairs``, fitted or pivoted, in either order (codes as given; ``("",
    "")``: the languages were not named). A lexicon that records no languages (fitted before
    they were recorded, or on pairs without languages) is used with a warning: it may be right,
    and only a refit can tell. InputError for a pair it lacks, unless ``absent_ok``: then those
    pairs are returned (and warned about), to be mined without the lexicon."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise UsageError(f"{flag} {path}: not found (a lexicon.parquet of filters lexicon)")
    try:
        t = pq.read_table(path)
        check_table(t)
        langs = recorded_langs(t.schema.metadata)
        pivots, _ = recorded_pivots(t.schema.metadata)
    except (ValueError, OSError) as e:
        raise InputError(path, str(e), flag) from e
    if not langs:
        log.warning(
            "%s %s records no languages (fitted before they were recorded, or on pairs without "
            "them): not checked against the mined pairs; refit it with filters lexicon to have "
            "them checked",
            flag,
            path,
        )
        return []
    covered = list(dict.fromkeys([*langs, *pivots]))
    keys = [_pair_key(s, t, flag, path) for s, t in pairs]
    wrong = [p for p in keys if p not in covered and _reverse(p) not in covered]
    if wrong and absent_ok:
        log.warning(
            "%s %s: no dictionary for %s (fitted on %s): mined without the lexicon (lex_fwd and "
            "lex_bwd empty); training pairs of them, or of each with a shared language, add one",
            flag,
            path,
            ", ".join(wrong),
            ", ".join(covered),
        )
    elif wrong:
        raise InputError(
            path,
            f"fitted on {', '.join(covered)}, not on {', '.join(wrong)} (the languages mined, "
            "either order): fit a lexicon on pairs of these languages (filters lexicon "
            "--for-pairs composes one through a shared language), or mine without it",
            flag,
        )
    return wrong


def _pair_key(src: str, trg: str, flag: str, path: str) -> str:
    if not src or not trg:
        raise UsageError(
            f"{flag} {path} records the languages it was fitted on: give --src-lang and "
            "--trg-lang (the languages mined) so they can be checked"
        )
    try:
        return f"{normalize_lang(src)}-{normalize_lang(trg)}"
    except ValueError as e:
        raise UsageError(f"--src-lang/--trg-lang: {e}") from None
