"""``voxanon models import sa-toolkit`` and ``models check`` on faithful ``final.pt`` fixtures (written from
SA-toolkit's module tree, ``sa_toolkit_fixtures.py``): both front ends, anonymisation and extractor tags,
and the refusals (unknown key, tampered shape, unknown entry or option, a pickle that would run code)."""
from __future__ import annotations

import json
import os

import pytest
import torch
from safetensors.torch import load_file

from tests.helpers.sa_toolkit_fixtures import OUTPUT_DIM, SPEAKERS, reference_asr, tamper, write_asr_release, \
    write_converter_release
from voxanon.models.checkpoints.safe import split_weight_norm
from voxanon.models.checkpoints.safe import CheckpointError, UnsafeCheckpointError
from voxanon.models.checkpoints.sa_toolkit_tags import SA_TOOLKIT_CONVERTER_TAGS as CONVERTER_TAGS
from voxanon.models.checkpoints.sa_toolkit_tags import SA_TOOLKIT_EXTRACTOR_TAGS as EXTRACTOR_TAGS
from voxanon.models.checkpoints.sa_toolkit import (convert_asr_state, import_sa_toolkit, random_sa_toolkit,
                                                   release_tdnnf_shapes)
from voxanon.pipeline.cli import main

B5, B6 = "hifigan_bn_tdnnf_wav2vec2_vq_48_v1", "hifigan_bn_tdnnf_600h_vq_48_v1"
POS_CONV = "bn_extractor.preprocessor.encoder.transformer.pos_conv_embed.conv."


@pytest.fixture(scope="module")
def releases(tmp_path_factory):
    """B5- and B6-layout anonymisation tags and a wav2vec2 extractor tag, each in a folder named after its tag."""
    root = tmp_path_factory.mktemp("releases")
    return {B5: write_converter_release(root / B5, "wav2vec2"), B6: write_converter_release(root / B6, "fbank"),
            EXTRACTOR_TAGS[0]: write_asr_release(root / EXTRACTOR_TAGS[0], "wav2vec2")}


def copy_of(path, tmp_path):
    target = tmp_path / "copy" / "final.pt"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(path.read_bytes())
    return target


@pytest.mark.parametrize("tag", [B5, B6, EXTRACTOR_TAGS[0]])
def test_import_and_check_both_front_ends(tag, releases, voxanon_home, capsys):
    folder = releases[tag].parent
    assert main(["models", "check", str(folder)]) == 0
    report = capsys.readouterr().out
    assert "unknown keys: none" in report and "would succeed" in report and report.rstrip().endswith("OK")
    assert main(["models", "import", "sa-toolkit", str(folder)]) == 0  # named after its folder, the tag
    manifest = json.loads((voxanon_home / "models" / tag / "manifest.json").read_text())
    config = json.loads((voxanon_home / "models" / tag / "config.json").read_text())
    assert manifest["random"] is False and "sha256" in manifest["source"]
    assert config["extractor"]["front_end"] == ("fbank" if tag == B6 else "wav2vec2")
    assert config["extractor"]["codebook_size"] == 48 and config["asr_output_dim"] == OUTPUT_DIM
    extractor = load_file(voxanon_home / "models" / tag / "extractor.safetensors")
    assert not any(key.startswith(("tdnnfs_after", "prefinal", "chain_output", "xent_output")) for key in extractor)
    if tag in CONVERTER_TAGS:
        assert config["kind"] == "converter" and config["speakers"] == sorted(SPEAKERS)
        assert config["generator"]["in_channels"] == 256 + 1 + len(SPEAKERS)
        assert config["f0"] == {"frame_length": 35.0, "frame_space": 20.0, "nccf_thresh1": 0.25,
                                "tda_frame_length": 25.0}
        generator = load_file(voxanon_home / "models" / tag / "generator.safetensors")
        assert "conv_pre.weight" in generator and not any(key.endswith("weight_g") for key in generator)
    else:
        assert config["kind"] == "bn-extractor" and manifest["components"] == ["extractor"]


