"""``voxanon benchmark``: anonymise with several systems and compare them in one table and report."""
from __future__ import annotations

import argparse
import os
from pathlib import Path

from ...data_prep.errors import VoxanonError
from .options import add_device_argument, add_evaluation_arguments, cache_from
from .options import add_backend_arguments, backend_from_args


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "benchmark", help="anonymise with several systems and compare them in one report",
        description="Anonymise the evaluation sets with each system (finished runs are reused: the runner "
                    "resumes), evaluate each against the original, and write one comparison table and report.")
    parser.add_argument("--systems", required=True, help="comma-separated systems, e.g. b2,b2r")
    parser.add_argument("--data", required=True, type=Path, metavar="DATA",
                        help="original set (data dir with enrolls and trials) or folder of VoicePrivacy sets")
    parser.add_argument("--out", type=Path, default=Path("benchmark"), metavar="DIR",
                        help="output folder: anonymised sets go to DIR/anon, the report to DIR (default ./benchmark)")
    add_evaluation_arguments(parser)
    add_device_argument(parser, "every model runs: the systems' neural stages and the evaluation's speaker encoder "
                                "and ASR model")
    add_backend_arguments(parser, "worker processes (local; default: the number of cores) or Ray actors (default: "
                                  "as many as the cluster's CPUs/GPUs hold), for anonymisation and evaluation")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..evaluation.benchmark import compare
    from ..evaluation.computations import check_device
    from ..evaluation.outputs import print_table, write_outputs
    from ..evaluation.protocols import load_protocol
    from ..evaluation.sets import discover_sets
    from ..execution.heap import share_one_heap

    share_one_heap()   # before any thread allocates: Whisper's replicas then keep their blocks
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    if not systems:
        raise VoxanonError("--systems: name at least one system")
    backend = backend_from_args(args)
    check_device(args.device, backend)
    protocol = load_protocol(args.protocol, args.overrides)
    sets = discover_sets(args.data, allow_pipes=args.allow_pipes)
    try:
        evaluation = compare(sets, systems, protocol, args.out, args.workers or os.cpu_count() or 1,
                             cache_from(args), args.allow_missing, backend=backend, batch_size=args.batch_size,
                             trust_model_code=args.trust_model_code, device=args.device, progress=not args.quiet)
    finally:
        if backend is not None:
            backend.close()   # its Ray actors served every system, set and side
    report = write_outputs(args.out, evaluation, f"voxanon benchmark: {', '.join(systems)} ({protocol['name']})",
                           {"protocol": protocol["name"], "data": str(args.data), "systems": ", ".join(systems)})
    print_table(evaluation.results)
    print(f"report: {report}")
    return 0
