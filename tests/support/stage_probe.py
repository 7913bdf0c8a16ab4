"""A stand-in for a stage's command, run as ``python -m tests.support.stage_probe``: it prints
what it sees (the environment variables named, torch's thread count, its folder), burns a little
CPU and memory, then ends as told (exit status, an exception, or a sleep until killed)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.support.stage_probe")
    ap.add_argument("--env", nargs="*", default=[], help="environment variables to print")
    ap.add_argument("--exit", type=int, default=0, help="exit status")
    ap.add_argument("--raise", dest="fail", action="store_true", help="raise an exception")
    ap.add_argument("--sleep", type=float, default=0.0, help="seconds to sleep before ending")
    ap.add_argument("--pid-file", help="write this process's pid here first")
    args = ap.parse_args()
    if args.pid_file:
        Path(args.pid_file).write_text(str(os.getpid()))
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    import torch

    seen = {
        "env": {k: os.environ.get(k) for k in args.env},
        "torch_threads": torch.get_num_threads(),
        "cwd": os.getcwd(),
        "argv0": sys.argv[0],
    }
    print("probe " + json.dumps(seen, sort_keys=True))
    logging.getLogger("probe").info("to stderr")
    block = bytearray(64 << 20)  # 64 MB, touched: a peak RSS above the interpreter's
    for i in range(0, len(block), 4096):
        block[i] = 1
    t = time.process_time()
    while time.process_time() - t < 0.2:  # some CPU of its own
        sum(range(1000))
    time.sleep(args.sleep)
    if args.fail:
        raise ValueError("the probe was told to fail")
    return args.exit


if __name__ == "__main__":
    sys.exit(main())
