"""The stages from the sentences to the mined pairs: the vocabulary, pretraining, the dual
encoder, the embedding stores and the kNN mining."""

from __future__ import annotations

from pathlib import Path

from pipelines.run.corpus_stages import INPUTS, SENTENCES, has_source
from pipelines.run.declare import Command, Context, keys, stage


def _init_files(ctx: Context) -> list[str]:
    """The files of model.init (a replaced checkpoint reruns what embeds with it)."""
    if not ctx.init or ctx.on.get(TRAIN.name):
        return []
    return sorted(str(p) for p in Path(ctx.init).rglob("*") if p.is_file())[:200]


def _trained_off(ctx: Context) -> str | None:
    return f"model.init is given ({ctx.init})" if ctx.init else None


@stage(
    "smoothed multilingual wordpiece vocabulary (Beam + learner)",
    reads=(*keys("vocab"), "beam"),
    inputs=(SENTENCES,),
    outputs=("vocab.txt", "tokenizer.json", "vocab_stats.json", "stats.json"),
    off=_trained_off,
    engine=True,
)
def VOCAB(c: Context) -> list[Command]:
    return [
        c.py(
            "pipelines.vocab",
            "--input",
            c.d(SENTENCES) / "vocab",
            "--output",
            c.d(VOCAB),
            *c.config_args,
            "--overwrite",
            *c.beam_args,
        )
    ]


@stage(
    "MLM + TLM pretraining with progressive stacking",
    reads=(*keys("model", but=("init",)), *keys("pretrain"), "launch"),
    inputs=(SENTENCES, INPUTS, VOCAB),
    outputs=("model",),
    resumable=True,
    off=_trained_off,
)
def PRETRAIN(c: Context) -> list[Command]:
    return [
        c.py(
            "labse_model",
            "pretrain",
            *c.config_args,
            "--sentences",
            c.d(SENTENCES) / "vocab",
            "--pairs",
            c.d(INPUTS) / "train_pairs.tsv",
            "--vocab",
            c.d(VOCAB),
            "--output",
            c.d(PRETRAIN),
            *c.launch_args,
        )
    ]


def _train_off(c: Context) -> str | None:
    if c.init and c.values["train"]["steps"] == 0:
        return f"model.init is given ({c.init}) and train.steps is 0"
    return None


def _training_pairs(c: Context) -> Path:
    """With ``train.source_weights``, the pairs by ``<source>.<pair>`` folder, weighed by the
    rule; without, the one file, read as one group as before the rule existed."""
    if c.values["train"]["source_weights"]:
        return c.d(INPUTS) / "train_groups"
    return c.d(INPUTS) / "train_pairs.tsv"


@stage(
    "dual encoder, additive-margin softmax (torchrun-capable); fine-tunes model.init when given",
    reads=(*keys("model"), *keys("train"), "launch"),
    inputs=(INPUTS,),
    optional_inputs=(VOCAB, PRETRAIN),
    files=lambda c: [],
    outputs=("model", "metrics.jsonl", "stats.json"),
    resumable=True,
    off=_train_off,
)
def TRAIN(c: Context) -> list[Command]:
    # From model.init, else from the pretrained encoder; either checkpoint carries its own
    # tokenizer (a --vocab beside --init would only be ignored, with a warning).
    start = ["--init", c.init] if c.init else ["--init", c.d(PRETRAIN) / "model"]
    return [
        c.py(
            "labse_model",
            "train",
            *c.config_args,
            "--pairs",
            _training_pairs(c),
            *start,
            "--output",
            c.d(TRAIN),
            *c.launch_args,
        )
    ]


def encoder(c: Context, url: bool = False) -> Path | str:
    """The encoder that embeds: the trained one, else the one the user gave. With ``url`` (for
    a Beam job, whose workers do not see this machine's disk) a model.init on object storage is
    its URL: each worker copies it (labse_model.embed_store.load_model)."""
    from labse_common.filesystems import is_remote

    init = c.values["model"]["init"]
    if url and init and is_remote(init) and not c.on.get(TRAIN.name):
        return init
    return c.d(TRAIN) / "model" if c.on.get(TRAIN.name) else Path(c.init or "")


def _embed_outputs(c: Context) -> list[str]:
    return c.langs if c.values["beam"]["runner"] else [*c.langs, "stats.json"]


