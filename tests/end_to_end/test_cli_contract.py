"""The contract of every command line the project installs, on bad input and shared outputs.

Every command is found automatically: the ``[project.scripts]`` of pyproject.toml, every module
of the project's packages that runs as ``python -m`` (a package's ``__main__.py``, a module with
``if __name__ == "__main__":``), the subcommands of each one's argparse parser and the
``python -m filters`` commands. Each command needs an entry in :data:`TABLE` saying how it takes
an input and an output; a command without one fails :func:`test_every_command_has_an_entry` (and
its own cases), so a new command cannot be skipped silently.

Each command runs, as its own process, with:

* ``missing``: an input that does not exist;
* ``empty``: an empty input file;
* ``truncated_parquet``: a Parquet file cut in half (no footer);
* ``damaged_parquet``: a snappy Parquet of several row groups, bytes flipped in the middle group
  (the footer is intact, so the file opens and fails half-way through reading);
* ``non_utf8``: a text input with one line that is not UTF-8;
* ``s3_no_credentials``: an ``s3://`` input with no credentials anywhere;
* ``s3_dead_endpoint``: an ``s3://`` input with credentials but an endpoint that does not answer
  (a closed port on 127.0.0.1), which must end within 30 s;
* ``concurrent``: two runs with good input into one output at the same time (once per call
  site of the output claim: a command sharing another's is declared, naming the case that
  races it).

Each gives a correct result (the case's check in the table), or one error line naming the file
or the flag and exit status 2; never a traceback, never exit 0 with wrong or mixed data. A text
line that is not UTF-8 may also be read with the bad bytes replaced (the project's text reader,
labse_common.textio): exit 0 then needs every stats.json written to balance. Two writers into
one output: exactly one succeeds, the other exits 2 naming the output, nothing of either is
left beside the winner's files. A case
that does not apply to a command is declared in its entry with the reason (:data:`NA`).

Nothing leaves the machine: ``AWS_EC2_METADATA_DISABLED=true``, no ``AWS_*`` credentials but the
fake ones of the dead-endpoint case, every endpoint on 127.0.0.1.

Speed: each case is a process forked from a server that imported Beam, torch, BERT's modelling
code, scikit-learn and FAISS once (the stage runner's fork server, through
tests/support/cli_process.py), so a case costs its own work, not 5-30 s of imports; cases run in
parallel. ``LABSE_CONTRACT_SUBPROCESS=1`` runs plain ``python -m`` processes instead.
"""

from __future__ import annotations

import bz2
import importlib
import json
import logging
import os
import re
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.support.cli_process import CliResult, cli_context, run_cli, server_env
from tests.support.paths import REPO as ROOT

PACKAGES = ("pipelines", "labse_model", "mining", "filters", "labse_common")
CASES = (
    "missing",
    "empty",
    "truncated_parquet",
    "damaged_parquet",
    "non_utf8",
    "s3_no_credentials",
    "s3_dead_endpoint",
    "concurrent",
)
PARQUET_CASES = ("truncated_parquet", "damaged_parquet")
S3_CASES = ("s3_no_credentials", "s3_dead_endpoint")
REMOTE_LIMIT_S = 30
# The damaged Parquet: three row groups, the middle one damaged. Its size does not matter to the
# contract (a group is lost and counted, the others read); 600 rows, not 3,000, because every
# command that reads it pays for the rows (embedding, word counts, Beam).
DAMAGED_ROWS = 600
GROUP_ROWS = DAMAGED_ROWS // 3
TRUNCATED_ROWS = 400
CASE_LIMIT_S = 240
BUCKET = "contract-bucket"


# --- discovery ---------------------------------------------------------------------------------

_MAIN_GUARD = re.compile(r"^if __name__ == [\"']__main__[\"']:", re.M)


def runnable_modules() -> list[str]:
    """Every module ``python -m`` runs: packages with ``__main__.py``, modules with a main guard.

    ``filters/bitext/cli_*.py`` are reached through ``python -m filters <command>``."""
    found = set()
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            rel = path.relative_to(ROOT).with_suffix("")
            parts = list(rel.parts)
            if path.name == "__main__.py":
                found.add(".".join(parts[:-1]))
            elif _MAIN_GUARD.search(path.read_text(encoding="utf-8")):
                if parts[:2] == ["filters", "bitext"] and parts[-1].startswith("cli_"):
                    continue
                found.add(".".join(parts))
    return sorted(found)


def scripts() -> dict[str, str]:
    """The console scripts the installed distribution declares: name -> ``module:function``
    (``[project.scripts]`` of pyproject.toml)."""
    from importlib.metadata import distribution

    eps = distribution("labse-pipeline").entry_points
    return {ep.name: ep.value for ep in eps if ep.group == "console_scripts"}


def _parser_of(module: str):
    """The module's argparse parser when it builds one in a function (build_parser/parser)."""
    import argparse

    target = (
        f"{module}.__main__"
        if (ROOT / module.replace(".", "/") / "__main__.py").exists()
        else module
    )
    mod = importlib.import_module(target)
    if callable(getattr(mod, "commands", None)):  # a command group (labse_common.command_group)
        return None, list(mod.commands())
    for name in ("build_parser", "parser", "_parser"):
        fn = getattr(mod, name, None)
        if callable(fn):
            try:
                p = fn()
            except TypeError:
                continue
            if isinstance(p, argparse.ArgumentParser):
                return p, None
    return None, None


