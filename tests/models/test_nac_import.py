"""``voxanon models import nac`` and ``models check`` on a faithful B4 fixture release (``nac_fixtures.py``): the
safetensors set and its manifest, Bark's training checkpoints (optimizer state included, torch's zip and legacy
formats; the memory peak at full size, slow), the refusals (a pickle that would run code, a wrong shape, a
missing file, an unknown key, untied fine weights, a bad voice prompt), and ``--random-init`` with the published
shapes."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from tests.helpers.nac_fixtures import (COARSE_ARGS, FINE_ARGS, VOICES, reference_coarse, reference_fine, save_bark,
                                        write_release)
from tests.reference import bark as ref
from voxanon.models.nets.nac.bark import COARSE_FULL, FINE_FULL, CoarseGPT, FineGPT
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


def test_the_fixture_holds_every_entry_nanogpt_training_saves(release):
    """The published files are training checkpoints: beside the model, AdamW's two moments of each parameter
    (tied ones once), its param groups, iter_num and the training config."""
    checkpoint = torch.load(release / "fine_2.pt", weights_only=False)
    assert set(checkpoint) == {"model", "optimizer", "model_args", "iter_num", "best_val_loss", "config"}
    parameters = list(reference_fine().parameters())
    parameters = [p for p in parameters if p.dim() >= 2] + [p for p in parameters if p.dim() < 2]  # group order
    state = checkpoint["optimizer"]["state"]
    assert len(state) == len(parameters) == sum(len(g["params"]) for g in checkpoint["optimizer"]["param_groups"])
    assert all(state[i]["exp_avg"].shape == state[i]["exp_avg_sq"].shape == p.shape for i, p in enumerate(parameters))
    assert state[0]["step"].ndim == 0 and checkpoint["optimizer"]["param_groups"][0]["betas"] == (0.9, 0.95)


def test_a_reduce_payload_is_refused_and_never_runs(copy, tmp_path, voxanon_home, capsys):
    marker = tmp_path / "ran"
    save_bark(copy / "coarse_2.pt", reference_coarse(), COARSE_ARGS, best_val_loss=Payload(marker))
    with pytest.raises(UnsafeCheckpointError, match=r"coarse_2.pt: .*posix.system.*not allowed"):
        import_nac(copy)
    assert main(["models", "import", "nac", str(copy)]) == 2
    assert "coarse_2.pt" in capsys.readouterr().err
    assert main(["models", "check", str(copy)]) == 1
    assert not marker.exists() and not (voxanon_home / "models" / "nac").exists()


@pytest.mark.parametrize("legacy", [False, True])
@pytest.mark.parametrize("entry", ["optimizer", "config"])
def test_a_payload_in_the_training_entries_is_refused_in_either_format(copy, tmp_path, entry, legacy):
    marker = tmp_path / "ran"
    if entry == "optimizer":
        optimizer = torch.load(copy / "fine_2.pt", weights_only=False)["optimizer"]
        optimizer["param_groups"][1]["foreach"] = Payload(marker)
        replace = {"optimizer": optimizer}
    else:
        replace = {"config": {"dataset": Payload(marker)}}
    save_bark(copy / "fine_2.pt", reference_fine(), FINE_ARGS, legacy=legacy, **replace)
    with pytest.raises(UnsafeCheckpointError, match=r"fine_2.pt: .*posix.system.*not allowed"):
        import_nac(copy)
    assert not marker.exists()


def test_torch_legacy_format_imports_as_the_zip_format(release, copy):
    """``_use_new_zipfile_serialization=False``: not memory-mapped (torch cannot), read whole, same weights."""
    save_bark(copy / "coarse_2.pt", reference_coarse(), COARSE_ARGS, legacy=True)
    save_bark(copy / "fine_2.pt", reference_fine(), FINE_ARGS, legacy=True)
    assert not zipfile.is_zipfile(copy / "coarse_2.pt")
    legacy, legacy_config = import_nac(copy)
    expected, config = import_nac(release)
    assert legacy_config["coarse"] == config["coarse"] and legacy_config["fine"] == config["fine"]
    for part in ("coarse", "fine"):
        assert legacy[part].keys() == expected[part].keys()
        assert all(torch.equal(legacy[part][key], expected[part][key]) for key in expected[part])


@pytest.mark.parametrize("replace", [
    {"optimizer": None, "iter_num": None, "config": None},  # the model entries alone, as Bark's loader reads them
    {"best_val_loss": torch.tensor(2.5)},  # nanoGPT's train.py saves the loss as a 0-d tensor
])
def test_the_training_entries_are_optional(copy, replace):
    save_bark(copy / "coarse_2.pt", reference_coarse(), COARSE_ARGS, **replace)
    components, _ = import_nac(copy)
    assert "lm_head.weight" in components["coarse"]


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
    # Sizes model_args declares are compared with the tensors before any network is built (100,000 layers took
    # minutes to build before the key check refused them).
    ("coarse_2.pt", lambda c: c["model_args"].__setitem__("n_layer", 100_000),
     r"coarse_2.pt: model_args n_layer 100000, but model holds 2 layers"),
    ("fine_2.pt", lambda c: c["model_args"].__setitem__("n_embd", 10**9),
     r"fine_2.pt: model_args n_embd 1000000000, but model holds 32 wide embeddings"),
    ("coarse_2.pt", lambda c: c["model_args"].__setitem__("block_size", 10**7),
     r"coarse_2.pt: model_args block_size 10000000, but model holds 1024 positions"),
    ("coarse_2.pt", lambda c: c.__setitem__("optimizer", {}), r"coarse_2.pt: optimizer is not an optimizer's state"),
    ("coarse_2.pt", lambda c: c["optimizer"]["state"].__setitem__("0", {}), r"coarse_2.pt: optimizer is not"),
    ("fine_2.pt", lambda c: c["optimizer"]["param_groups"][0].pop("params"), r"fine_2.pt: optimizer is not"),
    ("coarse_2.pt", lambda c: c.__setitem__("iter_num", "42000"), r"coarse_2.pt: iter_num is a str, not an int"),
    ("coarse_2.pt", lambda c: c.__setitem__("config", ["lr"]), r"coarse_2.pt: config is a list"),
    ("coarse_2.pt", lambda c: c.__setitem__("scaler", {}),
     r"coarse_2.pt: a Bark checkpoint holds best_val_loss, model, model_args \(and from training config, iter_num, "
     r"optimizer\); this holds .*scaler"),
    ("fine_2.pt", lambda c: c.pop("model"), r"fine_2.pt: a Bark checkpoint holds .*; this holds (?!.*'model')"),
    ("fine_2.pt", lambda c: c.__setitem__("model", [1.0]), r"fine_2.pt: model is a list, not a state dict"),
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


MEASURE_IMPORT = """
import re, sys
from pathlib import Path
from voxanon.models.checkpoints.nac import convert_bark, read_bark_checkpoint

