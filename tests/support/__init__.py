"""Helper modules shared by tests in several folders (no tests here). Fixtures are in the
conftest.py nearest their users; these are plain functions and constants, imported by name.

- paths: REPO (the repository), SHARED_DATA and TATOEBA (the real samples beside it).
- corpus_fixtures: generators of good and deliberately broken WET/WARC files and Wikipedia dumps.
- corpus_util: reading a corpus job's output (rows, stats.json) and asserting its balance.
- cleaner_samples: the sentence cleaner's expected digests on the shared samples
  (tests/data/cleaner_expected.json; ``python -m tests.support.cleaner_samples`` rewrites it).
- cds_toy: a toy word-for-word language pair and the tiny CDS model settings for it.
- pretrain_fixtures: Tatoeba inputs for pretraining/training runs and a dev-retrieval score.
- scaleout_util: a loopback Dask cluster and S3 (moto) server, free ports, process groups.
- source_ast: ast.parse of a source file, robust to CPython 3.11's threaded-parse SystemError.
- two_node_util: the two-node (--nnodes 2) launchers' inputs, S3 objects and metrics.
- cli_process: run_cli, a command line run as ``python -m`` runs it, forked from the stage
  runner's preloaded fork server (cli_context), or a new interpreter.
- stage_probe: ``python -m tests.support.stage_probe``, a stand-in stage command that prints
  what it sees and ends as told.
"""
