"""The published releases voxanon knows, one entry each: what to download, how to import it, how to make random
weights of its shapes, what ``voxanon models check`` verifies of it, what runs after ``fetch --import``, and what
to tell a user whose run needs it.

``voxanon models fetch``, ``import``, ``list`` and ``check`` and the installed-set registry all read this one
table: a new release is one entry here (and its own modules), not a branch in the commands. It is data plus small
functions that import their importer or checker when called: the command line reads it at start-up, so nothing
here imports torch.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from ...data_prep.errors import VoxanonError
from .sa_toolkit_tags import SA_TOOLKIT_RELEASE_URL, SA_TOOLKIT_TAGS

if TYPE_CHECKING:
    from .fetch import Fetched
    from .registry import ModelSet
    from .release_check import CheckReport, OnceReader


@dataclass(frozen=True)
class RemoteFile:
    """One file to download, with whatever is known to check it (None: unknown)."""

    url: str
    filename: str
    sha256: str | None = None
    sha256_prefix: str | None = None
    md5: str | None = None
    size: int | None = None


Components = dict[str, dict]
"""A model set's tensors by component (``{"generator": state_dict, ...}``)."""


@dataclass(frozen=True)
class Imported:
    """What an importer read: the model set's name, components, config and a line saying where they came from."""

    name: str
    components: Components
    config: dict
    origin: str


@dataclass(frozen=True)
class FolderCheck:
    """What ``voxanon models check FOLDER`` runs on a release's unpacked folder: ``run(folder, read)``, reading
    each file once through ``read``; it reports, never raises, on what it finds."""

    run: Callable[[Path, OnceReader], CheckReport]
    holds: Callable[[Path], bool] | None = None
    """Whether a folder is this release's; None for the one check that reads any folder no other release's
    check ``holds``."""


@dataclass(frozen=True)
class BundledFlow:
    """A pickled flow a release ships beside its model set (zLLR-VC's sex flow), imported by ``fetch --import``
    as the flow ``name`` unless one of that name is installed."""

    name: str
    """The flow's name, the one its systems need (``flow:NAME``)."""
    pattern: str
    """Where it lies in the unpacked release (a glob below each unpacked folder)."""


@dataclass(frozen=True)
class Release:
    name: str
    description: str
    licence: str
    files: tuple[RemoteFile, ...] = ()
    zenodo_record: str | None = None
    """Resolved through the Zenodo API at fetch time (file names, sizes and md5 sums)."""
    source: str = ""
    """What ``voxanon models import NAME SOURCE`` reads; empty for a download that is not a model set."""
    import_options: frozenset[str] = frozenset()
    """The ``models import`` options that apply: ``hubert``, ``vocoder_dir``, ``name``, ``tag``."""
    importer: Callable[..., Imported] | None = None
    """``importer(source, **options)``: reads the release as data."""
    random_init: Callable[..., Imported] | None = None
    """``random_init(size, seed, **options)``: the same layout with random weights (``size`` full or tiny)."""
    set_names: tuple[str, ...] = ()
    """The model sets this release installs (default: its own name)."""
    install_hint: str = ""
    """How to install it, for a run that finds it missing."""
    set_install_hint: Callable[[str], str] | None = None
    """How to install one of its model sets by name, where that differs from set to set (default ``install_hint``)."""
    folder_check: FolderCheck | None = None
    """What ``voxanon models check FOLDER`` verifies of its unpacked folder."""
    set_loaders: Callable[[ModelSet], dict] | None = None
    """``set_loaders(model_set)``: component name -> how a run builds it from an installed set of this release,
    each strictly (every key and shape): what ``voxanon models check NAME`` loads."""
    fetched_source: Callable[[Fetched], Path] | None = None
    """What ``voxanon models fetch NAME --import`` hands the importer: the file or folder among the download's."""
    bundled_flow: BundledFlow | None = None
    """A flow the download also holds, installed after its model set by ``fetch --import``."""
    fetch_note: str = ""
    """What to do with the download, for a release that is not a model set (printed after ``fetch``)."""

    @property
    def model_sets(self) -> tuple[str, ...]:
        return self.set_names or ((self.name,) if self.importer else ())


