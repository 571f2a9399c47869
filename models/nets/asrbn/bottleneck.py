"""SA-toolkit's ASR bottleneck (BN) extractor, as far as inference needs: a front end, a TDNN-F chain
acoustic model's first layers, and the vector-quantised bottleneck (VoicePrivacy 2024 B5/B6).

SA-toolkit (deep-privacy/SA-toolkit, Apache-2.0) trains a Kaldi-style LF-MMI chain model
(``egs/asr/librispeech/local/chain/tuning/tdnnf_wav2vec2_vq.py`` and ``tdnnf_vq.py``) and anonymises
from the output of one of its layers: ``extract_bn`` runs the front end and the TDNN-F layers up to the
bottleneck layer, and returns that layer's 256-d bottleneck (``linearB``), vector-quantised when the
model has a codebook. Nothing after it (the bottleneck layer's ``linearA`` and batch norm, the layers
after it, the chain and cross-entropy heads) is needed, so it is not held here; the importer
(:mod:`voxanon.models.checkpoints.sa_toolkit`) checks those tensors' shapes and leaves them out.

Front ends:

* ``wav2vec2`` (B5): torchaudio's wav2vec2 large (``layer_norm`` feature encoder, pre-norm layers),
  the last layer of ``extract_features`` (no final layer norm), then the last frame repeated once
  ("missing one dimension for downsampling to 320"): L samples give about L/320 frames at 50 Hz.
  The network is our HuBERT backbone in its wav2vec2 large layout
  (:class:`voxanon.models.nets.hubert.HubertBackbone` with ``wav2vec2_large``), not a copy of it.
* ``fbank`` (B6): the waveform scaled to 16-bit range, Kaldi filterbanks (25 ms Povey windows every
  10 ms, ``snip_edges=False``, pre-emphasis 0.97, DC removal, no dither) with the log floored at 1e-6 as
  ``satools.kaldifeat.fbank`` floors it (torchaudio's Kaldi compliance floors at float32 epsilon; the
  two differ only on near-silent bands), then each band's mean over the utterance subtracted
  (``satools.cmvn.UttCMVN()``). One layer subsamples by 2: BN frames at 50 Hz again.

TDNN-F layers (``satools.chain.nn.TDNNFBatchNorm``): the input is padded by repeating its first and
last frame (``pad_input``: half the stack's context on each side), and each layer splices ``context``
frames every ``subsampling`` frames (``unfold`` over the flattened frames), projects to the bottleneck
(``linearB``, the bias stored as a (1, out) row as Kaldi's natural-gradient affine keeps it), back up
(``linearA``), adds the centre frames scaled by 0.66 where input and output widths agree (the bypass;
none into the bottleneck layer), and applies batch norm (no affine) and ReLU.

The quantiser (``satools.chain.nn.VectorQuantizerEMA``) maps each bottleneck frame to its nearest
codebook row (squared Euclidean distance, computed as SA-toolkit does). SA-toolkit returns
``x + (q - x)`` (the straight-through estimator of training), equal to ``q`` up to one float rounding;
here ``q`` itself.

Each utterance is processed alone. SA-toolkit's VoicePrivacy recipe feeds zero-padded batches without
masks (padding then reaches the attention and the utterance mean); here a padded batch
(:meth:`AsrBnExtractor.extract_batch`, the GPU path) masks the padding, so every utterance's features
are its one-at-a-time features (to float rounding) whatever it is batched with.
"""
from __future__ import annotations

import contextlib
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..hubert import HubertBackbone, HubertBackboneConfig, batch_hubert_features

FRONT_ENDS = ("wav2vec2", "fbank")
BYPASS_SCALE = 0.66
"""``TDNNF``'s default bypass scale: the centre input frame's weight in every layer with a bypass."""
FBANK_FLOOR = 1e-6
"""``satools.kaldifeat.fbank``'s floor on mel energies before the log."""
MIN_SAMPLES = 400
"""One 25 ms analysis window (the first wav2vec2 convolution's kernel, Kaldi's frame length)."""


