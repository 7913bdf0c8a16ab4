"""Every source and setting the plan depends on, checked before anything runs (and with
--dry-run): one line and exit status 2, not a stage failing minutes later."""

from __future__ import annotations

from pathlib import Path

from labse_common.config import ConfigError
from labse_common.errors import InputError
from labse_common.filesystems import is_remote
from labse_common.remote import check_paths, remote_paths
from labse_common.remote_cache import local_file, require_encoder_folder
from pipelines.run.corpus_stages import has_source, source_patterns
from pipelines.run.declare import Context


def _require_nonempty(path: Path, what: str) -> None:
    if not path.is_file() or path.stat().st_size == 0:
        raise InputError(path.parent, f"{what}: no {path.name} (or it is empty)", "--data")


def _line_count(path: Path) -> int:
    with open(path, "rb") as f:
        return sum(1 for _ in f)


def validate_demo(data: Path, demo: dict) -> None:
    """--data in the demo's layout, checked before anything runs (and with --dry-run): one
    InputError naming the file, instead of a stage failing minutes later."""
    if not data.is_dir():
        raise InputError(
            data, "not a folder (the demo expects tatoeba/, wikipedia/, commoncrawl/)", "--data"
        )
    tatoeba = data / "tatoeba"
    if not tatoeba.is_dir():
        raise InputError(
            data,
            "no tatoeba/ folder inside (the demo's layout: tatoeba/, wikipedia/, commoncrawl/)",
            "--data",
        )
    from labse_common.langs import TATOEBA_TO_LID

    for key in ("langs", "train_languages"):
        bad = [c for c in demo[key] or [] if c not in TATOEBA_TO_LID or c == "eng"]
        if bad:
            raise ConfigError(
                f"sources.demo.{key}: unknown Tatoeba code(s) {', '.join(bad)} "
                f"(known: {', '.join(sorted(set(TATOEBA_TO_LID) - {'eng'}))})"
            )
    for code in sorted({*demo["langs"], *(demo["train_languages"] or [])}):
        for side in (code, "eng"):
            _require_nonempty(tatoeba / f"train.{code}-eng.{side}", f"training pairs of {code}")
    for code in demo["langs"]:
        for split in ("train", "dev"):
            a, b = tatoeba / f"{split}.{code}-eng.{code}", tatoeba / f"{split}.{code}-eng.eng"
            for f in (a, b):
                _require_nonempty(f, f"{split} pairs of {code} (sources.demo.langs)")
            na, nb = _line_count(a), _line_count(b)
            if na != nb:  # the alignment would be shifted from the first missing line on
                raise InputError(a, f"{na} lines vs {nb} in {b.name}", "--data")


def validate_synthetic(demo: dict) -> None:
    from pipelines.synthetic import LANGS

    for key in ("langs", "train_languages"):
        bad = [c for c in demo[key] or [] if c not in LANGS]
        if bad:
            raise ConfigError(
                f"sources.demo.{key}: {', '.join(bad)} not in the synthetic sample "
                f"({', '.join(c for c in LANGS if c != 'eng')}); give --data for other languages"
            )


