"""From the sources a user configured to concrete files: pair files and monolingual text files.

Plain Python (no Beam unless a path is remote), for the stage runner and the commands it calls.

Pair sources
------------
A pair source is a glob with the placeholder ``{src}-{trg}`` where a file name (or folder name)
gives the two languages, e.g. ``parallel/{src}-{trg}.tsv``, ``data/*/{src}-{trg}.parquet``, or
Moses plain-text files ``corpus/train.{src}-{trg}.{lang}`` (``{lang}`` is the language of each of
the two files: ``train.de-fr.de`` and ``train.de-fr.fr``). Globs follow :mod:`glob`: ``*`` and
``?`` within one path component, ``[...]``, ``**`` for any number of folders. Codes are any
spelling :func:`labse_common.langs.normalize_lang` knows (``deu-fra`` gives ``de``, ``fr``); a
code is letters, digits and ``_`` (no ``-``, which separates the pair, and no ``.``).

The format is the file's extension: ``.tsv``, ``.tsv.gz``, ``.txt``, ``.txt.gz`` (tab-separated
``src<TAB>trg``, more columns ignored), ``.parquet`` (columns ``src`` and ``trg``); a pattern
with ``{lang}`` is Moses. :func:`expand_pairs` refuses what would silently give less data than
the user meant: a pattern without ``{src}-{trg}``, a list of patterns none of which matches a file
(one that matches nothing beside others that match is logged and skipped: a folder holds TSV or
Moses files, and a list names both), an unknown extension (UsageError); a file whose name gives no language or the same language twice, a file
the pattern's ``*`` matched but whose name does not fit the placeholders, a Moses file without
its partner (InputError naming the file). In a Moses folder, files whose ``{lang}`` part is
neither language of the pair (OPUS's ``.xml``/``.ids``, a third language) are not sides of that
pair and are skipped (logged).

Remote patterns (``s3://``, ``gs://``, any scheme Beam serves) are matched with Beam's
``FileSystems.match`` (:func:`labse_common.filesystems.match`, where ``*`` does not cross ``/``
and ``**`` does). Every pair file is read by :func:`labse_common.pair_files.read_pairs_file`.

Text sources
------------
:func:`expand_texts`: the same globs, with an optional ``{lang}`` giving each file's language;
without it the language is unknown (None) and the caller detects it per line
(:func:`filters.langid.detect_lines`: language identification is the filters' own, above this
package).
"""

from __future__ import annotations

import glob
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

from labse_common import filesystems
from labse_common.errors import InputError, UsageError
from labse_common.filesystems import is_remote
from labse_common.langs import normalize_lang
from labse_common.pair_files import PairFile

log = logging.getLogger(__name__)

PAIR_PLACEHOLDER = "{src}-{trg}"
PLACEHOLDERS = ("src", "trg", "lang")
TSV_SUFFIXES = (".tsv", ".tsv.gz", ".txt", ".txt.gz")
PARQUET_SUFFIXES = (".parquet",)
# What a placeholder matches inside a name: a code with its script or region after '_'.
_CODE = r"[^/\\.\-]+"
_TOKEN = re.compile(r"\{(\w*)\}|\*\*/?|\*|\?|\[!?\]?[^\]]*\]|.", re.DOTALL)


@dataclass(frozen=True)
class TextFile:
    """One monolingual text file; ``lang`` is None when its name does not say."""

    path: str
    lang: str | None


# --- patterns ----------------------------------------------------------------------------------


def _norm(path: str) -> str:
    """A local path without ``..`` and doubled separators (the same file found twice is one)."""
    return path if is_remote(path) else os.path.normpath(path)


def _where(flag: str | None, pattern: str) -> str:
    return f"{flag} {pattern}" if flag else pattern


@dataclass(frozen=True)
class _Pattern:
    text: str  # as the user wrote it
    glob: str  # placeholders as '*', base prepended
    regex: re.Pattern[str]  # named groups <name>_<i> per placeholder occurrence
    names: tuple[str, ...]  # the placeholders it has


