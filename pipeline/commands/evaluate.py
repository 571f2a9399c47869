"""``voxanon evaluate``: challenge-style privacy and utility evaluation of an anonymised corpus."""
from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

from voxanon.data_prep.atomic import ensure_writable_folder
from voxanon.data_prep.errors import VoxanonError
from voxanon.data_prep.paths import contained_path
from voxanon.models.checkpoints.registry import voxanon_home
from voxanon.pipeline.model_service import device_option
from voxanon.pipeline.ray_backend import add_backend_arguments, backend_from_args
from voxanon.pipeline.systems import available_recipes, read_recipe

if TYPE_CHECKING:
    from voxanon.eval.results import Result
    from voxanon.pipeline.evaluation.attackers import SemiInformed
    from voxanon.pipeline.evaluation.evaluate import Evaluation
    from voxanon.pipeline.evaluation.sets import EvaluationSet
    from voxanon.pipeline.feature_cache import CachedComputation, ContentCache

log = logging.getLogger(__name__)


def default_cache_dir() -> Path:
    return voxanon_home() / "cache"


def load_protocol(name: str, overrides: list[str] = ()) -> dict:
    protocol = read_recipe("protocols", name, overrides)
    unknown = set(protocol) - {"name", "description", "asv", "similarity", "asr", "relative", "adversary_calibration", "pitch_correlation",
                                   "inversion_attack", "sex_attack", "weighted_averages"}
    if unknown:
        raise VoxanonError(f"protocol {protocol['name']!r}: unknown setting(s) {sorted(unknown)}")
    return protocol


ENCODERS = "ge2e (embedded), ecapa:DIR (SSL-SAS-style speechbrain folder), ecapa-voxceleb:DIR (spkrec-ecapa-voxceleb)"


def speaker_encoder_factory(spec: str, digest=None):
    """``(cache tag, build)`` for an encoder spec (see ``ENCODERS``): ``build(device="cpu")`` loads the encoder on a
    device. ``digest`` (path -> sha256, e.g. a :class:`~voxanon.pipeline.feature_cache.FileDigests`) names an
    ECAPA checkpoint in the cache; default: hash it."""
    if spec == "ge2e":
        from voxanon.models.nets.ge2e import GE2EEncoder
        return "ge2e", lambda device="cpu": GE2EEncoder(device=device)
    kind, _, directory = spec.partition(":")
    if kind not in ("ecapa", "ecapa-voxceleb") or not directory:
        raise VoxanonError(f"unknown speaker encoder {spec!r}; available: {ENCODERS}")
    from voxanon.models.checkpoints.ecapa import ecapa_from_directory
    from voxanon.models.nets.speaker import EcapaConfig
    from voxanon.models.checkpoints.ecapa import EMBEDDING_FILE
    from voxanon.models.checkpoints.speechbrain_dirs import ecapa_dilations

    checkpoint = Path(directory) / EMBEDDING_FILE
    if not checkpoint.is_file():
        raise VoxanonError(f"speaker encoder {spec!r}: {checkpoint} not found")

    def build(device: str = "cpu"):
        return ecapa_from_directory(directory, embedding_mean_norm=kind == "ecapa-voxceleb").to(device)

    if digest is None:
        from voxanon.data_prep.digest import sha256_file as digest
    # The checkpoint's content names the cache, so two model folders never share embeddings; a geometry
    # other than the standard one (dilations from hyperparams.yaml) gives other embeddings from the same weights.
    tag = f"{kind}-{digest(checkpoint)[:16]}"
    dilations = ecapa_dilations(directory)
    if dilations is not None and dilations != EcapaConfig().dilations:
        tag += f"-dil{'.'.join(map(str, dilations))}"
    return tag, build


def embedding_function(encoder, device: str):
    """An encoder's ``waves -> vectors`` on ``device``: on the CPU ECAPA embeds one utterance at a time; on any other
    device (``cpu:N`` runs that path on the CPU) padded batches of similar length, each vector the utterance's own
    to float rounding. GE2E's partials are all of one length: batched either way."""
    from voxanon.models.nets.speaker import EcapaEncoder

    return encoder.embed_on_device if device != "cpu" and isinstance(encoder, EcapaEncoder) else encoder.embed


def encoder_label(spec: str, tag: str) -> str:
    """How the tables name a speaker encoder: ``ge2e``, or ``<folder name> (<kind>-<checkpoint sha256>)``."""
    kind, _, directory = str(spec).partition(":")
    return tag if not directory else f"{Path(directory).name} ({tag})"


