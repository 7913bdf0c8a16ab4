"""``python -m module args`` in a process forked from a server that imported the heavy libraries
(Beam, torch, transformers, pyarrow, scikit-learn, ...) once, so that a command costs its own
work instead of 5-10 s of imports.

Parent side: :func:`start_mode` reads ``LABSE_STAGE_START`` (``fork`` or ``spawn``),
:func:`forkserver` starts the server lazily, with the children's environment (torch and the BLAS
libraries read ``OMP_NUM_THREADS`` when they are imported), and :func:`run_forked` runs one
command: its exit status, CPU seconds and peak RSS. Child side: :func:`child_main` does what
``python -m`` does; the stage runner (``pipelines/run/execute.py``) and
tests/end_to_end/test_cli_contract.py (through tests/support/cli_process.py) both use it.
A stage's own children die with it too: :func:`dying_with_this_process` wraps the command line
of one (Beam's SDK workers, see pipelines/local_runner.py) in ``python -m
labse_common.forked_main --die-with PID -- ...``.

The server only imports (``multiprocessing.forkserver``): it starts no threads of its own and
runs no computation before it forks. The thread pools some native libraries start on import
(OpenBLAS, jemalloc) re-create themselves in a child after the fork.
"""

from __future__ import annotations

import contextlib
import json
import logging
import multiprocessing
import os
import shlex
import signal
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Literal, NoReturn

from labse_common.errors import UsageError

log = logging.getLogger(__name__)

START_ENV = "LABSE_STAGE_START"
START_MODES = ("fork", "spawn")

# What the stages import that is slow (``python -X importtime``, 2026-11-27 on 2 loaded cores:
# torch 3.5 s, BERT's modelling code 4 s more (torch._dynamo, sympy), Beam 2.8 s, scikit-learn
# 2.1 s, transformers 1.1 s, pyplot 0.6 s, dask.distributed 0.5 s). A module that fails to import
# (another transformers version) is skipped by the server; the command then imports what it
# needs itself, or fails the way it would under ``python -m``.
PRELOAD = (
    "numpy",
    "pyarrow.parquet",
    "torch",
    "apache_beam",
    "apache_beam.io.filesystems",
    "transformers",
    "transformers.models.bert.modeling_bert",
    "transformers.models.bert.tokenization_bert",
    "transformers.models.bart.modeling_bart",
    "transformers.models.auto.modeling_auto",
    "transformers.models.auto.tokenization_auto",
    "transformers.optimization",
    "tokenizers",
    "boto3",
    "faiss",
    "distributed",
    "sklearn.linear_model",
    "sklearn.model_selection",
    "matplotlib.pyplot",
    __name__,  # the child body itself, unpickled by name in every child
)

# The server's first child: the preload has to finish within this before the first command runs.
PROBE_TIMEOUT_S = 600
PR_SET_PDEATHSIG = 1
DIE_WITH = "--die-with"

_server: dict[str, object] = {}  # "ctx": the started context, or "failed": True


@dataclass(frozen=True)
class ChildResult:
    """How a command ended: its exit status (negative: killed by that signal), the CPU seconds
    of it and of the processes it waited for, and the peak RSS of the largest of them."""

    rc: int
    cpu_seconds: float
    peak_rss_kb: int


def start_mode() -> str:
    """``fork`` or ``spawn``: ``LABSE_STAGE_START``, by default ``fork`` on Linux (where the
    kernel also stops a forked child with its runner) and ``spawn`` elsewhere."""
    value = os.environ.get(START_ENV, "").strip().lower()
    if not value:
        return "fork" if sys.platform.startswith("linux") else "spawn"
    if value not in START_MODES:
        raise UsageError(f"{START_ENV}={value!r}: use fork or spawn")
    return value


def forkserver(
    env: Mapping[str, str], output: Path | None = None
) -> multiprocessing.context.BaseContext | None:
    """The fork server's context, started on the first call with ``env`` as its environment and
    ``output`` (appended) as its stdout and stderr, and checked with one empty child; None (after
    one warning) when it cannot start.

    As with every multiprocessing start method but fork, a child imports the caller's
    ``__main__`` script (not a ``python -m`` module's) as ``__mp_main__``: such a script needs
    the ``if __name__ == "__main__":`` guard."""
    if "ctx" in _server:
        return _server["ctx"]  # type: ignore[return-value]
    if _server.get("failed"):
        return None
    from multiprocessing import forkserver as fs

    try:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(list(PRELOAD))
        with _environ(env), _output(output):
            fs.ensure_running()
        probe = ctx.Process(target=_probe, name="forkserver probe")
        probe.start()
        probe.join(PROBE_TIMEOUT_S)
        if probe.exitcode != 0:
            probe.kill()
            raise RuntimeError(f"its first child ended with status {probe.exitcode}")
    except Exception as e:  # noqa: BLE001 - any failure: the commands still run as before
        log.warning(
            "the fork server did not start (%s); stages start as new interpreters (%s=spawn)",
            e,
            START_ENV,
        )
        _server["failed"] = True
        return None
    _server["ctx"] = ctx
    return ctx


