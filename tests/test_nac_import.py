"""``voxanon models import nac`` and ``models check`` on a faithful B4 fixture release (``nac_fixtures.py``): the
safetensors set and its manifest, the refusals (a pickle that would run code, a wrong shape, a missing file, an
unknown key, untied fine weights, a bad voice prompt), and ``--random-init`` with the published shapes."""
from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from tests.helpers.nac_fixtures import COARSE_ARGS, FINE_ARGS, VOICES, reference_coarse, save_bark, write_release
from voxanon.models.nets.bark import COARSE_FULL, FINE_FULL, CoarseGPT, FineGPT
from voxanon.models.checkpoints.safe import CheckpointError, UnsafeCheckpointError
from voxanon.models.checkpoints.nac import import_nac, random_nac
from voxanon.pipeline.cli import main


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    return write_release(tmp_path_factory.mktemp("nac") / "exp")


@pytest.fixture
def copy(release, tmp_path):
    target = tmp_path / "release"
    shutil.copytree(release, target)
    return target


def test_import_writes_a_safetensors_set_with_a_manifest(release, voxanon_home, capsys):
    assert main(["models", "check", str(release)]) == 0
    report = capsys.readouterr().out
    assert "would succeed" in report and report.rstrip().endswith("OK") and "3 voice prompts" in report
    assert main(["models", "import", "nac", str(release)]) == 0
    folder = voxanon_home / "models" / "nac"
    manifest = json.loads((folder / "manifest.json").read_text())
    config = json.loads((folder / "config.json").read_text())
    assert manifest["random"] is False and manifest["source"].count("sha256") == 5
    assert sorted(manifest["components"]) == ["coarse", "encodec", "fine", "hubert", "quantiser", "voices"]
    assert config["voices"] == sorted(VOICES) and config["hubert_layer"] == 9
    assert config["coarse"] == COARSE_ARGS and config["fine"] == FINE_ARGS
    coarse = load_file(folder / "coarse.safetensors")
    assert "lm_head.weight" in coarse and not any(key.startswith("_orig_mod.") for key in coarse)
    encodec = load_file(folder / "encodec.safetensors")
    assert "decoder.model.0.conv.conv.weight_g" in encodec and not any(k.startswith("encoder.") for k in encodec)
    assert not any(key.endswith(("embed_avg", "cluster_size", "inited")) for key in encodec)
    voices = load_file(folder / "voices.safetensors")
    assert voices[f"{VOICES[0]}.coarse_prompt"].shape[0] == 2 and voices[f"{VOICES[0]}.fine_prompt"].shape[0] == 8
    assert main(["models", "check", "nac"]) == 0
    report = capsys.readouterr().out
    assert report.count("would succeed") == 6 and report.rstrip().endswith("OK")


class Payload:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_a_reduce_payload_is_refused_and_never_runs(copy, tmp_path, voxanon_home, capsys):
    marker = tmp_path / "ran"
    save_bark(copy / "coarse_2.pt", reference_coarse(), COARSE_ARGS, best_val_loss=Payload(marker))
    with pytest.raises(UnsafeCheckpointError, match=r"coarse_2.pt: .*posix.system.*not allowed"):
        import_nac(copy)
    assert main(["models", "import", "nac", str(copy)]) == 2
    assert "coarse_2.pt" in capsys.readouterr().err
    assert main(["models", "check", str(copy)]) == 1
    assert not marker.exists() and not (voxanon_home / "models" / "nac").exists()


def test_only_the_numpy_scalar_is_allowed_beside_tensors(copy):
    """An argparse Namespace (which the general checkpoint reader tolerates as configuration) is refused here."""
    import argparse

    save_bark(copy / "fine_2.pt", reference_coarse(), FINE_ARGS, best_val_loss=argparse.Namespace(loss=1.0))
    with pytest.raises(UnsafeCheckpointError, match=r"fine_2.pt: .*argparse.Namespace"):
        import_nac(copy)


