"""Pretrain the encoder with MLM + TLM and progressive stacking (torchrun when --nproc-per-node > 1)."""

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
    from labse_common.sections.pretrain import PretrainConfig

log = logging.getLogger("labse_model")

SUMMARY = (
    "Pretrain a BERT encoder: masked language modelling on monolingual sentences and\n"
    "translation language modelling on pairs, growing the depth by progressive stacking\n"
    "(L/4, L/2, L layers with the paper preset)."
)
DETAILS = (
    "Inputs stream from shards. A rerun of the same command resumes from the newest valid\n"
    "checkpoint under OUTPUT/checkpoints; the final encoder (OUTPUT/model) is what\n"
    "`train --init` starts from."
)
EXAMPLES = (
    "python -m labse_model pretrain --sentences sentences/ --vocab vocab/ --output pre/",
    "python -m labse_model pretrain --config paper --sentences sentences/ --pairs pairs.tsv "
    "--vocab vocab/ --output pre/ --nproc-per-node 8",
)


def build_parser() -> argparse.ArgumentParser:
    p = command_parser("python -m labse_model pretrain", SUMMARY, DETAILS, EXAMPLES)
    add_config_options(p, "pretrain", "lr=1e-4 (model keys as model.KEY=value)")
    add_log_level_option(p)
    p.add_argument(
        "--sentences",
        action="append",
        metavar="DIR_OR_GLOB",
        help="monolingual sentences: the corpus output folder (<lang>/*.parquet, column text; "
        "languages mixed by p^alpha), Parquet/text files or a glob; repeatable",
    )
    p.add_argument(
        "--pairs",
        action="append",
        metavar="FILE_OR_GLOB",
        help="translation pairs for TLM: TSV (src<TAB>trg[...], .gz ok) or Parquet (src, trg), "
        "a glob or a <lang>/ folder; repeatable",
    )
    p.add_argument(
        "--vocab",
        metavar="DIR",
        help="BERT tokenizer directory (vocab.txt/tokenizer.json), e.g. the vocab stage output",
    )
    p.add_argument(
        "--init",
        metavar="DIR",
        help="continue from this pretrained encoder (with its mlm_head.safetensors) instead of "
        "random weights",
    )
    add_output_option(
        p,
        "run directory: checkpoints/, model/ (+ mlm_head.safetensors), "
        "metrics.jsonl, tb/, stats.json",
    )
    p.add_argument(
        "--stage-steps",
        metavar="A,B,C",
        help="optimizer steps per stacking stage (overrides pretrain.stage_steps and stages)",
    )
    p.add_argument(
        "--stop-at-step", type=int, help="checkpoint and exit after this step, to continue later"
    )
    ro.add_launcher_options(p)
    p.add_argument(
        "overrides",
        nargs="*",
        metavar="key=value",
        help="config overrides: pretrain keys (lr=1e-4) or model.KEY=value",
    )
    return p


def worker_argv(args: argparse.Namespace) -> list[str]:
    """The pretrain command line each torchrun worker runs (without the launcher options)."""
    argv = ["pretrain", "--config", args.config, "--output", args.output]
    for item in args.set:
        argv += ["--set", item]
    argv += ro.local_paths("--sentences", args.sentences) + ro.local_paths("--pairs", args.pairs)
    for flag, value in (("--vocab", args.vocab), ("--init", args.init)):
        if value:
            argv += [flag, os.path.abspath(value)]
    if args.stage_steps:
        argv += ["--stage-steps", args.stage_steps]
    if args.stop_at_step is not None:
        argv += ["--stop-at-step", str(args.stop_at_step)]
    return argv + list(args.overrides)


def _stage_steps(value: str | None) -> list[int] | None:
    if not value:
        return None
    try:
        return [int(x) for x in value.split(",") if x.strip()]
    except ValueError:  # int() of the flag's parts
        raise UsageError(f"--stage-steps {value!r} is not a list of integers") from None


def run(args: argparse.Namespace) -> int:
    model_ov, pre_ov = ro.split_overrides([*args.overrides, *args.set], "pretrain")
    model_cfg = load("model", args.config, model_ov)
    stage_steps = _stage_steps(args.stage_steps)
    # The typed section, checked before any worker starts, goes to pretrain() as is.
    stages = {"stage_steps": stage_steps, "stages": len(stage_steps)} if stage_steps else None
    pre_cfg = load("pretrain", args.config, pre_ov, stages)
    if not (args.sentences or args.pairs):
        raise UsageError("nothing to pretrain on: give --sentences and/or --pairs")
    require_local(args.output, "--output", "labse_model pretrain (torch checkpoints)")
    ro.check_inputs("--sentences", args.sentences)  # a missing file or empty glob fails here
    ro.check_inputs("--pairs", args.pairs)
    ro.check_dirs(("--vocab", args.vocab), ("--init", args.init))
    ro.check_launch_flags(args)
    from labse_model.pretrain import stage_layers

    # The stacking plan must fit the model: a ConfigError here, not in every worker.
    stage_layers(model_cfg.num_hidden_layers, pre_cfg.stages)
    with ro.run_claim(args):
        return ro.launch_or_run(
            args, lambda: worker_argv(args), lambda: _pretrain(args, model_cfg, pre_cfg)
        )


def _pretrain(args: argparse.Namespace, model_cfg: ModelConfig, pre_cfg: PretrainConfig) -> int:
    from labse_model.pretrain import pretrain

    summary = pretrain(
        model_cfg,
        pre_cfg,
        args.sentences,
        args.pairs,
        args.output,
        vocab=args.vocab,
        init=args.init,
        stop_at_step=args.stop_at_step,
    )
    if ro.is_rank_zero():
        last = summary.get("last", {})
        print(
            f"step {summary['step']}/{summary['total_steps']}  stage {summary['stage']}  "
            f"loss {summary['loss']:.4f}  "
            f"eval_mlm_loss {last.get('eval_mlm_loss', float('nan')):.4f}  "
            f"model {summary.get('model', '-')}"
        )
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.log_level)
    ro.quiet_transformers()
    # One error mapping; every s3:// / gs:// value is preflighted before the command runs.
    return run_main(lambda: run(args), log, args=args)