def make_embedder(asv: dict, encoder: str | None = None, *, device: str = "cpu", digest=None) -> CachedComputation:
    """The protocol's speaker encoder (or ``encoder``, a spec), built on ``device`` (``auto`` resolved where it runs)
    only when an embedding is not in the cache; see :func:`embedding_function`."""
    from voxanon.pipeline.feature_cache import CachedComputation

    tag, build = speaker_encoder_factory(str(encoder or asv.get("encoder", "ge2e")), digest)
    encoder = {}

    def embed(waves):
        if "embed" not in encoder:
            from voxanon.pipeline.model_service import resolve_device

            resolved = resolve_device(device)
            encoder["embed"] = embedding_function(build(resolved), resolved)
        return list(encoder["embed"](waves))

    return CachedComputation(tag, embed, kind="vector", batch_size=int(asv.get("batch_size", 16)),
                             loudness_lufs=asv.get("loudness_lufs"))


def semi_informed_attacker(model_dir: Path, asv: dict, sets: list[EvaluationSet], system: str, *,
                           device: str = "cpu", digest=None) -> tuple[SemiInformed, list[str]]:
    """The semi-informed attacker from a ``voxanon train asv`` (or challenge-released) model folder, and the
    warnings on what it was trained on (:func:`~voxanon.pipeline.evaluation.attackers.attacker_training_warnings`).
    A missing model file is an error naming it."""
    from voxanon.pipeline.evaluation.attackers import (SemiInformed, attacker_training_summary,
                                                       attacker_training_warnings, check_attacker_model)

    training = check_attacker_model(model_dir)
    spec = f"ecapa:{model_dir}"
    embedder = make_embedder(asv, spec, device=device, digest=digest)
    warnings = attacker_training_warnings(model_dir, training, sets, system)
    for warning in warnings:
        log.warning("%s", warning)
    return SemiInformed(embedder, encoder_label(spec, embedder.tag), attacker_training_summary(training)), warnings


def make_transcriber(spec: str | None, trust_model_code: bool = False, *,
                     device: str = "cpu") -> CachedComputation | None:
    """The protocol's ASR model (a name or a model directory), built on ``device`` only when a transcript is not
    cached (Whisper on CUDA where CTranslate2 has it, :func:`voxanon.models.recognisers.asr.whisper_device`).

    ``trust_model_code``: let speechbrain build a model directory whose hyperparams.yaml names code
    outside voxanon's allow-list (see :mod:`voxanon.models.checkpoints.speechbrain_dirs`)."""
    from voxanon.pipeline.feature_cache import CachedComputation

    if not spec:
        return None
    model = {}

    def transcribe(waves):
        if "asr" not in model:
            from voxanon.models.recognisers.asr import load_asr
            from voxanon.pipeline.model_service import resolve_device

            model["asr"] = load_asr(spec, trust_model_code=trust_model_code, device=resolve_device(device))
        return model["asr"].transcribe_many(waves)

    tag = Path(spec).name if os.sep in str(spec) else str(spec)
    return CachedComputation(tag, transcribe, kind="text", batch_size=8)


def run_computations_on(backend, batch_size: int | None, *computations: CachedComputation | None,
                        progress: bool = True) -> None:
    """Send the embedder's and transcriber's batches to ``backend`` (None: this process), ``batch_size`` each,
    with progress bars unless ``progress`` is false."""
    for computation in computations:
        if computation is not None:
            computation.backend = backend
            computation.progress = progress
            if batch_size is not None:
                computation.batch_size = batch_size


def add_device_argument(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--device", type=device_option, default="auto", metavar="cpu|cuda|auto",
                        help=f"where {what} (default auto: CUDA wherever the process running a model sees a GPU). "
                             "Off the CPU utterances of similar length run as padded batches, each item computed as "
                             "it is alone; numbers differ from the CPU's by float rounding. cuda[:N] picks a GPU")


def anonymisation_device_overrides(config: dict, device: str, backend=None) -> list[str]:
    """The stage settings that run a system's models on ``device`` (``auto`` resolved here, or by each actor under
    Ray): none for a system without models, and none for stages already there, so a CPU run keeps its
    configuration and with it its finished outputs."""
    from voxanon.pipeline.systems import device_overrides

    try:
        device_overrides(config, device)
    except VoxanonError:  # no stage with a device (McAdams, the DSP systems): they run on the CPU
        return []
    if backend is None:
        from voxanon.pipeline.model_service import resolve_device

        device = resolve_device(device)
    return [override for override in device_overrides(config, device)
            if str((config.get(override.split(".")[0]) or {}).get("device", "cpu")) != device]


