"""VoicePrivacy 2024 B3 (STTTS, IMS Stuttgart): its published files assembled into one model set.

``voxanon models import sttts DIR`` reads, under ``DIR`` (the recipe's ``exp/sttts_models``, as release v2.0 of
DigitalPhonetics/speaker-anonymization unpacks, at any depth, each found once by its folder and name, :data:`FILES`):

* ``asr/asr_branchformer_tts-phn_en.zip``: the ESPnet model-zoo zip of the phone recogniser
  (:mod:`voxanon.models.checkpoints.sttts_asr`);
* ``tts/Embedding/embedding_function.pt`` (the style embedding) and
  ``anonymization/gan_style-embed/style-embed_wgan.pt`` (the WGAN generator with its ``mean`` and ``std``)
  (:mod:`voxanon.models.checkpoints.sttts_speaker`);
* ``tts/Aligner/aligner.pt`` (:mod:`voxanon.models.checkpoints.sttts_prosody`);
* ``tts/FastSpeech2_Multi/prosody_cloning.pt`` and ``tts/HiFiGAN_combined/best.pt``
  (:mod:`voxanon.models.checkpoints.sttts_tts`);

and, from the installed ``silero-vad`` package, Silero VAD's 16 kHz weights (``vad``), which cut the silence before
the style embedding and the prosody extraction.

Each is read as data by its part's ``read_<component>`` and checked key by key by its ``convert_<component>``;
the set holds one safetensors file per component and their configurations in ``config.json``. The recipe's
``anonymization/style-embed_wgan.pt`` (without ``gan_style-embed/``) is a previous run's cache of generated
vectors, not a release file: it is not read.
"""
from __future__ import annotations

from pathlib import Path

from ...data_prep.errors import VoxanonError
from .safe import CheckpointError

RELEASE = "sttts"
SAMPLE_RATE = 16_000
FILES = {"asr": "asr/asr_branchformer_tts-phn_en.zip",
         "style": "tts/Embedding/embedding_function.pt",
         "wgan": "anonymization/gan_style-embed/style-embed_wgan.pt",
         "aligner": "tts/Aligner/aligner.pt",
         "fastspeech2": "tts/FastSpeech2_Multi/prosody_cloning.pt",
         "hifigan": "tts/HiFiGAN_combined/best.pt"}
"""Each component's file, as the recipe's ``configs/anon_sttts.yaml`` names it under ``models_dir``; found by its
last two path parts (folder and name) below the folder given."""
PACKAGED = ("vad",)
"""Components read from an installed package rather than the release: Silero VAD's 16 kHz weights, as the
``silero-vad`` package ships them (:func:`voxanon.models.checkpoints.sttts_speaker.packaged_vad_path`); the recipe
fetches Silero from torch.hub."""
COMPONENTS = tuple(FILES) + PACKAGED
PART_MODULES = {"asr": "sttts_asr", "style": "sttts_speaker", "wgan": "sttts_speaker", "aligner": "sttts_prosody",
                "fastspeech2": "sttts_tts", "hifigan": "sttts_tts", "vad": "sttts_speaker"}
"""The module of ``voxanon.models.checkpoints`` that reads, converts, builds and makes random weights of each."""
PART_DESCRIPTIONS = {"asr": "ESPnet model-zoo zip: Branchformer + Transformer decoder + CTC phone recogniser",
                     "style": "IMS-Toucan StyleEmbedding (GST), style_emb_func",
                     "wgan": "WGAN-QC generator (model_parameters, generator/critic state dicts, mean, std)",
                     "aligner": "IMS-Toucan CTC aligner, asr_model", "fastspeech2": "IMS-Toucan FastSpeech2 (Conformer)",
                     "hifigan": "IMS-Toucan HiFi-GAN generator (48 kHz)", "vad": "Silero VAD 16 kHz (silero-vad package)"}
SIZES = ("full", "tiny")
FULL_AT_EVERY_SIZE = ("style", "wgan")


def _part(component: str):
    import importlib

    return importlib.import_module(f"{__package__}.{PART_MODULES[component]}")