def _subcommands_from_help(module: str) -> list[str]:
    """Subcommands of a parser built inside main(): the ``{a,b}`` choice list of its usage."""
    r = subprocess.run(
        [sys.executable, "-m", module, "--help"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    usage = r.stdout.split("\n\n")[0]
    m = re.search(r"^usage:[^{]*\{([\w,-]+)\}", usage, re.M)
    return m.group(1).split(",") if m else []


def discover_commands() -> list[str]:
    """``"module"`` or ``"module subcommand"`` for every command line of the project."""
    import argparse

    out = []
    for module in runnable_modules():
        parser, listed = _parser_of(module)
        subs: list[str] = []
        if listed is not None:
            subs = listed
        elif parser is not None:
            for a in parser._actions:  # noqa: SLF001 - argparse has no public accessor
                if isinstance(a, argparse._SubParsersAction):  # noqa: SLF001
                    subs = list(a.choices)
        else:
            subs = _subcommands_from_help(module)
        out += [f"{module} {s}" for s in subs] if subs else [module]
    return out


COMMANDS = discover_commands()


# --- the table -----------------------------------------------------------------------------------
#
# How each command takes its input and output. ``args`` is the argv after ``python -m MODULE``,
# with {IN} (the input under test), {OUT} (the output), {D} (the folder of good inputs, see the
# ``data`` fixture). ``fmt`` is what {IN} holds: parquet, text, tsv, wet, wikidump, lang_dir (a
# folder of <lang>/*.parquet), dir (a folder of *.parquet), data (the ../shared/data layout),
# json, store (an embedding store or .npy). ``good`` is {IN} for the concurrent case.
# ``na``: case -> why it does not apply; ``ok``: case -> a check of a correct exit-0 result;
# ``xfail``: case -> reason (another engineer's command, being fixed).

NO_PARQUET = "reads no Parquet"
NO_TEXT = "reads no text file (Parquet only)"
NO_OUTPUT = "writes no output folder"
NO_INPUT = "reads no input file"
# Two writers are one claim (labse_common.output_dir) taken at one call site; a command whose
# call site another command's case already races, or whose claim another module races, is
# declared here, so that each way of claiming is raced once (the suite's time).
SAME_CLAIM_FILTERS = (
    "tests/filters/test_cli_contract.py: every filters command against a held output (exit 2, "
    "one line, untouched) and two real rules processes racing into one folder"
)


@dataclass
class Cmd:
    args: list[str]
    fmt: str | None
    good: str | None = None
    beam: bool = False
    na: dict[str, str] = field(default_factory=dict)
    ok: dict[str, object] = field(default_factory=dict)
    xfail: dict[str, str] = field(default_factory=dict)
    slow: tuple[str, ...] = ()
    # Resumes into its own output (training): a second run after the first ended is a resume,
    # so the second writer is started once the first holds the claim.
    resumable: bool = False
    # Added for the concurrent case (a longer run, so that the first still holds the output
    # when the second has started up).
    concurrent_args: tuple[str, ...] = ()

    def applies(self, case: str) -> str | None:
        """None, or why ``case`` does not apply."""
        if case in self.na:
            return self.na[case]
        return None


def _na(cases, why: str) -> dict[str, str]:
    return dict.fromkeys(cases, why)


def _balanced_stats(out: Path, res) -> None:
    from labse_common.stats import check_balanced

    stats = json.loads((out / "stats.json").read_text())
    assert check_balanced(stats) == [], stats


def _lost_pair_rows(out: Path, res) -> None:
    """A pair file is one of many: its damaged row group's rows are counted, the rest read."""
    stats = json.loads((out / "stats.json").read_text())
    _balanced_stats(out, res)
    c = stats["counts"]["pairs"]
    assert c["dropped"]["damaged_row_group"] == GROUP_ROWS and c["in"] == DAMAGED_ROWS, c


def _lost_row_group(unit: str):
    """Rows stand alone (word counts, pair rules, training streams): the damaged middle row
    group's rows are counted dropped and the two readable groups are still read (exit 0,
    balanced)."""

    def check(out: Path, res) -> None:
        stats = json.loads((out / "stats.json").read_text())
        _balanced_stats(out, res)
        c = stats["counts"]
        assert c[unit]["dropped"]["damaged_row_group"] == GROUP_ROWS, c
        assert c[unit]["in"] == DAMAGED_ROWS and c["files"]["out"] == 1, c
        assert "row group 1 damaged" in res.stderr

    return check


def _damaged_rows_kept(out: Path, res) -> None:
    """Row i of a store is row i of the input: the damaged middle row group's rows keep
    their place with empty texts and zero vectors (counted ``damaged_row_group``), the rest is
    embedded (exit 0, balanced)."""
    from labse_common.embedding_store import EmbeddingStore

    [folder] = [p.parent for p in out.rglob("store.json")]
    stats = json.loads((folder / "stats.json").read_text())
    _balanced_stats(folder, res)
    c = stats["counts"]["sentences"]
    n, g = DAMAGED_ROWS, GROUP_ROWS
    assert c["in"] == c["out"] == n and c["events"]["damaged_row_group"] == g, c
    store = EmbeddingStore(folder)
    vecs = np.concatenate(store.all_vectors()).astype(np.float32)
    texts = store.all_metadata().column("text").to_pylist()
    want = universal_table(n).column("text").to_pylist()
    lost = slice(g, 2 * g)
    assert texts[:g] == want[:g] and texts[2 * g :] == want[2 * g :]
    assert texts[lost] == [""] * g and not vecs[lost].any()
    assert (np.abs(vecs[:g]).sum(axis=1) > 0).all() and (
        np.abs(vecs[2 * g :]).sum(axis=1) > 0
    ).all()


def _replaced_line(out: Path, res) -> None:
    """Text is read with invalid bytes replaced (labse_common.textio: a stray byte costs one
    character, not the file): exit 0 is a correct result when every stats.json it wrote
    balances."""
    from labse_common.stats import check_balanced

    for stats in [out / "stats.json", *out.glob("*/stats.json")] if out.is_dir() else []:
        if stats.is_file():
            report = json.loads(stats.read_text())
            assert check_balanced(report) == [], (stats, report)


BEAM = ["--direct_running_mode", "in_memory", "--direct_num_workers", "1"]
CORPUS_FAST = ["--set", "dedup=false", *BEAM]
MODEL_TINY = [
    "model.hidden_size=32",
    "model.intermediate_size=64",
    "model.num_hidden_layers=1",
    "model.num_attention_heads=2",
    "model.max_position_embeddings=64",
    "threads=1",
    "progress=false",
    "tensorboard=false",
    "log_every=1",
]
TRAIN_TINY = [
    "--vocab",
    "{D}/vocab",
    *(a for kv in [*MODEL_TINY, "batch_size=8"] for a in ("--set", kv)),
]
PRETRAIN_TINY = [
    "--vocab",
    "{D}/vocab",
    *(
        a
        for kv in [
            *MODEL_TINY,
            "model.num_hidden_layers=2",
            "mlm_batch_size=8",
            "tlm_batch_size=8",
            "lanes=2",
            "max_seq_length=32",
            "warmup_steps=1",
            "eval_every=0",
        ]
        for a in ("--set", kv)
    ),
]

TABLE: dict[str, Cmd] = {
    # --- Beam corpus jobs ------------------------------------------------------------------------
    "pipelines.commoncrawl": Cmd(
        ["--input", "{IN}", "--output", "{OUT}", *CORPUS_FAST],
        "wet",
        "{D}/cc.warc.wet.gz",
        beam=True,
        na=_na(PARQUET_CASES, NO_PARQUET + " (WARC/WET)"),
        ok={"non_utf8": _balanced_stats},
    ),
    "pipelines.wikipedia": Cmd(
        ["--input", "{IN}", "--output", "{OUT}", *CORPUS_FAST],
        "wikidump",
        "{D}/wiki-pages-articles.xml.bz2",
        beam=True,
        na={
            **_na(PARQUET_CASES, NO_PARQUET + " (bz2 XML dumps)"),
            "concurrent": "the claim of pipelines.commoncrawl (corpus_cli.run_cli): its case",
        },
        ok={"non_utf8": _balanced_stats},
    ),
    "pipelines.vocab": Cmd(
        ["--input", "{IN}", "--output", "{OUT}", "--vocab-size", "120", *BEAM],
        "lang_dir",
        "{D}/sent",
        beam=True,
        na=_na(["non_utf8"], NO_TEXT),
        ok={"damaged_parquet": _lost_row_group("sentences")},
    ),
    "pipelines.mine": Cmd(
        [
            "--src-emb",
            "{IN}",
            "--trg-emb",
            "{D}/trg.npy",
            "--src-text",
            "{D}/src.txt",
            "--trg-text",
            "{D}/trg.txt",
            "--output",
            "{OUT}",
            "--k",
            "2",
            *BEAM,
        ],
        "store",
        "{D}/src.npy",
        beam=True,
        na={
            **_na(PARQUET_CASES, "reads embeddings (.npy / store)"),
            "non_utf8": "the embeddings are the input under test; texts are covered by mining mine",
        },
    ),
    "pipelines.embed": Cmd(
        ["--input", "{IN}", "--model", "{D}/model", "--output", "{OUT}", *BEAM],
        "dir",
        "{D}/sentdir",
        beam=True,
        na=_na(["non_utf8"], NO_TEXT),
        ok={"damaged_parquet": _damaged_rows_kept},
    ),
    "pipelines.quality train": Cmd(
        [
            "train",
            "--positive",
            "{IN}",
            "--negative",
            "{D}/ccout",
            "--output",
            "{OUT}/q.bin",
            "--epoch",
            "1",
        ],
        "lang_dir",
        "{D}/sent",
        na=_na(["non_utf8"], NO_TEXT),
    ),
    "pipelines.quality score": Cmd(
        ["score", "--model", "{IN}", "a line of text"],
        "model",
        na={
            **_na(["empty", *PARQUET_CASES, "non_utf8"], "its input is a fastText model file"),
            "concurrent": NO_OUTPUT,
        },
    ),
    # --- training and vocabulary -----------------------------------------------------------------
    "labse_model pretrain": Cmd(
        [
            "pretrain",
            "--sentences",
            "{IN}",
            "--output",
            "{OUT}",
            "--stage-steps",
            "1,1",
            *PRETRAIN_TINY,
        ],
        "lang_dir",
        "{D}/sent",
        na=_na(["non_utf8"], NO_TEXT + " (--sentences: <lang>/*.parquet)"),
        resumable=True,
        # The second writer is forked (everything preloaded) once the first holds the claim, so
        # it reaches the claim within about a second: 30 steps a stage overlap; a run that did
        # not is made again 4x longer (_run_concurrent).
        concurrent_args=("--stage-steps", "30,30"),
        ok={"damaged_parquet": _lost_row_group("sentences")},
    ),
    "labse_model train": Cmd(
        ["train", "--pairs", "{IN}", "--output", "{OUT}", "--max-steps", "2", *TRAIN_TINY],
        "tsv",
        "{D}/pairs.tsv",
        na={"concurrent": "the claim of labse_model pretrain (_run_claim): its concurrent case"},
        ok={"non_utf8": _balanced_stats, "damaged_parquet": _lost_row_group("pairs")},
    ),
    "labse_model encode": Cmd(
        ["encode", "--model", "{D}/model", "--input", "{IN}", "--output", "{OUT}", "--no-progress"],
        "text",
        "{D}/src.txt",
        ok={"damaged_parquet": _damaged_rows_kept},
    ),
    "labse_model.vocab": Cmd(
        ["--counts", "{IN}", "--output", "{OUT}", "--vocab-size", "120"],
        "parquet",
        "{D}/counts.parquet",
        na=_na(["non_utf8"], NO_TEXT),
    ),
    # --- mining ----------------------------------------------------------------------------------
    "mining mine": Cmd(
        [
            "mine",
            "--src-text",
            "{IN}",
            "--trg-text",
            "{D}/trg.txt",
            "--src-emb",
            "{D}/src.npy",
            "--trg-emb",
            "{D}/trg.npy",
            "--output",
            "{OUT}",
            "--k",
            "2",
        ],
        "text",
        "{D}/src.txt",
        ok={"non_utf8": _balanced_stats},
    ),
    "mining mine-many": Cmd(
        [
            "mine-many",
            "--pairs",
            "de-en",
            "--corpus",
            "{IN}/{lang}.txt",
            "--emb",
            "{D}/{lang}.npy",
            "--output",
            "{OUT}",
            "--k",
            "2",
        ],
        "dir_of_text",
        "{D}/texts",
        na=_na(PARQUET_CASES, "reads text files here (one per language)"),
        ok={"non_utf8": lambda out, res: _balanced_stats(out / "de-en", res)},
    ),
    "mining embed": Cmd(
        ["embed", "--text", "{IN}", "--model", "{D}/model", "--output", "{OUT}"],
        "text",
        "{D}/src.txt",
        na={"concurrent": "the claim of labse_model encode (embed_store.embed_to_store): its case"},
        ok={"damaged_parquet": _damaged_rows_kept},
    ),
    "mining eval": Cmd(
        [
            "eval",
            "un",
            "--src-text",
            "{IN}",
            "--trg-text",
            "{D}/trg.txt",
            "--emb-dir",
            "{D}",
            "--output",
            "{OUT}",
        ],
        "text",
        "{D}/src.txt",
        na=_na(PARQUET_CASES, "reads text files"),
        ok={"non_utf8": lambda out, res: (out / "un_pool.json").is_file()},
    ),
    "mining plan": Cmd(
        ["plan", "--n-src", "1000", "--n-trg", "1000", "--mem-gb", "1"],
        None,
        na=_na(CASES, "a planner: reads no file, writes no output"),
    ),
    # --- filters ---------------------------------------------------------------------------------
    "filters rules": Cmd(
        [
            "rules",
            "--pairs",
            "{IN}",
            "--src-lang",
            "de",
            "--trg-lang",
            "en",
            "--output",
            "{OUT}",
            "--set",
            "steps=[empty, length]",
        ],
        "parquet",
        "{D}/pairs.parquet",
        ok={"damaged_parquet": _lost_row_group("pairs")},
    ),
    "filters margin-score": Cmd(
        ["margin-score", "--model", "{D}/model", "--pairs", "{IN}", "--output", "{OUT}"],
        "parquet",
        "{D}/pairs.parquet",
    ),
    "filters cds-train": Cmd(
        [
            "cds-train",
            "--noisy",
            "{IN}",
            "--trusted",
            "{D}/trusted.tsv",
            "--output",
            "{OUT}",
            "--threads",
            "1",
            "CDS_TINY",
        ],
        "tsv",
        "{D}/noisy.tsv",
    ),
    "filters cds-score": Cmd(
        [
            "cds-score",
            "--model",
            "{D}/cds_model",
            "--pairs",
            "{IN}",
            "--output",
            "{OUT}",
            "--threads",
            "1",
            "--set",
            "progress=false",
        ],
        "parquet",
        "{D}/pairs.parquet",
        ok={"damaged_parquet": _lost_row_group("pairs")},
    ),
    "filters lexicon": Cmd(
        [
            "lexicon",
            "--fit",
            "{D}/trusted.tsv",
            "--pairs",
            "{IN}",
            "--output",
            "{OUT}",
            "--set",
            "progress=false",
        ],
        "parquet",
        "{D}/pairs.parquet",
        ok={"damaged_parquet": _lost_row_group("pairs")},
    ),
    "filters calibrate": Cmd(
        ["calibrate", "--scored", "{IN}", "--labels", "{D}/labels.tsv", "--output", "{OUT}"],
        "parquet",
        "{D}/pairs.parquet",
    ),
    "filters apply": Cmd(
        ["apply", "--scored", "{IN}", "--threshold", "{D}/threshold.json", "--output", "{OUT}"],
        "parquet",
        "{D}/pairs.parquet",
        ok={"damaged_parquet": _lost_row_group("pairs")},
    ),
    "filters sample": Cmd(
        ["sample", "--pairs", "{IN}", "--n", "20", "--output", "{OUT}"],
        "parquet",
        "{D}/pairs.parquet",
    ),
    "filters combine": Cmd(
        ["combine", "--pairs", "{IN}", "--labels", "{D}/labels_header.tsv", "--output", "{OUT}"],
        "parquet",
        "{D}/pairs.parquet",
    ),
    "filters export": Cmd(
        ["export", "--mined", "{IN}", "--output", "{OUT}"], "mined_dir", "{D}/mined"
    ),
    "pipelines.export": Cmd(
        ["--mined", "{IN}", "--output", "{OUT}", *BEAM], "mined_dir", "{D}/mined", beam=True
    ),
    "pipelines.filter_pairs": Cmd(
        ["--input", "{IN}", "--output", "{OUT}", "--src-lang", "de", "--trg-lang", "en", *BEAM],
        "parquet",
        "{D}/pairs.parquet",
        beam=True,
        ok={"damaged_parquet": _lost_row_group("pairs")},
    ),
    # --- the runner and its tasks ----------------------------------------------------------------
    "pipelines.run": Cmd(
        ["--data", "{IN}", "--output", "{OUT}", "--dry-run"],
        "data",
        na={
            **_na(PARQUET_CASES, NO_PARQUET + " (--data is the ../shared/data layout)"),
            "concurrent": "--dry-run writes nothing; two real runners: tests/pipelines/test_run_pipeline",
        },
    ),
    "filters label": Cmd(
        ["label", "{IN}", "--no-browser"],
        "tsv",
        na={
            **_na(PARQUET_CASES, NO_PARQUET + " (a labelling TSV)"),
            "concurrent": "serves a page until Ctrl-C and edits FILE in place; no output folder",
        },
    ),
    "labse_common.forked_main": Cmd(
        [],
        None,
        na=_na(
            CASES,
            "internal: the exec wrapper that arms Beam SDK workers' parent-death signal "
            "(pipelines/local_runner.py); it reads no data and writes no output",
        ),
    ),
    "pipelines.demo_data": Cmd(
        ["--data", "{IN}", "--output", "{OUT}"],
        "data",
        "{D}/synth",
        na=_na(PARQUET_CASES, NO_PARQUET),
    ),
    "pipelines.e2e_tasks inputs": Cmd(
        ["inputs", "--pairs", "{IN}", "--output", "{OUT}"],
        "pairs_glob",
        ok={"damaged_parquet": _lost_pair_rows},
        na={"concurrent": "the output claim of every e2e task is OutputDir's: the sentences case"},
    ),
    "pipelines.e2e_tasks labels": Cmd(
        [
            "labels",
            "--sample",
            "{IN}",
            "--candidates",
            "{IN}",
            "--file",
            "{OUT}.labels.tsv",
            "--output",
            "{OUT}",
        ],
        "parquet",
        na={"concurrent": "the output claim of every e2e task is OutputDir's: the sentences case"},
    ),
    "pipelines.e2e_tasks sentences": Cmd(
        ["sentences", "--corpus", "{IN}", "--output", "{OUT}"],
        "lang_dir",
        "{D}/ccjob",
        na=_na(["non_utf8"], NO_TEXT),
    ),
    "pipelines.e2e_tasks score": Cmd(
        [
            "score",
            "--bitext",
            "{D}/bitext",
            "--gold",
            "{IN}",
            "--sentences",
            "{D}/sent",
            "--output",
            "{OUT}",
        ],
        "tsv",
        None,
        na={
            **_na(PARQUET_CASES, "--gold is a TSV"),
            "concurrent": "needs a whole run's bitext; the runner's end-to-end test covers it",
        },
    ),
    "pipelines.e2e_tasks concat": Cmd(
        ["concat", "{IN}", "--output", "{OUT}/pairs.parquet"],
        "parquet",
        "{D}/pairs.parquet",
        na=_na(["non_utf8"], NO_TEXT),
    ),
    "pipelines.pair_assembly concat": Cmd(
        ["concat", "{IN}", "--output", "{OUT}/pairs.parquet"],
        "parquet",
        "{D}/pairs.parquet",
        na=_na(["non_utf8"], NO_TEXT),
    ),
    "pipelines.pair_assembly scored": Cmd(
        ["scored", "{IN}", "--pairs", "de-en"],
        None,
        na=_na(
            CASES,
            "internal: the runner's cds_score stage joins the folders its own commands wrote "
            "(tests/pipelines/test_bitext_resume.py: a missing pair is one line, exit 2)",
        ),
    ),
    "pipelines.pair_assembly bitext": Cmd(
        ["bitext", "{IN}", "--pairs", "de-en"],
        None,
        na=_na(
            CASES,
            "internal: the runner's bitext stage assembles the parts its own commands wrote "
            "(tests/pipelines/test_bitext_parts.py: a missing part is one line, exit 2)",
        ),
    ),
    "pipelines.e2e_tasks embed": Cmd(
        [
            "embed",
            "--sentences",
            "{IN}",
            "--langs",
            "en",
            "--model",
            "{D}/model",
            "--output",
            "{OUT}",
        ],
        "lang_dir",
        "{D}/sent",
        na={
            **_na(["non_utf8"], NO_TEXT),
            "concurrent": "the output claim of every e2e task is OutputDir's: the sentences case",
        },
        ok={"damaged_parquet": _damaged_rows_kept},
    ),
    "pipelines.report": Cmd(
        ["--run", "{IN}", "--output", "{OUT}"],
        "run_dir",
        None,
        na={
            **_na(PARQUET_CASES, "reads the run folder's JSON"),
            "non_utf8": "reads JSON manifests (covered by the runner's tests)",
            "concurrent": "needs a finished run folder; the runner's end-to-end test covers it",
        },
    ),
    "pipelines.synthetic": Cmd(
        ["--output", "{OUT}", "--train", "20", "--dev", "10"], None, na=_na(CASES[:-1], NO_INPUT)
    ),
    # --- labse_common --------------------------------------------------------------------------
    "labse_common.config": Cmd(
        ["--check", "{IN}"],
        "yaml",
        na={
            **_na(PARQUET_CASES, "reads YAML"),
            **_na(S3_CASES, "presets are local files"),
            "concurrent": NO_OUTPUT,
        },
    ),
    "labse_common.embedding_store convert": Cmd(
        ["convert", "{IN}", "{OUT}"],
        "store",
        "{D}/src.npy",
        na={**_na(PARQUET_CASES, "reads .npy"), "non_utf8": "reads .npy"},
    ),
}

for _command, _cmd in TABLE.items():  # every filters command: one claim, raced in its own module
    if _command.startswith("filters "):
        _cmd.na.setdefault("concurrent", SAME_CLAIM_FILTERS)


# --- running a command -----------------------------------------------------------------------------


def run_command(
    command: str, argv: list[str], env: dict, workdir: Path, ctx, timeout: float = CASE_LIMIT_S
) -> CliResult:
    """One case's process (tests/support/cli_process.py): ``python -m`` of the command's module."""
    return run_cli(command.split()[0], argv, env, workdir, ctx, timeout)


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def base_env() -> dict[str, str]:
    """No AWS credentials or endpoints of the machine; the metadata service off; one thread."""
    env = server_env()  # the fork server's: no credentials, one thread, the repository
    env.update(
        LABSE_LOG_LEVEL="INFO",
        AWS_SHARED_CREDENTIALS_FILE="/nonexistent",
        AWS_CONFIG_FILE="/nonexistent",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
    )
    return env


# --- inputs ----------------------------------------------------------------------------------------

WORDS = ["alpha", "beta", "gamma", "delta", "Haus", "Stadt", "maison", "ville", "río", "город"]


def universal_table(n: int) -> pa.Table:
    """Rows with every column a command of the project reads, so the damage is what is found."""
    rng = np.random.default_rng(0)
    src = [" ".join(rng.choice(WORDS, 6)) + f" {i}" for i in range(n)]
    trg = [" ".join(rng.choice(WORDS, 6)) + f" {i}" for i in range(n)]
    return pa.table(
        {
            "text": src,
            "src": src,
            "trg": trg,
            "src_lang": ["de"] * n,
            "trg_lang": ["en"] * n,
            "lang": ["de"] * n,
            "id": [f"s{i}" for i in range(n)],
            "url_or_title": [f"http://x/{i}" for i in range(n)],
            "margin": pa.array([1.0 + (i % 50) / 100 for i in range(n)], pa.float32()),
            "cds_score": pa.array([(i % 10) / 10 for i in range(n)], pa.float32()),
            "quality_score": pa.array([0.9] * n, pa.float32()),
            "reason": ["low_quality"] * n,
            "word": src,
            "count": pa.array([5.0] * n),
        }
    )


BAD_LINE = b"ein Satz mit \xff\xfe kaputten Bytes\tand a \xc3( broken one\n"
FMT_EXT = {
    "parquet": ".parquet",
    "text": ".txt",
    "tsv": ".tsv",
    "wet": ".warc.wet.gz",
    "wikidump": "-pages-articles.xml.bz2",
    "lang_dir": ".parquet",
    "dir": ".parquet",
    "store": ".npy",
    "yaml": ".yaml",
    "model": ".bin",
    "mined_dir": ".parquet",
    "dir_of_text": ".txt",
    "data": ".txt",
    "run_dir": ".json",
    "pairs_glob": ".{src}-{trg}.tsv",
}


def _place(fmt: str, where: Path, name: str) -> tuple[Path, Path]:
    """(the file to write, the path to pass as {IN}) for a one-file input of ``fmt``."""
    if fmt == "lang_dir":
        return where / "in" / "en" / name, where / "in"
    if fmt == "dir":
        return where / "in" / name, where / "in"
    if fmt == "mined_dir":
        return where / "in" / "de-en" / "mined.parquet", where / "in"
    if fmt == "dir_of_text":
        return where / "in" / "de.txt", where / "in"
    if fmt == "data":
        return where / "in" / "tatoeba" / "train.deu-eng.deu", where / "in"
    if fmt == "run_dir":
        return where / "in" / "_run.json", where / "in"
    if fmt == "pairs_glob":  # a sources glob: the pair in the name
        name = name if "{src}" in name else name.replace(".", ".{src}-{trg}.", 1)
        return where / "in" / name.format(src="de", trg="en"), where / "in" / name
    return where / name, where / name


def make_input(
    case: str, fmt: str, where: Path, d: Path, damaged_parquet, truncated_parquet
) -> str:
    ext = FMT_EXT[fmt]
    if case == "missing":
        return str(where / f"absent{ext}")
    if case in S3_CASES:
        return f"s3://{BUCKET}/input/x{ext}"
    if case in PARQUET_CASES:
        ext = ".parquet"
    file, arg = _place(fmt, where, f"input{ext}")
    file.parent.mkdir(parents=True, exist_ok=True)
    if case == "empty":
        file.write_bytes(b"")
    elif case == "truncated_parquet":
        truncated_parquet(file, universal_table(TRUNCATED_ROWS))
    elif case == "damaged_parquet":
        damaged_parquet(file, universal_table(DAMAGED_ROWS))
    elif case == "non_utf8":
        if fmt in ("parquet", "lang_dir", "dir", "mined_dir"):  # as a pair file (TSV) instead
            file = file.with_suffix(".tsv")
            arg = file if arg == file.with_suffix(".parquet") else arg
            fmt = "tsv"
        file.write_bytes(non_utf8_bytes("tsv" if fmt == "pairs_glob" else fmt, d))
        if fmt == "dir_of_text":
            (file.parent / "en.txt").write_bytes((d / "trg.txt").read_bytes())
    return str(arg)


def non_utf8_bytes(fmt: str, d: Path) -> bytes:
    good = (d / "pairs.tsv").read_bytes() if fmt == "tsv" else (d / "src.txt").read_bytes()
    lines = good.splitlines(keepends=True)
    if fmt in ("text", "tsv", "dir_of_text", "data", "yaml"):
        # In place of line 5: the line count stays that of the good file (and its embeddings).
        bad = BAD_LINE if fmt == "tsv" else BAD_LINE.replace(b"\t", b" ")
        return b"".join([*lines[:5], bad, *lines[6:]])
    if fmt == "wet":
        from tests.support.corpus_fixtures import NEWS, write_wet

        payload = "\n".join(NEWS).encode() + b"\n" + BAD_LINE
        tmp = d / f"nonutf8-{time.monotonic_ns()}.wet.gz"
        write_wet(tmp, [("http://a.example/1", payload)])
        data = tmp.read_bytes()
        tmp.unlink()
        return data
    if fmt == "wikidump":
        from tests.support.corpus_fixtures import FOOTER, HEADER, article, page_xml

        pages = "".join(page_xml(f"Topic {i}", article(i), pid=i + 1) for i in range(3))
        xml = (HEADER + pages).encode() + BAD_LINE + FOOTER.encode()
        return bz2.compress(xml)
    raise AssertionError(f"no non-UTF-8 input for {fmt}")


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """The good inputs every command is given besides the one under test."""
    from labse_model.tiny import make_tiny_checkpoint
    from tests.support.cds_toy import TINY, toy_pairs
    from tests.support.corpus_fixtures import (
        article,
        good_wet_payload,
        page_xml,
        write_dump,
        write_wet,
    )
    from tests.support.two_node_util import synthetic_pairs, write_vocab

    d = tmp_path_factory.mktemp("contract_data")
    table = universal_table(300)
    sents = table.column("text").to_pylist()
    for lang in ("en", "de"):
        (d / "sent" / lang).mkdir(parents=True)
        pq.write_table(table.slice(0, 150), d / "sent" / lang / "a.parquet")
    (d / "sentdir").mkdir()
    pq.write_table(table.slice(0, 40), d / "sentdir" / "a.parquet")
    pq.write_table(table, d / "pairs.parquet")
    (d / "mined" / "de-en").mkdir(parents=True)
    pq.write_table(table, d / "mined" / "de-en" / "mined.parquet")
    pq.write_table(
        pa.table({"word": sents[:100] + WORDS, "count": [3.0] * 110}), d / "counts.parquet"
    )
    (d / "src.txt").write_text("\n".join(sents[:40]) + "\n", encoding="utf-8")
    (d / "trg.txt").write_text(
        "\n".join(table.column("trg").to_pylist()[:40]) + "\n", encoding="utf-8"
    )
    (d / "texts").mkdir()
    (d / "texts" / "de.txt").write_bytes((d / "src.txt").read_bytes())
    (d / "texts" / "en.txt").write_bytes((d / "trg.txt").read_bytes())
    rng = np.random.default_rng(0)
    for name in ("src", "trg", "de", "en"):
        v = rng.standard_normal((40, 8)).astype(np.float32)
        np.save(d / f"{name}.npy", v / np.linalg.norm(v, axis=1, keepdims=True))
    for name in ("src.txt", "trg.txt"):  # mining eval un: <text file name>.npy in --emb-dir
        (d / f"{name}.npy").write_bytes((d / f"{name[:3]}.npy").read_bytes())
    (d / "pairs.tsv").write_text(synthetic_pairs(), encoding="utf-8")
    write_vocab(d / "vocab")
    write_wet(d / "cc.warc.wet.gz", [("http://a.example/1", good_wet_payload())])
    write_dump(
        d / "wiki-pages-articles.xml.bz2",
        [page_xml(f"Topic {i}", article(i), pid=i + 1) for i in range(3)],
    )
    make_tiny_checkpoint(str(d / "model"), sentences=sents, hidden=32, layers=1)
    src, trg = toy_pairs(80, 7)
    (d / "noisy.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in zip(src[:50], trg[:50])))
    (d / "trusted.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in zip(src[50:], trg[50:])))
    rows = table.slice(0, 60).to_pylist()
    (d / "labels.tsv").write_text(
        "".join(
            f"{r['src']}\t{r['trg']}\t{'GOOD' if r['cds_score'] >= 0.5 else 'BAD'}\n" for r in rows
        )
    )
    (d / "threshold.json").write_text(json.dumps({"threshold": 0.5, "score_column": "cds_score"}))
    from filters.bitext.cli_cds_train import main as cds_train

    sets = [a for kv in TINY for a in ("--set", kv)]
    assert (
        cds_train(
            [
                "--noisy",
                str(d / "noisy.tsv"),
                "--trusted",
                str(d / "trusted.tsv"),
                "--output",
                str(d / "cds_model"),
                "--threads",
                "1",
                "--log-level",
                "WARNING",
                *sets,
            ]
        )
        == 0
    )
    (d / "ccout" / "_dropped").mkdir(parents=True)  # a corpus job's output with --write-dropped
    (d / "ccout" / "en").mkdir()
    dropped = {
        "text": [f"Share on Facebook {i}" for i in range(40)],
        "reason": ["low_quality"] * 40,
    }
    pq.write_table(pa.table(dropped), d / "ccout" / "_dropped" / "a.parquet")
    pq.write_table(table.slice(0, 40), d / "ccout" / "en" / "a.parquet")
    from pipelines.commoncrawl import main as commoncrawl  # a real corpus job output

    assert (
        commoncrawl(
            [
                "--input",
                str(d / "cc.warc.wet.gz"),
                "--output",
                str(d / "ccjob"),
                "--log-level",
                "WARNING",
                *BEAM,
            ]
        )
        == 0
    )
    (d / "labels_header.tsv").write_text(
        "sample_id\tsrc\ttrg\tlabel\n"
        + "".join(
            f"{i}\t{r['src']}\t{r['trg']}\t{'GOOD' if r['cds_score'] >= 0.5 else 'BAD'}\n"
            for i, r in enumerate(rows)
        )
    )  # a labelled sample of pairs.parquet, as combine takes
    from pipelines.synthetic import generate

    generate(d / "synth", n_train=20, n_dev=10)
    (d / "CDS_TINY").write_text(json.dumps(sets))
    return d


def _expand(cmd: Cmd, case: str, inp: str | None, out: Path, d: Path) -> list[str]:
    argv = []
    for a in cmd.args:
        if a == "CDS_TINY":
            argv += json.loads((d / "CDS_TINY").read_text())
            continue
        argv.append(a.replace("{IN}", inp or "").replace("{OUT}", str(out)).replace("{D}", str(d)))
    return argv


def _remote_setup(cmd: Cmd, case: str, argv: list[str], env: dict) -> list[str]:
    """Credentials (fake, for the dead endpoint) and an endpoint on a closed loopback port."""
    endpoint = f"http://127.0.0.1:{closed_port()}"
    env["AWS_ENDPOINT_URL"] = endpoint  # whatever path boto3 takes, it stays on loopback
    flags = ["--s3_endpoint_url", endpoint, "--s3_region_name", "us-east-1"]
    if case == "s3_dead_endpoint":
        flags += ["--s3_access_key_id", "contract", "--s3_secret_access_key", "contract"]
    if cmd.beam:
        return [*argv, *flags]
    env["LABSE_BEAM_OPTIONS"] = " ".join(flags)
    return argv


# --- cases -----------------------------------------------------------------------------------------


def _params():
    out = []
    only = re.compile(
        os.environ.get("LABSE_CONTRACT_ONLY", "")
    )  # e.g. "^mining |^pipelines.vocab$"
    for command in COMMANDS:
        if not only.search(command):
            continue
        cmd = TABLE.get(command)
        for case in CASES:
            marks = []
            if cmd is not None:
                if cmd.applies(case):
                    continue  # declared not applicable: listed by test_not_applicable_declared
                reason = cmd.xfail.get(case)
                if reason:
                    marks.append(pytest.mark.xfail(strict=False, reason=reason))
                if case in cmd.slow:
                    marks.append(pytest.mark.slow)
            out.append(pytest.param(command, case, id=f"{command}:{case}", marks=marks))
    return out


ERROR_LINE = re.compile(r"\b(ERROR|CRITICAL)\b|^error:|: error:")


def error_lines(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ERROR_LINE.search(ln)]


def _names(line: str, wanted: list[str]) -> bool:
    return any(w and w in line for w in wanted)


def _scaled(args: tuple[str, ...], k: int) -> list[str]:
    """``args`` with every count multiplied by ``k`` ("300,300" -> "1200,1200")."""
    return [
        re.sub(r"\d+", lambda m: str(int(m.group()) * k), a) if not a.startswith("-") else a
        for a in args
    ]


def _run_concurrent(
    cmd: Cmd,
    command: str,
    case: str,
    inp: str,
    where: Path,
    d: Path,
    env: dict,
    ctx,
    attempts: int = 3,
):
    """Two writers into one output; for a resumable command, proven to overlap.

    A resumable command's second writer starts once the first holds the claim. If the first
    has ended before the second has, the second may have resumed legitimately from the
    first's checkpoint: that run proved nothing, so it is made again with a 4x longer first
    run (a 600-step tiny pretraining ended in ~2 s on an idle machine, before the second
    process had imported torch)."""
    for attempt in range(attempts):
        out = where / ("out" if attempt == 0 else f"out{attempt}")
        argv = _expand(cmd, case, inp, out, d) + _scaled(cmd.concurrent_args, 4**attempt)
        with ThreadPoolExecutor(2) as pool:
            first = pool.submit(run_command, command, argv, env, where / f"w0-{attempt}", ctx)
            if cmd.resumable:  # the second starts while the first holds the output
                deadline = time.monotonic() + 120
                while not (out / "_CLAIM.json").exists() and not first.done():
                    assert time.monotonic() < deadline, "the first writer took no claim"
                    time.sleep(0.02)
            second = pool.submit(run_command, command, argv, env, where / f"w1-{attempt}", ctx)
            b = second.result()
            overlapped = not first.done()
            a = first.result()
        if overlapped or not cmd.resumable or attempt == attempts - 1:
            return [a, b], inp, out
        logging.getLogger(__name__).warning(
            "%s: the first writer ended before the second; again with a longer run", command
        )
    raise AssertionError("unreachable")


def _run_case(command: str, case: str, d: Path, base: Path, ctx, damaged, truncated):
    cmd = TABLE[command]
    where = base / re.sub(r"\W+", "_", command) / case
    where.mkdir(parents=True, exist_ok=True)
    out = where / "out"
    env = base_env()
    if case == "concurrent":
        inp = (cmd.good or "").replace("{D}", str(d))
        return _run_concurrent(cmd, command, case, inp, where, d, env, ctx)
    inp = make_input(case, cmd.fmt, where, d, damaged, truncated) if cmd.fmt else None
    argv = _expand(cmd, case, inp, out, d)
    if case in S3_CASES:
        argv = _remote_setup(cmd, case, argv, env)
    limit = REMOTE_LIMIT_S + 30 if case in S3_CASES else CASE_LIMIT_S
    return run_command(command, argv, env, where, ctx, limit), inp, out


@pytest.fixture(scope="module")
def results(data, tmp_path_factory, damaged_parquet, truncated_parquet, request):
    """Every selected case, run in parallel once."""
    wanted = [
        (p.callspec.params["command"], p.callspec.params["case"])
        for p in request.session.items
        if p.originalname == "test_contract" and hasattr(p, "callspec")
    ]
    wanted = [w for w in wanted if w[0] in TABLE]
    base = tmp_path_factory.mktemp("contract_runs")
    ctx = cli_context()
    # Concurrent cases first: they are the longest, the short ones fill in around them.
    wanted.sort(key=lambda w: (w[1] != "concurrent", w))
    with ThreadPoolExecutor(max_workers=int(os.environ.get("LABSE_CONTRACT_JOBS", "3"))) as pool:
        futs = {
            w: pool.submit(_run_case, *w, data, base, ctx, damaged_parquet, truncated_parquet)
            for w in wanted
        }
        done = {w: _result_or_error(f) for w, f in futs.items()}
    with open(base / "timings.txt", "w") as f:
        for w, got in sorted(done.items(), key=lambda kv: str(kv[0])):
            if isinstance(got, Exception):
                f.write(f"  error        {w[0]}:{w[1]}: {got!r}\n")
                continue
            res = got[0]
            for r in res if isinstance(res, list) else [res]:
                f.write(f"{r.seconds:7.1f}s rc={r.rc:3d} {w[0]}:{w[1]}\n")
    return done


def _result_or_error(fut):
    """A case that could not even be set up fails alone, not the whole module."""
    try:
        return fut.result()
    except Exception as e:  # noqa: BLE001 - re-raised by the case's test
        return e


def _check_error(res: CliResult, wanted: list[str], what: str) -> None:
    assert "Traceback" not in res.stderr, f"{what}: traceback\n{res.stderr[-3000:]}"
    lines = error_lines(res.stderr)
    assert res.rc == 2, f"{what}: exit {res.rc}, not 2\n{res.stderr[-3000:]}"
    assert len(lines) == 1, f"{what}: {len(lines)} error lines, not one\n{res.stderr[-3000:]}"
    assert _names(lines[0], wanted), f"{what}: the error names none of {wanted}: {lines[0]}"


@pytest.mark.slow
@pytest.mark.parametrize(("command", "case"), _params())
def test_contract(command, case, results, data):
    assert command in TABLE, f"{command}: add an entry to TABLE in {__file__}"
    cmd = TABLE[command]
    got = results[(command, case)]
    if isinstance(got, Exception):
        raise got
    res, inp, out = got
    if case == "concurrent":
        a, b = res
        for r in (a, b):
            assert "Traceback" not in r.stderr, f"traceback\n{r.stderr[-3000:]}"
        codes = sorted([a.rc, b.rc])
        assert codes == [0, 2], (
            f"two writers into one output: exits {codes}, want one 0 and one 2\n"
            f"{a.stderr[-2000:]}\n---\n{b.stderr[-2000:]}"
        )
        loser = a if a.rc == 2 else b
        _check_error(loser, [str(out), "--output", os.path.basename(str(out))], "second writer")
        leftovers = (
            [p.name for p in out.iterdir() if p.name == "_CLAIM.json" or p.name.startswith("_tmp-")]
            if out.is_dir()
            else []
        )
        assert not leftovers, f"the winner left {leftovers} in {out}"
        if (out / "stats.json").exists():
            _balanced_stats(out, a)
        return
    assert res.rc != -9, f"did not end within the limit\n{res.stderr[-3000:]}"
    if case in S3_CASES:
        assert res.seconds < REMOTE_LIMIT_S, f"took {res.seconds:.0f}s\n{res.stderr[-3000:]}"
    check = cmd.ok.get(case) or (_replaced_line if case == "non_utf8" else None)
    if check is not None and res.rc == 0:
        assert "Traceback" not in res.stderr, res.stderr[-3000:]
        check(out, res)
        return
    flags = [a for a in cmd.args if a.startswith("--")]
    wanted = [inp or "", os.path.basename(inp or "") if inp else ""]
    if inp and "{src}-{trg}" in inp:  # a sources glob: the error names the file it matched
        wanted.append(os.path.basename(inp.format(src="de", trg="en")))
    flag = next((cmd.args[i - 1] for i, a in enumerate(cmd.args) if "{IN}" in a), None)
    if flag and flag.startswith("--"):
        wanted.append(flag)
    elif inp is None:
        wanted += flags
    _check_error(res, [w for w in wanted if w], f"{command} {case}")


def test_every_command_has_an_entry():
    missing = [c for c in COMMANDS if c not in TABLE]
    assert not missing, f"add {missing} to TABLE in {__file__} (how it takes input and output)"
    stale = [c for c in TABLE if c not in COMMANDS]
    assert not stale, f"TABLE has entries for commands that no longer exist: {stale}"


def test_scripts_are_among_the_commands():
    modules = {c.split()[0] for c in COMMANDS}
    for name, target in scripts().items():
        module = target.split(":")[0]
        module = module[: -len(".__main__")] if module.endswith(".__main__") else module
        assert module in modules, f"console script {name} -> {target} is not discovered"


def test_not_applicable_is_declared_with_a_reason():
    for command, cmd in TABLE.items():
        assert set(cmd.na) <= set(CASES), f"{command}: unknown cases {set(cmd.na) - set(CASES)}"
        for case, why in cmd.na.items():
            assert why.strip(), f"{command}:{case} is declared not applicable without a reason"
        if cmd.fmt is None:
            assert all(cmd.applies(c) for c in CASES if c != "concurrent"), command