@dataclass(frozen=True)
class AsrBnConfig:
    """The extractor's layout. ``context`` and ``subsampling`` list the TDNN-F layers from ``tdnn1`` to the
    bottleneck layer; ``codebook_size`` None: no quantiser (SA-toolkit's ``*_aug`` tags)."""

    front_end: str = "wav2vec2"
    wav2vec2: HubertBackboneConfig | None = HubertBackboneConfig(
        hidden_size=1024, num_layers=24, num_heads=16, intermediate_size=4096, conv_channels=512,
        pos_conv_kernel=128, pos_conv_groups=16)
    fbank_bins: int = 80
    hidden_dim: int = 1024
    bottleneck_dim: int = 128
    bn_dim: int = 256
    context: tuple[int, ...] = (3, 3, 3)
    subsampling: tuple[int, ...] = (1, 1, 1)
    codebook_size: int | None = 48

    def __post_init__(self):
        if self.front_end not in FRONT_ENDS:
            raise ValueError(f"front_end must be one of {FRONT_ENDS}, got {self.front_end!r}")
        if (self.front_end == "wav2vec2") != (self.wav2vec2 is not None):
            raise ValueError("a wav2vec2 configuration is given exactly when the front end is wav2vec2")
        if len(self.context) != len(self.subsampling) or len(self.context) < 2:
            raise ValueError("context and subsampling must list the same layers, at least tdnn1 and the bottleneck")
        if any(c < 1 for c in self.context) or any(s < 1 or int(s) != s for s in self.subsampling):
            raise ValueError(f"contexts must be >= 1 and subsampling factors whole numbers >= 1, got "
                             f"{self.context} / {self.subsampling}")

    @property
    def input_dim(self) -> int:
        return self.wav2vec2.hidden_size if self.wav2vec2 is not None else self.fbank_bins

    @property
    def padding(self) -> int:
        """Frames repeated at each end (``ChainE2EModel.get_padding(...) // 2``)."""
        pad, rate = 0, 1
        for context, subsampling in zip(self.context, self.subsampling):
            pad += (context - 1) * rate
            rate *= subsampling
        return pad // 2

    def to_dict(self) -> dict:
        values = asdict(self)
        values["context"], values["subsampling"] = list(self.context), list(self.subsampling)
        return values

    @classmethod
    def from_dict(cls, values: dict) -> "AsrBnConfig":
        values = dict(values)
        if values.get("wav2vec2") is not None:
            values["wav2vec2"] = HubertBackboneConfig.from_dict(values["wav2vec2"])
        values["context"] = tuple(int(v) for v in values["context"])
        values["subsampling"] = tuple(int(v) for v in values["subsampling"])
        return cls(**values)


