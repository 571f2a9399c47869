"""Importing SA-toolkit's released ASR-BN models (VoicePrivacy 2024 B5/B6) as data, into our modules.

SA-toolkit (deep-privacy/SA-toolkit, Apache-2.0) publishes each model as a GitHub release
(``https://github.com/deep-privacy/SA-toolkit/releases/download/<tag>/final.pt``, with a ``conf.pt``
beside it); its ``hubconf.py`` lists the tags (:data:`voxanon.models.checkpoints.catalogue.SA_TOOLKIT_TAGS`). A ``final.pt`` is a pickled dict:

* ``base_model_state_dict``: the network's state dict;
* ``base_model_path``: the training config that built it (``local/chain/tuning/tdnnf_wav2vec2_vq.py``,
  ``tdnnf_vq.py``, ``tdnnf_wav2vec2.py``, ``tdnnf.py`` for the ASR-BN extractors, ``local/tuning/hifigan.py``
  for the anonymisation models);
* ``base_model_args``: that config's command-line options (``codebook_size``, ``freeze_encoder``; for the
  converter ``asrbn_model`` and ``f0_transformation``);
* ``base_model_params``: the constructor's arguments (the ASR's ``output_dim``; the converter's ``utt2spk``,
  whose sorted speakers are its one-hot targets);
* ``install_path``, ``task_path``: where it was trained.

SA-toolkit loads one by running that config's Python (``infer_helper.load_model``). Here the pickle is
read with :func:`voxanon.models.checkpoints.safe.safe_load` (tensors and plain containers only: anything else
in it is refused before it is called), nothing of SA-toolkit is imported, and the state dict is mapped key
by key into :class:`voxanon.models.nets.asrbn.bottleneck.AsrBnExtractor` and :class:`voxanon.models.nets.asrbn.core_hifigan.CoreHifiGan`:

* the wav2vec2 front end's torchaudio keys: ``preprocessor.encoder.feature_projection.`` ->
  ``preprocessor.feature_projection.``, ``preprocessor.encoder.transformer.`` -> ``preprocessor.encoder.``,
  the positional convolution's weight norm folded (either PyTorch layout);
* the TDNN-F layers keep their keys; the converter's ``hifigan.*`` keys lose the prefix, weight norm folded;
* what BN extraction does not use is checked (every key present, every shape as the layout says) and left
  out: the bottleneck layer's ``linearA`` and batch norm, ``tdnnfs_after.*``, ``prefinal_*``, the chain and
  cross-entropy outputs, the quantiser's EMA statistics (``_ema_w``, ``_ema_cluster_size``: training state)
  and the second reference ``TDNNFBatchNorm`` keeps to the same quantiser (``tdnnfs.K.bottleneck_func.*``,
  which must equal the ``tdnnfs.K.tdnn.bottleneck_func.*`` one).

Only SA-toolkit's two ASR layouts exist (:data:`LAYOUTS`: the wav2vec2 one, three TDNN-F layers to the
bottleneck; the filterbank one, twelve with a subsampling by 2); the layer count and every splice width
read off the weights must be one of them. An unknown entry or key, an option our modules do not implement
(``f0_transformation``, an unknown config file, a codebook size that disagrees with the weights) or a wrong
shape fails with one :class:`~voxanon.models.checkpoints.safe.CheckpointError` naming the file and the key(s).
"""
from __future__ import annotations

import re
from collections import Counter
from pathlib import Path, PurePosixPath

from ...data_prep.errors import VoxanonError
from .sa_toolkit_tags import SA_TOOLKIT_CONVERTER_TAGS, SA_TOOLKIT_TAGS
from ..f0.params import SA_TOOLKIT_B5_B6

# torch and the checkpoint readers are imported where they are used: the command line reads the tags
# below at start-up.

SOURCE_COMMIT = "22c298edfa3ef92accf347053cd00826702a2c0d"
"""The SA-toolkit commit whose code this importer and its parity tests follow."""
ENTRIES = {"base_model_state_dict", "base_model_path", "base_model_args", "base_model_params", "install_path",
           "task_path"}
ASR_CONFIGS = {"tdnnf_wav2vec2_vq.py": ("wav2vec2", True), "tdnnf_wav2vec2.py": ("wav2vec2", False),
               "tdnnf_vq.py": ("fbank", True), "tdnnf.py": ("fbank", False)}
