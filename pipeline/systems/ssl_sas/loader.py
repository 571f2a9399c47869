"""The SSL-SAS-layout model sets' loader: one component (content, speaker, vocoder) of an installed set, loaded
once per process in the form for a device. The chain's stages use it, and so do the corpus embeddings (B1's
pool, zLLR's sex flow) and the vocoder's training, which load the same components without running a stage."""
from __future__ import annotations

from ....data_prep.errors import VoxanonError
from ...model_service import cached_model, check_precision, model_set, resolve_device

COMPONENTS = ("content", "speaker", "vocoder")
_CONFIG_KEYS = {"content": "content", "speaker": "speaker", "vocoder": "generator"}


def load_model(name: str, component: str, precision: str = "float32", device: str = "cpu"):
    """One component of an installed model set, loaded once per process, in the form for ``device``.

    ``content`` is the set's content encoder (SSL-SAS soft content, or bshall HuBERT-soft units
    for a ``hubert-soft`` set), ``speaker`` its ECAPA :class:`EcapaEncoder`, ``vocoder`` its
    generator with the conditioning layout it was trained on. A set need not have all three
    (``hubert-soft`` holds a content encoder only), so each stage loads just what it uses.

    On ``cpu`` the float32 model is the set's weights as loaded, the vocoder's spectral convolutions
    planned here (so that forked workers share them); a lower ``precision`` (content and vocoder) gives
    a copy whose matrix-product and convolution weights are already in it, run under CPU autocast
    (:func:`voxanon.models.nets.precision.lower_precision_copy`), cached beside the float32 model. On any other
    device (``auto`` resolved here, :func:`resolve_device`; ``cpu:N`` is the device form on the CPU) the
    set's weights go straight into the direct form (:func:`voxanon.models.nets.precision.prepared_for_device`):
    cast to ``precision`` once and moved; no float32 CPU copy is kept and no CPU-only plans are built.
    The speaker encoder runs in float32 on every device. The set's checksums are verified once per
    process, when it is first loaded.
    """
    if component not in COMPONENTS:
        raise ValueError(f"model component must be one of {COMPONENTS}, got {component!r}")
    check_precision(precision, component)
    if precision == "tf32":
        raise ValueError("models are loaded in their weights' precision (float32 for tf32), not 'tf32'")
    if component == "speaker" and precision != "float32":
        raise ValueError("the speaker encoder runs in float32 only")
    device = resolve_device(device)

    def build():
        import torch

        from ....models.nets.hifigan import Vocoder
        from ....models.nets.precision import prepared_for_device

        if device == "cpu" and precision == "float32":
            return _built(model_set(name), name, component, cpu_plans=True)
        model = (load_model(name, component) if device == "cpu"
                 else _built(model_set(name), name, component, cpu_plans=False))
        module = prepared_for_device(model.generator if component == "vocoder" else model, device,
                                     getattr(torch, precision))
        return Vocoder(module, model.layout) if component == "vocoder" else module

    return cached_model(name, component, precision, device, build)


def _built(model_set, name: str, component: str, cpu_plans: bool):
    """``component`` of ``model_set`` holding the set's tensors themselves, in float32 on the CPU; with
    ``cpu_plans`` the vocoder's spectral convolutions planned."""
    if _CONFIG_KEYS[component] not in model_set.config:
        raise VoxanonError(f"model set {name!r} has no {component} model (it holds "
                           f"{', '.join(c for c in COMPONENTS if _CONFIG_KEYS[c] in model_set.config)}); "
                           f"set {component}.models to a set that has one")
    if component == "content":
        from ....models.nets.hubert_soft import content_encoder

        return content_encoder(model_set)
    if component == "speaker":
        from ....models.checkpoints.ecapa import ecapa_from_model_set

        return ecapa_from_model_set(model_set)
    from ....models.nets.hifigan import load_vocoder

    return load_vocoder(model_set, cpu_plans)


def load_ssl_sas_models(name: str = "ssl-sas"):
    """(content encoder, speaker encoder, vocoder) of an installed SSL-SAS-layout set, cached per process."""
    return tuple(load_model(name, component) for component in COMPONENTS)
