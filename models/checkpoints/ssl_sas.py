"""Importing the SSL-SAS and zLLR-VC releases: their ``g_*`` generator files, soft content and speaker models.

* SSL-SAS ``g_*``: ``{'generator': state}`` split into the generator, the content model
  (``latent_encoder.*``) and the speaker encoder (``xv_model.*``); the speaker front end's non-learned
  state (``fbank.compute_deltas.kernel``, any ``mean_var_norm.*``) must equal what speechbrain's own
  ``Fbank``/``InputNormalization`` hold and is dropped, a zLLR-VC ``g_*`` may also hold its sex flow
  (``xv_dis_model.*``, dropped), and any other key is an error that lists the keys and names the file;
* the soft content model's fairseq HuBERT keys go through :mod:`voxanon.models.checkpoints.keymaps`.

Every file is read with :func:`voxanon.models.checkpoints.safe.safe_load`.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import torch

from ...data_prep.errors import VoxanonError

from .keymaps import fairseq_hubert_to_hf, unknown_soft_content_keys
from .ecapa import ecapa_config_from_state, ecapa_with_weights
from .safe import CheckpointError, ImplausibleConfigError, built_with_weights, fold_weight_norm, key_list, safe_load, strip_prefix
from ..nets.hifigan import ConditioningLayout, GeneratorConfig, GeneratorSizeError, HifiganGenerator, Vocoder
from ..nets.hubert import SoftContentConfig, SoftContentEncoder
from ..nets.speaker import SSL_SAS_ECAPA, EcapaConfig, EcapaEncoder, ecapa_front_end


SSL_SAS_SUBMODELS = ("latent_encoder.", "xv_model.")
SPEAKER_FRONT_END = ("fbank.", "mean_var_norm.")
"""``latentGenerator``'s speechbrain ``Fbank(n_mels=80)`` and ``InputNormalization(norm_type='sentence',
std_norm=False)``: no learned weights, but ``Fbank`` registers its deltas kernel as a persistent buffer,
so every ``g_*`` holds ``fbank.compute_deltas.kernel``."""
SEX_FLOW_PREFIX = "xv_dis_model."
"""zLLR-VC's ``latentGenerator`` holds the pickled sex flow named by its config's
``xv_disentanglement_model`` as a submodule; the flow is imported from its own file instead."""

GENERATOR_KEY = re.compile(r"(conv_pre|conv_post|ups\.\d+|resblocks\.\d+\.convs[12]?\.\d+)\."
                           r"(weight|bias|weight_g|weight_v|parametrizations\.weight\.original[01])")
"""Keys of jik876's HiFi-GAN generator (resblock 1 or 2; weight norm in either PyTorch layout, or folded)."""
SEX_FLOW_KEY = re.compile(r"lmu|cpl\.\d+\.(mask|[st]\.\d+\.(weight|bias))")
"""Keys of the ICASSP 2023 release's ``RealNVP`` (its ``classes.py``): coupling layers ``cpl.<k>`` with
their ``s``/``t`` networks (``s.6`` the rescale) and ``mask``, and ``lmu`` (log μ)."""

def generator_families(checkpoint, source: str, *, sex_flow: bool = False) -> dict[str, dict]:
    """A ``{'generator': state}`` checkpoint's keys by component, prefixes stripped:
    ``generator`` (weight norm not folded), ``content``, ``speaker``, ``front_end`` (keys kept whole),
    ``sex_flow`` (only with ``sex_flow``: the zLLR-VC layout) and ``unknown`` (whole keys, and any
    checkpoint entry other than ``generator``)."""
    if not isinstance(checkpoint, dict) or not isinstance(checkpoint.get("generator"), dict):
        found = sorted(map(str, checkpoint)) if isinstance(checkpoint, dict) else type(checkpoint).__name__
        raise CheckpointError(f"{source}: expected a dict with a 'generator' state dict (jik876 g_* layout), got "
                              f"{found}")
    families: dict[str, dict] = {name: {} for name in ("generator", "content", "speaker", "front_end", "sex_flow",
                                                       "unknown")}
    for entry in checkpoint:
        if entry != "generator":
            families["unknown"][f"entry {entry!r} beside 'generator'"] = checkpoint[entry]
    for key, value in checkpoint["generator"].items():
        if key.startswith("latent_encoder."):
            families["content"][key[len("latent_encoder."):]] = value
        elif key.startswith("xv_model."):
            families["speaker"][key[len("xv_model."):]] = value
        elif key.startswith(SPEAKER_FRONT_END):
            families["front_end"][key] = value
        elif sex_flow and key.startswith(SEX_FLOW_PREFIX) and SEX_FLOW_KEY.fullmatch(key[len(SEX_FLOW_PREFIX):]):
            families["sex_flow"][key[len(SEX_FLOW_PREFIX):]] = value
        elif GENERATOR_KEY.fullmatch(key):
            families["generator"][key] = value
        else:
            families["unknown"][key] = value
    return families


