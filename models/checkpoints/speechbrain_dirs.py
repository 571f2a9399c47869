"""speechbrain model directories read without running their ``hyperparams.yaml``.

A speechbrain ``hyperparams.yaml`` is a program: hyperpyyaml's ``!new:``, ``!name:``,
``!apply:`` and ``!module:`` tags import and call any Python object, so evaluating an
untrusted one can run anything (``!apply:os.system ["..."]``). voxanon therefore:

* reads every YAML with :func:`read_hparams`, a YAML safe loader that keeps each tag as
  inert data (:class:`Tagged`): nothing is imported or called;
* for the layouts whose architecture it knows (ECAPA in :mod:`voxanon.models.nets.speaker`,
  the wav2vec2 CTC ASR in :mod:`voxanon.models.recognisers.asr`, the wav2vec2 emotion classifier in
  :mod:`voxanon.models.recognisers.ser`) takes sizes and labels from that data and loads the
  checkpoints into its own modules through :func:`voxanon.models.checkpoints.safe.safe_load`;
* for any other directory, which speechbrain itself must build, refuses every object tag
  outside :data:`ALLOWED_CALLABLES` unless the user passes ``--trust-model-code``
  (:func:`check_model_code`).

The speechbrain wav2vec2 wrapper (``speechbrain.integrations.huggingface.wav2vec2.Wav2Vec2``,
formerly ``lobes.models.huggingface_transformers`` / ``huggingface_wav2vec``) is
reproduced here (:func:`load_wav2vec2`) because both known wav2vec2 layouts use it:
its checkpoint ``wav2vec2.ckpt`` holds a transformers ``Wav2Vec2Model`` under the prefix
``model.``, which loads into our wrapper key for key.
"""
from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from ...data_prep.errors import VoxanonError

HPARAMS_FILE = "hyperparams.yaml"
TRUST_FLAG = "--trust-model-code"

WAV2VEC2_WRAPPERS = ("speechbrain.integrations.huggingface.wav2vec2.Wav2Vec2",
                     "speechbrain.lobes.models.huggingface_transformers.wav2vec2.Wav2Vec2",
                     "speechbrain.lobes.models.huggingface_wav2vec.HuggingFaceWav2Vec2")
"""The names under which speechbrain releases have published the wav2vec2 wrapper."""

ALLOWED_CALLABLE_PREFIXES = (
    "torch.nn.",
    "speechbrain.nnet.",
    "speechbrain.lobes.features.",
    "speechbrain.lobes.models.",
    "speechbrain.processing.features.",
    "speechbrain.decoders.",
    "speechbrain.dataio.encoder.",
    "speechbrain.integrations.huggingface.",
)
"""Modules of network building blocks, features, decoders and label encoders: their
constructors build tensors and modules, they do not run commands or reach the network
beyond what a model source names. A name under these prefixes is allowed only when it is a
class or function *defined* there (see :func:`is_allowed_callable`): hyperpyyaml resolves
dotted names attribute by attribute, so ``speechbrain.nnet.x.subprocess.Popen`` would
otherwise reach any module that one of them imports."""

ALLOWED_CALLABLES = frozenset({
    "speechbrain.utils.parameter_transfer.Pretrainer",
    "speechbrain.utils.checkpoints.Checkpointer",
    "speechbrain.utils.epoch_loop.EpochCounter",
    "sentencepiece.SentencePieceProcessor",
    "torch.manual_seed",
})
"""Single callables outside those modules that published inference YAMLs use."""

INERT_TAGS = frozenset({"!ref", "!copy", "!tuple", "!PLACEHOLDER"})
"""hyperpyyaml tags that only refer to or copy other entries."""

CODE_TAG = re.compile(r"^!(new|name|apply|applyref|module):(.+)$")


class ModelDirError(VoxanonError):
    """A model directory that is missing a file or is not in the expected layout; names the file."""


class UnsafeModelCodeError(ModelDirError):
    """A hyperparams.yaml would import or call code outside the allow-list."""


@dataclass(frozen=True)
class Tagged:
    """A YAML node carrying a tag (``!new:torch.nn.LeakyReLU``, ``!ref``, ...), kept as data."""

    tag: str
    value: object

    @property
    def target(self) -> str:
        """The dotted name after ``!new:`` / ``!name:`` / ..., or ``""``."""
        match = CODE_TAG.match(self.tag)
        return match.group(2) if match else ""


