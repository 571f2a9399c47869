"""Safe checkpoint loading: fairseq config objects become inert, code-running pickles are refused."""
from __future__ import annotations

import argparse
import os
import sys
import types
from unittest import mock

import pytest
import torch

from voxanon.models.checkpoints.safe import split_weight_norm

from voxanon.models.checkpoints.safe import CheckpointError, OpaqueConfig, UnsafeCheckpointError, atomic_torch_save, fold_weight_norm, safe_load


class DictConfig:
    """Pickled under omegaconf's name, as fairseq's ``cfg`` entry is (without needing omegaconf installed)."""

    def __init__(self, content):
        self._content = content


def save_with_fake_omegaconf(obj, path):
    package, module = types.ModuleType("omegaconf"), types.ModuleType("omegaconf.dictconfig")
    package.dictconfig, module.DictConfig = module, DictConfig
    DictConfig.__module__ = "omegaconf.dictconfig"
    try:
        # patch.dict puts back whatever was there, the real omegaconf included.
        with mock.patch.dict(sys.modules, {"omegaconf": package, "omegaconf.dictconfig": module}):
            torch.save(obj, path)
    finally:
        DictConfig.__module__ = __name__


def test_fairseq_layout_loads_tensors_and_neutralises_configs(tmp_path):
    weights = {"encoder.layer_norm.weight": torch.arange(4.0), "mask_emb": torch.ones(4)}
    checkpoint = {"args": argparse.Namespace(arch="hubert", encoder_layers=12),
                  "cfg": DictConfig({"model": {"_name": "hubert"}}),
                  "model": weights, "optimizer_history": [{"num_updates": 400000}]}
    path = tmp_path / "hubert_base_ls960.pt"
    save_with_fake_omegaconf(checkpoint, path)
    with pytest.raises(Exception):
        torch.load(path, weights_only=True)
    loaded = safe_load(path)
    assert isinstance(loaded["args"], OpaqueConfig) and isinstance(loaded["cfg"], OpaqueConfig)
    torch.testing.assert_close(loaded["model"]["encoder.layer_norm.weight"], torch.arange(4.0))
    assert loaded["optimizer_history"] == [{"num_updates": 400000}]


class RunsCode:
    def __init__(self, command):
        self.command = command

    def __reduce__(self):
        return os.system, (self.command,)


def test_pickle_that_runs_code_is_refused(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "g_00000001"
    torch.save({"generator": {"w": torch.ones(2)}, "payload": RunsCode(f"touch {marker}")}, path)
    with pytest.raises(UnsafeCheckpointError, match="posix.system|os.system"):
        safe_load(path)
    assert not marker.exists()


def test_eval_global_is_refused(tmp_path):
    class Evaluates:
        def __reduce__(self):
            return eval, ("1+1",)

    path = tmp_path / "ckpt.pt"
    torch.save({"x": Evaluates()}, path)
    with pytest.raises(UnsafeCheckpointError, match="builtins.eval"):
        safe_load(path)


def test_plain_state_dict_loads_with_weights_only(tmp_path):
    path = tmp_path / "embedding_model.ckpt"
    torch.save({"fc.conv.weight": torch.ones(3, 2, 1)}, path)
    assert safe_load(path)["fc.conv.weight"].shape == (3, 2, 1)


def test_missing_and_garbage_files_are_named(tmp_path):
    with pytest.raises(CheckpointError, match="not found: .*absent.pt"):
        safe_load(tmp_path / "absent.pt")
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="garbage.pt"):
        safe_load(garbage)


@pytest.mark.parametrize("dim", [0, 2])
def test_weight_norm_folding_in_both_layouts(dim):
    weight = torch.randn(6, 4, 5)
    g, v = split_weight_norm(weight * 3.0, dim)
    old = fold_weight_norm({"conv.weight_g": g, "conv.weight_v": v / 7.0, "conv.bias": torch.zeros(6)})
    new = fold_weight_norm({"conv.parametrizations.weight.original0": g,
                            "conv.parametrizations.weight.original1": v * 2.0})
    torch.testing.assert_close(old["conv.weight"], weight * 3.0)
    torch.testing.assert_close(new["conv.weight"], weight * 3.0)
    assert set(old) == {"conv.weight", "conv.bias"}


def test_weight_norm_folding_matches_torch():
    conv = torch.nn.utils.parametrizations.weight_norm(torch.nn.Conv1d(8, 8, 16, groups=2), dim=2)
    folded = fold_weight_norm(conv.state_dict())
    torch.testing.assert_close(folded["weight"], conv.weight.detach())


class _RunsAShellCommand:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_legacy_format_header_pickles_go_through_the_allow_list(tmp_path):
    """torch's legacy (non-zip) reader unpickles records with pickle_module.load before any tensor."""
    import pickle

    from voxanon.models.checkpoints.zllr_flow import import_reference_flow

    marker = tmp_path / "ran"
    path = tmp_path / "legacy.pt"
    path.write_bytes(pickle.dumps(_RunsAShellCommand(marker), protocol=2))
    with pytest.raises(UnsafeCheckpointError, match="system"):
        safe_load(path)
    with pytest.raises(UnsafeCheckpointError, match="system"):
        import_reference_flow(path, mu=1.0)
    assert not marker.exists()
    legacy = tmp_path / "plain.pt"
    torch.save({"w": torch.arange(3.0)}, legacy, _use_new_zipfile_serialization=False)
    assert safe_load(legacy)["w"].tolist() == [0.0, 1.0, 2.0]


def test_atomic_torch_save_gives_identical_bytes_for_identical_objects(tmp_path):
    state = {"weight": torch.arange(6.0).reshape(2, 3), "step": 3}
    first, second = tmp_path / "a" / "embedding_model.ckpt", tmp_path / "b" / "embedding_model.ckpt"
    atomic_torch_save(state, first)
    atomic_torch_save(state, second)
    assert first.read_bytes() == second.read_bytes()
    assert torch.equal(safe_load(first)["weight"], state["weight"])
    assert not [p for p in first.parent.iterdir() if p != first]
