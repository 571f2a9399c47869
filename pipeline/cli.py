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
import traceback
import time
from pathlib import Path

from ..data_prep.errors import VoxanonError
from . import commands

# Nothing may reach a model hub at run time: every model is local.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

DEBUG_VARIABLE = "VOXANON_DEBUG"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="voxanon",
        description="Anonymise speech corpora and evaluate how well that worked.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debugging detail")
    parser.add_argument("--debug", action="store_true",
                        help=f"show the traceback of an error (for a bug report; or set {DEBUG_VARIABLE}=1)")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module_info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{commands.__name__}.{module_info.name}")
        if hasattr(module, "add_parser"):  # commands/options.py holds the options several commands share
            module.add_parser(subparsers)
    for command in {id(p): p for p in subparsers.choices.values()}.values():  # also after the command's name
        command.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
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
    debug = args.debug or os.environ.get(DEBUG_VARIABLE, "") not in ("", "0")
    try:
        return int(args.run(args) or 0)
    except KeyboardInterrupt:
        if debug:
            traceback.print_exc()
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as error:
        # Every fault ends in one line and exit 2 (1 means "some utterances failed"): the user's (a VoxanonError,
        # or the system's refusal of a path: an OSError names the file) as it is, anything else as what it is.
        if debug:
            traceback.print_exc()
        print(f"voxanon {args.command}: error: {_one_line_error(error, debug)}", file=sys.stderr)
        return 2


def _one_line_error(error: Exception, debug: bool) -> str:
    if isinstance(error, VoxanonError):
        text = str(error)
    elif isinstance(error, OSError):
        text = f"{error.strerror or type(error).__name__}: {error.filename!r}" if error.filename else str(error)
        text = text if error.filename2 is None else f"{text} -> {error.filename2!r}"
    else:
        text = f"{type(error).__name__}: {' '.join(str(error).split())}"
        if not debug:
            text += f" (an unexpected error: rerun with --debug or {DEBUG_VARIABLE}=1 for its traceback)"
    return text


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