def _compile(pattern: str, base: Path | str | None, flag: str | None) -> _Pattern:
    """The glob and the regex of ``pattern`` (relative: under ``base``, else the working
    folder)."""
    text = os.path.expanduser(pattern.strip())
    if not text:
        raise UsageError(f"{_where(flag, repr(pattern))}: empty pattern")
    prefix = ""  # the folder of a relative pattern, taken literally
    if not (is_remote(text) or os.path.isabs(text)):
        root = str(base) if base is not None else os.getcwd()
        if is_remote(root):
            prefix = root.rstrip("/") + "/"
        else:
            prefix = os.path.join(os.path.abspath(os.path.expanduser(root)), "")
    globs = [prefix if is_remote(prefix) else glob.escape(prefix)]
    regex, names, count = [re.escape(prefix)], [], {}
    for m in _TOKEN.finditer(text):
        tok = m.group(0)
        if m.group(1) is not None or tok == "{}":
            name = m.group(1)
            if name not in PLACEHOLDERS:
                raise UsageError(
                    f"{_where(flag, pattern)}: unknown placeholder {tok} (known: "
                    + ", ".join(f"{{{p}}}" for p in PLACEHOLDERS)
                    + ")"
                )
            i = count[name] = count.get(name, -1) + 1
            globs.append("*")
            regex.append(f"(?P<{name}_{i}>{_CODE})")
            names.append(name)
        elif tok.startswith("**"):
            globs.append(tok)
            regex.append("(?:.*/)?" if tok.endswith("/") else ".*")
        elif tok == "*":
            globs.append(tok)
            regex.append("[^/]*")
        elif tok == "?":
            globs.append(tok)
            regex.append("[^/]")
        elif tok.startswith("[") and len(tok) > 2:
            globs.append(tok)
            body = tok[1:-1]
            neg = body.startswith("!")
            body = (body[1:] if neg else body).replace("\\", "\\\\")
            body = "\\" + body if body.startswith("^") else body  # '^' is literal in a glob
            regex.append("[" + ("^" if neg else "") + body + "]")
        else:
            globs.append(tok)
            regex.append(re.escape(tok))
    return _Pattern(
        pattern, "".join(globs), re.compile("".join(regex)), tuple(dict.fromkeys(names))
    )


def _match(pat: _Pattern, flag: str | None) -> list[str]:
    """The files the pattern's glob matches (folders left out)."""
    if not is_remote(pat.glob):
        return sorted(p for p in glob.glob(pat.glob, recursive=True) if os.path.isfile(p))
    try:
        from apache_beam.io.filesystem import BeamIOError
    except ImportError:
        raise UsageError(
            f"{_where(flag, pat.text)}: a remote pattern needs Apache Beam "
            "(pip install 'apache-beam[aws]' or '[gcp]')"
        ) from None
    try:
        return sorted(filesystems.match(pat.glob))
    except BeamIOError as e:
        raise UsageError(f"{_where(flag, pat.text)}: cannot list the files ({e})") from None


def _codes(pat: _Pattern, path: str, flag: str | None) -> tuple[dict[str, str], re.Match[str]]:
    """The raw code of each placeholder in ``path``; every occurrence of one must agree."""
    m = pat.regex.fullmatch(path)
    if m is None:
        raise InputError(
            path,
            f"matches {pat.text} but its name does not fit the placeholders "
            "(a language code is letters, digits and '_')",
            flag,
        )
    raw: dict[str, str] = {}
    for key, value in m.groupdict().items():
        name = key.rsplit("_", 1)[0]
        if raw.setdefault(name, value) != value:
            raise InputError(
                path,
                f"{{{name}}} is {raw[name]!r} in one place and {value!r} in "
                f"another (pattern {pat.text})",
                flag,
            )
    return raw, m


def _lang(code: str, path: str, pat: _Pattern, flag: str | None) -> str:
    try:
        return normalize_lang(code)
    except ValueError as e:
        raise InputError(
            path, f"{e} (the name gives it for a placeholder of {pat.text})", flag
        ) from None


def _format_of(name: str) -> str | None:
    low = name.lower()
    if low.endswith(TSV_SUFFIXES):
        return "tsv"
    if low.endswith(PARQUET_SUFFIXES):
        return "parquet"
    return None


def _unknown_format(where: str, what: str) -> UsageError:
    return UsageError(
        f"{where}: {what}: unknown pair file format (known: "
        f"{', '.join(TSV_SUFFIXES + PARQUET_SUFFIXES)}, or Moses files named "
        "with {lang})"
    )


# --- globs of one source ------------------------------------------------------------------------
# A source is often listed as several globs, one per shape a download may take (WET or WARC files,
# TSV or Moses pairs); a folder holds one of them. A glob that matches nothing is therefore only
# logged while another glob of the same source matches, and an error when none does: a typo must
# not give an empty corpus, and a WET-only folder must not stop on the WARC glob.