def _ssl_sas_layout(release: str):
    def importer(source, *, hubert=None, vocoder_dir=None) -> Imported:
        from .ssl_sas import RELEASES, import_ssl_sas

        variant = RELEASES[release]
        components, config = import_ssl_sas(source, hubert, vocoder_dir=vocoder_dir or variant.vocoder_dir,
                                            layout=variant.layout, release=release)
        return Imported(release, components, config,
                        f"{variant.title} release {source}" + (f" + {hubert}" if hubert else ""))

    def random_init(size: str, seed: int) -> Imported:
        from .ssl_sas import RELEASES, random_ssl_sas

        components, config = random_ssl_sas(size, seed, RELEASES[release].layout)
        return Imported(release, components, config, f"random-init size={size} seed={seed}")

    return importer, random_init


def _import_hubert_soft(source) -> Imported:
    from .hubert_soft import import_hubert_soft

    components, config = import_hubert_soft(source)
    return Imported("hubert-soft", components, config, f"bshall HuBERT-soft {source}")


def _random_hubert_soft(size: str, seed: int) -> Imported:
    from .hubert_soft import random_hubert_soft

    components, config = random_hubert_soft(size, seed)
    return Imported("hubert-soft", components, config, f"random-init size={size} seed={seed}")


def _import_sa_toolkit(source, *, name: str | None = None) -> Imported:
    from ...data_prep.digest import sha256_file
    from .sa_toolkit import default_name, find_final_pt, import_sa_toolkit

    path = find_final_pt(source)
    components, config = import_sa_toolkit(path)
    return Imported(name or default_name(path), components, config,
                    f"SA-toolkit {config['kind']} {path} (sha256 {sha256_file(path)})")


def _random_sa_toolkit(size: str, seed: int, *, tag: str | None = None, name: str | None = None) -> Imported:
    from .sa_toolkit import random_sa_toolkit

    if not tag:
        raise VoxanonError("sa-toolkit --random-init needs --tag TAG (the layout to give random weights)")
    components, config = random_sa_toolkit(tag, size, seed)
    return Imported(name or tag, components, config, f"random-init {tag} size={size} seed={seed}")


def _import_nac(source, *, name: str | None = None) -> Imported:
    from pathlib import Path

    from ...data_prep.digest import sha256_file
    from .nac import find_release_files, import_nac

    components, config = import_nac(source)
    files = find_release_files(Path(source))
    origin = "VoicePrivacy 2024 B4 " + ", ".join(f"{path} (sha256 {sha256_file(path)})" for path in files.values())
    return Imported(name or "nac", components, config, f"{origin} + {len(config['voices'])} voice prompts")


def _random_nac(size: str, seed: int, *, name: str | None = None) -> Imported:
    from .nac import random_nac

    components, config = random_nac(size, seed)
    return Imported(name or "nac", components, config, f"random-init size={size} seed={seed}")


def _import_sttts(source, *, name: str | None = None) -> Imported:
    from pathlib import Path

    from ...data_prep.digest import sha256_file
    from .sttts import find_release_files, import_sttts

    components, config = import_sttts(source)
    files = find_release_files(Path(source))
    origin = "VoicePrivacy 2024 B3 " + ", ".join(f"{path} (sha256 {sha256_file(path)})" for path in files.values())
    return Imported(name or "sttts", components, config, origin)


def _random_sttts(size: str, seed: int, *, name: str | None = None) -> Imported:
    from .sttts import random_sttts

    components, config = random_sttts(size, seed)
    return Imported(name or "sttts", components, config, f"random-init size={size} seed={seed}")