def _probe() -> None:
    os._exit(0)


@contextlib.contextmanager
def _environ(env: Mapping[str, str]) -> Iterator[None]:
    """``os.environ`` replaced by ``env`` meanwhile: the server process inherits it."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextlib.contextmanager
def _output(path: Path | None) -> Iterator[None]:
    """fds 1 and 2 appended to ``path`` meanwhile: the server process inherits them, so what its
    imports print (Beam warns about missing GCP libraries) goes there, not to the console."""
    if path is None:
        yield
        return
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    saved = {fd: os.dup(fd) for fd in (1, 2)}
    f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for fd in saved:
            os.dup2(f, fd)
        yield
    finally:
        for fd, copy in saved.items():
            os.dup2(copy, fd)
            os.close(copy)
        os.close(f)


def run_forked(
    ctx: multiprocessing.context.BaseContext,
    module: str,
    argv: Sequence[str],
    env: Mapping[str, str],
    cwd: str | Path,
    logfile: Path,
) -> ChildResult:
    """Run ``python -m module *argv`` forked from the server, its stdout and stderr appended to
    ``logfile``; it dies with this process (however this one dies). Ctrl-C or an exception here
    (SIGTERM raised as one) stops it first."""
    status = logfile.with_name(f"{logfile.name}.status.json")
    status.unlink(missing_ok=True)
    # Only this process holds the write end: the kernel closes it however this process dies.
    alive_r, alive_w = ctx.Pipe(duplex=False)  # type: ignore[attr-defined]
    p = ctx.Process(  # type: ignore[attr-defined]
        target=child_main,
        args=(module, list(map(str, argv)), dict(env), str(cwd), str(logfile)),
        kwargs={"status": str(status), "runner": alive_r},
        name=f"python -m {module}",
    )
    try:
        p.start()
        alive_r.close()
        try:
            p.join()
        except BaseException:
            p.terminate()
            p.join()
            raise
    finally:
        alive_r.close()
        alive_w.close()
    result = ChildResult(p.exitcode if p.exitcode is not None else -signal.SIGKILL, 0.0, 0)
    p.close()
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        doc = json.loads(status.read_text(encoding="utf-8"))
        result = ChildResult(int(doc["rc"]), float(doc["cpu_seconds"]), int(doc["peak_rss_kb"]))
    status.unlink(missing_ok=True)
    return result


def child_main(
    module: str,
    argv: list[str],
    env: Mapping[str, str],
    cwd: str,
    out: str,
    err: str | None = None,
    *,
    status: str,
    status_format: Literal["json", "rc"] = "json",
    new_session: bool = False,
    runner: Connection | None = None,
) -> NoReturn:
    """Body of a forked process: what ``python -m module *argv`` does, with ``env`` as its
    environment and ``cwd`` as its folder; stdout appended to ``out``, stderr to ``err`` (to
    ``out`` when None). Before it exits it writes ``status``: a JSON of its exit status and
    resource use, or (``status_format="rc"``) the exit status alone. The status travels in a file
    because a forkserver child's exit code reaches the parent through the server's pipe, and
    multiprocessing reports 255 when that read fails (seen once on a loaded machine, after the
    command had printed its error and exited 2).

    ``runner``: the read end of a pipe only the runner writes to; this process dies when the
    runner does (:func:`_die_with`). ``new_session``: a process group of its own, so a caller's
    timeout kills it and whatever it started. A stage stays in the runner's group instead, so a
    kill of that group reaches it."""
    _leave_forkserver()
    if runner is not None:
        _die_with(runner)
    if new_session:
        os.setsid()
    _redirect(out, err)
    os.environ.clear()
    os.environ.update(env)
    if "labse_common.filesystems" in sys.modules:  # configured from the parent's environment
        sys.modules["labse_common.filesystems"].forget_configuration()
    os.chdir(cwd)
    sys.argv = [module, *argv]
    if sys.path[:1] != [cwd]:
        sys.path.insert(0, cwd)  # as `python -m` puts its folder first
    code = _run_module(module)
    if runner is not None:  # ended: a later close of the pipe must signal nobody
        _signal_on_close(runner.fileno(), False)
    import resource

    own = resource.getrusage(resource.RUSAGE_SELF)
    waited = resource.getrusage(resource.RUSAGE_CHILDREN)
    if status_format == "rc":
        text = str(code)
    else:
        cpu = own.ru_utime + own.ru_stime + waited.ru_utime + waited.ru_stime
        peak = max(own.ru_maxrss, waited.ru_maxrss)
        text = json.dumps({"rc": code, "cpu_seconds": cpu, "peak_rss_kb": peak})
    with open(status, "w", encoding="utf-8") as f:
        f.write(text)
    os._exit(code)


def _run_module(module: str) -> int:
    """``runpy`` as ``python -m`` runs it: the exit status, a traceback on stderr when it
    raises. Output is flushed; no exit-time destructors run (as a forked child must end)."""
    import runpy
    import traceback
    import warnings

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
    logging.shutdown()  # what the interpreter's exit would do: flush every handler
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        with contextlib.suppress(Exception):
            stream.flush()
    return code


def _redirect(out: str, err: str | None) -> None:
    """fds 1 and 2 onto the files (appended: a stage's log already holds its command line), and
    sys.stdout/sys.stderr line-buffered on them."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
    fds = {1: os.open(out, flags, 0o644)}
    fds[2] = os.open(err, flags, 0o644) if err is not None else fds[1]
    for target, fd in fds.items():
        os.dup2(fd, target)
    for fd in set(fds.values()):
        os.close(fd)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115


def _leave_forkserver() -> None:
    """Close this child's copy of the server's "alive" pipe. The server exits when every copy is
    closed, and only then does a child's parent-death signal fire: a child holding one would
    keep the server, and itself, alive after the runner was killed."""
    from multiprocessing import forkserver as fs

    server = fs._forkserver
    if server._forkserver_pid is None and server._forkserver_alive_fd is not None:
        with contextlib.suppress(OSError):
            os.close(server._forkserver_alive_fd)
        server._forkserver_alive_fd = None


def die_with_parent(sig: int = signal.SIGTERM) -> bool:
    """Ask the kernel for ``sig`` when this process's parent dies, however it dies (``kill -9``
    included), so that no child of a killed runner goes on writing into a run folder whose next
    runner takes the claim. Linux only: False where it cannot be asked for.

    The signal comes when the parent's *thread* that started this process ends: a parent must
    start such a child from a thread that outlives it (its main thread, or one that waits for it)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def dying_with_this_process(command: str) -> str:
    """The shell command line ``command`` (run with ``sh -c``, as Beam runs its SDK workers)
    made to die with this process, however this one dies: the shell becomes
    :func:`exec_dying_with`, which arms the parent-death signal and then becomes ``command``.
    A stage's grandchildren otherwise outlive a killed runner (Beam's workers by 18 s or more,
    until their gRPC channel times out)."""
    return f"exec {shlex.quote(sys.executable)} -m {__name__} {DIE_WITH} {os.getpid()} -- {command}"


def exec_dying_with(parent: int, argv: Sequence[str]) -> NoReturn:
    """Become ``argv`` (looked up on PATH) with SIGKILL armed for when this process's parent
    dies; the signal survives the exec. ``parent``: the pid that started this process; when it
    is gone already (it died before the signal was armed) this process ends at once."""
    die_with_parent(signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(128 + signal.SIGKILL)
    os.execvp(argv[0], list(argv))


def _main(argv: list[str]) -> NoReturn:
    """``python -m labse_common.forked_main --die-with PID -- PROGRAM [ARG ...]``."""
    if len(argv) < 4 or argv[0] != DIE_WITH or not argv[1].isdigit() or argv[2] != "--":
        sys.stderr.write(f"usage: python -m {__name__} {DIE_WITH} PID -- PROGRAM [ARG ...]\n")
        os._exit(2)
    exec_dying_with(int(argv[1]), argv[3:])


def _die_with(runner: Connection) -> None:
    """SIGTERM from the kernel the moment the runner dies, however it dies (``kill -9``
    included): the runner's end of the pipe ``runner`` closes, and the kernel signals the
    owner of the read end (O_ASYNC with F_SETSIG). The parent-death signal alone is late: this
    process's parent is the fork server, which exits when the runner dies but takes seconds to
    finalize its imports; it stays for a server that dies on its own. Linux only."""
    die_with_parent()
    fd = runner.fileno()
    os.set_inheritable(fd, False)  # a program the command starts does not hold it
    try:
        _signal_on_close(fd, True)
    except (OSError, AttributeError):
        return
    import select

    if select.select([fd], [], [], 0)[0]:  # at EOF already: the runner died before this
        os._exit(128 + signal.SIGTERM)


def _signal_on_close(fd: int, on: bool) -> None:
    """SIGTERM to this process when the pipe's write end closes (``on``), or no signal."""
    import fcntl

    flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    if on:
        fcntl.fcntl(fd, fcntl.F_SETOWN, os.getpid())
        fcntl.fcntl(fd, fcntl.F_SETSIG, signal.SIGTERM)
        fcntl.fcntl(fd, fcntl.F_SETFL, flags | os.O_ASYNC)
    else:
        fcntl.fcntl(fd, fcntl.F_SETFL, flags & ~os.O_ASYNC)


if __name__ == "__main__":
    from labse_common.command import exit_with

    exit_with(lambda: _main(sys.argv[1:]))