"""SA-toolkit's ASR configs with a BN extractor voxanon implements: (front end, vector-quantised)."""
CONVERTER_CONFIG = "hifigan.py"
ASR_ARGS = {"freeze_encoder", "codebook_size"}
CONVERTER_ARGS = {"asrbn_model", "f0_transformation"}
LAYOUTS = {"wav2vec2": ((3, 3, 3), (1, 1, 1)),
           "fbank": ((3, 3, 3, 1, 3, 3, 3, 3, 3, 3, 3, 3), (1, 1, 1, 2, 1, 1, 1, 1, 1, 1, 1, 1))}
"""(contexts, subsampling factors) from ``tdnn1`` to the bottleneck layer, per front end."""
AFTER_CONTEXTS = (1, 3, 3, 3)
"""``tdnnfs_after``'s splice widths (the first subsamples by 1.5), the same in both layouts."""
FBANK_BINS = 80
F0_SETTINGS = {key: value for key, value in SA_TOOLKIT_B5_B6.reference_kwargs().items()
               if key in ("frame_length", "frame_space", "nccf_thresh1", "tda_frame_length")}
"""``hifigan.py``'s ``f0_yaapt_opts`` (recorded in an imported set's config): SA-toolkit's YAAPT port with these,
its defaults otherwise (the F0 stage's ``sa-toolkit`` backend)."""
_PROJECTION = "preprocessor.encoder.feature_projection."
_TRANSFORMER = "preprocessor.encoder.transformer."


def tag_front_end(tag: str) -> tuple[str, int | None]:
    """(front end, codebook size or None) a tag's name announces."""
    match = re.search(r"_vq_(\d+)_", tag)
    return ("wav2vec2" if "wav2vec2" in tag else "fbank"), (int(match.group(1)) if match else None)


def _fail(source: str, message: str):
    from .safe import CheckpointError

    return CheckpointError(f"{source}: {message}")


def read_final_pt(path: str | Path, read=None) -> dict:
    """A ``final.pt``'s entries, read as data (``read``, default :func:`~voxanon.models.checkpoints.safe.safe_load`);
    any entry besides SA-toolkit's six is an error naming it."""
    from .safe import key_list, safe_load

    checkpoint = (read or safe_load)(path)
    if not isinstance(checkpoint, dict) or not isinstance(checkpoint.get("base_model_state_dict"), dict):
        found = key_list(map(str, checkpoint)) if isinstance(checkpoint, dict) else type(checkpoint).__name__
        raise _fail(str(path), f"not an SA-toolkit final.pt (a dict with base_model_state_dict); it holds {found}")
    unknown = sorted(map(str, set(checkpoint) - ENTRIES))
    if unknown:
        raise _fail(str(path), f"unknown entr{'y' if len(unknown) == 1 else 'ies'} {', '.join(unknown)} beside "
                               f"SA-toolkit's {', '.join(sorted(ENTRIES))}")
    missing = sorted(ENTRIES - set(checkpoint) - {"install_path", "task_path"})
    if missing:
        raise _fail(str(path), f"entr{'y' if len(missing) == 1 else 'ies'} {', '.join(missing)} missing")
    return checkpoint


def _shape(state: dict, key: str, source: str) -> tuple[int, ...]:
    import torch

    if key not in state:
        raise _fail(source, f"key {key} missing (the layout of SA-toolkit's ASR models needs it)")
    value = state[key]
    if not isinstance(value, torch.Tensor):
        raise _fail(source, f"key {key} is a {type(value).__name__}, not a tensor")
    return tuple(value.shape)


def _tdnnf_shapes(prefix: str, in_dim: int, out_dim: int, bottleneck: int, context: int) -> dict[str, tuple]:
    """Every state-dict key of one ``TDNNFBatchNorm`` (no quantiser) with its shape."""
    return {f"{prefix}.tdnn.linearB.inner_nat.weight": (bottleneck, in_dim * context),
            f"{prefix}.tdnn.linearB.inner_nat.bias": (1, bottleneck),
            f"{prefix}.tdnn.linearA.weight": (out_dim, bottleneck), f"{prefix}.tdnn.linearA.bias": (out_dim,),
            f"{prefix}.bn.running_mean": (out_dim,), f"{prefix}.bn.running_var": (out_dim,),
            f"{prefix}.bn.num_batches_tracked": ()}