@stage(
    "embedding store per language of mining.pairs (a Beam job per language with beam.runner)",
    reads=("run.embed_batch_size", "run.embed_quantize", "mining.pairs", "model.init", "beam"),
    inputs=(SENTENCES,),
    optional_inputs=(TRAIN,),
    files=_init_files,
    outputs=_embed_outputs,
    # A rerun after a kill keeps the languages already embedded: the local command resumes by
    # itself (resumed_shards in its stats.json), the Beam jobs by command (pipelines/run/units.py).
    resumable=True,
    engine=True,
)
def EMBED(c: Context) -> list[Command]:
    batch, quantize = c.cfg["run"]["embed_batch_size"], c.cfg["run"]["embed_quantize"]
    if c.values["beam"]["runner"]:
        # The distributed form of the same embedding path: byte for byte the same stores.
        return [
            c.py(
                "pipelines.embed",
                "--input",
                c.d(SENTENCES) / "mine" / lang,
                "--model",
                encoder(c, url=True),
                "--output",
                c.d(EMBED) / lang,
                "--dtype",
                "float16",
                "--batch-size",
                batch,
                "--quantize",
                quantize,
                *c.beam_args,
            )
            for lang in c.langs
        ]
    return [
        c.py(
            "pipelines.e2e_tasks",
            "embed",
            "--sentences",
            c.d(SENTENCES) / "mine",
            "--langs",
            *c.langs,
            "--model",
            encoder(c),
            "--output",
            c.d(EMBED),
            "--batch-size",
            batch,
            "--quantize",
            quantize,
        )
    ]


def _lexicon_off(c: Context) -> str | None:
    if not has_source(c, "pairs"):
        return "no training pairs (sources.pairs) to fit the lexicon on"
    return None


@stage(
    "IBM Model 1 dictionaries fitted on the training pairs (the miner re-ranks with them; "
    "lex_fwd and lex_bwd of the mined pairs)",
    reads=(*keys("lexicon"), "mining.pairs"),
    inputs=(INPUTS,),
    outputs=("lexicon.parquet", "stats.json"),
    optional=True,
    off=_lexicon_off,
)
def LEXICON(c: Context) -> list[Command]:
    return [
        c.py(
            "filters",
            "lexicon",
            "--fit",
            c.d(INPUTS) / "train_pairs.tsv",
            # src, trg, src_lang, trg_lang without a header: the languages the lexicon records
            *("--layout", "src-trg", "--lang-columns", "col2", "col3"),
            # the pairs to mine: one without training pairs gets a pivot dictionary
            *(("--for-pairs", *c.pairs) if c.pairs else ()),
            "--output",
            c.d(LEXICON),
            "--overwrite",
            *c.config_args,
        )
    ]


@stage(
    "FAISS kNN + margin scoring of every pair of mining.pairs (candidates re-ranked with the "
    "lexicon when mining.lexicon_weight > 0; a Beam job per pair with beam.runner)",
    # Not "beam": its options reach the commands only on the engine, as arguments (a changed
    # command reruns the stage), and a local run does not depend on them.
    reads=keys("mining"),
    inputs=(SENTENCES, EMBED),
    optional_inputs=(LEXICON,),
    outputs=lambda c: [f"{p}/mined.parquet" for p in c.pairs] + ["stats.json"],
    # A rerun after a kill keeps the pairs already mined: the local command resumes by itself
    # (mine-many's shards), the Beam jobs by command (pipelines/run/units.py).
    resumable=True,
    engine=True,
)
def MINE(c: Context) -> list[Command]:
    lexicon = ["--lexicon", c.d(LEXICON) / "lexicon.parquet"] if c.on.get(LEXICON.name) else []
    corpus, emb = str(c.d(SENTENCES) / "mine" / "{lang}"), str(c.d(EMBED) / "{lang}")
    if c.engine:
        # mine-many's path for one pair, its shard tasks as Beam elements: the same files per
        # pair; then its stage-wide stats.json (no --output: never skipped as a finished unit).
        return [
            *(
                c.py(
                    "pipelines.mine",
                    "--pair",
                    pair,
                    "--corpus",
                    corpus,
                    "--emb",
                    emb,
                    "--output",
                    c.d(MINE) / pair,
                    *lexicon,
                    *c.config_args,
                    "--overwrite",
                    *c.beam_args,
                )
                for pair in c.pairs
            ),
            c.py("pipelines.mine", "--sum-stats", c.d(MINE), "--pairs", *c.pairs, *c.beam_args),
        ]
    return [
        c.py(
            "mining",
            "mine-many",
            "--pairs",
            *c.pairs,
            "--corpus",
            corpus,
            "--emb",
            emb,
            "--output",
            c.d(MINE),
            *lexicon,
            *c.config_args,
            "--overwrite",
        )
    ]