def check_device(device: str, backend) -> None:
    """``--device cuda`` where this process sees no CUDA device: one error before any work. Under Ray the actors
    check their own (the machine that starts the run need not have a GPU)."""
    if backend is None:
        from voxanon.pipeline.model_service import check_device_available

        check_device_available(device)


COMPUTATION_WORKERS_HELP = ("Ray actors computing embeddings and transcripts (default: as many as the cluster's "
                            "CPUs/GPUs hold); the local backend computes in this process")


def write_outputs(out_dir: Path, evaluation: Evaluation, title: str, notes: dict[str, str]) -> Path:
    """results.json/.csv/.md, plots/ and report.html; returns the report's path."""
    from voxanon.eval.plots import det_figure, ece_profile_figure, save_figure, similarity_figure, zoo_figure
    from voxanon.eval.report import write_report

    plots = out_dir / "plots"
    figures: list[tuple[str, Path]] = []
    for set_name in sorted({s.set_name for s in evaluation.scores}):
        systems = [(f"{s.system} {s.condition}", s.tar, s.non) for s in evaluation.scores
                   if s.set_name == set_name and len(s.tar) and len(s.non)]
        if systems:
            paths = save_figure(ece_profile_figure(systems), contained_path(plots, f"{set_name}_ece_profile"))
            figures.append((f"{set_name}: ECE / ZEBRA profile per condition", paths[0]))
            paths = save_figure(det_figure(systems), contained_path(plots, f"{set_name}_det"))
            figures.append((f"{set_name}: DET curves per condition", paths[0]))
    for set_name, matrices in sorted(evaluation.similarity.items()):
        stem = set_name.replace(" ", "_")
        paths = save_figure(similarity_figure(matrices), contained_path(plots, f"{stem}_similarity"))
        figures.append((f"{set_name}: voice similarity matrices M_OO, M_OP, M_PP", paths[0]))
        for setting, matrix in (("OO", matrices.oo), ("PP", matrices.pp)):
            paths = save_figure(zoo_figure(matrix.zoo(), title=f"{set_name} {setting}"),
                                contained_path(plots, f"{stem}_zoo_{setting}"))
            figures.append((f"{set_name}: zoo plot in the {setting} setting", paths[0]))
    for remark in evaluation.remarks:
        log.warning("%s", remark)
    return write_report(out_dir, evaluation.results, figures, title, notes=notes, remarks=evaluation.remarks)


def add_evaluation_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--protocol", default="vpc2022",
                        help=f"evaluation protocol ({', '.join(available_recipes('protocols'))}) or a .yaml path")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a protocol setting, e.g. --set asr=null (repeatable)")
    add_evaluation_input_arguments(parser)


def add_evaluation_input_arguments(parser: argparse.ArgumentParser) -> None:
    """The cache and the input and model-trust options of every command that evaluates."""
    parser.add_argument("--cache", type=Path, default=None, metavar="DIR",
                        help=f"embedding/transcript cache (default {default_cache_dir()}; 'none' disables)")
    parser.add_argument("--allow-missing", action="store_true",
                        help="evaluate without utterances that have no usable (or no anonymised) audio, listed, "
                             "instead of failing")
    parser.add_argument("--allow-pipes", action="store_true", help="run 'command |' wav.scp entries")
    parser.add_argument("--trust-model-code", action="store_true",
                        help="let speechbrain build model directories whose hyperparams.yaml names code outside "
                             "voxanon's allow-list (only for model directories you trust)")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")


def cache_from(args: argparse.Namespace) -> ContentCache:
    from voxanon.pipeline.feature_cache import ContentCache

    if args.cache is not None and str(args.cache).lower() == "none":
        return ContentCache(None)
    return ContentCache(args.cache or default_cache_dir())


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


def attacker_notes(semi_informed: SemiInformed, warnings: list[str]) -> dict[str, str]:
    """Report notes naming the semi-informed attacker's model and any warning about its training data."""
    notes = {"semi-informed attacker": f"a-a scored with {semi_informed.model} (cosine scoring)"}
    if semi_informed.training is not None:
        notes["semi-informed attacker training"] = semi_informed.training["line"]
    notes.update({f"warning {k}" if len(warnings) > 1 else "warning": w for k, w in enumerate(warnings, 1)})
    return notes


def print_table(results: list[Result]) -> None:
    from voxanon.eval.tables import markdown_tables_by_condition
    print(markdown_tables_by_condition(results))


def run(args: argparse.Namespace) -> int:
    from voxanon.pipeline.evaluation.evaluate import evaluate_sets
    from voxanon.pipeline.evaluation.sets import discover_sets
    from voxanon.pipeline.feature_cache import FileDigests

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