def test_a_folder_not_named_after_a_tag_needs_a_name(releases, tmp_path, voxanon_home, capsys):
    path = copy_of(releases[B6], tmp_path)
    assert main(["models", "import", "sa-toolkit", str(path.parent)]) == 2
    assert "give --name" in capsys.readouterr().err
    assert main(["models", "import", "sa-toolkit", str(path), "--name", "b6-local"]) == 0
    assert (voxanon_home / "models" / "b6-local" / "manifest.json").is_file()


@pytest.mark.parametrize("change,message", [
    (lambda c: c["base_model_state_dict"].__setitem__("bn_extractor.tdnnfs.0.extra", torch.zeros(3)),
     r"unknown key\(s\) bn_extractor.tdnnfs.0.extra|tdnnfs.0.extra"),
    (lambda c: c["base_model_state_dict"].__setitem__("hifigan.conv_pre.extra", torch.zeros(3)),
     r"unknown key\(s\) hifigan.conv_pre.extra"),
    (lambda c: c["base_model_state_dict"].__setitem__("bn_extractor.tdnn1.tdnn.linearA.weight", torch.zeros(64, 31)),
     r"tdnn1.tdnn.linearA.weight \(64, 31\) \(expected \(64, 32\)\)"),
    (lambda c: c["base_model_state_dict"].__setitem__("bn_extractor.tdnnfs_after.2.tdnn.linearB.inner_nat.weight",
                                                      torch.zeros(32, 64)),
     r"tdnnfs_after.2.tdnn.linearB.inner_nat.weight \(32, 64\) \(expected \(32, 192\)\)"),
    (lambda c: c["base_model_state_dict"].pop("bn_extractor.xent_output.bias"), r"missing xent_output.bias"),
    (lambda c: c["base_model_state_dict"].__setitem__(
        "bn_extractor.preprocessor.encoder.transformer.layers.1.feed_forward.output_dense.weight", torch.zeros(64, 95)),
     r"preprocessor.encoder.transformer.layers.1.feed_forward.output_dense.weight \(64, 95\)"),
    (lambda c: c.__setitem__("optimizer", {}), r"unknown entry optimizer"),
    (lambda c: c["base_model_args"].__setitem__("f0_transformation", "quant_16_awgn_2"),
     r"f0_transformation.*not implemented"),
    (lambda c: c["base_model_args"].__setitem__("spk_norm", True), r"base_model_args holds option\(s\) spk_norm"),
    (lambda c: c.__setitem__("base_model_path", "local/tuning/hifigan_m2o.py"), r"base_model_path .*hifigan_m2o.py"),
    (lambda c: c["base_model_params"]["utt2spk"].__setitem__("extra_utt", "new_speaker"),
     r"hifigan.conv_pre takes 262 channels.*6 speakers"),
    # Issue 29 item 17: the changed codebook copy is named, not the five untouched ones.
    (lambda c: c["base_model_state_dict"].__setitem__(
        "bn_extractor.tdnnfs.2.tdnn.bottleneck_func.quant._embedding.weight", torch.zeros(47, 256)),
     r"shapes differ: tdnnfs.2.tdnn.bottleneck_func.quant._embedding.weight \(47, 256\) \(expected \(48, 256\)\)$"),
    # ... and a weight-norm tensor by the key in the file, not by the folded weight's.
    (lambda c: c["base_model_state_dict"].__setitem__("hifigan.conv_post.weight_v", torch.zeros(1, 1, 5)),
     r"shapes differ: hifigan.conv_post.weight_v \(1, 1, 5\) \(expected \(1, 1, 7\)\)"),
])
def test_refusals_name_the_file_and_the_key(change, message, releases, tmp_path, voxanon_home, capsys):
    path = tamper(copy_of(releases[B5], tmp_path), change)
    with pytest.raises(CheckpointError, match=message) as error:
        import_sa_toolkit(path)
    assert str(path) in str(error.value)
    assert main(["models", "import", "sa-toolkit", str(path), "--name", "x"]) == 2
    assert str(path) in capsys.readouterr().err
    assert not (voxanon_home / "models" / "x").exists()
    assert main(["models", "check", str(path)]) == 1
    assert "import would FAIL" in capsys.readouterr().out