def _ssl_sas_loaders(model_set) -> dict:
    """The SSL-SAS layout's components (SSL-SAS, zLLR-VC and HuBERT-soft sets hold some of them)."""
    from ..nets.hifigan import load_vocoder
    from ..nets.hubert_soft import content_encoder
    from .ecapa import ecapa_from_model_set

    loaders = {"content": lambda: content_encoder(model_set), "speaker": lambda: ecapa_from_model_set(model_set),
               "generator": lambda: load_vocoder(model_set, cpu_plans=False).generator}
    return {component: load for component, load in loaders.items() if component in model_set.config}


def _sa_toolkit_loaders(model_set) -> dict:
    from .sa_toolkit import load_converter, load_extractor

    loaders = {"extractor": lambda: load_extractor(model_set)}
    if model_set.config.get("kind") == "converter":
        loaders["generator"] = lambda: load_converter(model_set, cpu_plans=False)[0].generator
    return loaders


def _nac_loaders(model_set) -> dict:
    from types import SimpleNamespace

    from .nac import COMPONENTS, load_component, voices_state

    loaders = {component: lambda c=component: load_component(model_set, c) for component in COMPONENTS}
    # The voices are arrays, not a network: reported as their tensors.
    loaders["voices"] = lambda: SimpleNamespace(state_dict=lambda: voices_state(load_component(model_set, "voices")))
    return loaders


def _sttts_loaders(model_set) -> dict:
    from .sttts import COMPONENTS, load_component

    return {component: lambda c=component: load_component(model_set, c) for component in COMPONENTS}


def _check_ssl_sas_folder(folder: Path, read) -> CheckReport:
    from .release_check import check_release

    return check_release(folder, read)


def _check_sa_toolkit_folder(folder: Path, read) -> CheckReport:
    from .release_check import check_file

    return check_file(folder / "final.pt", read)


def _holds_sa_toolkit(folder: Path) -> bool:
    """A tag's folder (torch.hub's ``checkpoints/<tag>/``): its ``final.pt``, and no SSL-SAS ``HiFi-GAN``."""
    return (folder / "final.pt").is_file() and not (folder / "HiFi-GAN").is_dir()


def _check_nac_folder(folder: Path, read) -> CheckReport:
    from .release_check import check_nac_release

    return check_nac_release(folder, read)


def _holds_nac(folder: Path) -> bool:
    return next(folder.rglob("coarse_2.pt"), None) is not None


def _check_sttts_folder(folder: Path, read) -> CheckReport:
    from .sttts import check_sttts_release

    return check_sttts_release(folder, read)


def _holds_sttts(folder: Path) -> bool:
    return next(folder.rglob("asr_branchformer_tts-phn_en.zip"), None) is not None


def _sa_toolkit_set_hint(set_name: str) -> str:
    return (f"voxanon models import sa-toolkit DIR, DIR holding {SA_TOOLKIT_RELEASE_URL.format(tag=set_name)} "
            f"(torch.hub keeps it in ~/.cache/torch/hub/checkpoints/{set_name}/), or voxanon models import "
            f"sa-toolkit --random-init --tag {set_name} for plumbing tests")


def find_release_root(folders: tuple[Path, ...] | list[Path], marker: str = "HiFi-GAN", max_depth: int = 3) -> Path:
    """The folder (at most ``max_depth`` levels down) that holds ``marker``: the unpacked release's root."""
    found = []
    for folder in folders:
        for depth in range(max_depth + 1):
            found.extend(p.parent for p in folder.glob("/".join(["*"] * depth + [marker])) if p.is_dir())
    roots = sorted(set(found))
    if len(roots) != 1:
        raise VoxanonError(f"expected one folder holding {marker}/ in {', '.join(map(str, folders))}; found "
                           f"{', '.join(map(str, roots)) or 'none'}")
    return roots[0]


