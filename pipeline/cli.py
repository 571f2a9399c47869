"""The ``voxanon`` command line."""
from __future__ import annotations

import argparse
import atexit
import gc
import importlib
import logging
import os
import pkgutil
import sys
import time
from pathlib import Path

from voxanon.data_prep.errors import VoxanonError
from voxanon.pipeline import commands

# Nothing may reach a model hub at run time: every model is local.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="voxanon",
        description="Anonymise speech corpora and evaluate how well that worked.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debugging detail")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module_info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{commands.__name__}.{module_info.name}")
        module.add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    # A command's clock (run.json's) starts with its process where this is the process's command line (argv
    # None), else (a call from Python) now.
    command_started = process_started() if argv is None else time.time()
    # At exit, before the interpreter's final garbage collections: they would walk every object torch and
    # the models made (0.3 s at each exit of a neural run), none of which needs collecting when the process
    # is about to end. Objects made by exit handlers that run after it are still collected.
    atexit.unregister(gc.freeze)
    atexit.register(gc.freeze)
    parser = build_parser()
    args = parser.parse_args(argv)
    args.command_started = command_started
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(levelname)s: %(message)s")
    # faster-whisper logs every decoded window at INFO.
    logging.getLogger("faster_whisper").setLevel(logging.DEBUG if args.verbose else logging.WARNING)
    # matplotlib announces at INFO that it built its font cache (the first plot of a fresh install),
    # and at DEBUG scores every font it considers.
    logging.getLogger("matplotlib.font_manager").setLevel(logging.WARNING)
    try:
        return int(args.run(args) or 0)
    except VoxanonError as error:
        print(f"voxanon {args.command}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def process_started() -> float:
    """When this process started (wall-clock seconds, to the kernel's 10 ms ticks), from Linux's /proc; elsewhere
    now."""
    try:
        fields = Path("/proc/self/stat").read_text().rpartition(")")[2].split()
        age = float(Path("/proc/uptime").read_text().split()[0]) - int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return time.time()
    return time.time() - max(0.0, age)


if __name__ == "__main__":
    sys.exit(main())
