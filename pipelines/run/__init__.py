"""One command from a user's raw crawl, dumps and pairs to NMT-ready bitext: resumable, with a
person in the loop and a report.

    python -m pipelines.run --config CONFIG [--data DIR] [--output DIR] [--set section.key=value ...]
        [--publish URL] [--from STAGE | --only STAGE] [--dry-run] [--list]

What a run reads is the ``sources:`` section (CommonCrawl WET/WARC globs or ``*.paths`` lists,
Wikipedia dumps, plain text, training pairs named ``{src}-{trg}``, known alignments), what it mines
is ``mining.pairs`` (any languages the language-ID model knows), ``model.init`` starts from an
encoder the user already has (no vocabulary or pretraining; training only when train.steps > 0),
``beam:`` is the runner of every Beam stage and ``launch:`` how the training stages start
(torchrun). The demo preset is one such config: its ``sources.demo`` task builder
(:mod:`pipelines.demo_data`) hides pairs with a known alignment in web text.

Every stage is declared once, below, by a small function under ``@stage(...)``: its name (the
function's, lower-cased), what it does, the config keys it reads, the stages it reads, the files
it must leave, and the command line(s) that run it (the function's body). ``--list`` prints the
declarations. Each stage runs as a child process through its own CLI (so a stage's memory is
returned when it ends and a kill is what it would be in production), writes into
``OUTPUT/<stage>/``, and on success the runner writes ``OUTPUT/_state/<stage>.manifest.json``: a
hash of the config keys the stage reads and of its command, the fingerprints of its inputs (an
upstream stage's hash; size, mtime and content hash of a data file) and the list of files it
wrote. A rerun skips a stage only when its manifest matches and its files are all there; a stage
that reruns makes every stage after it that reads it rerun too. A killed or failed run therefore
resumes at the stage that did not finish, and a changed setting reruns exactly the stages that
read it and those downstream of them.

A person labels the sample of mined pairs: unless ``sources.label_from`` is ``eval``, the run
stops after ``sample`` with exit status 3 and one line naming ``OUTPUT/labels.tsv`` (label it with
``python -m filters label OUTPUT/labels.tsv`` or any editor); the same command then continues.

The whole ``OUTPUT`` is claimed while the runner works (``OUTPUT/_CLAIM.json``, as every
command's output folder): a second runner on the same folder stops with exit status 2 naming
the claim. The claim of a runner that was killed is taken over by the next run (see
:func:`labse_common.output_dir.claim_output`, ``resumable=True``).
"""

# The runner's modules, each one concern:
#   declare        Context (what a stage's command builder sees), Stage and the @stage declaration
#   corpus_stages  the stages from the sources to the sentences (demo, inputs, corpus jobs)
#   model_stages   vocabulary, pretraining, training, embedding and mining
#   bitext_stages  the filters, the bitext, its evaluation and the report
#   stages         the stage list in run order (STAGES, BY_NAME, NAMES)
#   plan           fingerprints, manifests and the plan (what runs, what is skipped and why)
#   execute        one stage's commands as child processes; its manifest
#   loop           the run over the plan: _run.json, optional stages that fail, labels, publish
#   config, validate   the effective config; sources and settings checked before anything runs
#   cli, __main__  the command line