class _InertLoader(yaml.SafeLoader):
    """yaml's safe loader, with every tag turned into a :class:`Tagged` instead of an object."""


def _construct_tagged(loader: _InertLoader, suffix: str, node: yaml.Node) -> Tagged:
    if isinstance(node, yaml.MappingNode):
        value = loader.construct_mapping(node, deep=True)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_scalar(node)
    return Tagged(f"!{suffix}", value)


_InertLoader.add_multi_constructor("!", _construct_tagged)


def read_hparams(path: str | Path) -> dict:
    """The top-level mapping of a hyperparams.yaml, tags kept as :class:`Tagged` data; runs nothing."""
    path = Path(path)
    if not path.is_file():
        raise ModelDirError(f"{path}: missing")
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_InertLoader)
    except (yaml.YAMLError, UnicodeDecodeError) as error:
        raise ModelDirError(f"{path}: not readable YAML ({error})") from None
    if not isinstance(data, dict):
        raise ModelDirError(f"{path}: expected a mapping at the top level")
    return data


def _node_tags(text: str) -> set[str]:
    """Every local (``!``) tag of the YAML text, from its node graph: duplicate keys, anchors and
    merges included, whatever a constructor would keep."""
    tags, seen, stack = set(), set(), [yaml.compose(text, Loader=_InertLoader)]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if node.tag.startswith("!"):
            tags.add(node.tag)
        if isinstance(node, yaml.MappingNode):
            stack.extend(item for pair in node.value for item in pair)
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
    return tags


def is_allowed_callable(target: str) -> bool:
    """Whether a ``!new:``/``!name:`` target is on the allow-list.

    Imports the target's module (a speechbrain or torch module under an allowed prefix, never
    one the YAML defines) to check that the name is a class or function defined under an
    allowed prefix, not something that module merely imported.
    """
    if target in ALLOWED_CALLABLES:
        return True
    if not target.startswith(ALLOWED_CALLABLE_PREFIXES):
        return False
    module_name, _, attribute = target.rpartition(".")
    if not attribute.isidentifier() or attribute.startswith("_"):
        return False
    import importlib
    import inspect
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # speechbrain's redirects of its old module paths
            found = getattr(importlib.import_module(module_name), attribute, None)
    except Exception:  # not an importable module: hyperpyyaml could not build it either
        return False
    if not (inspect.isclass(found) or inspect.isfunction(found)):
        return False
    defined_in = str(getattr(found, "__module__", "")) + "."
    return defined_in.startswith(ALLOWED_CALLABLE_PREFIXES)


def disallowed_tags(text: str) -> list[str]:
    """Every tag of a hyperparams.yaml text that could import or call code outside the allow-list, sorted."""
    refused = set()
    for tag in _node_tags(text):
        if tag in INERT_TAGS:
            continue
        match = CODE_TAG.match(tag)
        target = match.group(2) if match else ""
        if tag.startswith(("!new:", "!name:")) and is_allowed_callable(target):
            continue
        if tag.startswith("!apply:") and target in ALLOWED_CALLABLES:
            continue
        refused.add(tag)
    return sorted(refused)


def check_model_code(directory: str | Path, trust_model_code: bool) -> dict:
    """The directory's hyperparams, read inertly; raises unless every code tag is allow-listed or trusted."""
    path = Path(directory) / HPARAMS_FILE
    hparams = read_hparams(path)
    refused = disallowed_tags(path.read_text(encoding="utf-8"))
    if refused and not trust_model_code:
        shown = ", ".join(refused[:5]) + (" ..." if len(refused) > 5 else "")
        raise UnsafeModelCodeError(
            f"{path}: refers to code outside voxanon's allow-list of speechbrain/torch classes ({shown}); "
            f"building it would run that code. Pass {TRUST_FLAG} only if you trust this model directory")
    return hparams


_REFERENCE = re.compile(r"<([^<>]+)>")


def resolve(hparams: dict, value, depth: int = 0):
    """``value`` with ``!ref``/``!copy`` references to top-level entries followed (other tags kept)."""
    if depth > 20:
        raise ModelDirError("hyperparams: references nested too deeply (a cycle?)")
    if not (isinstance(value, Tagged) and value.tag in ("!ref", "!copy") and isinstance(value.value, str)):
        return value
    text = value.value.strip()
    whole = _REFERENCE.fullmatch(text)
    if whole:
        return resolve(hparams, _lookup(hparams, whole.group(1)), depth + 1)

    def substitute(match: re.Match) -> str:
        return str(resolve(hparams, _lookup(hparams, match.group(1)), depth + 1))
    return _REFERENCE.sub(substitute, text)