def speaker_front_end_reference(n_mels: int = 80) -> dict[str, object]:
    """What the ECAPA front end holds besides weights, recomputed with speechbrain's own classes:
    ``Fbank(n_mels)``'s persistent buffers (the deltas kernel, ``arange(-2, 3)`` repeated per mel band)
    under ``fbank.``, and under ``mean_var_norm.`` the sentence normaliser's state dict and the
    statistics its checkpoint hook saves (``count``, ``glob_mean``, ``glob_std``)."""

    fbank, normaliser = ecapa_front_end(n_mels)
    reference: dict[str, object] = {f"fbank.{k}": v for k, v in fbank.state_dict().items()}
    reference.update({f"mean_var_norm.{k}": v for k, v in normaliser.state_dict().items()})
    statistics = getattr(normaliser, "_statistics_dict", dict)()
    reference.update({f"mean_var_norm.{k}": v for k, v in statistics.items()})
    return reference


def _never_updated(value) -> bool:
    """A sentence normaliser never updates its global statistics: count 0 and the initial mean and std
    (empty in speechbrain >= 1.1, ``tensor([0])`` in 0.5)."""
    if isinstance(value, torch.Tensor):
        return value.numel() <= 1 and not bool(value.ne(0).any())
    return isinstance(value, (int, float)) and value == 0


def front_end_problems(front_end: dict, n_mels: int, source: str) -> tuple[list[str], list[str]]:
    """(keys speechbrain's front end does not hold, one message per key whose value differs from it)."""
    reference = speaker_front_end_reference(n_mels)
    unknown, mismatched = [], []
    for key, value in front_end.items():
        if key not in reference:
            unknown.append(key)
            continue
        expected = reference[key]
        if isinstance(expected, torch.Tensor):
            same = isinstance(value, torch.Tensor) and value.shape == expected.shape and \
                torch.equal(value.detach().cpu().to(expected.dtype), expected)
            if not same and key.startswith("mean_var_norm."):
                same = _never_updated(value)
            described = f"{tuple(expected.shape)} {expected.flatten()[:5].tolist()}..."
        else:
            same = value == expected or (key.startswith("mean_var_norm.") and _never_updated(value))
            described = repr(expected)
        if not same:
            got = f"{tuple(value.shape)} {value.flatten()[:5].tolist()}..." if isinstance(value, torch.Tensor) \
                else repr(value)
            what = (f"speechbrain Fbank(n_mels={n_mels})" if key.startswith("fbank.") else
                    "speechbrain InputNormalization(norm_type='sentence', std_norm=False), which never updates it")
            mismatched.append(f"{source}: {key} is {got}, but {what} holds {described}: the checkpoint's speaker "
                              "front end differs from the one voxanon computes")
    return unknown, mismatched


def speaker_input_size(speaker: dict, default: int = 80) -> int:
    """The ECAPA's input width (mel bands), read off its first convolution; SSL-SAS builds ``Fbank(n_mels=80)``."""
    weight = speaker.get("blocks.0.conv.conv.weight")
    return int(weight.shape[1]) if isinstance(weight, torch.Tensor) and weight.ndim == 3 else default


def generator_problems(families: dict[str, dict], source: str, sex_flow: bool) -> list[str]:
    """What makes a split ``g_*`` (:func:`generator_families`) unusable: unknown keys, front-end state that differs."""
    unknown_front_end, mismatched = front_end_problems(families["front_end"], speaker_input_size(families["speaker"]),
                                                       source)
    unknown = list(families["unknown"]) + unknown_front_end
    problems = []
    if unknown:
        known = ("jik876 generator keys (conv_pre, ups.N, resblocks.N.convs*, conv_post), latent_encoder.*, "
                 "xv_model.*, fbank.* and mean_var_norm.* front-end state"
                 + (", xv_dis_model.* (the sex flow)" if sex_flow else ""))
        problems.append(f"{source}: {len(unknown)} key(s) that no component of "
                        f"{'a zLLR-VC' if sex_flow else 'an SSL-SAS'} g_* holds: {key_list(unknown)} (known: {known})")
    return problems + mismatched