class NaturalAffine(nn.Module):
    """Kaldi's natural-gradient affine transform at inference: x·Wᵀ + b, the bias a (1, out) row."""

    def __init__(self, in_dim: int, out_dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_dim, in_dim) / (in_dim * out_dim) ** 0.5)
        self.bias = nn.Parameter(torch.randn(1, out_dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.matmul(self.weight.t()) + self.bias


class Nested(nn.Module):
    """One module under a fixed attribute name, run as it is: SA-toolkit's ``OrthonormalLinear`` (``inner_nat``,
    whose semi-orthogonal constraint is a training-time update, so that it is affine at inference) and
    ``VQLayer`` (``quant``) nest their one child so, and their state-dict keys with it."""

    def __init__(self, name: str, child: nn.Module):
        super().__init__()
        self.child_name = name
        self.add_module(name, child)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._modules[self.child_name](x)


class VectorQuantizer(nn.Module):
    """Nearest-codebook-row quantisation of (..., dim) frames; ``_embedding`` holds the codebook."""

    def __init__(self, codebook_size: int, dim: int):
        super().__init__()
        self._embedding = nn.Embedding(codebook_size, dim)

    def codes(self, x: torch.Tensor) -> torch.Tensor:
        """Each frame's code index (the argmin of the squared distance, expanded as SA-toolkit expands it)."""
        flat = x.reshape(-1, x.shape[-1])
        codebook = self._embedding.weight
        distances = (flat.pow(2).sum(1, keepdim=True) + codebook.pow(2).sum(1)
                     - 2 * torch.matmul(flat, codebook.t()))
        return distances.argmin(1).view(x.shape[:-1])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._embedding.weight[self.codes(x)]


class Tdnnf(nn.Module):
    """One factorised TDNN layer (``satools.chain.nn.TDNNF``): splice, project to the bottleneck, (quantise),
    project back, add the bypass. ``bottleneck_only``: the layer BN features are taken from, up to its
    (quantised) bottleneck."""

    def __init__(self, in_dim: int, out_dim: int, bottleneck_dim: int, context: int, subsampling: int, *,
                 bypass: bool, codebook_size: int | None = None, bottleneck_only: bool = False):
        super().__init__()
        self.context, self.subsampling, self.bottleneck_only = context, subsampling, bottleneck_only
        if codebook_size is not None:
            self.bottleneck_func = Nested("quant", VectorQuantizer(codebook_size, bottleneck_dim))
        self.linearB = Nested("inner_nat", NaturalAffine(in_dim * context, bottleneck_dim))
        if not bottleneck_only:
            self.linearA = nn.Linear(bottleneck_dim, out_dim)
        self.bypass = bypass and in_dim == out_dim and not bottleneck_only
        # The centre frames the bypass adds, as TDNNF slices them: [c // 2 : -(c // 2)] for an odd context c,
        # [c // 2 : -(c // 2) + 1] for an even one, all frames for c = 1.
        half = context // 2
        self.centre = slice(half, (-half + (context % 2 == 0)) or None, subsampling)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, _, dim = x.shape
        spliced = x.reshape(batch, -1).unfold(1, dim * self.context, dim * self.subsampling).contiguous()
        y = self.linearB(spliced)
        if hasattr(self, "bottleneck_func"):
            y = self.bottleneck_func(y)
        if self.bottleneck_only:
            return y
        y = self.linearA(y)
        if self.bypass:
            y = y + x[:, self.centre, :] * BYPASS_SCALE
        return y


class TdnnfBatchNorm(nn.Module):
    """``satools.chain.nn.TDNNFBatchNorm``: a TDNN-F layer, batch norm (no affine, running statistics) and ReLU."""

    def __init__(self, in_dim: int, out_dim: int, bottleneck_dim: int, context: int, subsampling: int, *,
                 bypass: bool, codebook_size: int | None = None, bottleneck_only: bool = False):
        super().__init__()
        self.tdnn = Tdnnf(in_dim, out_dim, bottleneck_dim, context, subsampling, bypass=bypass,
                          codebook_size=codebook_size, bottleneck_only=bottleneck_only)
        if not bottleneck_only:
            self.bn = nn.BatchNorm1d(out_dim, affine=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.tdnn(x)
        if self.tdnn.bottleneck_only:
            return x
        return F.relu(self.bn(x.permute(0, 2, 1)).permute(0, 2, 1))


def kaldi_fbank(wave: torch.Tensor, bins: int) -> torch.Tensor:
    """(samples,) in [-1, 1] at 16 kHz -> (frames, bins) log mel filterbanks as ``satools.kaldifeat.fbank``
    computes them for SA-toolkit's ASR (module doc): (samples + 80) // 160 frames."""
    from torchaudio.compliance.kaldi import fbank

    energies = fbank(wave[None] * 32768, num_mel_bins=bins, snip_edges=False, dither=0.0, frame_length=25.0,
                     frame_shift=10.0, preemphasis_coefficient=0.97, remove_dc_offset=True, window_type="povey",
                     round_to_power_of_two=True, low_freq=20.0, high_freq=0.0, use_power=True,
                     use_log_fbank=False, sample_frequency=16000.0)
    return energies.clamp_min(FBANK_FLOOR).log()


class AsrBnExtractor(nn.Module):
    """16 kHz waveform -> BN features (frames at 50 Hz, ``bn_dim``), SA-toolkit's ``extract_bn``."""

    def __init__(self, config: AsrBnConfig = AsrBnConfig()):
        super().__init__()
        self.config = config
        if config.wav2vec2 is not None:
            self.preprocessor = HubertBackbone(config.wav2vec2, wav2vec2_large=True)
        n = len(config.context)
        layer = dict(bottleneck_dim=config.bottleneck_dim, bypass=True)
        self.tdnn1 = TdnnfBatchNorm(config.input_dim, config.hidden_dim, context=config.context[0],
                                    subsampling=config.subsampling[0], **layer)
        # SA-toolkit's nn.Sequential interleaves dropouts: its layers sit at the even indices.
        self.tdnnfs = nn.ModuleDict({str(2 * (i - 1)): TdnnfBatchNorm(
            config.hidden_dim, config.hidden_dim, context=config.context[i], subsampling=config.subsampling[i],
            **layer) for i in range(1, n - 1)})
        self.tdnnfs[str(2 * (n - 2))] = TdnnfBatchNorm(
            config.hidden_dim, config.hidden_dim, config.bn_dim, config.context[-1], config.subsampling[-1],
            bypass=False, codebook_size=config.codebook_size, bottleneck_only=True)
        self.eval()

    def for_device(self, device: str, dtype: torch.dtype = torch.float32) -> "AsrBnExtractor":
        """This extractor in its form for ``device`` (:func:`~voxanon.models.nets.precision.prepared_for_device`):
        the wav2vec2 front end's weights in ``dtype`` (on the CPU a copy run under autocast, elsewhere the
        direct form), the TDNN-F layers and the quantiser in float32, as SA-toolkit casts the front end's
        output back to float32. ``self`` is unchanged."""
        import copy

        from ..precision import prepared_for_device

        prepared = copy.copy(self)  # a new module whose children are replaced below
        prepared._modules = {name: prepared_for_device(child, device, dtype) if name == "preprocessor" else
                             copy.deepcopy(child).to(device) for name, child in self._modules.items()}
        return prepared.eval()

    def _front_end_precision(self):
        """CPU autocast for a lower-precision copy of the wav2vec2 front end (norms in float32), else nothing."""
        from ..precision import float32_normalisations, model_dtype

        if self.config.wav2vec2 is None or model_dtype(self.preprocessor) == torch.float32 or \
                next(self.preprocessor.parameters()).device.type != "cpu" or \
                not getattr(self.preprocessor.encoder.pos_conv_embed, "cpu_forms", True):
            return contextlib.nullcontext()
        stack = contextlib.ExitStack()
        stack.enter_context(torch.autocast("cpu", dtype=model_dtype(self.preprocessor)))
        stack.enter_context(float32_normalisations(self.preprocessor))
        return stack

    def front_end(self, wave: torch.Tensor) -> torch.Tensor:
        """(samples,) -> (frames, input_dim) float32: the TDNN-F stack's input for one utterance."""
        if self.config.wav2vec2 is not None:
            with self._front_end_precision():
                features = self.preprocessor(wave[None])[0].float()
            return torch.cat([features, features[-1:]])
        energies = kaldi_fbank(wave.float(), self.config.fbank_bins)
        return energies - energies.mean(0)

    def tdnnf(self, frames: torch.Tensor) -> torch.Tensor:
        """(frames, input_dim) front-end features of one utterance -> (BN frames, bn_dim)."""
        pad = self.config.padding
        x = torch.cat([frames[:1].expand(pad, -1), frames, frames[-1:].expand(pad, -1)])[None]
        x = self.tdnn1(x)
        for layer in self.tdnnfs.values():
            x = layer(x)
        return x[0]

    def forward(self, wave: torch.Tensor) -> torch.Tensor:
        """One utterance, (samples,) -> (BN frames, bn_dim)."""
        if wave.ndim != 1 or wave.shape[0] < MIN_SAMPLES:
            raise ValueError(f"the BN extractor takes one waveform of at least {MIN_SAMPLES} samples (25 ms at "
                             f"16 kHz), got shape {tuple(wave.shape)}")
        return self.tdnnf(self.front_end(wave))

    @torch.inference_mode()
    def extract(self, waves: list[np.ndarray]) -> list[np.ndarray]:
        """Float32 BN features per utterance, one utterance at a time (the CPU path)."""
        device = next(self.parameters()).device
        return [self(torch.from_numpy(np.ascontiguousarray(w, dtype=np.float32)).to(device)).cpu().numpy()
                for w in waves]

    @torch.inference_mode()
    def extract_batch(self, waves: list[np.ndarray], max_items: int | None = None) -> list[np.ndarray]:
        """Float32 BN features per utterance from an extractor prepared for its device (:meth:`for_device`):
        the GPU path (on the CPU the same values, which is how it is tested). wav2vec2 runs groups of similar
        length (:func:`~voxanon.models.nets.precision.device_groups`, at most ``max_items`` each, padded to the
        grid's shapes) as padded, masked batches (:func:`~voxanon.models.nets.hubert.batch_hubert_features`) in its
        weights' precision; the filterbanks and the TDNN-F layers, a small part of the work, run per
        utterance in float32."""
        from ..precision import device_groups, to_device

        short = [i for i, w in enumerate(waves) if len(w) < MIN_SAMPLES]
        if short:
            raise ValueError(f"the BN extractor needs at least {MIN_SAMPLES} samples per utterance; item(s) {short} "
                             "are shorter")
        device = next(self.parameters()).device
        if self.config.wav2vec2 is None:
            return self.extract(waves)
        outputs: list[np.ndarray] = [np.empty(0, dtype=np.float32)] * len(waves)
        for group in device_groups([len(w) for w in waves], max_items):
            padded = torch.zeros(group.rows, group.length)
            lengths = torch.full((group.rows,), group.length)  # padding rows: silence of the full length
            for row, i in enumerate(group.indices):
                padded[row, :len(waves[i])] = torch.from_numpy(np.asarray(waves[i], dtype=np.float32))
                lengths[row] = len(waves[i])
            features, frames = batch_hubert_features(self.preprocessor, to_device(padded, device),
                                                     to_device(lengths, device))
            for row, i in enumerate(group.indices):
                valid = features[row, :int(frames[row])].float()
                outputs[i] = self.tdnnf(torch.cat([valid, valid[-1:]])).cpu().numpy()
        return outputs
