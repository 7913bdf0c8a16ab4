"""The body of a process that runs a command line as ``python -m`` does:
tests/end_to_end/test_cli_contract.py forks it from a forkserver that imported the heavy
libraries once, so each case costs a fork, not an interpreter start. The body is the product's
(labse_common.forked_main, which the stage runner forks its stages with); a case differs in its
own session and its separate stdout and stderr files."""

from __future__ import annotations

from labse_common.forked_main import child_main


def run_as_main(module: str, argv: list[str], env: dict, cwd: str, out: str, err: str) -> None:
    """Body of one case's process: what ``python -m module *argv`` does, with its own session
    (a timeout kills it and whatever it started), environment, stdout and stderr; its exit
    status also in ``err + ".rc"``."""
    child_main(
        module, argv, env, cwd, out, err, status=f"{err}.rc", status_format="rc", new_session=True
    )