def validate_sources(ctx: Context) -> None:
    """Every source and setting the plan depends on, before anything runs (and with --dry-run):
    a glob that matches nothing, a language the LID model does not know, a checkpoint that is not
    one, a run with nothing to mine or nothing to train on is one line and exit status 2."""
    from labse_common.langs import LID_LANGS, TATOEBA_TO_LID, parse_pair
    from labse_common.sources import expand_pairs, expand_texts, matching_globs

    src, demo = ctx.sources, ctx.demo
    _check_remote(ctx)
    if not ctx.values["mining"]["pairs"]:
        raise ConfigError(
            "mining.pairs is empty: name the language pairs to mine, e.g. [de-en, de-fr]"
        )
    for p in ctx.values["mining"]["pairs"]:
        try:
            parse_pair(p)
        except ValueError as e:
            raise ConfigError(f"mining.pairs: {e}") from None
    if demo is not None:
        unmined = [c for c in demo["langs"] if f"{TATOEBA_TO_LID[c]}-en" not in ctx.pairs]
        if unmined:
            raise ConfigError(
                f"sources.demo.langs {unmined} are hidden in the web text but not mined: "
                f"add {', '.join(TATOEBA_TO_LID[c] + '-en' for c in unmined)} to mining.pairs"
            )
    if not ctx.synthetic:

        def user(kind: str) -> list[str]:  # the user's patterns, not the demo's web text
            return [p for p in source_patterns(ctx, kind) if not p.startswith(str(ctx.out))]

        # One source, the text to mine: a WET-only, WARC-only or dump-only folder is fine.
        matching_globs({f"sources.{k}": user(k) for k in ("commoncrawl", "wikipedia")})
        for kind, expand in (
            ("pairs", expand_pairs),
            ("eval", expand_pairs),
            ("text", expand_texts),
        ):
            if user(kind):  # each glob must match a file whose name gives its languages
                expand(user(kind), None, f"sources.{kind}")
    if not (source_patterns(ctx, "commoncrawl") or source_patterns(ctx, "wikipedia")):
        raise ConfigError(
            "sources.commoncrawl and sources.wikipedia are both empty: nothing to mine"
        )
    if src["label_from"] == "eval" and not has_source(ctx, "eval"):
        raise ConfigError(
            "sources.label_from is eval but sources.eval is empty: no alignment to label from"
        )
    init = ctx.values["model"]["init"]
    if init and is_remote(init):  # its listing first: nothing is copied for a wrong URL
        require_encoder_folder(init, "model.init")
    if ctx.init:
        _check_init(Path(ctx.init), init if init and is_remote(init) else None)
    trains = not (ctx.init and ctx.values["train"]["steps"] == 0)
    if trains and not has_source(ctx, "pairs"):
        why = (
            "model.init is not given"
            if not ctx.init
            else f"train.steps is {ctx.values['train']['steps']}"
        )
        raise ConfigError(
            f"sources.pairs is empty and {why}: nothing to train the encoder on; give "
            "training pairs, or model.init with train.steps=0 to mine with it as it is"
        )
    missing = [lang for lang in ctx.langs if lang not in LID_LANGS]
    if missing:  # parse_pair checks this too; kept for a table edited by hand
        raise ConfigError(f"mining.pairs: {missing} unknown to the language-ID model")
    labels = ctx.values["combine"]["labels"]
    if labels and is_remote(labels):
        local_file(labels, "combine.labels")  # the labels stage reads it: missing is one line
    elif labels and not Path(labels).is_file():
        raise InputError(labels, "no such labels file", "combine.labels")


def _check_remote(ctx: Context) -> None:
    """Credentials, endpoint and bucket of every source, model.init and combine.labels on
    object storage (labse_common.remote): one line, before anything lists or copies them."""
    kinds = ("commoncrawl", "wikipedia", "pairs", "eval", "text")
    given = [*(p for k in kinds for p in ctx.sources[k]), ctx.values["model"]["init"]]
    check_paths(remote_paths([*given, ctx.values["combine"]["labels"]]))


def _check_init(path: Path, url: str | None = None) -> None:
    """model.init must be an encoder folder: HF (config.json) or sentence-transformers
    (modules.json), with its tokenizer. ``url``: the folder on object storage ``path`` is the
    copy of (the one the messages name)."""
    shown = url or path
    if not path.is_dir():
        raise InputError(shown, "not a folder (model.init names an encoder folder)", "model.init")
    if not ((path / "config.json").is_file() or (path / "modules.json").is_file()):
        raise InputError(
            shown,
            "no config.json or modules.json: not a Hugging Face or "
            "sentence-transformers encoder folder",
            "model.init",
        )
    if not any(path.rglob("vocab.txt")) and not any(path.rglob("tokenizer.json")):
        raise InputError(
            shown,
            "no vocab.txt or tokenizer.json: the encoder's tokenizer is missing",
            "model.init",
        )
