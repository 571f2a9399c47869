"""``voxanon evaluate``: challenge-style privacy and utility evaluation of an anonymised corpus."""
from __future__ import annotations

import argparse
import logging
from pathlib import Path

from ...data_prep.atomic import ensure_writable_folder
from .options import COMPUTATION_WORKERS_HELP, add_device_argument, add_evaluation_arguments, cache_from
from .options import add_backend_arguments, backend_from_args


log = logging.getLogger(__name__)


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
    from ..evaluation.computations import check_device, encoder_label, make_embedder, make_transcriber, run_computations_on, semi_informed_attacker
    from ..evaluation.outputs import attacker_notes, print_table, write_outputs
    from ..evaluation.protocols import load_protocol

    from ..evaluation.evaluate import evaluate_sets
    from ..evaluation.sets import discover_sets
    from ..feature_cache import FileDigests

    backend = backend_from_args(args)
    check_device(args.device, backend)
    ensure_writable_folder(args.out, "--out")   # now, not after every score is computed
    protocol = load_protocol(args.protocol, args.overrides)
    system = args.system or (args.suffix.lstrip("_") if args.suffix else args.anon.name)
    sets = discover_sets(args.orig, args.anon, args.suffix, allow_pipes=args.allow_pipes)
    cache = cache_from(args)
    digest = FileDigests(cache.root)
    asv = protocol.get("asv", {})
    embedder = make_embedder(asv, device=args.device, digest=digest)
    transcriber = make_transcriber(protocol.get("asr"), args.trust_model_code, device=args.device)
    notes = {"protocol": protocol["name"], "original": str(args.orig), "anonymised": str(args.anon)}
    semi_informed = None
    if args.asv_model is not None:
        semi_informed, warnings = semi_informed_attacker(args.asv_model, asv, sets, system, device=args.device,
                                                         digest=digest)
        notes |= attacker_notes(semi_informed, warnings)
    run_computations_on(backend, args.batch_size, embedder, transcriber,
                        semi_informed.embedder if semi_informed else None, progress=not args.quiet)
    try:
        evaluation = evaluate_sets(sets, protocol, system, embedder=embedder, cache=cache, asr=transcriber,
                                   allow_missing=args.allow_missing,
                                   asv_model=encoder_label(asv.get("encoder", "ge2e"), embedder.tag),
                                   semi_informed=semi_informed)
    finally:
        if backend is not None:
            backend.close()   # its Ray actors served every set and side
    report = write_outputs(args.out, evaluation, f"voxanon evaluation: {system} ({protocol['name']})", notes)
    print_table(evaluation.results)
    print(f"report: {report}")
    return 0