def peak():  # this process's own high-water mark (ru_maxrss would carry the parent's across fork and exec)
    return int(re.search(r"VmHWM:\\s+(\\d+) kB", Path("/proc/self/status").read_text()).group(1)) * 1024

before = peak()
state, _ = convert_bark(read_bark_checkpoint(Path(sys.argv[1])), Path(sys.argv[1]), fine=False)
print(before, peak(), sum(t.nbytes for t in state.values()))
"""


@pytest.mark.slow
def test_a_full_size_training_checkpoint_imports_without_holding_the_optimizer_state(tmp_path):
    """``coarse_2.pt`` at the published shapes with AdamW's state (3.9 GB): the import's peak resident memory
    beyond the interpreter's stays near the weights' twice (the mapped file's pages it reads and their copy),
    far below the file, since the moments are mapped and never read."""
    args = dict(COARSE_ARGS, n_layer=24, n_head=16, n_embd=1024)
    path = save_bark(tmp_path / "coarse_2.pt", ref.GPT(ref.GPTConfig(**args)), args)
    size = path.stat().st_size
    assert size > 3.9e9
    completed = subprocess.run([sys.executable, "-c", MEASURE_IMPORT, str(path)], capture_output=True, text=True,
                               check=True)
    before, peak, weights = map(int, completed.stdout.split())
    print(f"file {size / 1e9:.2f} GB, weights {weights / 1e9:.2f} GB, interpreter {before / 1e9:.2f} GB, "
          f"peak {peak / 1e9:.2f} GB (+{(peak - before) / 1e9:.2f} GB)")
    assert weights > 1.3e9 and peak - before < 2.2 * weights < 0.75 * size


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