def _lookup(hparams: dict, name: str):
    node = hparams
    for part in name.replace("]", "").replace("[", ".").split("."):
        inner = node.value if isinstance(node, Tagged) else node
        if not isinstance(inner, dict) or part not in inner:
            raise ModelDirError(f"hyperparams: reference <{name}> names no entry")
        node = inner[part]
    return node


def entry(hparams: dict, name: str, where: Path):
    """A top-level entry with references followed; raises naming the file if absent."""
    if name not in hparams:
        raise ModelDirError(f"{where}: no {name!r} entry")
    return resolve(hparams, hparams[name])


def arguments(hparams: dict, node: Tagged) -> dict:
    """The keyword arguments of an object tag, references followed."""
    if not isinstance(node.value, dict):
        return {}
    return {key: resolve(hparams, value) for key, value in node.value.items()}


def ecapa_dilations(directory: str | Path) -> tuple[int, ...] | None:
    """The ``dilations`` of the ``embedding_model`` entry of a model folder's hyperparams.yaml (read as data),
    or None when the folder has no such file or entry (no ECAPA weight shows its dilations)."""
    path = Path(directory) / HPARAMS_FILE
    if not path.is_file():
        return None
    hparams = read_hparams(path)
    node = entry(hparams, "embedding_model", path) if "embedding_model" in hparams else None
    dilations = arguments(hparams, node).get("dilations") if isinstance(node, Tagged) else None
    if dilations is None:
        return None
    if not (isinstance(dilations, list) and dilations and all(type(d) is int and d > 0 for d in dilations)):
        raise ModelDirError(f"{path}: embedding_model dilations {dilations!r} are not positive integers")
    return tuple(dilations)


def require_files(directory: Path, names: tuple[str, ...] | list[str], what: str) -> None:
    if not directory.is_dir():
        raise ModelDirError(f"{directory}: {what} directory not found")
    for name in names:
        if not (directory / name).is_file():
            raise ModelDirError(f"{directory / name}: missing (a {what} directory holds {', '.join(names)})")


def read_label_encoder(path: str | Path) -> tuple[str, ...]:
    """Labels by index from a speechbrain ``CategoricalEncoder``/``CTCTextEncoder`` file (``'neu' => 0`` lines),
    parsed as literals: nothing in it is evaluated."""
    path = Path(path)
    if not path.is_file():
        raise ModelDirError(f"{path}: missing")
    by_index: dict[int, str] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("="):
            break  # the encoder's own settings follow
        if not line.strip():
            continue
        try:
            label_text, index_text = line.rsplit(" => ", 1)
            label, index = ast.literal_eval(label_text), int(index_text)
        except (ValueError, SyntaxError):
            raise ModelDirError(f"{path}:{number}: expected \"'label' => index\", got {line!r}") from None
        if index in by_index:
            raise ModelDirError(f"{path}:{number}: index {index} given twice")
        by_index[index] = str(label)
    if sorted(by_index) != list(range(len(by_index))) or not by_index:
        raise ModelDirError(f"{path}: indices must run 0..n-1, got {sorted(by_index)}")
    return tuple(by_index[i] for i in range(len(by_index)))


# The speechbrain wav2vec2 wrapper --------------------------------------------------------------

def _hf_cached(source: str, filename: str, directory: Path, save_path: str | None) -> Path | None:
    """``filename`` of a wav2vec2 ``source``: a local folder, the model directory's speechbrain
    ``save_path`` cache, or the Hugging Face cache; never downloaded."""
    local = Path(source)
    if not local.is_absolute():
        local = directory / source if (directory / source).is_dir() else local
    if local.is_dir():
        return local / filename if (local / filename).is_file() else None
    repo_folder = "models--" + source.replace("/", "--")
    for cache in ([directory / save_path] if save_path else []):
        snapshots = cache / repo_folder / "snapshots"
        if snapshots.is_dir():
            for snapshot in sorted(snapshots.iterdir()):
                if (snapshot / filename).is_file():
                    return snapshot / filename
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    try:
        found = try_to_load_from_cache(source, filename)
    except ValueError:  # not a valid repository id
        return None
    return Path(found) if isinstance(found, str) else None


STANDARD_CONV_STRIDES = (5, 2, 2, 2, 2, 2, 2)


