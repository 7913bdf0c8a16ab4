"""Embed several languages' sentences into one embedding store each, the encoder loaded once."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from labse_common.cli import (
    add_log_level_option,
    add_overwrite_option,
    add_quantize_option,
    command_parser,
    run_main,
)
from labse_common.datafiles import read_json
from labse_common.errors import UsageError
from labse_common.logs import setup_logging
from labse_common.output_dir import claim_output
from labse_common.resume_shards import fingerprint
from labse_common.stats import sum_reports, write_report

log = logging.getLogger("pipelines.tasks")

SUMMARY = (
    "One embedding store per language (OUTPUT/<lang>) from a folder of <lang>/ Parquet sentences,\n"
    "through the one embedding path, with the encoder loaded once for every language."
)
DETAILS = (
    "A rerun after a kill keeps the languages an earlier attempt with the same encoder, sentences\n"
    "and settings finished."
)
EXAMPLES = (
    "python -m pipelines.e2e_tasks embed --sentences sentences/mine "
    "--langs de en --model run/model --output embed/",
)


def embed(
    sentences_dir: Path,
    langs: list[str],
    model: str,
    out: Path,
    batch_size: int,
    overwrite: bool = False,
    quantize: str = "none",
) -> None:
    """One store per language (``OUT/<lang>``) through the one embedding path
    (:func:`labse_model.embed_store.embed_to_store`, what ``mining embed`` runs), in one process:
    the encoder is loaded (and torch imported) once for every language. ``OUT`` as a whole is
    claimed and the stores are written under its temporary folder, so a second run into it
    stops (exit 2) and a failed run leaves no half set of stores."""
    from labse_model.embed_store import embed_to_store, load_model

    langs = list(dict.fromkeys(langs))  # a language named twice is embedded once
    missing = [str(sentences_dir / lang) for lang in langs if not (sentences_dir / lang).exists()]
    if missing:  # every language checked before the first is embedded
        raise UsageError(f"--sentences {sentences_dir}: no sentences for {', '.join(missing)}")
    # One shard per language: a rerun after a kill keeps the stores an earlier attempt with the
    # same encoder, sentences and settings finished (labse_common/resume_shards.py).
    settings = {"langs": langs, "batch_size": batch_size, "quantize": quantize}
    key = fingerprint([model, *(sentences_dir / lang for lang in langs)], settings)
    with claim_output(out, overwrite, resume=key, stage="embed") as claimed:
        shards = claimed.shards
        encoder = None  # loaded (slow) only when a language is left to embed
        for lang in langs:
            if shards.finished(lang):
                continue
            encoder = encoder or load_model(model, quantize=quantize)
            store = Path(shards.begin(lang))
            embed_to_store(
                encoder,
                str(sentences_dir / lang),
                str(store),
                dtype="float16",
                batch_size=batch_size,
                flag="--sentences",
            )
            _name_final_store(store / "stats.json", out / lang)
            shards.end(lang)
        # The stores' counts summed (what the report shows for the stage), and the shards.
        parts = [read_json(Path(claimed.path) / lang / "stats.json") for lang in langs]
        report = sum_reports("embed", parts, shards=len(langs), resumed_shards=shards.resumed)
        write_report(str(Path(claimed.path) / "stats.json"), report)


def _name_final_store(stats: Path, final: Path) -> None:
    """The store's stats.json names where it was written (the temporary folder): name where it
    will be once committed."""
    report = read_json(stats)
    if "output" in report:
        report["output"] = str(final)
        write_report(str(stats), report)


def build_parser() -> argparse.ArgumentParser:
    e = command_parser("python -m pipelines.e2e_tasks embed", SUMMARY, DETAILS, EXAMPLES)
    e.add_argument("--sentences", required=True, help="folder of <lang>/ Parquet sentences")
    e.add_argument("--langs", nargs="+", required=True, help="languages to embed")
    e.add_argument("--model", required=True, help="LaBSE checkpoint directory")
    e.add_argument("--output", required=True, help="folder receiving one store per language")
    e.add_argument("--batch-size", type=int, default=64, help="encoding batch size (64)")
    add_quantize_option(e)
    add_overwrite_option(e)
    add_log_level_option(e)
    return e


def run(args: argparse.Namespace) -> int:
    embed(
        Path(args.sentences),
        args.langs,
        args.model,
        Path(args.output),
        args.batch_size,
        args.overwrite,
        args.quantize,
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.log_level)
    return run_main(lambda: run(args), log, args=args)
