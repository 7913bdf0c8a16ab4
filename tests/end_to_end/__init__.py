"""Tests whose subject is several packages at once: the contract of every command line
(test_cli_contract, test_cli_errors), the installed wheel (test_package_install), the one
embedding path shared by labse_model, mining and pipelines (test_embedding_paths) and text
encodings from the corpus readers to the miner (test_encodings). A test of one package's code
lives under that package's folder instead."""