def _unpacked_release_root(fetched: Fetched) -> Path:
    return find_release_root(fetched.folders)


def _the_one_checkpoint(fetched: Fetched) -> Path:
    models = [path for path in fetched.files if path.suffix == ".pt"]
    if len(models) != 1:
        raise VoxanonError(f"expected one .pt file among {', '.join(map(str, fetched.files))}")
    return models[0]


def _download_folder(fetched: Fetched) -> Path:
    """The folder every file was downloaded to (B4's files are not archives)."""
    return fetched.files[0].parent


_ssl_sas_import, _ssl_sas_random = _ssl_sas_layout("ssl-sas")
_zllr_vc_import, _zllr_vc_random = _ssl_sas_layout("zllr-vc")

CATALOGUE: dict[str, Release] = {release.name: release for release in (
    Release(
        "ssl-sas", "SSL-SAS release (Zenodo 6529898): HiFi-GAN g_*, HuBERT soft model, ECAPA, pseudo x-vectors",
        "CC BY-NC 4.0",
        files=(RemoteFile("https://zenodo.org/records/6529898/files/pretrained_models_anon_xv.tar.gz?download=1",
                          "pretrained_models_anon_xv.tar.gz"),),
        source="the unpacked SSL-SAS release (pretrained_models_anon_xv)",
        import_options=frozenset({"hubert", "vocoder_dir"}), importer=_ssl_sas_import, random_init=_ssl_sas_random,
        # Any folder no other release claims is read as a pretrained_models_anon_xv release: SSL-SAS's or
        # zLLR-VC's, told apart by what its g_* holds; the report says what is missing.
        folder_check=FolderCheck(_check_ssl_sas_folder), set_loaders=_ssl_sas_loaders,
        fetched_source=_unpacked_release_root,
        install_hint="voxanon models fetch ssl-sas --import (downloads the release), or voxanon models import "
                     "ssl-sas DIR (the unpacked pretrained_models_anon_xv release), or voxanon models import ssl-sas "
                     "--random-init for plumbing tests"),
    Release(
        "hubert-base", "fairseq HuBERT-base LibriSpeech 960 h (checks the SSL-SAS content model)", "MIT",
        files=(RemoteFile("https://dl.fbaipublicfiles.com/hubert/hubert_base_ls960.pt", "hubert_base_ls960.pt"),)),
    Release(
        "ssl-sas-pool", "SSL-SAS pool x-vectors of LibriTTS train-other-500 (GitHub release provided_xvector)",
        "CC BY-NC 4.0",
        files=(RemoteFile("https://github.com/nii-yamagishilab/SSL-SAS/releases/download/provided_xvector/"
                          "libritts_train_other_500_xvector.tar.gz", "libritts_train_other_500_xvector.tar.gz"),),
        fetch_note="import the pool with: voxanon pool import FOLDER --spk2gender FILE --out NAME (the speakers' "
                   "sexes are in the SSL-SAS repository's LibriTTS train-other-500 spk2gender)"),
    Release(
        "hubert-soft", "bshall HuBERT-soft, 256-d soft units (GitHub release v0.2)", "MIT",
        files=(RemoteFile("https://github.com/bshall/hubert/releases/download/v0.2/hubert-soft-35d9f29f.pt",
                          "hubert-soft-35d9f29f.pt", sha256_prefix="35d9f29f"),),
        source="hubert-soft-35d9f29f.pt", importer=_import_hubert_soft, random_init=_random_hubert_soft,
        set_loaders=_ssl_sas_loaders, fetched_source=_the_one_checkpoint,
        install_hint="voxanon models fetch hubert-soft --import (downloads hubert-soft-35d9f29f.pt), or voxanon "
                     "models import hubert-soft FILE, or voxanon models import hubert-soft --random-init for "
                     "plumbing tests"),
    Release(
        "zllr-vc", "ICASSP 2023 zero-evidence sex privacy release (Zenodo 7347685): vocoder and sex flow",
        "CC BY-NC 4.0", zenodo_record="7347685",
        source="the unpacked ICASSP 2023 zLLR-VC release (its pretrained_models_anon_xv folder)",
        import_options=frozenset({"hubert", "vocoder_dir"}), importer=_zllr_vc_import, random_init=_zllr_vc_random,
        set_loaders=_ssl_sas_loaders, fetched_source=_unpacked_release_root,
        bundled_flow=BundledFlow("sex", "xv_disentanglement_model/*.pt"),
        install_hint="voxanon models fetch zllr-vc --import (downloads the ICASSP 2023 release), or voxanon models "
                     "import zllr-vc DIR (its unpacked pretrained_models_anon_xv folder), or voxanon models import "
                     "zllr-vc --random-init for plumbing tests"),
    Release(
        "sa-toolkit", "SA-toolkit's ASR-BN anonymisation and extractor models (VoicePrivacy 2024 B5/B6), one "
                      "final.pt per tag (GitHub releases of deep-privacy/SA-toolkit)", "Apache-2.0",
        source="an SA-toolkit release's final.pt, or the folder holding it (B5: tag "
               "hifigan_bn_tdnnf_wav2vec2_vq_48_v1, B6: hifigan_bn_tdnnf_600h_vq_48_v1; the bn_tdnnf_* extractors "
               "too), read as data",
        import_options=frozenset({"name", "tag"}), importer=_import_sa_toolkit, random_init=_random_sa_toolkit,
        set_names=SA_TOOLKIT_TAGS, set_install_hint=_sa_toolkit_set_hint,
        folder_check=FolderCheck(_check_sa_toolkit_folder, _holds_sa_toolkit), set_loaders=_sa_toolkit_loaders,
        install_hint="voxanon models import sa-toolkit FILE|DIR (a tag's final.pt from deep-privacy/SA-toolkit's "
                     "GitHub releases), or voxanon models import sa-toolkit --random-init --tag TAG for plumbing "
                     "tests"),
    Release(
        "nac", "VoicePrivacy 2024 B4: Bark coarse_2.pt and fine_2.pt (7.7 GB), EnCodec 24 kHz, the HuBERT quantiser, "
               "HuBERT-base and the 130 voice prompts (nac_speaker_mappings.zip)", "MIT",
        files=(RemoteFile("https://huggingface.co/suno/bark/resolve/main/coarse_2.pt", "coarse_2.pt"),
               RemoteFile("https://huggingface.co/suno/bark/resolve/main/fine_2.pt", "fine_2.pt"),
               RemoteFile("https://dl.fbaipublicfiles.com/encodec/v0/encodec_24khz-d7cc33bc.th",
                          "encodec_24khz-d7cc33bc.th", sha256_prefix="d7cc33bc"),
               RemoteFile("https://huggingface.co/GitMylo/bark-voice-cloning/resolve/main/"
                          "quantifier_hubert_base_ls960_14.pth", "quantifier_hubert_base_ls960_14.pth"),
               RemoteFile("https://huggingface.co/facebook/hubert-base-ls960/resolve/main/pytorch_model.bin",
                          "pytorch_model.bin"),
               RemoteFile("https://github.com/m-pana/nac-requirements/releases/download/1.0/"
                          "nac_speaker_mappings.zip", "nac_speaker_mappings.zip")),
        source="the folder holding VoicePrivacy 2024 B4's files (coarse_2.pt, fine_2.pt, encodec_24khz-d7cc33bc.th, "
               "the HuBERT quantiser tokenizer.pth or quantifier_hubert_base_ls960_14.pth, facebook/hubert-base-ls960's "
               "pytorch_model.bin and the unpacked nac_speaker_mappings.zip), read as data",
        import_options=frozenset({"name"}), importer=_import_nac, random_init=_random_nac,
        folder_check=FolderCheck(_check_nac_folder, _holds_nac), set_loaders=_nac_loaders,
        fetched_source=_download_folder,
        install_hint="voxanon models fetch nac --import (downloads B4's files), or voxanon models import nac DIR (DIR "
                     "holding B4's coarse_2.pt, fine_2.pt, encodec_24khz-d7cc33bc.th, the HuBERT quantiser, "
                     "hubert-base-ls960's pytorch_model.bin and the unpacked nac_speaker_mappings.zip; see docs/b4.md), "
                     "or voxanon models import nac --random-init for plumbing tests"),
    Release(
        "sttts", "VoicePrivacy 2024 B3 (STTTS): the ESPnet phone recogniser zip, IMS-Toucan's style embedding, "
                 "WGAN, aligner, FastSpeech2 and HiFi-GAN (release v2.0 of DigitalPhonetics/speaker-anonymization)",
        "GPL-3.0 (the release's repository; IMS-Toucan Apache-2.0)",
        files=tuple(RemoteFile(f"https://github.com/DigitalPhonetics/speaker-anonymization/releases/download/v2.0/"
                               f"{name}.zip", f"{name}.zip", size=size)
                    for name, size in (("anonymization", 850_894), ("asr", 408_472_040), ("tts", 748_014_864))),
        source="the recipe's exp/sttts_models folder (asr/asr_branchformer_tts-phn_en.zip, tts/Embedding/"
               "embedding_function.pt, anonymization/gan_style-embed/style-embed_wgan.pt, tts/Aligner/aligner.pt, "
               "tts/FastSpeech2_Multi/prosody_cloning.pt, tts/HiFiGAN_combined/best.pt), read as data",
        import_options=frozenset({"name"}), importer=_import_sttts, random_init=_random_sttts,
        folder_check=FolderCheck(_check_sttts_folder, _holds_sttts), set_loaders=_sttts_loaders,
        fetched_source=_download_folder,
        install_hint="voxanon models fetch sttts --import (downloads B3's three zips), or voxanon models import "
                     "sttts DIR (DIR the recipe's exp/sttts_models, holding B3's asr_branchformer_tts-phn_en.zip, embedding_function.pt, style-embed_wgan.pt, aligner.pt, "
                     "prosody_cloning.pt and best.pt; see docs/b3.md), or voxanon models import sttts --random-init "
                     "for plumbing tests"),
)}


