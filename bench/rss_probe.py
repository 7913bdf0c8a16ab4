"""Trace where a job's memory goes: each process's RSS over time (a tracing tool, not a bench).

    .venv/bin/python bench/rss_probe.py --out trace.jsonl [--every 1.0] -- CMD ARGS...

Runs CMD and every ``--every`` seconds writes one JSON line per process of its tree
(``t`` seconds since start, ``pid``, ``rss`` MiB, ``cmd``); at the end prints, per process that
passed 100 MiB, its peak and when, and a coarse series. Used to find which phase of a Beam job
grows (bench/HISTORY.md "Where the largest process's 10x→100x growth goes").
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import subprocess
import sys
import time

log = logging.getLogger("rss_probe")


def sample(cmd: list[str], out_path: str, every: float) -> int:
    import psutil

    with open(out_path, "w") as out, open(out_path + ".log", "w") as err:
        proc = subprocess.Popen(cmd, stdout=err, stderr=subprocess.STDOUT)
        root, t0 = psutil.Process(proc.pid), time.time()
        while proc.poll() is None:
            try:
                procs = [root, *root.children(recursive=True)]
            except psutil.Error:
                break
            for q in procs:
                try:
                    row = {
                        "t": round(time.time() - t0, 1),
                        "pid": q.pid,
                        "rss": q.memory_info().rss / 2**20,
                        "cmd": " ".join(q.cmdline())[:160],
                    }
                except psutil.Error:
                    continue
                out.write(json.dumps(row) + "\n")
            out.flush()
            time.sleep(every)
        log.info(
            "exit %s after %.0f s; the command's output is in %s.log",
            proc.wait(),
            time.time() - t0,
            out_path,
        )
        return proc.returncode


def summary(path: str, points: int = 20) -> None:
    by: dict[int, list[dict]] = collections.defaultdict(list)
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            by[r["pid"]].append(r)
    for pid, rows in by.items():
        top = max(rows, key=lambda r: r["rss"])
        if top["rss"] < 100:
            continue
        step = max(1, len(rows) // points)
        series = ", ".join(f"{r['t']:.0f}s {r['rss']:.0f}" for r in rows[::step])
        print(f"{pid} peak {top['rss']:.0f} MiB at {top['t']:.0f} s  {rows[0]['cmd'][:80]}")
        print(f"    {series}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--out", required=True, help="JSON-lines trace to write")
    p.add_argument("--every", type=float, default=1.0, help="seconds between samples (default 1)")
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="the command, after --")
    args = p.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        p.error("give the command to trace after --")
    if args.every <= 0:
        p.error("--every must be > 0")
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    rc = sample(cmd, args.out, args.every)
    summary(args.out)
    return rc


if __name__ == "__main__":
    sys.exit(main())