def _retouch(path, change):
    checkpoint = torch.load(path, weights_only=False)
    change(checkpoint)
    torch.save(checkpoint, path)


@pytest.mark.parametrize("file,change,message", [
    ("coarse_2.pt", lambda c: c["model"].__setitem__("_orig_mod.transformer.h.1.mlp.c_fc.weight", torch.zeros(128, 31)),
     r"coarse_2.pt: .*transformer.h.1.mlp.c_fc.weight \(128, 31\) \(expected \(128, 32\)\)"),
    ("coarse_2.pt", lambda c: c["model"].__setitem__("_orig_mod.transformer.h.0.attn.extra", torch.zeros(2)),
     r"coarse_2.pt: .*unexpected transformer.h.0.attn.extra"),
    ("fine_2.pt", lambda c: c["model"].__setitem__("_orig_mod.lm_heads.2.weight",
                                                   c["model"]["_orig_mod.lm_heads.2.weight"].clone() + 1),
     r"fine_2.pt: key lm_heads.2.weight differs from transformer.wtes.3.weight"),
    ("fine_2.pt", lambda c: c["model_args"].__setitem__("n_codes_total", 4), r"fine_2.pt: model_args n_codes_total 4"),
    ("coarse_2.pt", lambda c: c.__setitem__("optimizer", {}), r"coarse_2.pt: a Bark checkpoint holds"),
])
def test_bad_bark_checkpoints_are_refused_naming_file_and_key(copy, file, change, message):
    _retouch(copy / file, change)
    with pytest.raises(CheckpointError, match=message):
        import_nac(copy)


def test_other_files_are_checked(copy):
    encodec = copy / "encodec_24khz-d7cc33bc.th"
    state = torch.load(encodec, weights_only=True)
    state["decoder.model.4.block.1.conv.conv.weight_v"] = torch.zeros(3, 3, 3)
    torch.save(state, encodec)
    with pytest.raises(CheckpointError, match=r"encodec_24khz-d7cc33bc.th: .*decoder.model.4.block.1.conv.conv.weight_v"):
        import_nac(copy)


def test_bad_voice_and_missing_file(copy):
    voice = next(copy.rglob("*.npz"))
    np.savez(voice, semantic_prompt=np.zeros(5, int), coarse_prompt=np.zeros((3, 5), int), fine_prompt=np.zeros((8, 5), int))
    with pytest.raises(CheckpointError, match=rf"{voice.name}: key coarse_prompt has shape \(3, 5\)"):
        import_nac(copy)
    (copy / "tokenizer.pth").unlink()
    with pytest.raises(CheckpointError, match=r"missing quantifier_hubert_base_ls960_14.pth or tokenizer.pth"):
        import_nac(copy)


def test_random_init(voxanon_home):
    assert main(["models", "import", "nac", "--random-init", "--size", "tiny"]) == 0
    manifest = json.loads((voxanon_home / "models" / "nac" / "manifest.json").read_text())
    assert manifest["random"] is True
    assert main(["models", "check", "nac"]) == 0


def test_full_size_random_init_has_the_published_shapes():
    """The published networks' shapes, checked on meta tensors (no 3 GB of weights drawn)."""
    with torch.device("meta"):
        coarse, fine = CoarseGPT(COARSE_FULL), FineGPT(FINE_FULL)
    assert coarse.transformer.wte.weight.shape == (12_096, 1024) and len(coarse.transformer.h) == 24
    assert coarse.lm_head.weight.shape == (12_096, 1024) and coarse.transformer.wpe.weight.shape == (1024, 1024)
    assert fine.transformer.wtes[7].weight.shape == (1056, 1024) and len(fine.lm_heads) == 7
    components, config = random_nac("tiny")
    assert config["coarse"]["input_vocab_size"] == COARSE_FULL.input_vocab_size == 12_096
    assert config["fine"]["n_codes_total"] == 8 and len(config["voices"]) == 4
