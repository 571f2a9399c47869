"""SSL-SAS soft content on our HuBERT backbone, loaded from fairseq-layout weights."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from voxanon.models.checkpoints.keymaps import fairseq_hubert_to_hf


from voxanon.models.checkpoints.safe import CheckpointError
from voxanon.models.checkpoints.ssl_sas import soft_content_from_ssl_sas_state
from voxanon.models.nets.hubert import SoftContentConfig

from tests.helpers.hubert import TINY, random_fairseq_soft_model


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_fairseq_key_names_are_the_published_ones():
    _, state = random_fairseq_soft_model(TINY)
    keys = set(state)
    for expected in ["ssl_model.feature_extractor.conv_layers.0.0.weight",
                     "ssl_model.feature_extractor.conv_layers.0.2.weight",
                     "ssl_model.feature_extractor.conv_layers.6.0.weight",
                     "ssl_model.layer_norm.weight", "ssl_model.post_extract_proj.weight",
                     "ssl_model.encoder.pos_conv.0.weight_g", "ssl_model.encoder.pos_conv.0.weight_v",
                     "ssl_model.encoder.pos_conv.0.bias", "ssl_model.encoder.layers.1.self_attn.k_proj.weight",
                     "ssl_model.encoder.layers.1.self_attn.out_proj.bias",
                     "ssl_model.encoder.layers.1.self_attn_layer_norm.weight", "ssl_model.encoder.layers.1.fc1.weight",
                     "ssl_model.encoder.layers.1.fc2.bias", "ssl_model.encoder.layers.1.final_layer_norm.weight",
                     "ssl_model.encoder.layer_norm.weight", "W"]:
        assert expected in keys
    assert not any("feature_extractor.conv_layers.1.2" in k or k.endswith("conv.bias") for k in keys)


def test_soft_content_equals_ssl_sas_computation():
    hubert, state = random_fairseq_soft_model(TINY)
    encoder = soft_content_from_ssl_sas_state(state).eval()
    assert encoder.config == TINY
    wave = torch.randn(1, 3200) * 0.1
    with torch.no_grad():
        x = hubert(wave)
        assert x.shape[1] == 3200 // 320 - 1
        x = F.normalize(x)
        expected = F.linear(x, F.normalize(state["W"]))
        expected = F.pad(expected.transpose(1, 2), (0, 1), "replicate").transpose(1, 2)
        got = encoder(wave)
    assert got.shape == (1, 10, 200)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got[0, -1], got[0, -2])
    # Normalised over time: every feature channel of x has unit norm across frames.
    torch.testing.assert_close(x.norm(dim=1), torch.ones(1, TINY.hidden_size))


def test_per_frame_normalisation_flag_changes_the_quirk():
    _, state = random_fairseq_soft_model(TINY)
    per_frame = soft_content_from_ssl_sas_state(state, normalise_over_time=False,
                                                      replicate_last_frame=False)
    content = per_frame.encode([np.random.default_rng(0).standard_normal(3200).astype(np.float32) * 0.1])[0]
    assert content.shape == (9, 200)
    assert np.all(np.abs(content) <= 1.0 + 1e-5)


def test_encode_lengths_for_several_utterances():
    _, state = random_fairseq_soft_model(TINY, seed=1)
    encoder = soft_content_from_ssl_sas_state(state)
    rng = np.random.default_rng(1)
    content = encoder.encode([rng.standard_normal(n).astype(np.float32) for n in (640, 4800, 16000)])
    assert [c.shape for c in content] == [(2, 200), (15, 200), (50, 200)]
    assert all(c.dtype == np.float32 for c in content)


def test_converter_round_trip_and_errors():
    hubert, state = random_fairseq_soft_model(TINY)
    fairseq = {k[len("ssl_model."):]: v for k, v in state.items() if k.startswith("ssl_model.")}
    converted = fairseq_hubert_to_hf(fairseq)
    assert set(converted) == set(hubert.state_dict())
    with pytest.raises(CheckpointError, match="unexpected keys.*decoder.weight"):
        fairseq_hubert_to_hf({**fairseq, "decoder.weight": torch.zeros(1)})
    with pytest.raises(CheckpointError, match="'W'"):
        soft_content_from_ssl_sas_state({k: v for k, v in state.items() if k != "W"})


@pytest.mark.slow
def test_hubert_base_shapes_load_from_fairseq_layout():
    _, state = random_fairseq_soft_model(SoftContentConfig())
    encoder = soft_content_from_ssl_sas_state(state)
    assert encoder.config == SoftContentConfig()
    assert encoder.encode([np.zeros(48000, dtype=np.float32) + 0.01])[0].shape == (150, 200)


def test_content_encoders_load_and_run_without_transformers():
    """Loading either content encoder as the content stage does (meta device, then the set's tensors) and
    encoding imports neither transformers nor torch._dynamo (about 2.7 s of start-up between them)."""
    code = """
import sys
import numpy as np
import torch
from voxanon.models.nets.hubert import SoftContentConfig, SoftContentEncoder
from voxanon.models.nets.hubert_soft import HubertSoftConfig, HubertSoftEncoder
from voxanon.models.checkpoints.safe import built_with_weights
sizes = dict(hidden_size=64, num_layers=2, num_heads=1, intermediate_size=96, conv_channels=32, pos_conv_kernel=16,
             pos_conv_groups=4)
for encoder_class, config in ((SoftContentEncoder, SoftContentConfig(**sizes)), (HubertSoftEncoder, HubertSoftConfig(**sizes))):
    state = encoder_class(config).state_dict()
    encoder = built_with_weights(lambda: encoder_class(config), state)
    assert len(encoder.encode([np.full(3200, 0.01, dtype=np.float32)])[0]) == 10
print(sorted(name for name in ("transformers", "torch._dynamo") if name in sys.modules))
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[-2] == "[]"