def split_ssl_sas_generator(checkpoint: dict, source: str = "g_* checkpoint", *,
                            sex_flow: bool = False) -> dict[str, dict[str, torch.Tensor]]:
    """``{'generator': state}`` -> {'generator', 'content', 'speaker'} state dicts, weight norm folded.

    The speaker front-end state (``fbank.*``, ``mean_var_norm.*``) is checked against speechbrain's
    own front end and dropped; with ``sex_flow`` (zLLR-VC) the embedded flow's keys are checked by name
    and dropped. Any other key is an error that lists them and names ``source``.
    """
    families = generator_families(checkpoint, source, sex_flow=sex_flow)
    problems = generator_problems(families, source, sex_flow)
    if problems:
        raise CheckpointError("\n".join(problems))
    try:
        generator = fold_weight_norm(families["generator"])
    except CheckpointError as error:
        raise CheckpointError(f"{source}: {error}") from None
    return {"generator": generator, "content": families["content"], "speaker": families["speaker"]}


# fairseq HuBERT <-> transformers HubertModel ------------------------------------------------

SSL_SAS_VOCODER_DIR = "HiFi-GAN/libri_tts_clean_100_fbank_xv_ssl_freeze"
ZLLR_VC_LAYOUT = {"standardise_content": True, "l2_normalise_speaker": True, "layer_norm_speaker": False}
"""The conditioning the ICASSP 2023 zLLR-VC vocoder was trained with
(nii-yamagishilab/speaker_sex_attribute_privacy)."""


@dataclass(frozen=True)
class LayoutRelease:
    """What tells apart the releases of the ``pretrained_models_anon_xv`` layout, for their import and check."""

    name: str
    title: str
    """Its name in the source line of an imported set's manifest."""
    sex_flow: bool
    """Whether its ``g_*`` may hold the sex flow (``xv_dis_model.*``: :func:`split_ssl_sas_generator`)."""
    layout: dict | None
    """Its vocoder's conditioning (:class:`ConditioningLayout` fields; None: SSL-SAS's)."""
    vocoder_dir: str | None
    """The ``HiFi-GAN/<model>`` folder the import reads by default (None: the release's only one)."""


RELEASES = {"ssl-sas": LayoutRelease("SSL-SAS", "SSL-SAS", False, None, SSL_SAS_VOCODER_DIR),
            "zllr-vc": LayoutRelease("zLLR-VC", "ICASSP 2023 zLLR-VC", True, ZLLR_VC_LAYOUT, None)}


def _ssl_sas_configs(size: str, layout: dict) -> dict:
    if size == "full":
        generator, content, speaker = GeneratorConfig(), SoftContentConfig(), SSL_SAS_ECAPA
    elif size == "tiny":
        generator = GeneratorConfig(upsample_initial_channel=32)
        content = SoftContentConfig(hidden_size=64, num_layers=2, num_heads=1, intermediate_size=96,
                                    conv_channels=32, pos_conv_kernel=16, pos_conv_groups=4)
        speaker = EcapaConfig(channels=(32, 32, 32, 32, 96), attention_channels=16, se_channels=16, res2net_scale=4)
    else:
        raise VoxanonError(f"model size must be 'full' or 'tiny', got {size!r}")
    return {"sample_rate": 16000, "generator": generator.to_dict(), "layout": ConditioningLayout(**layout).to_dict(),
            "content": content.to_dict(), "speaker": speaker.to_dict()}


def random_ssl_sas(size: str = "full", seed: int = 0, layout: dict | None = None
                   ) -> tuple[dict[str, dict[str, torch.Tensor]], dict]:
    """SSL-SAS-layout components with random weights: ``full`` has the published shapes, ``tiny`` is for tests.

    ``layout`` sets :class:`~voxanon.models.nets.hifigan.ConditioningLayout` fields (e.g. :data:`ZLLR_VC_LAYOUT`).
    """

    config = _ssl_sas_configs(size, dict(layout or {}))
    torch.manual_seed(seed)
    generator = HifiganGenerator(GeneratorConfig.from_dict(config["generator"]))
    content = SoftContentEncoder(SoftContentConfig.from_dict(config["content"]))
    content.W.data.normal_()
    speaker = EcapaEncoder(EcapaConfig.from_dict(config["speaker"]))
    components = {"generator": generator.state_dict(), "content": content.state_dict(),
                  "speaker": speaker.embedding_model.state_dict()}
    return components, config


def find_vocoder_dir(release_dir: str | Path) -> str:
    """The one ``HiFi-GAN/<model>`` folder of a release that holds ``g_*`` files (relative to the release)."""
    release = Path(release_dir)
    found = sorted({path.parent.name for path in release.glob("HiFi-GAN/*/g_*")})
    if len(found) != 1:
        raise CheckpointError(f"expected one HiFi-GAN/<model> folder with g_* files in {release}, found "
                              f"{found or 'none'} (is {release} the unpacked pretrained_models_anon_xv folder?)")
    return f"HiFi-GAN/{found[0]}"


