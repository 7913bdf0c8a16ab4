"""The body of a process that runs a command line as ``python -m`` does:
tests/end_to_end/test_cli_contract.py forks it from a forkserver that imported the heavy
libraries once, so each case costs a fork, not an interpreter start."""

from __future__ import annotations

import os
import sys


def run_as_main(module: str, argv: list[str], env: dict, cwd: str, out: str, err: str) -> None:
    """Body of one case's process: what ``python -m module *argv`` does, with its own session,
    environment, stdout and stderr."""
    import runpy
    import traceback
    import warnings

    os.setsid()  # its own process group: a timeout kills it and whatever it started
    for fd, path in ((1, out), (2, err)):
        f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(f, fd)
        os.close(f)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    sys.argv = [module, *argv]
    import logging

    # An import in the server may have configured the root logger (logging.warning() does);
    # the command sets logging up itself, as in a fresh interpreter.
    for h in list(logging.root.handlers):
        logging.root.removeHandler(h)
    logging.root.setLevel(logging.WARNING)
    # run_module re-executes a preloaded module as __main__; `python -m` would not warn.
    warnings.filterwarnings("ignore", message=".*found in sys.modules.*", category=RuntimeWarning)
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            code = e.code or 0
        else:
            print(e.code, file=sys.stderr)
            code = 1
    except BaseException:  # noqa: BLE001 - what the interpreter does: traceback, exit 1
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    # The status also goes to a file: a forkserver child's exit code reaches the parent through
    # the server's pipe, and multiprocessing reports 255 when that read fails (seen once on a
    # loaded machine, after the command had printed its error and exited 2).
    with open(err + ".rc", "w") as f:
        f.write(str(code))
    os._exit(code)
