"""Train the dual encoder on translation pairs (torchrun when --nproc-per-node > 1)."""

from __future__ import annotations

import argparse
import logging
import os
from typing import TYPE_CHECKING

from labse_common.cli import (
    add_config_options,
    add_log_level_option,
    add_output_option,
    command_parser,
    run_main,
)
from labse_common.config import load
from labse_common.errors import UsageError
from labse_common.logs import setup_logging
from labse_common.remote import require_local
from labse_model import run_options as ro

if TYPE_CHECKING:
    from labse_common.sections.model import ModelConfig
    from labse_common.sections.train import TrainConfig

log = logging.getLogger("labse_model")

SUMMARY = (
    "Train a LaBSE dual encoder on translation pairs (bidirectional additive-margin ranking\n"
    "loss, in-batch negatives gathered from every rank)."
)
DETAILS = (
    "A rerun of the same command resumes from the newest valid checkpoint under\n"
    "OUTPUT/checkpoints. With --nproc-per-node > 1 or several nodes it starts torchrun."
)
EXAMPLES = (
    "python -m labse_model train --pairs pairs.tsv --vocab vocab/ --output run/ --max-steps 1000",
    "python -m labse_model train --config paper --pairs 'pairs/*.parquet' --init pretrained/model "
    "--output run/ --nproc-per-node 8",
)


def build_parser() -> argparse.ArgumentParser:
    p = command_parser("python -m labse_model train", SUMMARY, DETAILS, EXAMPLES)
    add_config_options(p, "train", "lr=1e-4 (model keys as model.KEY=value)")
    add_log_level_option(p)
    p.add_argument(
        "--pairs",
        action="append",
        required=True,
        metavar="FILE_OR_GLOB",
        help="pair file: TSV (src<TAB>trg[<TAB>src_lang<TAB>trg_lang], .gz ok) or Parquet "
        "(src, trg), a glob, or a folder of <lang>/ shards (streamed, languages mixed by "
        "p^alpha); repeat for several",
    )
    add_output_option(p, "run directory: checkpoints/, model/, metrics.jsonl, tb/, stats.json")
    p.add_argument(
        "--vocab",
        metavar="DIR",
        help="BERT tokenizer directory (vocab.txt/tokenizer.json), e.g. the vocab stage output; "
        "default: train.vocab, else (with train.learn_vocab) a WordPiece learned from the "
        "pairs; not needed with --init",
    )
    p.add_argument(
        "--init",
        metavar="CHECKPOINT",
        help="start from this encoder (HF BertModel or sentence-transformers directory) "
        "instead of random weights",
    )
    p.add_argument(
        "--max-steps",
        type=int,
        help="total optimizer steps (overrides train.steps; sets the LR schedule length)",
    )
    p.add_argument(
        "--stop-at-step",
        type=int,
        help="checkpoint and exit after this step, to continue later (a job slice on a "
        "preemptible cluster)",
    )
    ro.add_launcher_options(p, " Rerunning the same command after a failure also resumes")
    p.add_argument(
        "overrides",
        nargs="*",
        metavar="key=value",
        help="config overrides: train keys (lr=1e-4) or model.KEY=value (model.hidden_size=128)",
    )
    return p


def worker_argv(args: argparse.Namespace) -> list[str]:
    """The train command line each torchrun worker runs (without the launcher options)."""
    argv = ["train", "--config", args.config, "--output", args.output]
    for item in args.set:
        argv += ["--set", item]
    argv += ro.local_paths("--pairs", args.pairs)
    for flag, value in (("--vocab", args.vocab), ("--init", args.init)):
        if value:
            argv += [flag, os.path.abspath(value)]
    for flag, value in (("--max-steps", args.max_steps), ("--stop-at-step", args.stop_at_step)):
        if value is not None:
            argv += [flag, str(value)]
    return argv + list(args.overrides)


def run(args: argparse.Namespace) -> int:
    model_ov, train_ov = ro.split_overrides([*args.overrides, *args.set], "train")
    # Validate config and paths before starting any worker: the typed sections reject unknown
    # keys, wrong types, NaN and out-of-range values, naming the key (exit status 2).
    model_cfg = load("model", args.config, model_ov)
    train_cfg = load("train", args.config, train_ov)  # the typed section goes to train() as is
    steps, flag = (
        (args.max_steps, "--max-steps")
        if args.max_steps is not None
        else (train_cfg.steps, "train.steps")
    )
    if steps < 1:  # 0 is the runner's "no training" (with model.init); here it would be a no-op
        raise UsageError(f"{flag} is {steps}: nothing to train (give at least 1 step)")
    require_local(args.output, "--output", "labse_model train (torch checkpoints)")
    ro.check_inputs("--pairs", args.pairs, "pair file")
    ro.check_dirs(("--vocab", args.vocab), ("--init", args.init))
    _check_vocabulary_given(args, train_cfg)
    ro.check_launch_flags(args)
    with ro.run_claim(args):
        return ro.launch_or_run(
            args, lambda: worker_argv(args), lambda: _train(args, model_cfg, train_cfg)
        )


def _check_vocabulary_given(args: argparse.Namespace, cfg: TrainConfig) -> None:
    """A fresh run needs a tokenizer from somewhere: --vocab, --init, train.vocab or
    train.learn_vocab; a run that resumes takes its checkpoint's. Checked before any worker
    starts, so the mistake is one line and exit 2, not a worker's traceback."""
    if args.vocab or args.init or cfg.vocab or cfg.learn_vocab:
        return
    from labse_model.checkpoint import list_checkpoints

    if list_checkpoints(os.path.join(args.output, "checkpoints")):
        return
    raise UsageError(
        "no vocabulary: pass --vocab DIR (e.g. the vocab stage output) or --init CHECKPOINT, "
        "or --set train.learn_vocab=true to learn a small WordPiece from the pairs"
    )


def _train(args: argparse.Namespace, model_cfg: ModelConfig, train_cfg: TrainConfig) -> int:
    from labse_model.train import train

    summary = train(
        model_cfg,
        train_cfg,
        args.pairs,
        args.output,
        vocab=args.vocab,
        init=args.init,
        max_steps=args.max_steps,
        stop_at_step=args.stop_at_step,
    )
    if ro.is_rank_zero():
        print(
            f"step {summary['step']}/{summary['total_steps']}  loss {summary['loss']:.4f}  "
            f"model {summary.get('model', '-')}"
        )
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.log_level)
    ro.quiet_transformers()
    # One error mapping; every s3:// / gs:// value is preflighted before the command runs.
    return run_main(lambda: run(args), log, args=args)