def test_extractor_options_are_checked(releases, tmp_path):
    path = copy_of(releases[EXTRACTOR_TAGS[0]], tmp_path)
    tamper(path, lambda c: c["base_model_args"].__setitem__("codebook_size", 64))
    with pytest.raises(CheckpointError, match=r"codebook_size'\] = 64 but the codebook has 48 rows"):
        import_sa_toolkit(path)
    tamper(path, lambda c: c.__setitem__("base_model_path", "local/chain/tuning/tdnnf_vq.py"))
    with pytest.raises(CheckpointError, match=r"names tdnnf_vq.py \(fbank, VQ\), but the weights are a wav2vec2"):
        import_sa_toolkit(path)


def test_legacy_weight_norm_keys_of_the_positional_convolution(releases, tmp_path):
    """torchaudio before its parametrizations kept the positional convolution's weight norm as weight_g/weight_v."""
    def legacy(checkpoint):
        state = checkpoint["base_model_state_dict"]
        weight = torch._weight_norm(state.pop(POS_CONV + "parametrizations.weight.original1"),
                                    state.pop(POS_CONV + "parametrizations.weight.original0"), 2)
        state[POS_CONV + "weight_g"], state[POS_CONV + "weight_v"] = split_weight_norm(weight, 2)

    modern = import_sa_toolkit(releases[B5])[0]["extractor"]
    old = import_sa_toolkit(tamper(copy_of(releases[B5], tmp_path), legacy))[0]["extractor"]
    key = "preprocessor.encoder.pos_conv_embed.conv.weight"
    assert torch.allclose(modern[key], old[key], rtol=1e-5, atol=1e-7)


class Payload:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_a_pickle_that_runs_code_is_refused_without_running_it(tmp_path, voxanon_home, capsys):
    marker = tmp_path / "ran"
    net = reference_asr("fbank")
    path = tmp_path / "evil" / "final.pt"
    path.parent.mkdir()
    torch.save({"base_model_state_dict": net.state_dict(), "base_model_path": "local/chain/tuning/tdnnf_vq.py",
                "base_model_args": {"codebook_size": 48}, "base_model_params": {"output_dim": Payload(marker)},
                "install_path": "/x", "task_path": "/y"}, path)
    with pytest.raises(UnsafeCheckpointError, match="system"):
        import_sa_toolkit(path)
    assert main(["models", "import", "sa-toolkit", str(path), "--name", "evil"]) == 2
    assert main(["models", "check", str(path)]) == 1
    assert "not allowed" in capsys.readouterr().out
    assert not marker.exists() and not (voxanon_home / "models" / "evil").exists()


def test_random_init_has_each_tags_layout(voxanon_home, capsys):
    assert main(["models", "import", "sa-toolkit", "--random-init", "--tag", B6, "--size", "tiny"]) == 0
    config = json.loads((voxanon_home / "models" / B6 / "config.json").read_text())
    assert json.loads((voxanon_home / "models" / B6 / "manifest.json").read_text())["random"] is True
    assert config["extractor"]["front_end"] == "fbank" and "6081" in config["speakers"]
    assert main(["models", "import", "sa-toolkit", "--random-init"]) == 2
    assert "--tag" in capsys.readouterr().err
    assert main(["models", "import", "ssl-sas", "--random-init", "--tag", B5]) == 2
    for tag in (EXTRACTOR_TAGS[2], CONVERTER_TAGS[4]):
        components, config = random_sa_toolkit(tag, "tiny")
        assert (config["kind"] == "converter") == (tag in CONVERTER_TAGS)
        assert config["extractor"]["codebook_size"] == (64 if "vq_64" in tag else None)


def test_full_size_random_weights_have_the_published_shapes(tmp_path):
    """The --random-init B6 set holds what an import of a full-size release in B6's layout holds, shape for shape."""
    torch.manual_seed(0)
    components, config = random_sa_toolkit(B6, "full")
    assert config["generator"]["in_channels"] == 256 + 1 + 247 and config["extractor"]["hidden_dim"] == 1024
    from tests.reference import sa_toolkit as ref

    net = ref.build_asr(ref.asr_args(48), "fbank", True)(output_dim=3280).eval()
    imported, asr, output_dim = convert_asr_state(net.state_dict(), "full-size reference")
    assert {k: tuple(v.shape) for k, v in imported.items()} == \
        {k: tuple(v.shape) for k, v in components["extractor"].items()}
    assert set(release_tdnnf_shapes(asr, output_dim)) == set(net.state_dict())