def _check_empty(empty: list[tuple[str, str]], given: int, flag: str | None) -> None:
    """UsageError naming every glob when none of the ``given`` matched; else a WARNING for each
    of ``empty`` (pattern, why)."""
    if empty and len(empty) == given:
        if given == 1:
            raise UsageError(f"{_where(flag, empty[0][0])}: {empty[0][1]}")
        raise UsageError(
            f"{flag or 'sources'}: matches no file with any of its {given} patterns: "
            + "; ".join(f"{p} {why}" for p, why in empty)
        )
    for pattern, why in empty:
        log.warning(
            "%s: %s; skipped (another glob of the list matches)", _where(flag, pattern), why
        )


def _local_files(pattern: str) -> bool:
    """Whether a local glob matches at least one file (folders do not count)."""
    return any(os.path.isfile(p) for p in glob.iglob(pattern, recursive=True))


def matching_globs(sources: dict[str, list[str]]) -> dict[str, list[str]]:
    """The globs of one source that match a file, by name (``sources.commoncrawl``,
    ``sources.wikipedia``: together the text to mine). Remote globs are kept (their job lists
    them). A local glob that matches nothing is a WARNING while another glob matches; when none
    does, a UsageError naming them all. Absolute or working-folder-relative globs."""
    given = [(name, p) for name, pats in sources.items() for p in pats]
    live = {
        name: [p for p in pats if is_remote(p) or _local_files(p)] for name, pats in sources.items()
    }
    if given and not any(live.values()):
        names = " and ".join(n for n, pats in sources.items() if pats)
        raise UsageError(
            f"{names}: the text to mine matches no file (globs: "
            f"{', '.join(p for _, p in given)}); give --data the folder of your downloads, or "
            "fix the globs"
        )
    for name, pattern in given:
        if pattern not in live[name]:
            log.warning(
                "%s: %s matches no file; skipped (another glob of the text to mine matches)",
                name,
                pattern,
            )
    return live


# --- pairs -------------------------------------------------------------------------------------


def expand_pairs(
    patterns: list[str], base: Path | str | None = None, flag: str | None = None
) -> list[PairFile]:
    """The pair files of ``patterns`` (see the module docstring), sorted by languages and paths,
    each file once. ``base``: the folder relative patterns are under (default: the working
    folder); local results are absolute paths. ``flag`` names the option in error messages."""
    if isinstance(patterns, str):
        patterns = [patterns]
    if not patterns:
        raise UsageError(f"{flag or 'pair sources'}: no pattern given")
    found: list[PairFile] = []
    empty: list[tuple[str, str]] = []  # (pattern, why) of those that gave no file
    for pattern in patterns:
        got, why = _expand_pair_pattern(pattern, base, flag)
        found.extend(got)
        if not got:
            empty.append((pattern, why))
    _check_empty(empty, len(patterns), flag)
    seen: set[tuple[str, ...]] = set()
    out = []
    for pf in sorted(found, key=lambda p: (p.src_lang, p.trg_lang, p.paths, p.fmt)):
        if pf.paths not in seen:
            seen.add(pf.paths)
            out.append(pf)
    return out


def _expand_pair_pattern(pattern: str, base, flag: str | None) -> tuple[list[PairFile], str]:
    """The pattern's pair files, and when there are none, what it looked for."""
    where = _where(flag, pattern)
    if PAIR_PLACEHOLDER not in pattern:
        raise UsageError(
            f"{where}: a pair pattern needs the placeholder {PAIR_PLACEHOLDER} where "
            "the file names give the two languages, e.g. parallel/{src}-{trg}.tsv "
            "or corpus/train.{src}-{trg}.{lang} (Moses)"
        )
    pat = _compile(pattern, base, flag)
    moses = "lang" in pat.names
    tail = re.split(r"[*?\]}]", pattern.rsplit("/", 1)[-1])[-1]
    if not moses and _format_of(tail) is None and "." in tail:
        raise _unknown_format(where, f"extension {tail[tail.rindex('.') :]!r}")
    paths = _match(pat, flag)
    out = _moses_pairs(pat, paths, flag) if moses else _single_pairs(pat, paths, flag, where)
    detail = " that make Moses pairs" if moses and paths else ""
    return out, f"matches no file{detail} (looked for {pat.glob})"