def wav2vec2_config_from_state(state: dict):
    """A ``Wav2Vec2Config`` read off a ``Wav2Vec2Model`` state dict.

    Shapes give every size but the number of attention heads and the layer-norm order. The
    published wav2vec2 models follow one rule for both (base: group norm, post-norm;
    large-lv60/960h-lv60-self/XLSR: layer norm in the feature extractor, pre-norm) and all
    use 64-dimensional heads, which is what is assumed here.
    """
    from transformers import Wav2Vec2Config

    try:
        n_conv = len({k.split(".")[2] for k in state if k.startswith("feature_extractor.conv_layers.")})
        conv_weights = [state[f"feature_extractor.conv_layers.{i}.conv.weight"] for i in range(n_conv)]
        layer_norm_extractor = "feature_extractor.conv_layers.1.layer_norm.weight" in state
        hidden = int(state["feature_projection.projection.weight"].shape[0])
        n_layers = len({k.split(".")[2] for k in state if k.startswith("encoder.layers.")})
        pos = state.get("encoder.pos_conv_embed.conv.weight",
                        state.get("encoder.pos_conv_embed.conv.parametrizations.weight.original1",
                                  state.get("encoder.pos_conv_embed.conv.weight_v")))
        if pos is None:
            raise KeyError("encoder.pos_conv_embed.conv.weight")
        if n_conv != len(STANDARD_CONV_STRIDES):
            raise ModelDirError(f"a {n_conv}-layer feature extractor: its strides cannot be read off the weights "
                                "(only the standard 7-layer one is known); give the wav2vec2 source's config.json")
        strides = STANDARD_CONV_STRIDES
        return Wav2Vec2Config(
            hidden_size=hidden, num_hidden_layers=n_layers, num_attention_heads=max(1, hidden // 64),
            intermediate_size=int(state["encoder.layers.0.feed_forward.intermediate_dense.weight"].shape[0]),
            conv_dim=[int(w.shape[0]) for w in conv_weights], conv_kernel=[int(w.shape[2]) for w in conv_weights],
            conv_stride=list(strides), conv_bias="feature_extractor.conv_layers.0.conv.bias" in state,
            feat_extract_norm="layer" if layer_norm_extractor else "group",
            do_stable_layer_norm=layer_norm_extractor,
            num_conv_pos_embeddings=int(pos.shape[2]), num_conv_pos_embedding_groups=hidden // int(pos.shape[1]),
            mask_time_prob=0.05 if "masked_spec_embed" in state else 0.0, mask_feature_prob=0.0)
    except (KeyError, IndexError) as error:
        raise ModelDirError(f"not a wav2vec2 state dict (missing {error})") from None


def load_wav2vec2(directory: Path, hparams: dict, node: Tagged, checkpoint: str = "wav2vec2.ckpt"):
    """Our copy of speechbrain's wav2vec2 wrapper, with ``directory/checkpoint`` loaded key for key."""
    from .safe import safe_load

    options = arguments(hparams, node)
    source = str(options.get("source", ""))
    save_path = options.get("save_path")
    save_path = str(save_path) if isinstance(save_path, (str, Path)) else None
    path = directory / checkpoint
    state = safe_load(path)
    if not isinstance(state, dict) or not any(k.startswith("model.") for k in state):
        raise ModelDirError(f"{path}: not a speechbrain wav2vec2 checkpoint (no 'model.' keys)")
    model_state = {k[len("model."):]: v for k, v in state.items() if k.startswith("model.")}
    config_file = _hf_cached(source, "config.json", directory, save_path) if source else None
    if config_file is not None:
        from transformers import Wav2Vec2Config

        config = Wav2Vec2Config.from_dict(json.loads(config_file.read_text(encoding="utf-8")))
    else:
        try:
            config = wav2vec2_config_from_state(model_state)
        except ModelDirError as error:
            raise ModelDirError(f"{path}: no configuration found for wav2vec2 source {source!r} (a local folder, "
                                f"the speechbrain save_path or the Hugging Face cache), and {error}") from None
    preprocessor = _hf_cached(source, "preprocessor_config.json", directory, save_path) if source else None
    normalize_wav = bool(json.loads(preprocessor.read_text(encoding="utf-8")).get("do_normalize", True)) \
        if preprocessor is not None else True
    from .safe import built_with_weights

    # Built without random initialisation, holding the checkpoint's tensors themselves: loaded once.
    return built_with_weights(lambda: _wav2vec2_module(config, bool(options.get("output_norm", False)), normalize_wav),
                              state, str(path), f"does not fit the wav2vec2 configuration of {source or 'its shapes'}")


def _wav2vec2_module(config, output_norm: bool, normalize_wav: bool):
    import torch
    import torch.nn.functional as F
    from transformers import Wav2Vec2Model

    class Wav2Vec2Encoder(torch.nn.Module):
        """(B, samples) -> (B, frames, hidden) as speechbrain's wrapper computes it in eval mode on each
        utterance: the wave layer-normed when the feature extractor normalises, and the last hidden state
        layer-normed (no affine parameters) over frames and channels when ``output_norm``.

        A zero-padded batch (``samples``: each item's sample count) gives each item what it gives alone, to
        float rounding: the wave's and the output's normalisations, a group-norm feature extractor's
        per-channel statistics and the attention see each item's own samples and frames only
        (:meth:`frame_counts` of them are valid). speechbrain's wrapper instead normalises over the padded
        batch, so its vectors depend on the batch an utterance lands in."""

        def __init__(self):
            super().__init__()
            self.model = Wav2Vec2Model(config)
            self.output_norm = output_norm
            self.normalize_wav = normalize_wav

        def frame_counts(self, samples: torch.Tensor) -> torch.Tensor:
            """The number of output frames of utterances of ``samples`` samples."""
            return self.model._get_feat_extract_output_lengths(samples).long()

        def forward(self, wav: torch.Tensor, samples: torch.Tensor | None = None) -> torch.Tensor:
            if samples is None or bool((samples == wav.shape[1]).all()):
                if self.normalize_wav:
                    wav = F.layer_norm(wav, wav.shape[1:])
                out = self.model(wav).last_hidden_state
                return F.layer_norm(out, out.shape[1:]) if self.output_norm else out
            samples = samples.to(wav.device)
            if self.normalize_wav:
                wav = _masked_layer_norm(wav[..., None], samples)[..., 0]
            frames = self.frame_counts(samples)
            features = self._features(wav, samples).transpose(1, 2)
            valid = torch.arange(features.shape[1], device=wav.device)[None] < frames[:, None]
            hidden, _ = self.model.feature_projection(features)
            out = self.model.encoder(hidden, attention_mask=valid).last_hidden_state
            if self.model.adapter is not None:
                raise ValueError("a wav2vec2 with an adapter cannot run padded batches")
            return _masked_layer_norm(out, frames) if self.output_norm else out

        def _features(self, wav: torch.Tensor, samples: torch.Tensor) -> torch.Tensor:
            """The feature extractor's (B, channels, frames); a group-norm first layer normalises each item over
            its own frames (the others norm each frame on its own, and no convolution pads)."""
            hidden = wav[:, None]
            for index, layer in enumerate(self.model.feature_extractor.conv_layers):
                norm = getattr(layer, "layer_norm", None)
                if index > 0 or not isinstance(norm, torch.nn.GroupNorm):
                    hidden = layer(hidden)
                    continue
                hidden = layer.conv(hidden)
                kernel, stride = layer.conv.kernel_size[0], layer.conv.stride[0]
                counts = torch.div(samples - kernel, stride, rounding_mode="floor") + 1
                normalised = _masked_layer_norm(hidden.transpose(1, 2), counts, over_channels=False, eps=norm.eps)
                hidden = layer.activation(torch.addcmul(norm.bias[:, None], normalised.transpose(1, 2),
                                                        norm.weight[:, None]))
            return hidden

    return Wav2Vec2Encoder()


def _masked_layer_norm(x, counts, over_channels: bool = True, eps: float = 1e-5):
    """(B, T, C) normalised to zero mean and unit variance over each item's first ``counts`` frames (and, with
    ``over_channels``, all channels together; else per channel); frames past an item's count become 0."""
    import torch

    valid = (torch.arange(x.shape[1], device=x.device)[None] < counts[:, None])[..., None]
    size = counts.to(x.dtype)[:, None, None] * (x.shape[2] if over_channels else 1)
    dims = (1, 2) if over_channels else (1,)
    x = x.masked_fill(~valid, 0.0)
    mean = x.sum(dim=dims, keepdim=True) / size
    centred = (x - mean).masked_fill_(~valid, 0.0)
    variance = centred.square().sum(dim=dims, keepdim=True) / size
    return centred * torch.rsqrt(variance + eps)