def _vq_shapes(prefix: str, codebook: int, dim: int) -> dict[str, tuple]:
    return {f"{prefix}.quant._embedding.weight": (codebook, dim), f"{prefix}.quant._ema_w": (codebook, dim),
            f"{prefix}.quant._ema_cluster_size": (codebook,)}


def release_tdnnf_shapes(config, output_dim: int) -> dict[str, tuple]:
    """Every TDNN-F and output key of SA-toolkit's ASR with ``config``'s layout, with its shape."""
    hidden, bottleneck = config.hidden_dim, config.bottleneck_dim
    shapes = _tdnnf_shapes("tdnn1", config.input_dim, hidden, bottleneck, config.context[0])
    for i, context in enumerate(config.context[1:-1]):
        shapes.update(_tdnnf_shapes(f"tdnnfs.{2 * i}", hidden, hidden, bottleneck, context))
    bn = f"tdnnfs.{2 * (len(config.context) - 2)}"
    shapes.update(_tdnnf_shapes(bn, hidden, hidden, config.bn_dim, config.context[-1]))
    if config.codebook_size is not None:
        for prefix in (f"{bn}.bottleneck_func", f"{bn}.tdnn.bottleneck_func"):
            shapes.update(_vq_shapes(prefix, config.codebook_size, config.bn_dim))
    for i, context in enumerate(AFTER_CONTEXTS):
        shapes.update(_tdnnf_shapes(f"tdnnfs_after.{2 * i}", hidden, hidden, bottleneck, context))
    for head in ("prefinal_chain", "prefinal_xent"):
        shapes.update(_tdnnf_shapes(head, hidden, hidden, config.bn_dim, 1))
    for head in ("chain_output", "xent_output"):
        shapes.update({f"{head}.weight": (output_dim, hidden), f"{head}.bias": (1, output_dim)})
    return shapes


def _front_end_state(state: dict, source: str) -> dict:
    """The wav2vec2 keys renamed to ours, weight norm folded."""
    from .safe import CheckpointError, fold_weight_norm

    renamed = {}
    for key, value in state.items():
        if key.startswith("preprocessor."):
            renamed["preprocessor.feature_projection." + key[len(_PROJECTION):] if key.startswith(_PROJECTION) else
                    "preprocessor.encoder." + key[len(_TRANSFORMER):] if key.startswith(_TRANSFORMER) else key] = value
    try:
        return fold_weight_norm(renamed)
    except CheckpointError as error:
        raise _fail(source, str(error)) from None


def release_key(key: str) -> str:
    """The release's name of one of our extractor's keys (a folded weight: the weight-norm pair's base)."""
    for ours, theirs in (("preprocessor.feature_projection.", _PROJECTION), ("preprocessor.encoder.", _TRANSFORMER)):
        if key.startswith(ours):
            return theirs + key[len(ours):]
    return key


