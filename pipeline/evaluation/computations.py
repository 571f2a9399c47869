"""What an evaluation computes per utterance, as cached computations: speaker embedders (GE2E, an ECAPA folder,
the semi-informed attacker) and transcribers, and where they run."""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

from ...data_prep.errors import VoxanonError

if TYPE_CHECKING:
    from .attackers import SemiInformed
    from .sets import EvaluationSet
    from ..feature_cache import CachedComputation

log = logging.getLogger(__name__)


# What each computation takes at its peak per sample of a batch's 16 kHz audio, beyond the loaded audio
# (CachedComputation.bytes_per_sample, measured by benchmarks/stage_memory.py --computations on 20 and 80 s of noise:
# GE2E 57.7 and 60.0, ECAPA 226.4, Whisper tiny.en 56.2 and, from 10 and 40 s, 43.3):
# the evaluation cuts its batches to the memory left by these. Others (a wav2vec2 or SpeechBrain ASR folder) count
# their loaded audio alone.
COMPUTE_BYTES_PER_SAMPLE = {"ge2e": 60.0, "ecapa": 227.0, "whisper": 57.0}

PACKED_ASR_BATCH = 64

ENCODERS = "ge2e (embedded), ecapa:DIR (SSL-SAS-style speechbrain folder), ecapa-voxceleb:DIR (spkrec-ecapa-voxceleb)"


def speaker_encoder_factory(spec: str, digest=None):
    """``(cache tag, build)`` for an encoder spec (see ``ENCODERS``): ``build(device="cpu")`` loads the encoder on a
    device. ``digest`` (path -> sha256, e.g. a :class:`~voxanon.pipeline.feature_cache.FileDigests`) names an
    ECAPA checkpoint in the cache; default: hash it."""
    if spec == "ge2e":
        from ...models.nets.ge2e import GE2EEncoder
        return "ge2e", lambda device="cpu": GE2EEncoder(device=device)
    kind, _, directory = spec.partition(":")
    if kind not in ("ecapa", "ecapa-voxceleb") or not directory:
        raise VoxanonError(f"unknown speaker encoder {spec!r}; available: {ENCODERS}")
    from ...models.checkpoints.ecapa import ecapa_from_directory
    from ...models.nets.speaker import EcapaConfig
    from ...models.checkpoints.ecapa import EMBEDDING_FILE
    from ...models.checkpoints.speechbrain_dirs import ecapa_dilations

    checkpoint = Path(directory) / EMBEDDING_FILE
    if not checkpoint.is_file():
        raise VoxanonError(f"speaker encoder {spec!r}: {checkpoint} not found")

    def build(device: str = "cpu"):
        return ecapa_from_directory(directory, embedding_mean_norm=kind == "ecapa-voxceleb").to(device)

    if digest is None:
        from ...data_prep.digest import sha256_file as digest
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
    from ...models.nets.speaker import EcapaEncoder

    return encoder.embed_on_device if device != "cpu" and isinstance(encoder, EcapaEncoder) else encoder.embed


def encoder_label(spec: str, tag: str) -> str:
    """How the tables name a speaker encoder: ``ge2e``, or ``<folder name> (<kind>-<checkpoint sha256>)``."""
    kind, _, directory = str(spec).partition(":")
    return tag if not directory else f"{Path(directory).name} ({tag})"


def make_embedder(asv: dict, encoder: str | None = None, *, device: str = "cpu", digest=None) -> CachedComputation:
    """The protocol's speaker encoder (or ``encoder``, a spec), built on ``device`` (``auto`` resolved where it runs)
    only when an embedding is not in the cache; see :func:`embedding_function`."""
    from ..feature_cache import CachedComputation

    spec = str(encoder or asv.get("encoder", "ge2e"))
    tag, build = speaker_encoder_factory(spec, digest)
    encoder = {}

    def embed(waves):
        if "embed" not in encoder:
            from ..model_service import resolve_device

            resolved = resolve_device(device)
            encoder["embed"] = embedding_function(build(resolved), resolved)
        return list(encoder["embed"](waves))

    return CachedComputation(tag, embed, kind="vector", batch_size=int(asv.get("batch_size", 16)),
                             loudness_lufs=asv.get("loudness_lufs"),
                             bytes_per_sample=COMPUTE_BYTES_PER_SAMPLE["ge2e" if spec == "ge2e" else "ecapa"])