def find_release_files(root: str | Path) -> dict[str, Path]:
    """The file of each component under ``root`` (:data:`FILES`); one line names every missing one, or a
    component found twice."""
    root = Path(root)
    if not root.is_dir():
        raise CheckpointError(f"{root}: not a folder (give the recipe's exp/sttts_models folder holding B3's files)")
    found, missing = {}, []
    for component, relative in FILES.items():
        folder, name = relative.split("/")[-2:]
        matches = sorted(path for path in root.rglob(name) if path.parent.name == folder and path.is_file())
        if not matches:
            missing.append(relative)
        elif len(matches) > 1:
            raise CheckpointError(f"{root}: {len(matches)} files {folder}/{name} ({', '.join(map(str, matches[:3]))}); "
                                  "give the folder holding one release")
        else:
            found[component] = matches[0]
    if missing:
        raise CheckpointError(f"{root}: missing {', '.join(missing)} (B3's release v2.0 of "
                              "DigitalPhonetics/speaker-anonymization, laid out as the recipe's exp/sttts_models)")
    return found


def import_sttts(root: str | Path) -> tuple[dict, dict]:
    """Components (name -> state dict) and config of B3's files under ``root``, each read as data and checked key
    by key by its part's reader and converter."""
    root = Path(root)
    files = find_release_files(root)
    components, config = {}, {"release": RELEASE, "sample_rate": SAMPLE_RATE}
    for component, path in {**files, **packaged_files()}.items():
        part = _part(component)
        checkpoint = getattr(part, f"read_{component}")(path)
        components[component], config[component] = getattr(part, f"convert_{component}")(checkpoint, path)
    config["files"] = {component: str(path.relative_to(root)) for component, path in files.items()}
    config["files"].update({component: str(path) for component, path in packaged_files().items()})
    return components, config


def packaged_files() -> dict[str, Path]:
    """The file of each component read from an installed package (:data:`PACKAGED`)."""
    from .sttts_speaker import packaged_vad_path

    return {"vad": packaged_vad_path()}


def random_sttts(size: str = "full", seed: int = 0) -> tuple[dict, dict]:
    """Components and config with random weights: ``full`` the published shapes, ``tiny`` small networks for
    tests; each component from its part's ``random_<component>(size, seed)``."""
    if size not in SIZES:
        raise VoxanonError(f"model size must be 'full' or 'tiny', got {size!r}")
    components, config = {}, {"release": RELEASE, "sample_rate": SAMPLE_RATE}
    for component in COMPONENTS:
        # The style and the GAN vectors keep their 128 dimensions at every size: FastSpeech2 is conditioned on the
        # GAN vector (its tiny size keeps 128), which is compared with the style embedding; both networks are small.
        part_size = "full" if component in FULL_AT_EVERY_SIZE else size
        components[component], config[component] = getattr(_part(component), f"random_{component}")(part_size, seed)
    config["files"] = {"random_init": size}
    return components, config


def require_sttts(model_set) -> None:
    if model_set.config.get("release") != RELEASE:
        raise VoxanonError(f"model set {model_set.name!r} is not a B3 import (voxanon models import sttts DIR)")


def load_component(model_set, component: str):
    """One network of an installed B3 set, built from its config and loaded strictly (each key and shape)."""
    require_sttts(model_set)
    if component not in COMPONENTS:
        raise ValueError(f"unknown B3 component {component!r}; known: {', '.join(COMPONENTS)}")
    build = getattr(_part(component), f"build_{component}")
    model = model_set.build(component, lambda: build(model_set.config[component]))
    return model.eval()


def check_sttts_release(root: Path, read=None):
    """``voxanon models check`` on B3's folder: each file found (:func:`find_release_files`) and a trial import."""
    from .release_check import CheckReport, FileReport, try_import

    report = CheckReport(root)
    try:
        files = find_release_files(root)
    except CheckpointError as error:
        report.problems.append(str(error))
        return report
    for component, path in files.items():
        report.files.append(FileReport(str(path.relative_to(root)), PART_DESCRIPTIONS[component], keyed=False))
    try:
        report.files.extend(FileReport(str(path), PART_DESCRIPTIONS[component], keyed=False)
                            for component, path in packaged_files().items())
    except CheckpointError as error:
        report.problems.append(str(error))
    try_import(report, f"voxanon models import sttts {root}", lambda: import_sttts(root)[0])
    return report

