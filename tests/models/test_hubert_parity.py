"""Our HuBERT backbone against transformers' ``HubertModel`` (:mod:`tests.reference_hubert`; the package
itself never imports transformers for it) for the HuBERT-base layout: same state-dict keys, same last-layer
features, alone and in padded batches."""
from __future__ import annotations

import functools

import pytest
import torch

from tests.reference import hubert as reference_hubert
from voxanon.models.nets.hubert import HubertBackboneConfig, _conv_output_lengths, batch_hubert_features, plain_hubert
from voxanon.models.checkpoints.safe import built_with_weights

SMALL = HubertBackboneConfig(hidden_size=64, num_layers=2, num_heads=4, intermediate_size=96, conv_channels=32,
                             pos_conv_kernel=16, pos_conv_groups=4)
BASE = HubertBackboneConfig()
TOLERANCE = 1e-5

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module", autouse=True)
def release_reference_models():
    yield
    transformers_hubert.cache_clear()


@functools.cache
def transformers_hubert(config: HubertBackboneConfig, attention: str = "sdpa"):
    """The reference :func:`tests.reference_hubert.transformers_hubert` with random weights. Norms and biases
    are random too (at ones and zeros a swapped norm or a dropped bias would go unseen), and linear
    weights have standard deviation 1 / sqrt(inputs), not 0.02: at 0.02 attention and feed-forward
    barely move the residual stream, and e.g. the tanh approximation of GELU would pass."""
    torch.manual_seed(0)
    model = reference_hubert.transformers_hubert(config, attention)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "norm" in name:
                parameter.normal_(1.0 if name.endswith("weight") else 0.0, 0.1)
            elif parameter.dim() == 2:
                parameter.normal_(0.0, parameter.shape[1] ** -0.5)
            elif name.endswith("bias"):
                parameter.normal_(0.0, 0.05)
    return model


def ours_from(reference) -> torch.nn.Module:
    """Ours, built on the meta device and given the reference's tensors (strict), as the content stage loads it."""
    config = HubertBackboneConfig(
        hidden_size=reference.config.hidden_size, num_layers=reference.config.num_hidden_layers,
        num_heads=reference.config.num_attention_heads, intermediate_size=reference.config.intermediate_size,
        conv_channels=reference.config.conv_dim[0], pos_conv_kernel=reference.config.num_conv_pos_embeddings,
        pos_conv_groups=reference.config.num_conv_pos_embedding_groups)
    return built_with_weights(lambda: plain_hubert(config), reference.state_dict())


def speech_like(samples: int, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    t = torch.arange(samples) / 16000
    return (0.3 * torch.sin(2 * torch.pi * (120 + 40 * t) * t) + 0.05 * torch.randn(samples, generator=generator))


def max_difference(a: torch.Tensor, b: torch.Tensor) -> float:
    assert a.shape == b.shape
    return float((a - b).abs().max())


@pytest.mark.parametrize("config", [SMALL, BASE], ids=["small", "base"])
def test_state_dict_keys_and_shapes_are_transformers(config):
    reference = transformers_hubert(config)
    with torch.device("meta"):
        ours = plain_hubert(config)
    assert {k: v.shape for k, v in ours.state_dict().items()} == \
        {k: v.shape for k, v in reference.state_dict().items()}
    assert "masked_spec_embed" not in ours.state_dict()  # transformers keeps it only with SpecAugment masking


@pytest.mark.parametrize("config,attention,samples", [(SMALL, "eager", 8000), (SMALL, "sdpa", 8000),
                                                      (BASE, "sdpa", 16000)], ids=["small-eager", "small-sdpa", "base"])
def test_one_at_a_time_equals_transformers(config, attention, samples):
    reference = transformers_hubert(config, attention)
    ours = ours_from(reference)
    wave = speech_like(samples, 0)[None]
    with torch.inference_mode():
        expected = reference(wave).last_hidden_state
        got = ours(wave)
    assert got.shape == (1, samples // 320 - 1, config.hidden_size)
    assert expected.abs().mean() > 0.1
    assert max_difference(got, expected) < TOLERANCE


@pytest.mark.parametrize("config,attention,lengths", [(SMALL, "eager", (8000, 4800, 6400)),
                                                      (SMALL, "sdpa", (8000, 4800, 6400)),
                                                      (BASE, "sdpa", (16000, 9600))],
                         ids=["small-eager", "small-sdpa", "base"])
def test_padded_batch_with_attention_mask_equals_transformers(config, attention, lengths):
    reference = transformers_hubert(config, attention)
    ours = ours_from(reference)
    lengths = torch.tensor(lengths)
    padded = torch.zeros(len(lengths), int(lengths.max()))
    for row, length in enumerate(lengths):
        padded[row, :length] = speech_like(int(length), row)
    sample_mask = torch.arange(padded.shape[1])[None] < lengths[:, None]
    frames = _conv_output_lengths(lengths)
    with torch.inference_mode():
        expected = reference(padded, attention_mask=sample_mask.long()).last_hidden_state
        hidden = ours.feature_projection(ours.feature_extractor(padded).transpose(1, 2))
        got = ours.encoder(hidden, attention_mask=torch.arange(hidden.shape[1])[None] < frames[:, None])
        # The content stage's batches: each item's own GroupNorm statistics, so each item equals
        # transformers on that item alone.
        batched, batch_frames = batch_hubert_features(ours, padded, lengths)
        alone = [reference(padded[row:row + 1, :length]).last_hidden_state[0] for row, length in enumerate(lengths)]
    assert torch.equal(batch_frames, frames) and int(frames.min()) < int(frames.max())
    for row, count in enumerate(frames.tolist()):
        assert max_difference(got[row, :count], expected[row, :count]) < TOLERANCE
        assert max_difference(batched[row, :count], alone[row]) < TOLERANCE
