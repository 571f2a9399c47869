"""``voxanon evaluate``: challenge-style privacy and utility evaluation of an anonymised corpus."""
from __future__ import annotations

import argparse
from pathlib import Path

from .options import COMPUTATION_WORKERS_HELP, add_device_argument, add_evaluation_arguments
from .options import add_backend_arguments, backend_from_args


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "evaluate", help="evaluate an anonymised corpus (ASV, ZEBRA, similarity matrices, WER) with a report",
        description="Score an anonymised corpus against its original the way the VoicePrivacy challenges "
                    "do: ASV EER (every number names its variant), Cllr, min Cllr, linkability and ZEBRA for "
                    "o-o, o-a and a-a; DeID and G_VD; WER. Writes results.json, results.csv, results.md, "
                    "plots/ and a self-contained report.html.")
    parser.add_argument("--orig", required=True, type=Path, metavar="DATA",
                        help="original set (data dir with enrolls and trials) or folder of VoicePrivacy sets")
    parser.add_argument("--anon", required=True, type=Path, metavar="DATA",
                        help="anonymised set, or folder holding <set><suffix> directories")
    parser.add_argument("--suffix", help="anonymised directory suffix when --anon is a folder of sets")
    parser.add_argument("--system", help="name of the anonymisation system in the tables (default: from --suffix "
                                         "or the anonymised directory name)")
    parser.add_argument("--out", type=Path, default=Path("evaluation"), metavar="DIR",
                        help="output folder (default ./evaluation)")
    parser.add_argument("--asv-model", type=Path, metavar="MODEL_DIR",
                        help="also score a-a with this ASV model trained on anonymised speech (voxanon train asv, "
                             "or a challenge-released ASV_eval^anon folder): the semi-informed attacker")
    add_evaluation_arguments(parser)
    add_device_argument(parser, "every model of the evaluation runs: the speaker encoder (GE2E or ECAPA), the "
                                "semi-informed attacker's, and the ASR model")
    add_backend_arguments(parser, COMPUTATION_WORKERS_HELP)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..api import evaluate
    from ..execution.heap import share_one_heap

    share_one_heap()   # before any thread allocates: Whisper's replicas then keep their blocks

    backend = backend_from_args(args)
    try:
        result = evaluate(args.orig, args.anon, out=args.out, suffix=args.suffix, system=args.system,
                          protocol=args.protocol, settings=args.overrides, asv_model=args.asv_model,
                          device=args.device, backend=backend, batch_size=args.batch_size, cache=args.cache,
                          allow_missing=args.allow_missing, allow_pipes=args.allow_pipes,
                          trust_model_code=args.trust_model_code, progress=not args.quiet)
    finally:
        if backend is not None:
            backend.close()   # its Ray actors served every set and side
    print(result.table())
    print(f"report: {result.report}")
    return 0