def release(name: str) -> Release:
    if name not in CATALOGUE:
        raise VoxanonError(f"unknown release {name!r}; known: {', '.join(CATALOGUE)}")
    return CATALOGUE[name]


def importable() -> tuple[str, ...]:
    """The releases ``voxanon models import`` reads."""
    return tuple(name for name, entry in CATALOGUE.items() if entry.importer)


def install_hint(set_name: str) -> str:
    """How to install the model set ``set_name``, for a message to a user whose run needs it."""
    for entry in CATALOGUE.values():
        if set_name in entry.model_sets:
            return entry.set_install_hint(set_name) if entry.set_install_hint else entry.install_hint
    return f"voxanon models import {set_name} ..."


def folder_check(folder: Path) -> FolderCheck:
    """The check of the release whose unpacked folder ``folder`` is (:attr:`FolderCheck.holds`); any other folder
    gets the one check that reads any folder."""
    checks = [entry.folder_check for entry in CATALOGUE.values() if entry.folder_check]
    return next((check for check in checks if check.holds and check.holds(folder)), None) or \
        next(check for check in checks if check.holds is None)


SET_LAYOUT_DEFAULT = "ssl-sas"
"""The release of an installed set whose config names none: the SSL-SAS layout's importers (SSL-SAS, zLLR-VC,
HuBERT-soft) record no release."""


def set_release(config: dict) -> Release:
    """The release an installed model set (its ``config.json``) was imported from."""
    return release(config.get("release", SET_LAYOUT_DEFAULT))