def semi_informed_attacker(model_dir: Path, asv: dict, sets: list[EvaluationSet], system: str, *,
                           device: str = "cpu", digest=None) -> tuple[SemiInformed, list[str]]:
    """The semi-informed attacker from a ``voxanon train asv`` (or challenge-released) model folder, and the
    warnings on what it was trained on (:func:`~voxanon.pipeline.evaluation.attackers.attacker_training_warnings`).
    A missing model file is an error naming it."""
    from .attackers import SemiInformed, attacker_training_summary, attacker_training_warnings, check_attacker_model

    training = check_attacker_model(model_dir)
    spec = f"ecapa:{model_dir}"
    embedder = make_embedder(asv, spec, device=device, digest=digest)
    warnings = attacker_training_warnings(model_dir, training, sets, system)
    for warning in warnings:
        log.warning("%s", warning)
    return SemiInformed(embedder, encoder_label(spec, embedder.tag), attacker_training_summary(training)), warnings


def make_transcriber(spec: str | None, trust_model_code: bool = False, *, device: str = "cpu",
                     decoding: str | None = None) -> CachedComputation | None:
    """The protocol's ASR model (a name or a model directory), built on ``device`` only when a transcript is not
    cached (Whisper on CUDA where CTranslate2 has it, :func:`voxanon.models.recognisers.asr.whisper_device`).

    ``decoding`` (the protocol's ``asr_decoding``; None: ``per-utterance``) is Whisper's: ``packed`` transcripts are
    tagged (labelled and cached) ``<model>-packed``, ``short-window`` ones ``<model>-short-window``, ``per-utterance``
    ones ``<model>`` as before the other two, so the cache never hands one decoding's transcript to another. Other ASR
    models ignore it.

    ``trust_model_code``: let speechbrain build a model directory whose hyperparams.yaml names code
    outside voxanon's allow-list (see :mod:`voxanon.models.checkpoints.speechbrain_dirs`). The spec and its folder
    are checked now (:func:`~voxanon.models.recognisers.asr.check_asr_model`), before any work."""
    from ...models.recognisers.asr import DEFAULT_WHISPER_DECODING, WHISPER_DECODINGS, check_asr_model
    from ..feature_cache import CachedComputation

    if not spec:
        return None
    decoding = decoding or DEFAULT_WHISPER_DECODING
    if decoding not in WHISPER_DECODINGS:
        raise VoxanonError(f"asr_decoding {decoding!r}: expected one of {', '.join(WHISPER_DECODINGS)}")
    asr_kind = check_asr_model(str(spec), trust_model_code)
    whisper_tag = "" if asr_kind != "whisper" or decoding == "per-utterance" else f"-{decoding}"
    packed = whisper_tag == "-packed"
    model = {}

    def transcribe(waves):
        if "asr" not in model:
            from ...models.recognisers.asr import load_asr
            from ..execution.heap import reuse_freed_memory
            from ..model_service import resolve_device

            # Whisper's encoder makes blocks of 54 MB and more per window: kept on the heap, not mapped afresh.
            reuse_freed_memory(every_block=True)
            model["asr"] = load_asr(spec, trust_model_code=trust_model_code, device=resolve_device(device),
                                    decoding=decoding)
        return model["asr"].transcribe_many(waves)

    tag = (Path(spec).name if os.sep in str(spec) else str(spec)) + whisper_tag
    # Packed: enough utterances per batch to fill several 30 s windows (about ten demo utterances each).
    return CachedComputation(tag, transcribe, kind="text", batch_size=PACKED_ASR_BATCH if packed else 8,
                             bytes_per_sample=COMPUTE_BYTES_PER_SAMPLE.get(asr_kind, 0.0))


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


def anonymisation_device(device: str, backend=None) -> str:
    """The device an evaluation's anonymisation runs its models on: ``auto`` resolved here, or by each actor under
    Ray (the machine that starts the run need not have a GPU)."""
    if backend is None:
        from ..model_service import resolve_device

        return resolve_device(device)
    return device


def check_device(device: str, backend) -> None:
    """``--device cuda`` where this process sees no CUDA device: one error before any work. Under Ray the actors
    check their own (the machine that starts the run need not have a GPU)."""
    if backend is None:
        from ..model_service import check_device_available

        check_device_available(device)
