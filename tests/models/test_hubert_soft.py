"""bshall HuBERT-soft: import of the published checkpoint layout, parity with a transcription of his model."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.reference.hubert_soft import HubertSoft, published_checkpoint
from voxanon.models.checkpoints.keymaps import bshall_hubert_to_hf
from voxanon.models.checkpoints.safe import CheckpointError
from voxanon.models.nets.hifigan import ConditioningLayout
from voxanon.models.nets.hubert import SoftContentEncoder
from voxanon.models.nets.hubert_soft import HubertSoftConfig, HubertSoftEncoder, content_encoder
from voxanon.models.checkpoints.hubert_soft import import_hubert_soft, random_hubert_soft
from voxanon.models.checkpoints.registry import load_model_set
from voxanon.pipeline.cli import main

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# Two heads, so the split of the fused q/k/v projection is checked across heads.
TINY = dict(hidden=128, heads=2, ffn=192, layers=2, channels=32, pos_kernel=16, pos_groups=4)


def reference_model(new_weight_norm: bool = False, seed: int = 0, **sizes) -> HubertSoft:
    torch.manual_seed(seed)
    model = HubertSoft(**{**TINY, **sizes}, new_weight_norm=new_weight_norm)
    # Layer norms start as the identity; perturb them so a swapped weight/bias would show.
    for name, parameter in model.named_parameters():
        if "norm" in name:
            parameter.data.normal_(1.0 if name.endswith("weight") else 0.0, 0.1)
    return model.eval()


def save_published(model: HubertSoft, path) -> None:
    torch.save(published_checkpoint(model), path)


def test_published_layout_has_bshall_key_names():
    old = published_checkpoint(reference_model())["hubert"]
    new = published_checkpoint(reference_model(new_weight_norm=True))["hubert"]
    for key in ["module.feature_extractor.conv0.weight", "module.feature_extractor.norm0.weight",
                "module.feature_extractor.conv6.weight", "module.feature_projection.norm.bias",
                "module.feature_projection.projection.weight", "module.positional_embedding.conv.bias",
                "module.norm.weight", "module.encoder.layers.1.self_attn.in_proj_weight",
                "module.encoder.layers.1.self_attn.out_proj.bias", "module.encoder.layers.1.linear1.weight",
                "module.encoder.layers.1.norm2.bias", "module.proj.weight", "module.label_embedding.weight",
                "module.masked_spec_embed"]:
        assert key in old and key in new
    assert "module.positional_embedding.conv.weight_g" in old
    assert "module.positional_embedding.conv.parametrizations.weight.original1" in new


@pytest.mark.parametrize("new_weight_norm", [False, True], ids=["weight_g_v", "parametrizations"])
def test_imported_units_equal_the_reference(tmp_path, new_weight_norm):
    reference = reference_model(new_weight_norm)
    save_published(reference, tmp_path / "hubert-soft.pt")
    components, config = import_hubert_soft(tmp_path / "hubert-soft.pt")
    encoder = HubertSoftEncoder(HubertSoftConfig.from_dict(config["content"]))
    encoder.load_state_dict(components["content"])
    assert encoder.config.num_heads == 2 and encoder.config.units_dim == 256
    wave = torch.randn(1, 1, 4800, generator=torch.Generator().manual_seed(3)) * 0.1
    expected = reference.units(wave)
    with torch.no_grad():
        got = encoder.eval()(wave[0])
        assert got.shape == (1, 4800 // 320, 256)
        torch.testing.assert_close(got, expected, atol=1e-4, rtol=0)
        torch.testing.assert_close(encoder.logits(got), reference.logits(expected), atol=1e-3, rtol=0)


def test_cli_import_writes_the_content_only_set(tmp_path, monkeypatch):
    monkeypatch.setenv("VOXANON_HOME", str(tmp_path / "home"))
    reference = reference_model(seed=5)
    save_published(reference, tmp_path / "hubert-soft-35d9f29f.pt")
    assert main(["models", "import", "hubert-soft", str(tmp_path / "hubert-soft-35d9f29f.pt")]) == 0
    model_set = load_model_set("hubert-soft")
    assert not model_set.random and model_set.manifest["components"] == ["content"]
    assert model_set.config["content_kind"] == "hubert-soft"
    assert ConditioningLayout.from_dict(model_set.config["layout"]).channels == 449
    encoder = content_encoder(model_set)
    assert isinstance(encoder, HubertSoftEncoder)
    waves = [np.random.default_rng(i).standard_normal(n).astype(np.float32) * 0.1 for i, n in enumerate((3200, 6400))]
    units = encoder.eval().encode(waves)
    assert [u.shape for u in units] == [(10, 256), (20, 256)]
    np.testing.assert_allclose(units[1], reference.units(torch.from_numpy(waves[1])[None, None])[0].numpy(),
                               atol=1e-4, rtol=0)


def test_random_init_cli_and_full_size_shapes(tmp_path, monkeypatch):
    monkeypatch.setenv("VOXANON_HOME", str(tmp_path / "home"))
    assert main(["models", "import", "hubert-soft", "--random-init", "--size", "tiny"]) == 0
    assert load_model_set("hubert-soft").random
    assert main(["models", "import", "ssl-sas", "--random-init", "--size", "tiny"]) == 0
    assert isinstance(content_encoder(load_model_set("ssl-sas")), SoftContentEncoder)
    full, _ = random_hubert_soft("full")
    backbone, head = bshall_hubert_to_hf(published_checkpoint(HubertSoft())["hubert"])
    published = {**{f"hubert.{k}": v for k, v in backbone.items()}, **head}
    assert {k: tuple(v.shape) for k, v in full["content"].items()} == {k: tuple(v.shape) for k, v in published.items()}


def test_wrong_files_are_refused_with_the_reason(tmp_path):
    torch.save({"model": {}}, tmp_path / "fairseq.pt")
    with pytest.raises(CheckpointError, match=r"fairseq.pt: expected a dict with a 'hubert' entry"):
        import_hubert_soft(tmp_path / "fairseq.pt")
    state = published_checkpoint(reference_model())
    state["hubert"]["module.encoder.layers.0.extra.weight"] = torch.zeros(2)
    torch.save(state, tmp_path / "odd.pt")
    with pytest.raises(CheckpointError, match=r"odd.pt: .*unexpected keys \['encoder.layers.0.extra.weight'\]"):
        import_hubert_soft(tmp_path / "odd.pt")
    del state["hubert"]["module.encoder.layers.0.extra.weight"]
    del state["hubert"]["module.positional_embedding.conv.weight_v"]
    torch.save(state, tmp_path / "half.pt")
    with pytest.raises(CheckpointError, match="weight-norm pair"):
        import_hubert_soft(tmp_path / "half.pt")


def test_content_stage_uses_hubert_soft_units_and_refuses_missing_components(tmp_path, monkeypatch):
    from voxanon.data_prep.errors import VoxanonError
    from voxanon.pipeline.systems.ssl_sas.chain import ContentStage
    from voxanon.pipeline.systems.ssl_sas.loader import load_model
    from voxanon.pipeline.systems.stage import Utterance

    monkeypatch.setenv("VOXANON_HOME", str(tmp_path / "home"))
    assert main(["models", "import", "hubert-soft", "--random-init", "--size", "tiny"]) == 0
    utt = Utterance.create("u1", "s1", "f", (np.random.default_rng(0).standard_normal(6400) * 0.1).astype(np.float32),
                           16000, 0, "test")
    ContentStage("hubert-soft").process_batch([utt])
    assert utt.features["content"].shape == (6400 // 320, 256)
    with pytest.raises(VoxanonError, match="model set 'hubert-soft' has no vocoder model"):
        load_model("hubert-soft", "vocoder")
