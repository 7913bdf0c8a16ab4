"""Command line: ``python -m labse_model {pretrain,train,encode}`` (console script ``labse-model``)."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import re
from typing import TYPE_CHECKING

from labse_common.cli import (
    add_config_options,
    add_log_level_option,
    add_output_option,
    exit_with,
    run_main,
)
from labse_common.config import load
from labse_common.errors import InputError, UsageError
from labse_common.filesystems import is_remote
from labse_common.logs import setup_logging
from labse_common.remote import require_local

if TYPE_CHECKING:
    from labse_common.sections.model import ModelConfig
    from labse_common.sections.pretrain import PretrainConfig
    from labse_common.sections.train import TrainConfig

log = logging.getLogger("labse_model")


def _train_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help="train the dual encoder on translation pairs (torchrun when --nproc-per-node > 1)",
        description=(
            "Train a LaBSE dual encoder (bidirectional additive-margin ranking loss, in-batch "
            "negatives gathered from every rank). Resumes automatically from the newest valid "
            "checkpoint under OUTPUT/checkpoints."
        ),
    )
    add_config_options(p, "train", "lr=1e-4 (model keys as model.KEY=value)")
    add_log_level_option(p, subcommand=True)
    p.add_argument(
        "--pairs",
        action="append",
        required=True,
        metavar="FILE_OR_GLOB",
        help="pair file: TSV (src<TAB>trg[<TAB>src_lang<TAB>trg_lang], .gz ok) or Parquet (src, trg), a glob, or a folder of <lang>/ shards (streamed, languages mixed by p^alpha); repeat for several",
    )
    add_output_option(p, "run directory: checkpoints/, model/, metrics.jsonl, tb/, stats.json")
    p.add_argument(
        "--vocab",
        metavar="DIR",
        help="BERT tokenizer directory (vocab.txt/tokenizer.json), e.g. the vocab stage output; default: train.vocab, else (with train.learn_vocab) a WordPiece learned from the pairs; not needed with --init",
    )
    p.add_argument(
        "--init",
        metavar="CHECKPOINT",
        help="start from this encoder (HF BertModel or sentence-transformers directory) instead of random weights",
    )
    p.add_argument(
        "--max-steps",
        type=int,
        help="total optimizer steps (overrides train.steps; sets the LR schedule length)",
    )
    p.add_argument(
        "--stop-at-step",
        type=int,
        help="checkpoint and exit after this step, to continue later (a job slice on a preemptible cluster)",
    )
    p.add_argument(
        "--nproc-per-node",
        type=int,
        default=1,
        help="worker processes per node (GPUs per node, or CPU processes); > 1 launches torchrun (default: 1)",
    )
    p.add_argument(
        "--nnodes", default="1", help="number of nodes, or MIN:MAX for elastic runs (default: 1)"
    )
    p.add_argument("--node-rank", type=int, help="this node's rank (static rendezvous only)")
    p.add_argument(
        "--rdzv-endpoint", metavar="HOST:PORT", help="rendezvous endpoint for multi-node runs"
    )
    p.add_argument("--rdzv-backend", default="c10d", help="rendezvous backend (default: c10d)")
    p.add_argument("--rdzv-id", help="job id shared by all nodes (default: random)")
    p.add_argument(
        "--max-restarts",
        type=int,
        default=0,
        help="let the elastic agent restart all workers this many times after a failure; they resume from the last checkpoint. Rerunning the same command after a failure also resumes (default: 0)",
    )
    p.add_argument(
        "overrides",
        nargs="*",
        metavar="key=value",
        help="config overrides: train keys (lr=1e-4) or model.KEY=value (model.hidden_size=128)",
    )


def _launcher_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--nproc-per-node",
        type=int,
        default=1,
        help="worker processes per node (GPUs per node, or CPU processes); > 1 launches torchrun (default: 1)",
    )
    p.add_argument(
        "--nnodes", default="1", help="number of nodes, or MIN:MAX for elastic runs (default: 1)"
    )
    p.add_argument("--node-rank", type=int, help="this node's rank (static rendezvous only)")
    p.add_argument(
        "--rdzv-endpoint", metavar="HOST:PORT", help="rendezvous endpoint for multi-node runs"
    )
    p.add_argument("--rdzv-backend", default="c10d", help="rendezvous backend (default: c10d)")
    p.add_argument("--rdzv-id", help="job id shared by all nodes (default: random)")
    p.add_argument(
        "--max-restarts",
        type=int,
        default=0,
        help="let the elastic agent restart all workers this many times after a failure; they resume from the last checkpoint (default: 0)",
    )


def _pretrain_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "pretrain",
        help="pretrain the encoder with MLM + TLM and progressive stacking (torchrun when --nproc-per-node > 1)",
        description=(
            "Pretrain a BERT encoder: masked language modelling on monolingual sentences and "
            "translation language modelling on pairs, growing the depth by progressive stacking "
            "(L/4, L/2, L layers with the paper preset). Inputs stream from shards. Resumes "
            "automatically from the newest valid checkpoint under OUTPUT/checkpoints; the final "
            "encoder (OUTPUT/model) is what `train --init` starts from."
        ),
    )
    add_config_options(p, "pretrain", "lr=1e-4 (model keys as model.KEY=value)")
    add_log_level_option(p, subcommand=True)
    p.add_argument(
        "--sentences",
        action="append",
        metavar="DIR_OR_GLOB",
        help="monolingual sentences: the corpus output folder (<lang>/*.parquet, column text; languages mixed by p^alpha), Parquet/text files or a glob; repeatable",
    )
    p.add_argument(
        "--pairs",
        action="append",
        metavar="FILE_OR_GLOB",
        help="translation pairs for TLM: TSV (src<TAB>trg[...], .gz ok) or Parquet (src, trg), a glob or a <lang>/ folder; repeatable",
    )
    p.add_argument(
        "--vocab",
        metavar="DIR",
        help="BERT tokenizer directory (vocab.txt/tokenizer.json), e.g. the vocab stage output",
    )
    p.add_argument(
        "--init",
        metavar="DIR",
        help="continue from this pretrained encoder (with its mlm_head.safetensors) instead of random weights",
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
    _launcher_options(p)
    p.add_argument(
        "overrides",
        nargs="*",
        metavar="key=value",
        help="config overrides: pretrain keys (lr=1e-4) or model.KEY=value",
    )


def _encode_parser(sub: argparse._SubParsersAction) -> None:
    from labse_common.cli import add_output_option, add_overwrite_option, add_quantize_option

    p = sub.add_parser(
        "encode",
        help="embed sentences into an embedding store (or one .npy)",
        description="Embed sentences with a LaBSE checkpoint (labse_model.embed_store, the path "
        "`mining embed` and `pipelines.embed` share): row i of the output is input row i; blank "
        "lines keep their row with a zero vector and are counted in stats.json.",
    )
    p.add_argument(
        "--model",
        required=True,
        metavar="DIR",
        help="HF BertModel or sentence-transformers directory",
    )
    p.add_argument(
        "--input",
        required=True,
        metavar="FILE|DIR|GLOB",
        help="text file (one sentence per line), Parquet file, folder of Parquet "
        "files or embedding store",
    )
    add_output_option(
        p,
        "an embedding store folder (any path not ending in .npy; read by `mining mine "
        "--src-emb DIR` and load_vectors), or a .npy file",
        metavar="DIR|EMB.npy",
    )
    p.add_argument(
        "--dtype",
        choices=["float16", "float32"],
        default=None,
        help="stored precision (default float32)",
    )
    p.add_argument(
        "--fp16",
        action="store_true",
        help="same as --dtype float16 (computed in fp16 on GPU, fp32 on CPU)",
    )
    p.add_argument(
        "--batch-size", type=int, default=64, help="sentences per forward pass (default: 64)"
    )
    add_quantize_option(p)
    p.add_argument(
        "--max-seq-length",
        type=int,
        default=128,
        help="tokens per sentence incl. [CLS] and [SEP] (at least 3); longer ones are "
        "truncated and counted (default: 128)",
    )
    p.add_argument(
        "--text-column", default="text", help="Parquet column holding the sentences (default: text)"
    )
    p.add_argument(
        "--rows-per-shard",
        "--shard-size",
        dest="rows_per_shard",
        type=int,
        default=None,
        help="rows per shard of the store (default 100000)",
    )
    p.add_argument("--device", help="cpu, cuda, cuda:1 ... (default: cuda if available)")
    add_overwrite_option(p, "store folder or .npy (the old output is replaced at the end)")
    p.add_argument(
        "--stats",
        metavar="FILE",
        help="also write the stats here (a store keeps its stats.json inside, a "
        "X.npy its own X.stats.json beside it)",
    )
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    add_log_level_option(p, subcommand=True)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="labse-model", description="LaBSE dual-encoder training and encoding."
    )
    add_log_level_option(parser)
    sub = parser.add_subparsers(dest="command", required=True)
    _pretrain_parser(sub)
    _train_parser(sub)
    _encode_parser(sub)
    return parser


def _split_overrides(overrides: list[str]) -> tuple[list[str], list[str]]:
    model, train = [], []
    for o in overrides:
        if o.startswith("model."):
            model.append(o[len("model.") :])
        else:
            train.append(o[len("train.") :] if o.startswith("train.") else o)
    return model, train


def _worker_argv(args: argparse.Namespace) -> list[str]:
    """The train command line each torchrun worker runs (without the launcher options)."""
    argv = ["train", "--config", args.config, "--output", args.output]
    for item in args.set:
        argv += ["--set", item]
    for p in args.pairs:
        argv += ["--pairs", p if is_remote(p) else os.path.abspath(p)]
    for flag, value in (("--vocab", args.vocab), ("--init", args.init)):
        if value:
            argv += [flag, os.path.abspath(value)]
    for flag, value in (("--max-steps", args.max_steps), ("--stop-at-step", args.stop_at_step)):
        if value is not None:
            argv += [flag, str(value)]
    return argv + list(args.overrides)


def _check_inputs(flag: str, specs: list[str] | None, what: str = "input file") -> None:
    """Files, globs or <lang>/ folders; a missing one is one line naming it, before any worker."""
    from labse_model.stream import expand_inputs

    if not specs:
        return
    try:
        expand_inputs(specs, what)
    except FileNotFoundError as e:  # the stream's own "not found" (no filename attached)
        raise InputError(None, str(e), flag) from None


def _check_dirs(*flag_paths: tuple[str, str | None]) -> None:
    from labse_model.model import check_vocab_dir

    for flag, path in flag_paths:
        if path and not os.path.isdir(path):
            raise InputError(path, "folder not found", flag)
        if path and flag == "--vocab":
            check_vocab_dir(path)


def _run_claim(args: argparse.Namespace):
    """Hold OUTPUT/_CLAIM.json while the run writes there: a second run into the same folder
    stops with exit 2 instead of mixing checkpoints. Held by the process that starts the run
    (one node: this one; several: the launcher of node rank 0), not by torchrun workers; a run
    that was killed is resumed by the next, which takes its claim over."""
    from labse_common.output_dir import claim_output
    from labse_model import launcher

    if launcher.is_worker() or (str(args.nnodes) != "1" and args.node_rank != 0):
        return contextlib.nullcontext()
    return claim_output(args.output, resumable=True)


def run_train(args: argparse.Namespace) -> int:

    model_ov, train_ov = _split_overrides([*args.overrides, *args.set])
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
    _check_inputs("--pairs", args.pairs, "pair file")
    _check_dirs(("--vocab", args.vocab), ("--init", args.init))
    _check_vocabulary_given(args, train_cfg)
    if args.nproc_per_node < 1:
        raise UsageError("--nproc-per-node must be >= 1")
    with _run_claim(args):
        return _train(args, model_cfg, train_cfg)


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


def check_launch_flags(args: argparse.Namespace) -> None:
    """The launch flags checked as the ``launch:`` section is (labse_common/sections/launch.py)
    before anything starts: a bad --nnodes, a --node-rank beyond it or an endpoint that is not
    HOST:PORT was a torchrun traceback, or minutes of DNS retries, once training started."""
    from labse_common.sections.launch import LaunchConfig

    try:
        LaunchConfig(
            nproc_per_node=args.nproc_per_node,
            nnodes=str(args.nnodes),
            node_rank=args.node_rank,
            rdzv_endpoint=args.rdzv_endpoint,
        ).validate()
    except UsageError as e:  # name the flags the user typed, not the config keys
        raise UsageError(re.sub(r"launch\.(\w+)", _flag_name, str(e))) from None


def _flag_name(m: re.Match) -> str:
    return "--" + m.group(1).replace("_", "-")


def _train(args: argparse.Namespace, model_cfg: ModelConfig, train_cfg: TrainConfig) -> int:
    from labse_model import launcher

    check_launch_flags(args)
    if launcher.needs_launch(args.nproc_per_node, args.nnodes, args.rdzv_endpoint):
        return launcher.launch(
            launcher.torchrun_args(
                _worker_argv(args),
                args.nproc_per_node,
                args.nnodes,
                args.node_rank,
                args.rdzv_endpoint,
                args.rdzv_backend,
                args.rdzv_id,
                args.max_restarts,
            )
        )
    from labse_model.distributed import shutdown
    from labse_model.train import train

    try:
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
    finally:
        shutdown()
    if int(os.environ.get("RANK", "0")) == 0:
        print(
            f"step {summary['step']}/{summary['total_steps']}  loss {summary['loss']:.4f}  model {summary.get('model', '-')}"
        )
    return 0


def _pretrain_worker_argv(args: argparse.Namespace) -> list[str]:
    argv = ["pretrain", "--config", args.config, "--output", args.output]
    for item in args.set:
        argv += ["--set", item]
    for flag, values in (("--sentences", args.sentences), ("--pairs", args.pairs)):
        for v in values or []:
            argv += [flag, v if is_remote(v) else os.path.abspath(v)]
    for flag, value in (("--vocab", args.vocab), ("--init", args.init)):
        if value:
            argv += [flag, os.path.abspath(value)]
    if args.stage_steps:
        argv += ["--stage-steps", args.stage_steps]
    if args.stop_at_step is not None:
        argv += ["--stop-at-step", str(args.stop_at_step)]
    return argv + list(args.overrides)


def run_pretrain(args: argparse.Namespace) -> int:
    model_ov, pre_ov = [], []
    for o in [*args.overrides, *args.set]:
        if o.startswith("model."):
            model_ov.append(o[len("model.") :])
        else:
            pre_ov.append(o[len("pretrain.") :] if o.startswith("pretrain.") else o)
    model_cfg = load("model", args.config, model_ov)
    stage_steps = None
    if args.stage_steps:
        try:
            stage_steps = [int(x) for x in args.stage_steps.split(",") if x.strip()]
        except ValueError:  # int() of the flag's parts
            raise UsageError(
                f"--stage-steps {args.stage_steps!r} is not a list of integers"
            ) from None
    # The typed section, checked before any worker starts, goes to pretrain() as is.
    stages = {"stage_steps": stage_steps, "stages": len(stage_steps)} if stage_steps else None
    pre_cfg = load("pretrain", args.config, pre_ov, stages)
    if not (args.sentences or args.pairs):
        raise UsageError("nothing to pretrain on: give --sentences and/or --pairs")
    require_local(args.output, "--output", "labse_model pretrain (torch checkpoints)")
    _check_inputs("--sentences", args.sentences)  # a missing file or empty glob fails here, once
    _check_inputs("--pairs", args.pairs)
    _check_dirs(("--vocab", args.vocab), ("--init", args.init))
    if args.nproc_per_node < 1:
        raise UsageError("--nproc-per-node must be >= 1")
    from labse_model.pretrain import stage_layers

    # The stacking plan must fit the model: a ConfigError here, not in every worker.
    stage_layers(model_cfg.num_hidden_layers, pre_cfg.stages)
    with _run_claim(args):
        return _pretrain(args, model_cfg, pre_cfg)


def _pretrain(args: argparse.Namespace, model_cfg: ModelConfig, pre_cfg: PretrainConfig) -> int:
    from labse_model import launcher

    check_launch_flags(args)
    if launcher.needs_launch(args.nproc_per_node, args.nnodes, args.rdzv_endpoint):
        return launcher.launch(
            launcher.torchrun_args(
                _pretrain_worker_argv(args),
                args.nproc_per_node,
                args.nnodes,
                args.node_rank,
                args.rdzv_endpoint,
                args.rdzv_backend,
                args.rdzv_id,
                args.max_restarts,
            )
        )
    from labse_model.distributed import shutdown
    from labse_model.pretrain import pretrain

    try:
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
    finally:
        shutdown()
    if int(os.environ.get("RANK", "0")) == 0:
        last = summary.get("last", {})
        print(
            f"step {summary['step']}/{summary['total_steps']}  stage {summary['stage']}  "
            f"loss {summary['loss']:.4f}  eval_mlm_loss {last.get('eval_mlm_loss', float('nan')):.4f}  "
            f"model {summary.get('model', '-')}"
        )
    return 0


def run_encode(args: argparse.Namespace) -> int:
    from labse_common.errors import UsageError
    from labse_model import embed_store

    if args.fp16 and args.dtype == "float32":
        raise UsageError("--fp16 contradicts --dtype float32")
    dtype = "float16" if args.fp16 else (args.dtype or "float32")
    common = dict(
        dtype=dtype,
        batch_size=args.batch_size,
        text_column=args.text_column,
        device=args.device,
        max_seq_length=args.max_seq_length,
        quantize=args.quantize,
        show_progress=not args.no_progress,
    )
    if str(args.output).endswith(".npy"):
        if args.rows_per_shard is not None:
            raise UsageError(
                "--rows-per-shard writes an embedding store folder: give --output "
                "DIR (not a .npy file)"
            )
        report = embed_store.embed_to_npy(
            args.model,
            args.input,
            args.output,
            stats_path=args.stats,
            overwrite=args.overwrite,
            **common,
        )
    else:
        report = embed_store.embed_to_store(
            args.model,
            args.input,
            args.output,
            overwrite=args.overwrite,
            rows_per_shard=embed_store.ROWS_PER_SHARD
            if args.rows_per_shard is None
            else args.rows_per_shard,
            **common,
        )
        if args.stats:
            embed_store.write_json(args.stats, report)
    print(embed_store.describe(report))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.log_level)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # per-file load/save bars drown the training bar
    runners = {"train": run_train, "pretrain": run_pretrain, "encode": run_encode}
    # One error mapping; every s3:// / gs:// value is preflighted before the command runs.
    return run_main(lambda: runners[args.command](args), log, args=args)


if __name__ == "__main__":
    exit_with(main)