def _pair_langs(pat: _Pattern, path: str, raw: dict[str, str], flag) -> tuple[str, str]:
    src, trg = _lang(raw["src"], path, pat, flag), _lang(raw["trg"], path, pat, flag)
    if src == trg:
        raise InputError(
            path,
            f"the name gives the same language on both sides ({raw['src']}-"
            f"{raw['trg']} -> {src}), not a pair (pattern {pat.text})",
            flag,
        )
    return src, trg


def _single_pairs(pat: _Pattern, paths: list[str], flag, where: str) -> list[PairFile]:
    out = []
    for path in paths:
        fmt = _format_of(path)
        if fmt is None:
            raise _unknown_format(where, path)
        raw, _ = _codes(pat, path, flag)
        src, trg = _pair_langs(pat, path, raw, flag)
        out.append(PairFile(src, trg, fmt, (_norm(path),), pat.text))
    return out


def _moses_pairs(pat: _Pattern, paths: list[str], flag) -> list[PairFile]:
    """Files grouped by their path with ``{lang}`` blanked out; each group is one pair, one
    file per side."""
    groups: dict[str, dict[str, list[str]]] = {}
    info: dict[str, tuple[str, str, dict[str, str]]] = {}
    for path in paths:
        raw, m = _codes(pat, path, flag)
        src, trg = _pair_langs(pat, path, raw, flag)
        try:
            lang = normalize_lang(raw["lang"])
        except ValueError:
            lang = None
        side = "src" if lang == src else "trg" if lang == trg else None
        if side is None:  # OPUS's .xml/.ids (quietly), a third language (with a warning)
            log.log(
                logging.DEBUG if lang is None else logging.WARNING,
                "%s: not a side of the %s-%s pair (%s is neither language); skipped",
                path,
                src,
                trg,
                raw["lang"],
            )
            continue
        key = _blank_lang(path, m)
        groups.setdefault(key, {"src": [], "trg": []})[side].append(path)
        info[key] = (src, trg, raw)
    out = []
    for key, sides in groups.items():
        src, trg, raw = info[key]
        for side, other in (("src", "trg"), ("trg", "src")):
            if len(sides[side]) > 1:
                raise InputError(
                    sides[side][0],
                    f"two files for the {side} side of one pair: {', '.join(sides[side])}",
                    flag,
                )
            if not sides[side]:
                present = sides[other][0]
                missing = key.replace("\0", raw[side])
                raise InputError(
                    present,
                    f"Moses file without its partner {missing} (the "
                    f"{raw[side]} side of {raw['src']}-{raw['trg']})",
                    flag,
                )
        both = (_norm(sides["src"][0]), _norm(sides["trg"][0]))
        out.append(PairFile(src, trg, "moses", both, pat.text))
    return out


def _blank_lang(path: str, m: re.Match[str]) -> str:
    spans = sorted(m.span(k) for k in m.groupdict() if k.rsplit("_", 1)[0] == "lang")
    for start, end in reversed(spans):
        path = path[:start] + "\0" + path[end:]
    return path


# --- texts -------------------------------------------------------------------------------------


def expand_texts(
    patterns: list[str], base: Path | str | None = None, flag: str | None = None
) -> list[TextFile]:
    """The text files of ``patterns``, sorted by path, each once; ``{lang}`` in a pattern gives
    each file's language (normalized), without it ``lang`` is None. A pattern matching nothing
    is a UsageError; a file whose ``{lang}`` is not a language, an InputError naming it."""
    if isinstance(patterns, str):
        patterns = [patterns]
    if not patterns:
        raise UsageError(f"{flag or 'text sources'}: no pattern given")
    files: dict[str, TextFile] = {}
    empty: list[tuple[str, str]] = []
    for pattern in patterns:
        where = _where(flag, pattern)
        pat = _compile(pattern, base, flag)
        if set(pat.names) - {"lang"}:
            raise UsageError(
                f"{where}: a text pattern takes only {{lang}}, not "
                f"{{{sorted(set(pat.names) - {'lang'})[0]}}}"
            )
        paths = _match(pat, flag)
        if not paths:
            empty.append((pattern, f"matches no file (looked for {pat.glob})"))
        for path in paths:
            lang = None
            if "lang" in pat.names:
                raw, _ = _codes(pat, path, flag)
                lang = _lang(raw["lang"], path, pat, flag)
            files.setdefault(_norm(path), TextFile(_norm(path), lang))
    _check_empty(empty, len(patterns), flag)
    return [files[p] for p in sorted(files)]