def _wav2vec2_config(state: dict, source: str):
    from ..nets.hubert import HubertBackboneConfig

    layers = {int(m.group(1)) for key in state if (m := re.match(re.escape(_TRANSFORMER) + r"layers\.(\d+)\.", key))}
    pos_conv = next((key for key in (f"{_TRANSFORMER}pos_conv_embed.conv.weight_v",
                                     f"{_TRANSFORMER}pos_conv_embed.conv.parametrizations.weight.original1",
                                     f"{_TRANSFORMER}pos_conv_embed.conv.weight") if key in state),
                    f"{_TRANSFORMER}pos_conv_embed.conv.weight_v")
    hidden = _shape(state, f"{_PROJECTION}projection.weight", source)[0]
    kernel_channels = _shape(state, pos_conv, source)
    # wav2vec2 large has 64-wide heads (1024 / 16); the head count is not in the weights.
    return HubertBackboneConfig(
        hidden_size=hidden, num_layers=len(layers), num_heads=max(1, hidden // 64),
        intermediate_size=_shape(state, f"{_TRANSFORMER}layers.0.feed_forward.intermediate_dense.weight", source)[0],
        conv_channels=_shape(state, "preprocessor.feature_extractor.conv_layers.0.conv.weight", source)[0],
        pos_conv_kernel=kernel_channels[2], pos_conv_groups=hidden // max(1, kernel_channels[1]))


def _codebook_size(state: dict, bn: str, source: str) -> int | None:
    """The quantiser's codebook size: the row count most of its copies agree on (SA-toolkit's layer holds the
    codebook and its EMA statistics under two names each, six tensors), so that a changed copy is the one named
    against the others, not the other way round; None without a quantiser."""
    copies = [key for key in (f"{bn}{inner}.bottleneck_func.quant.{name}" for inner in (".tdnn", "")
                              for name in ("_embedding.weight", "_ema_w", "_ema_cluster_size")) if key in state]
    if f"{bn}.tdnn.bottleneck_func.quant._embedding.weight" not in state:
        return None
    sizes = Counter(_shape(state, key, source)[0] for key in copies if _shape(state, key, source))
    return sizes.most_common(1)[0][0]


def asr_config_from_state(state: dict, source: str):
    """(:class:`~voxanon.models.nets.asrbn.bottleneck.AsrBnConfig`, ASR output width) read off an ASR state dict's shapes."""
    from ..nets.asrbn.bottleneck import AsrBnConfig

    front_end = "wav2vec2" if any(key.startswith("preprocessor.") for key in state) else "fbank"
    context, subsampling = LAYOUTS[front_end]
    indices = sorted({int(m.group(1)) for key in state if (m := re.match(r"tdnnfs\.(\d+)\.", key))})
    if not indices or indices[-1] != 2 * (len(context) - 2):
        raise _fail(source, f"{len(indices)} TDNN-F layers before the bottleneck's (tdnnfs.{indices[-1] if indices else '?'})"
                            f"; SA-toolkit's {front_end} ASR has {len(context) - 1} (tdnnfs.0 to "
                            f"tdnnfs.{2 * (len(context) - 2)}), so this is not a layout voxanon implements")
    bn = f"tdnnfs.{indices[-1]}"
    hidden, bottleneck = _shape(state, "tdnn1.tdnn.linearA.weight", source)[0], \
        _shape(state, "tdnn1.tdnn.linearB.inner_nat.weight", source)[0]
    tdnn1_in = _shape(state, "tdnn1.tdnn.linearB.inner_nat.weight", source)[1]
    codebook = _codebook_size(state, bn, source)
    wav2vec2 = _wav2vec2_config(state, source) if front_end == "wav2vec2" else None
    config = AsrBnConfig(front_end=front_end, wav2vec2=wav2vec2,
                         fbank_bins=tdnn1_in // context[0] if wav2vec2 is None else FBANK_BINS,
                         hidden_dim=hidden, bottleneck_dim=bottleneck,
                         bn_dim=_shape(state, f"{bn}.tdnn.linearB.inner_nat.weight", source)[0],
                         context=context, subsampling=subsampling,
                         codebook_size=codebook)
    if front_end == "fbank" and config.fbank_bins != FBANK_BINS:
        raise _fail(source, f"tdnn1.tdnn.linearB.inner_nat.weight takes {tdnn1_in} inputs; SA-toolkit's filterbank "
                            f"ASR splices 3 frames of {FBANK_BINS} bands ({3 * FBANK_BINS})")
    return config, _shape(state, "chain_output.weight", source)[0]


def convert_asr_state(state: dict, source: str):
    """(our extractor's state, its config, the ASR output width) from an ASR ``base_model_state_dict``
    (prefix removed); every key checked as the module doc says."""
    import torch

    from ..nets.asrbn.bottleneck import AsrBnExtractor
    from .safe import CheckpointError, check_state_fits, key_list

    config, output_dim = asr_config_from_state(state, source)
    front = _front_end_state(state, source) if config.wav2vec2 is not None else {}
    expected = release_tdnnf_shapes(config, output_dim)
    unknown = [key for key in state if key not in expected and not key.startswith("preprocessor.")]
    missing = [key for key in expected if key not in state]
    shapes = [f"{key} {tuple(state[key].shape)} (expected {expected[key]})" for key in expected
              if isinstance(state.get(key), torch.Tensor) and tuple(state[key].shape) != expected[key]]
    if unknown or missing or shapes:
        details = [f"{label} {key_list(keys)}" for label, keys in
                   (("unknown key(s)", unknown), ("missing", missing), ("shapes differ:", shapes)) if keys]
        raise _fail(source, "not SA-toolkit's ASR layout: " + "; ".join(details))
    with torch.device("meta"):
        module = AsrBnExtractor(config)
    kept = {key: state[key] for key in module.state_dict() if not key.startswith("preprocessor.")}
    bn = f"tdnnfs.{2 * (len(config.context) - 2)}"
    if config.codebook_size is not None and not torch.equal(
            state[f"{bn}.bottleneck_func.quant._embedding.weight"], state[f"{bn}.tdnn.bottleneck_func.quant._embedding.weight"]):
        raise _fail(source, f"{bn}.bottleneck_func.quant._embedding.weight differs from "
                            f"{bn}.tdnn.bottleneck_func.quant._embedding.weight: SA-toolkit's layer holds one "
                            "quantiser under both names")
    try:
        check_state_fits(module, {**front, **kept}, "not the wav2vec2 large front end its shapes describe", source)
    except CheckpointError as error:
        raise CheckpointError(re.sub(r"preprocessor\.[\w.]+", lambda m: release_key(m.group(0)), str(error))) from None
    return {**front, **kept}, config, output_dim


def _speakers(params: dict, source: str) -> list[str]:
    utt2spk = params.get("utt2spk")
    if not isinstance(utt2spk, dict) or not utt2spk or \
            not all(isinstance(k, str) and isinstance(v, str) for k, v in utt2spk.items()):
        raise _fail(source, "base_model_params['utt2spk'] must map utterance ids to speaker ids (strings): its "
                            "sorted speakers are the converter's one-hot targets")
    return sorted(set(utt2spk.values()))


def _check_options(checkpoint: dict, source: str, converter: bool) -> str:
    """The config file's name, after checking it and the options against what our modules implement."""
    path = checkpoint["base_model_path"]
    known = {CONVERTER_CONFIG} if converter else set(ASR_CONFIGS)
    name = PurePosixPath(str(path).replace("\\", "/")).name
    if name not in known:
        what = "an anonymisation model (hifigan_bn_* state: bn_extractor.* and hifigan.*)" if converter else \
            "an ASR-BN extractor"
        raise _fail(source, f"base_model_path {path!r}: {what} from a config voxanon does not implement (known: "
                            f"{', '.join(sorted(known))})")
    args, params = checkpoint["base_model_args"], checkpoint["base_model_params"]
    if not isinstance(args, dict) or not isinstance(params, dict):
        raise _fail(source, "base_model_args and base_model_params must be dicts")
    allowed_args, allowed_params = (CONVERTER_ARGS, {"utt2spk"}) if converter else (ASR_ARGS, {"output_dim"})
    for entry, given, allowed in (("base_model_args", args, allowed_args), ("base_model_params", params,
                                                                            allowed_params)):
        unknown = sorted(map(str, set(given) - allowed))
        if unknown:
            raise _fail(source, f"{entry} holds option(s) {', '.join(unknown)} that voxanon does not implement "
                                f"(known: {', '.join(sorted(allowed))})")
    if converter and args.get("f0_transformation"):
        raise _fail(source, f"base_model_args['f0_transformation'] = {args['f0_transformation']!r}: F0 "
                            "transformations (quantisation, noise, mean reversion) are not implemented; the "
                            "released anonymisation models have none")
    return name


def _check_asr_options(name: str, config, output_dim: int, checkpoint: dict, source: str) -> None:
    front_end, vq = ASR_CONFIGS[name]
    if front_end != config.front_end or vq != (config.codebook_size is not None):
        raise _fail(source, f"base_model_path names {name} ({front_end}{', VQ' if vq else ''}), but the weights are "
                            f"a {config.front_end} ASR{' with a quantiser' if config.codebook_size else ''}")
    args, params = checkpoint["base_model_args"], checkpoint["base_model_params"]
    if vq and "codebook_size" in args and int(args["codebook_size"]) != config.codebook_size:
        raise _fail(source, f"base_model_args['codebook_size'] = {args['codebook_size']} but the codebook "
                            f"has {config.codebook_size} rows")
    if "output_dim" in params and int(params["output_dim"]) != output_dim:
        raise _fail(source, f"base_model_params['output_dim'] = {params['output_dim']} but chain_output has "
                            f"{output_dim} rows")


def import_sa_toolkit(path: str | Path, read=None) -> tuple[dict, dict]:
    """Components (name -> state dict) and config of one ``final.pt`` (an anonymisation or an ASR-BN extractor tag);
    ``read`` as :func:`read_final_pt`'s."""
    import torch

    from .ssl_sas import GENERATOR_KEY

    from .safe import CheckpointError, check_state_fits, fold_weight_norm, key_list
    from ..nets.asrbn.core_hifigan import CoreHifiGan, generator_config

    source = str(path)
    checkpoint = read_final_pt(path, read)
    state = checkpoint["base_model_state_dict"]
    bad = [str(key) for key, value in state.items() if not isinstance(key, str) or not isinstance(value, torch.Tensor)]
    if bad:
        raise _fail(source, f"base_model_state_dict entries that are not tensors under string keys: {key_list(bad)}")
    converter = any(key.startswith(("hifigan.", "bn_extractor.")) for key in state)
    name = _check_options(checkpoint, source, converter)
    config = {"release": "sa-toolkit", "kind": "converter" if converter else "bn-extractor", "sample_rate": 16000,
              "source_commit": SOURCE_COMMIT,
              "origin": {key: checkpoint.get(key) for key in ("base_model_path", "task_path", "install_path")},
              "base_model_args": checkpoint["base_model_args"]}
    if not converter:
        extractor, asr, output_dim = convert_asr_state(state, source)
        _check_asr_options(name, asr, output_dim, checkpoint, source)
        return {"extractor": extractor}, {**config, "extractor": asr.to_dict(), "asr_output_dim": output_dim}
    unknown = [key for key in state if not key.startswith(("hifigan.", "bn_extractor."))]
    generator = {key[len("hifigan."):]: value for key, value in state.items() if key.startswith("hifigan.")}
    unknown += [f"hifigan.{key}" for key in generator if not GENERATOR_KEY.fullmatch(key)]
    if unknown:
        raise _fail(source, f"unknown key(s) {key_list(unknown)} (an anonymisation model holds bn_extractor.* "
                            "and CoreHifiGan's hifigan.*)")
    extractor, asr, output_dim = convert_asr_state(
        {key[len("bn_extractor."):]: value for key, value in state.items() if key.startswith("bn_extractor.")},
        f"{source} (bn_extractor.*)")
    speakers = _speakers(checkpoint["base_model_params"], source)
    try:
        folded = fold_weight_norm(generator)
    except CheckpointError as error:
        raise _fail(source, f"hifigan.*: {error}") from None
    conv_pre = folded.get("conv_pre.weight")
    if conv_pre is None:
        raise _fail(source, "key hifigan.conv_pre.weight_g/weight_v missing")
    expected_inputs = asr.bn_dim + 1 + len(speakers)
    if conv_pre.shape[1] != expected_inputs:
        raise _fail(source, f"hifigan.conv_pre takes {conv_pre.shape[1]} channels; BN ({asr.bn_dim}) + F0 (1) + "
                            f"one-hot over the {len(speakers)} speakers of base_model_params['utt2spk'] make "
                            f"{expected_inputs}")
    generator_settings = generator_config(asr.bn_dim, len(speakers), upsample_initial_channel=int(conv_pre.shape[0]))
    with torch.device("meta"):
        module = CoreHifiGan(generator_settings)
    try:
        check_state_fits(module, folded, "not CoreHifiGan as SA-toolkit's hifigan.py builds it (keys under hifigan.)",
                         source)
    except CheckpointError as error:
        raise CheckpointError(_file_keys(str(error), generator)) from None
    return {"extractor": extractor, "generator": folded}, \
        {**config, "extractor": asr.to_dict(), "asr_output_dim": output_dim,
         "generator": generator_settings.to_dict(), "speakers": speakers, "f0": dict(F0_SETTINGS)}


def _file_keys(message: str, generator: dict) -> str:
    """``message`` with each folded weight (``X.weight``, from a weight-norm pair) named as the file names the
    tensor that gives it its shape, ``hifigan.X.weight_v`` (or its parametrization's ``original1``)."""
    file_key = {}
    for key in generator:
        for suffix in (".weight_v", ".parametrizations.weight.original1"):
            if key.endswith(suffix):
                file_key[key[:-len(suffix)] + ".weight"] = f"hifigan.{key}"
    return re.sub(r"(?<![\w.])[\w.]+\.weight\b", lambda m: file_key.get(m.group(0), m.group(0)), message)


KEY_FAMILIES = (("front end (wav2vec2, preprocessor.*)", r"preprocessor\."),
                ("quantiser training state (EMA statistics), not used", r"tdnnfs\.\d+\.(tdnn\.)?bottleneck_func\.quant\._ema_"),
                ("TDNN-F layers (tdnn1, tdnnfs.*)", r"(tdnn1|tdnnfs\.\d+)\."),
                ("ASR head (tdnnfs_after, prefinal_*, outputs), not used", r"(tdnnfs_after\.\d+|prefinal_chain|prefinal_xent|"
                                                                            r"chain_output|xent_output)\."))
"""How ``voxanon models check`` groups an ASR state dict's keys (the import checks each key exactly)."""


def key_families(state: dict) -> dict[str, list[str]]:
    """A ``base_model_state_dict``'s keys by family, for a report; ``unknown`` holds the rest."""
    from .ssl_sas import GENERATOR_KEY

    families: dict[str, list[str]] = {}
    for key in map(str, state):
        asr = key[len("bn_extractor."):] if key.startswith("bn_extractor.") else key
        if key.startswith("hifigan."):
            family = "converter (CoreHifiGan, hifigan.*)" if GENERATOR_KEY.fullmatch(key[len("hifigan."):]) else "unknown"
        else:
            family = next((label for label, pattern in KEY_FAMILIES if re.match(pattern, asr)), "unknown")
        families.setdefault(family, []).append(key)
    return families


def find_final_pt(source: str | Path) -> Path:
    """``source`` itself, or the ``final.pt`` in the folder ``source`` (torch.hub keeps each tag's in
    ``checkpoints/<tag>/final.pt``)."""
    from .safe import CheckpointError

    path = Path(source)
    if path.is_dir():
        path = path / "final.pt"
    if not path.is_file():
        raise CheckpointError(f"{path}: no such file (give the release's final.pt, or the folder holding it)")
    return path


def default_name(path: Path) -> str:
    """The model set's name: the tag that the file's folder (or, failing that, the file's stem) is named after."""
    for candidate in (path.parent.name, path.stem):
        if candidate in SA_TOOLKIT_TAGS:
            return candidate
    raise VoxanonError(f"{path}: cannot tell which SA-toolkit tag this is from its folder's name "
                       f"({path.parent.name!r}); give --name (e.g. {SA_TOOLKIT_CONVERTER_TAGS[0]} for B5, "
                       f"{SA_TOOLKIT_CONVERTER_TAGS[3]} for B6)")


# Random weights with a tag's shapes, for plumbing tests and speed measurements -------------------------

RANDOM_SPEAKERS = {"full": 247, "tiny": 8}
"""Targets of a random converter: LibriTTS train-clean-100's count (247) at full size. Their ids are made
up (LibriTTS-like numbers, with the VoicePrivacy recipe's constant target 6081 among them)."""


def random_speakers(count: int) -> list[str]:
    return sorted({"6081", *(str(100 + 37 * i) for i in range(count - 1))})


def random_sa_toolkit(tag: str, size: str = "full", seed: int = 0) -> tuple[dict, dict]:
    """Components and config with random weights in ``tag``'s layout: ``full`` has the published shapes,
    ``tiny`` is small, for tests."""
    import torch

    from ..nets.asrbn.bottleneck import AsrBnConfig, AsrBnExtractor
    from ..nets.asrbn.core_hifigan import CoreHifiGan, generator_config
    from ..nets.hubert import HubertBackboneConfig

    if tag not in SA_TOOLKIT_TAGS:
        raise VoxanonError(f"unknown SA-toolkit tag {tag!r}; tags: {', '.join(SA_TOOLKIT_TAGS)}")
    if size not in RANDOM_SPEAKERS:
        raise VoxanonError(f"model size must be 'full' or 'tiny', got {size!r}")
    front_end, codebook = tag_front_end(tag)
    context, subsampling = LAYOUTS[front_end]
    wav2vec2 = None
    if front_end == "wav2vec2":
        wav2vec2 = AsrBnConfig().wav2vec2 if size == "full" else HubertBackboneConfig(
            hidden_size=64, num_layers=2, num_heads=4, intermediate_size=96, conv_channels=32, pos_conv_kernel=16,
            pos_conv_groups=4)
    widths = {} if size == "full" else {"hidden_dim": 64, "bottleneck_dim": 32, "bn_dim": 64}
    asr = AsrBnConfig(front_end=front_end, wav2vec2=wav2vec2, context=context, subsampling=subsampling,
                      codebook_size=codebook, **widths)
    torch.manual_seed(seed)
    extractor = AsrBnExtractor(asr)
    with torch.no_grad():
        for name, buffer in extractor.named_buffers():
            if name.endswith("running_var"):
                buffer.uniform_(0.5, 2.0)
    config = {"release": "sa-toolkit", "kind": "bn-extractor", "sample_rate": 16000, "source_commit": SOURCE_COMMIT,
              "origin": {"random_init": tag}, "base_model_args": {}, "extractor": asr.to_dict(),
              "asr_output_dim": None}
    components = {"extractor": extractor.state_dict()}
    if tag in SA_TOOLKIT_CONVERTER_TAGS:
        speakers = random_speakers(RANDOM_SPEAKERS[size])
        settings = generator_config(asr.bn_dim, len(speakers),
                                    **({} if size == "full" else {"upsample_initial_channel": 32}))
        components["generator"] = _signal_preserving(CoreHifiGan(settings)).state_dict()
        config.update(kind="converter", generator=settings.to_dict(), speakers=speakers, f0=dict(F0_SETTINGS))
    return components, config


def _signal_preserving(generator):
    """Random convolution weights of variance 1 / fan-in (transposed ones: stride / fan-in) and zero biases. With
    PyTorch's initialisation the activations fade layer after layer and a random converter outputs
    tanh(conv_post's bias), the same constant for every input."""
    import torch

    with torch.no_grad():
        for module in generator.modules():
            if isinstance(module, (torch.nn.Conv1d, torch.nn.ConvTranspose1d)):
                fan_in = module.in_channels * module.kernel_size[0]
                scale = module.stride[0] if isinstance(module, torch.nn.ConvTranspose1d) else 1
                module.weight.normal_(0.0, (scale / fan_in) ** 0.5)
                module.bias.zero_()
    return generator


# Loading an installed set ----------------------------------------------------------------------------------

def load_extractor(model_set):
    """The set's :class:`~voxanon.models.nets.asrbn.bottleneck.AsrBnExtractor`, built without random initialisation."""
    from ..nets.asrbn.bottleneck import AsrBnConfig, AsrBnExtractor

    _require_release(model_set)
    config = AsrBnConfig.from_dict(model_set.config["extractor"])
    return model_set.build("extractor", lambda: AsrBnExtractor(config))


def load_converter(model_set, cpu_plans: bool = True):
    """(the set's :class:`~voxanon.models.nets.hifigan.Vocoder` with a :class:`~voxanon.models.nets.asrbn.core_hifigan.CoreHifiGan`,
    its sorted target speakers); ``cpu_plans``: the spectral convolutions of CPU synthesis planned here."""
    from ..nets.asrbn.core_hifigan import CoreHifiGan, conditioning_layout
    from ..nets.hifigan import GeneratorConfig, Vocoder, plan_spectral_convolutions

    _require_release(model_set)
    if model_set.config.get("kind") != "converter":
        raise VoxanonError(f"model set {model_set.name!r} is an SA-toolkit BN extractor ({model_set.config.get('kind')})"
                           ", not an anonymisation model: import a hifigan_bn_* tag")
    settings = GeneratorConfig.from_dict(model_set.config["generator"])
    generator = model_set.build("generator", lambda: CoreHifiGan(settings))
    if cpu_plans:
        plan_spectral_convolutions(generator)  # here, so that forked workers share them
    speakers = list(model_set.config["speakers"])
    bn_dim = int(model_set.config["extractor"]["bn_dim"])
    return Vocoder(generator, conditioning_layout(bn_dim, len(speakers))), speakers


def _require_release(model_set) -> None:
    if model_set.config.get("release") != "sa-toolkit":
        raise VoxanonError(f"model set {model_set.name!r} is not an SA-toolkit import (voxanon models import "
                           "sa-toolkit FILE|DIR)")