def read_vocoder_config(path: Path):
    """The generator config of a jik876/SSL-SAS ``config.json`` (SSL-SAS's values where it has none)."""

    if not path.is_file():
        return GeneratorConfig()
    try:
        published = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(published, dict):
            raise ValueError(f"a JSON object is expected, got {type(published).__name__}")
        defaults = {k: v for k, v in GeneratorConfig().to_dict().items() if k != "in_channels"}
        if not {"in_channels", "model_in_dim", "num_mels"} & set(published):
            published["in_channels"] = GeneratorConfig().in_channels
        return GeneratorConfig.from_dict({**defaults, **published})
    except GeneratorSizeError as error:
        raise ImplausibleConfigError(f"{path}: {error}") from None
    except (ValueError, TypeError, KeyError, UnicodeDecodeError) as error:
        raise CheckpointError(f"{path}: not a usable vocoder config ({type(error).__name__}: {error})") from None


def soft_content_config_from_fairseq(centroids: torch.Tensor, hubert: dict[str, torch.Tensor],
                                     **quirks) -> SoftContentConfig:
    """Sizes read off the tensor shapes; heads = hidden / 64 as in HuBERT base and large."""
    try:
        layers = {int(m.group(1)) for k in hubert if (m := re.match(r"encoder\.layers\.(\d+)\.", k))}
        pos_v = hubert.get("encoder.pos_conv.0.weight_v", hubert.get("encoder.pos_conv.0.weight"))
        hidden = int(centroids.shape[1])
        return SoftContentConfig(hidden_size=hidden, num_layers=len(layers), num_heads=max(1, hidden // 64),
                                 intermediate_size=int(hubert["encoder.layers.0.fc1.weight"].shape[0]),
                                 conv_channels=int(hubert["feature_extractor.conv_layers.0.0.weight"].shape[0]),
                                 pos_conv_kernel=int(pos_v.shape[2]), pos_conv_groups=hidden // int(pos_v.shape[1]),
                                 n_centroids=int(centroids.shape[0]), **quirks)
    except (KeyError, AttributeError, IndexError) as error:
        raise CheckpointError(f"not a fairseq HuBERT state dict (missing {error})") from None


def soft_content_from_ssl_sas_state(state: dict[str, torch.Tensor], **quirks) -> SoftContentEncoder:
    """From ``soft_model.pt`` or the ``latent_encoder.*`` part of a ``g_*`` file: ``W`` + ``ssl_model.*``."""
    if "W" not in state:
        raise CheckpointError("SSL-SAS soft content state has no centroid matrix 'W'")
    fairseq_state = strip_prefix(state, "ssl_model.")
    config = soft_content_config_from_fairseq(state["W"], fairseq_state, **quirks)
    converted = {"W": state["W"], **{f"hubert.{k}": v for k, v in fairseq_hubert_to_hf(fairseq_state).items()}}
    return built_with_weights(lambda: SoftContentEncoder(config), converted, "soft content weights",
                              "do not fit the HuBERT backbone and centroids their shapes describe")


def soft_content_from_state(state, source: str):
    """The SSL-SAS soft content encoder from a ``SoftPredictor`` state; unknown keys are an error naming ``source``."""

    if not isinstance(state, dict):
        raise CheckpointError(f"{source}: expected a state dict, got {type(state).__name__}")
    unknown = unknown_soft_content_keys(state)
    if unknown:
        raise CheckpointError(f"{source}: {len(unknown)} key(s) that an SSL-SAS soft content model (centroids W and "
                              f"fairseq HuBERT keys under ssl_model.) does not hold: {key_list(unknown)}")
    try:
        return soft_content_from_ssl_sas_state(state)
    except CheckpointError as error:
        raise CheckpointError(f"{source}: {error}") from None


def ecapa_from_state(state, source: str):
    """The speaker encoder from a speechbrain ``ECAPA_TDNN`` state; unknown keys are an error naming ``source``."""

    if not isinstance(state, dict):
        raise CheckpointError(f"{source}: expected a state dict, got {type(state).__name__}")
    try:
        config = ecapa_config_from_state(state)
    except CheckpointError as error:
        raise CheckpointError(f"{source}: {error}") from None
    return ecapa_with_weights(config, state, source=source)


def import_ssl_sas(release_dir: str | Path, hubert_path: str | Path | None = None, *,
                   vocoder_dir: str | None = SSL_SAS_VOCODER_DIR, layout: dict | None = None,
                   release: str = "ssl-sas") -> tuple[dict, dict]:
    """Components and config from an unpacked ``pretrained_models_anon_xv`` release (SSL-SAS or zLLR-VC).

    The vocoder is the lexicographically last ``g_*`` in ``vocoder_dir`` (default
    ``HiFi-GAN/libri_tts_clean_100_fbank_xv_ssl_freeze``, as SSL-SAS ``inference.py`` picks it;
    ``None``: the release's only ``HiFi-GAN/<model>`` folder). ``layout`` sets the fields of the
    conditioning layout the vocoder was trained with (:data:`ZLLR_VC_LAYOUT` for zLLR-VC);
    ``release`` (``ssl-sas`` or ``zllr-vc``) says which keys its ``g_*`` may hold
    (:func:`import_ssl_sas_files`).
    """
    root = Path(release_dir)
    folder = root / (vocoder_dir or find_vocoder_dir(root))
    candidates = sorted(folder.glob("g_*"))
    if not candidates:
        raise CheckpointError(f"no g_* vocoder checkpoint in {folder} (is {root} the unpacked "
                              "pretrained_models_anon_xv release?)")
    return import_ssl_sas_files(candidates[-1], config_path=folder / "config.json",
                                soft_model_path=root / "HuBERT_soft" / "soft_model.pt",
                                embedding_path=root / "ECAPA-TDNN" / "embedding_model.ckpt",
                                hubert_path=hubert_path, layout=layout, release=release)


def import_ssl_sas_files(generator_path: Path, *, config_path: Path, soft_model_path: Path, embedding_path: Path,
                         hubert_path: str | Path | None = None, layout: dict | None = None,
                         release: str = "ssl-sas", read=None) -> tuple[dict, dict]:
    """Components and config from a ``g_*`` file and the files beside it in the release.

    The ``g_*``'s ``latent_encoder.*`` (fine-tuned HuBERT + centroids) and ``xv_model.*`` (ECAPA)
    are used; if it lacks them, ``soft_model_path`` and ``embedding_path`` are read instead. Its
    speaker front-end state must equal speechbrain's, and a zLLR-VC ``g_*`` may also hold the sex flow
    (:func:`split_ssl_sas_generator`). ``hubert_base_ls960.pt``, when given, is checked to be a
    fairseq HuBERT whose shapes match. Every component is loaded strictly into our modules; nothing
    is written. ``read`` reads a file (default :func:`safe_load`; ``models check`` passes one that reads
    each file once for its inspection and this import).
    """

    if release not in RELEASES:
        raise VoxanonError(f"release must be one of {', '.join(RELEASES)}, got {release!r}")
    read = read or safe_load
    conditioning = ConditioningLayout(**(layout or {}))
    parts = split_ssl_sas_generator(read(generator_path), str(generator_path), sex_flow=RELEASES[release].sex_flow)
    generator_config = read_vocoder_config(Path(config_path))
    if parts["content"]:
        content = soft_content_from_state(parts["content"], f"{generator_path} (latent_encoder.*)")
    else:
        content = soft_content_from_state(read(soft_model_path), str(soft_model_path))
    if parts["speaker"]:
        speaker = ecapa_from_state(parts["speaker"], f"{generator_path} (xv_model.*)")
    else:
        speaker = ecapa_from_state(read(embedding_path), str(embedding_path))

    generator = built_with_weights(lambda: HifiganGenerator(generator_config), parts["generator"], str(generator_path),
                                   f"generator shapes do not match its config {config_path}")
    Vocoder(generator, conditioning)
    if hubert_path is not None:
        base = read(hubert_path)
        if not isinstance(base, dict) or not isinstance(base.get("model"), dict):
            raise CheckpointError(f"{hubert_path}: not a fairseq checkpoint (no 'model' entry)")
        try:
            hf_base = fairseq_hubert_to_hf(base["model"])
        except CheckpointError as error:
            raise CheckpointError(f"{hubert_path}: {error}") from None
        mismatched = [k for k, v in content.hubert.state_dict().items()
                      if k not in hf_base or hf_base[k].shape != v.shape]
        if mismatched:
            raise CheckpointError(f"{hubert_path}: HuBERT shapes differ from the vocoder's content model "
                                  f"({mismatched[:3]})")
    config = {"sample_rate": 16000, "generator": generator_config.to_dict(),
              "layout": conditioning.to_dict(), "content": content.config.to_dict(),
              "speaker": speaker.config.to_dict()}
    components = {"generator": generator.state_dict(), "content": content.state_dict(),
                  "speaker": speaker.embedding_model.state_dict()}
    return components, config
