"""Releases in the exact layout SSL-SAS's and zLLR-VC's own code saves (issue 14).

The ``g_*`` fixtures here are written from the reference module trees, not from our modules:
``latentGenerator`` (SSL-SAS ``models_test.py``) is jik876's weight-norm generator plus
``latent_encoder`` (a ``SoftPredictor``: centroids ``W`` and a fairseq HuBERT after
``remove_pretraining_modules()``, which keeps ``mask_emb`` and ``label_embs_concat``), ``fbank``
(speechbrain ``Fbank(n_mels=80)``, whose deltas kernel is a persistent buffer),
``mean_var_norm`` (no state) and ``xv_model`` (speechbrain's ECAPA_TDNN keys). zLLR-VC's
``latentGenerator`` also holds its sex flow as ``xv_dis_model`` (a ``RealNVP`` of its
``classes.py``). Key names and shapes are written out below for a tiny configuration; the
speechbrain parts are built with speechbrain's own classes, which are the reference modules.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import torch
from speechbrain.lobes.features import Fbank
from speechbrain.lobes.models.ECAPA_TDNN import ECAPA_TDNN

from tests.reference.hifigan import Generator as ReferenceGenerator
from voxanon.models.checkpoints.ssl_sas import import_ssl_sas
from voxanon.models.checkpoints.safe import CheckpointError
from voxanon.models.checkpoints.registry import load_model_set
from voxanon.pipeline.cli import main
from tests.helpers.ssl_sas_release import SSL_SAS_VOCODER, ZLLR_VOCODER, RELEASE_CONFIG, ZLLR_CONFIG, HUBERT, ECAPA

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def jik876_generator_state(config: dict) -> dict[str, torch.Tensor]:
    """jik876's ``Generator`` with ``torch.nn.utils.weight_norm`` on every convolution (dim 0: ``weight_g``
    is (out, 1, 1) for ``Conv1d`` and (in, 1, 1) for ``ConvTranspose1d``, whose weight is (in, out, k))."""
    state = {}

    def conv(name, out_channels, in_channels, kernel, transposed=False):
        shape = (in_channels, out_channels, kernel) if transposed else (out_channels, in_channels, kernel)
        state[f"{name}.bias"] = torch.randn(out_channels) * 0.01
        state[f"{name}.weight_g"] = torch.rand(shape[0], 1, 1) + 0.5
        state[f"{name}.weight_v"] = torch.randn(shape) * 0.01

    channels = config["upsample_initial_channel"]
    conv("conv_pre", channels, config["model_in_dim"], 7)
    for i, kernel in enumerate(config["upsample_kernel_sizes"]):
        conv(f"ups.{i}", channels // 2 ** (i + 1), channels // 2 ** i, kernel, transposed=True)
    per_level = len(config["resblock_kernel_sizes"])
    for i in range(len(config["upsample_rates"])):
        width = channels // 2 ** (i + 1)
        for j, (kernel, dilations) in enumerate(zip(config["resblock_kernel_sizes"],
                                                    config["resblock_dilation_sizes"])):
            for convs in ("convs1", "convs2"):
                for m in range(len(dilations)):
                    conv(f"resblocks.{i * per_level + j}.{convs}.{m}", width, width, kernel)
    conv("conv_post", 1, channels // 2 ** len(config["upsample_rates"]), 7)
    return state


def fairseq_hubert_state(*, pretraining_modules: bool = False) -> dict[str, torch.Tensor]:
    """fairseq ``HubertModel`` keys (conv feature extractor in ``default`` mode, weight-norm positional
    conv with dim 2); ``remove_pretraining_modules()`` drops ``final_proj`` but keeps ``mask_emb`` and
    ``label_embs_concat``."""
    c, h, f = HUBERT["conv_channels"], HUBERT["hidden"], HUBERT["ffn"]
    state = {}
    for i, (kernel, inputs) in enumerate(zip((10, 3, 3, 3, 3, 2, 2), (1,) + (c,) * 6)):
        state[f"feature_extractor.conv_layers.{i}.0.weight"] = torch.randn(c, inputs, kernel) * 0.3
    state["feature_extractor.conv_layers.0.2.weight"] = 1 + 0.1 * torch.randn(c)
    state["feature_extractor.conv_layers.0.2.bias"] = 0.1 * torch.randn(c)
    state["post_extract_proj.weight"], state["post_extract_proj.bias"] = torch.randn(h, c) * 0.1, torch.zeros(h)
    state["mask_emb"] = torch.rand(h)
    state["encoder.pos_conv.0.weight_g"] = torch.rand(1, 1, HUBERT["pos_kernel"]) + 0.5
    state["encoder.pos_conv.0.weight_v"] = torch.randn(h, h // HUBERT["pos_groups"], HUBERT["pos_kernel"])
    state["encoder.pos_conv.0.bias"] = torch.zeros(h)
    for layer in range(HUBERT["layers"]):
        prefix = f"encoder.layers.{layer}."
        for projection in ("k_proj", "v_proj", "q_proj", "out_proj"):
            state[f"{prefix}self_attn.{projection}.weight"] = torch.randn(h, h) * 0.1
            state[f"{prefix}self_attn.{projection}.bias"] = torch.zeros(h)
        state[f"{prefix}fc1.weight"], state[f"{prefix}fc1.bias"] = torch.randn(f, h) * 0.1, torch.zeros(f)
        state[f"{prefix}fc2.weight"], state[f"{prefix}fc2.bias"] = torch.randn(h, f) * 0.1, torch.zeros(h)
        for norm in ("self_attn_layer_norm", "final_layer_norm"):
            state[f"{prefix}{norm}.weight"], state[f"{prefix}{norm}.bias"] = 1 + 0.1 * torch.randn(h), torch.zeros(h)
    state["layer_norm.weight"], state["layer_norm.bias"] = 1 + 0.1 * torch.randn(c), torch.zeros(c)
    state["encoder.layer_norm.weight"], state["encoder.layer_norm.bias"] = 1 + 0.1 * torch.randn(h), torch.zeros(h)
    state["label_embs_concat"] = torch.randn(HUBERT["classes"], HUBERT["final_dim"])
    if pretraining_modules:
        state["final_proj.weight"] = torch.randn(HUBERT["final_dim"], h)
        state["final_proj.bias"] = torch.zeros(HUBERT["final_dim"])
    return state


def real_nvp_state(dim: int = 192, hidden: int = 8, layers: int = 6) -> dict[str, torch.Tensor]:
    """The ICASSP 2023 ``RealNVP``: ``cpl.<k>`` coupling layers (``s`` ends Linear, Tanh, ``Rescale``;
    ``t`` ends with its own ``Linear``) with a ``mask`` parameter each, and ``lmu``."""
    state = {"lmu": torch.tensor(2.3)}
    for k in range(layers):
        for net in ("s", "t"):
            for index, (rows, cols) in zip((0, 2, 4), ((hidden, dim), (hidden, hidden), (dim, hidden))):
                state[f"cpl.{k}.{net}.{index}.weight"] = torch.randn(rows, cols) * 0.1
                state[f"cpl.{k}.{net}.{index}.bias"] = torch.zeros(rows)
        state[f"cpl.{k}.s.6.weight"] = torch.zeros(dim)
        state[f"cpl.{k}.mask"] = (torch.arange(dim) < dim // 2).float() if k % 2 == 0 else \
            (torch.arange(dim) >= dim // 2).float()
    return state


def write_release(root, *, config: dict = RELEASE_CONFIG, vocoder: str = SSL_SAS_VOCODER, sex_flow: bool = False,
                  extra: dict | None = None, seed: int = 0):
    """An unpacked release; returns the ``g_*`` state as saved."""
    torch.manual_seed(seed)
    soft_model = {"W": torch.randn(200, HUBERT["hidden"]),
                  **{f"ssl_model.{k}": v for k, v in fairseq_hubert_state().items()}}
    ecapa = ECAPA_TDNN(80, lin_neurons=192, **ECAPA)
    state = {**jik876_generator_state(config),
             **{f"latent_encoder.{k}": v for k, v in soft_model.items()},
             **{f"fbank.{k}": v for k, v in Fbank(n_mels=80).state_dict().items()},
             **{f"xv_model.{k}": v for k, v in ecapa.state_dict().items()}}
    if sex_flow:
        state.update({f"xv_dis_model.{k}": v for k, v in real_nvp_state().items()})
    state.update(extra or {})
    folder = root / "HiFi-GAN" / vocoder
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config, indent=4))
    torch.save({"generator": state}, folder / "g_00100000")
    (root / "HuBERT_soft").mkdir(exist_ok=True)
    torch.save(soft_model, root / "HuBERT_soft" / "soft_model.pt")
    (root / "ECAPA-TDNN").mkdir(exist_ok=True)
    torch.save(ecapa.state_dict(), root / "ECAPA-TDNN" / "embedding_model.ckpt")
    return state


def test_written_out_generator_keys_are_jik876s():
    written = jik876_generator_state(RELEASE_CONFIG)
    reference = ReferenceGenerator(RELEASE_CONFIG, RELEASE_CONFIG["model_in_dim"]).state_dict()
    assert {k: tuple(v.shape) for k, v in written.items()} == {k: tuple(v.shape) for k, v in reference.items()}


def test_faithful_ssl_sas_release_imports(tmp_path, monkeypatch):
    monkeypatch.setenv("VOXANON_HOME", str(tmp_path / "home"))
    state = write_release(tmp_path / "release")
    assert "fbank.compute_deltas.kernel" in state and "latent_encoder.ssl_model.label_embs_concat" in state
    hubert = tmp_path / "hubert_base_ls960.pt"
    torch.save({"args": argparse.Namespace(arch="hubert"),
                "model": fairseq_hubert_state(pretraining_modules=True)}, hubert)
    assert main(["models", "import", "ssl-sas", str(tmp_path / "release"), "--hubert", str(hubert)]) == 0
    model_set = load_model_set("ssl-sas")
    reference = ReferenceGenerator(RELEASE_CONFIG, 393).eval()
    reference.load_state_dict({k: v for k, v in state.items() if not k.startswith(("latent_encoder.", "xv_model.",
                                                                                     "fbank."))})
    from voxanon.models.nets.hifigan import GeneratorConfig, HifiganGenerator

    generator = HifiganGenerator(GeneratorConfig.from_dict(model_set.config["generator"])).eval()
    generator.load_state_dict(model_set.tensors("generator"))
    frames = torch.randn(1, 393, 6)
    with torch.no_grad():
        torch.testing.assert_close(generator(frames), reference(frames), atol=1e-5, rtol=0)
    torch.testing.assert_close(model_set.tensors("content")["W"], state["latent_encoder.W"])
    torch.testing.assert_close(model_set.tensors("speaker")["fc.conv.weight"], state["xv_model.fc.conv.weight"])


def test_faithful_zllr_vc_release_imports_with_its_sex_flow_keys(tmp_path, monkeypatch):
    monkeypatch.setenv("VOXANON_HOME", str(tmp_path / "home"))
    write_release(tmp_path / "release", config=ZLLR_CONFIG, vocoder=ZLLR_VOCODER, sex_flow=True)
    assert main(["models", "import", "zllr-vc", str(tmp_path / "release")]) == 0
    assert load_model_set("zllr-vc").config["layout"]["l2_normalise_speaker"] is True
    # SSL-SAS's latentGenerator holds no sex flow: there, the same keys are unknown.
    with pytest.raises(CheckpointError, match=r"g_00100000: 85 key\(s\) that no component of an SSL-SAS g_\* "
                                              r"holds: xv_dis_model\.cpl\.0\.mask"):
        import_ssl_sas(tmp_path / "release", vocoder_dir=None)


def test_unknown_generator_keys_are_listed_with_the_file(tmp_path):
    write_release(tmp_path, extra={"decoder.proj.weight": torch.ones(2), "ups.0.scale": torch.ones(1)})
    with pytest.raises(CheckpointError) as error:
        import_ssl_sas(tmp_path)
    message = str(error.value)
    assert f"{SSL_SAS_VOCODER}/g_00100000: 2 key(s)" in message
    assert "decoder.proj.weight, ups.0.scale" in message


def test_unknown_submodel_keys_are_listed_with_their_file(tmp_path):
    write_release(tmp_path / "a", extra={"latent_encoder.ssl_model.decoder.weight": torch.ones(2)})
    with pytest.raises(CheckpointError, match=r"g_00100000 \(latent_encoder\.\*\): 1 key\(s\) .*"
                                              r"ssl_model\.decoder\.weight"):
        import_ssl_sas(tmp_path / "a")
    write_release(tmp_path / "b", extra={"xv_model.classifier.weight": torch.ones(2)})
    with pytest.raises(CheckpointError, match=r"g_00100000 \(xv_model\.\*\): .*unexpected classifier\.weight"):
        import_ssl_sas(tmp_path / "b")


def test_separate_files_with_unknown_keys_are_named(tmp_path):
    """A g_* without its submodels: HuBERT_soft/soft_model.pt and ECAPA-TDNN/embedding_model.ckpt are read."""
    state = write_release(tmp_path)
    g_path = tmp_path / "HiFi-GAN" / SSL_SAS_VOCODER / "g_00100000"
    torch.save({"generator": {k: v for k, v in state.items() if not k.startswith(("latent_encoder.", "xv_model."))}},
               g_path)
    components, _ = import_ssl_sas(tmp_path)
    assert "W" in components["content"] and "fc.conv.weight" in components["speaker"]
    soft_model = torch.load(tmp_path / "HuBERT_soft" / "soft_model.pt")
    torch.save({**soft_model, "proj.weight": torch.ones(3)}, tmp_path / "HuBERT_soft" / "soft_model.pt")
    with pytest.raises(CheckpointError, match=r"HuBERT_soft/soft_model\.pt: 1 key\(s\) .*: proj\.weight"):
        import_ssl_sas(tmp_path)
    torch.save(soft_model, tmp_path / "HuBERT_soft" / "soft_model.pt")
    ecapa = torch.load(tmp_path / "ECAPA-TDNN" / "embedding_model.ckpt")
    torch.save({**ecapa, "asp.extra": torch.ones(1)}, tmp_path / "ECAPA-TDNN" / "embedding_model.ckpt")
    with pytest.raises(CheckpointError, match=r"ECAPA-TDNN/embedding_model\.ckpt: .*unexpected asp\.extra"):
        import_ssl_sas(tmp_path)


def test_tampered_deltas_kernel_is_refused(tmp_path):
    kernel = Fbank(n_mels=80).state_dict()["compute_deltas.kernel"].clone()
    kernel[3, 0, 0] = -3.0
    write_release(tmp_path, extra={"fbank.compute_deltas.kernel": kernel})
    with pytest.raises(CheckpointError, match=r"g_00100000: fbank\.compute_deltas\.kernel is \(80, 1, 5\) .*"
                                              r"speechbrain Fbank\(n_mels=80\) holds"):
        import_ssl_sas(tmp_path)


def test_speaker_normaliser_state_is_checked(tmp_path):
    write_release(tmp_path / "a", extra={"mean_var_norm.count": 0, "mean_var_norm.glob_mean": torch.tensor([0]),
                                         "mean_var_norm.glob_std": torch.tensor([0])})
    import_ssl_sas(tmp_path / "a")
    write_release(tmp_path / "b", extra={"mean_var_norm.glob_mean": torch.randn(80)})
    with pytest.raises(CheckpointError, match=r"mean_var_norm\.glob_mean is \(80,\).*never updates it"):
        import_ssl_sas(tmp_path / "b")


# voxanon models check ---------------------------------------------------------------------------------------------

def test_check_summarises_a_faithful_release(tmp_path, capsys):
    write_release(tmp_path / "release")
    assert main(["models", "check", str(tmp_path / "release")]) == 0
    out = capsys.readouterr().out
    assert f"HiFi-GAN/{SSL_SAS_VOCODER}/g_00100000" in out
    for line in ("generator (jik876 HiFi-GAN, weight norm): 291 keys", "content (latent_encoder.*): 53 keys",
                 "speaker front end (fbank.*, mean_var_norm.*): 1 key, equal to speechbrain's",
                 "model_in_dim 393", "hop 160", "voxanon models import ssl-sas", "would succeed"):
        assert line in out
    assert "unknown keys: none" in out


def test_check_reports_a_broken_release_and_fails(tmp_path, capsys):
    kernel = Fbank(n_mels=80).state_dict()["compute_deltas.kernel"] * 2
    write_release(tmp_path, extra={"fbank.compute_deltas.kernel": kernel, "decoder.weight": torch.ones(1)})
    assert main(["models", "check", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "unknown keys: decoder.weight" in out
    assert "fbank.compute_deltas.kernel is (80, 1, 5)" in out
    assert "import would FAIL" in out


@pytest.mark.parametrize("claim", [
    {"upsample_rates": [2] * 100_000, "upsample_kernel_sizes": [4] * 100_000},
    {"upsample_initial_channel": 10**9},
    {"resblock_kernel_sizes": [3] * 100_000, "resblock_dilation_sizes": [[1, 3, 5]] * 100_000},
    {"upsample_initial_channel": 16},  # halved 5 times: no channel left
])
def test_a_config_claiming_absurd_sizes_is_refused_before_anything_is_built(tmp_path, capsys, monkeypatch, claim):
    """Issue 37: a config.json claiming 100,000 layers made models check build them for 110 s before the key
    check failed. The declared sizes are checked first: one line naming the file, exit 2, in well under a second
    on a quiet machine (up to 1.5 s on the loaded 2-core one; the bound leaves room; the modules are imported
    first, as their import is not the check's time)."""
    import time

    import voxanon.models.checkpoints.release_check  # noqa: F401  (the import is not the check's time)

    monkeypatch.setenv("VOXANON_HOME", str(tmp_path / "home"))
    write_release(tmp_path)
    config = tmp_path / "HiFi-GAN" / SSL_SAS_VOCODER / "config.json"
    config.write_text(json.dumps({**RELEASE_CONFIG, **claim}))
    for command in (["models", "check", str(tmp_path)], ["models", "check", str(config.parent / "g_00100000")],
                    ["models", "import", "ssl-sas", str(tmp_path)]):
        start = time.perf_counter()
        assert main(command) == 2, command
        assert time.perf_counter() - start < 5.0, command
        captured = capsys.readouterr()
        assert "Traceback" not in captured.err and len(captured.err.strip().splitlines()) == 1
        assert f"{config}: " in captured.err and ("HiFi-GAN generator" in captured.err or "halved" in captured.err)


def test_check_of_single_files(tmp_path, capsys, monkeypatch):
    write_release(tmp_path, config=ZLLR_CONFIG, vocoder=ZLLR_VOCODER, sex_flow=True)
    assert main(["models", "check", str(tmp_path / "HiFi-GAN" / ZLLR_VOCODER / "g_00100000")]) == 0
    out = capsys.readouterr().out
    assert "sex flow (xv_dis_model.*): 85 keys" in out and "zllr-vc" in out
    state = torch.load(tmp_path / "HiFi-GAN" / ZLLR_VOCODER / "g_00100000")["generator"]
    bare = tmp_path / "HiFi-GAN" / ZLLR_VOCODER / "g_00200000"
    torch.save({"generator": {k: v for k, v in state.items() if not k.startswith(("latent_encoder.", "xv_model."))}},
               bare)
    monkeypatch.chdir(bare.parent)
    assert main(["models", "check", bare.name]) == 0
    assert "no latent_encoder.* inside: the import reads HuBERT_soft/soft_model.pt instead" in capsys.readouterr().out
    assert main(["models", "check", str(tmp_path / "ECAPA-TDNN" / "embedding_model.ckpt")]) == 0
    assert "speechbrain ECAPA_TDNN" in capsys.readouterr().out
    (tmp_path / "junk.pt").write_bytes(b"junk")
    assert main(["models", "check", str(tmp_path / "junk.pt")]) == 1
    assert "junk.pt" in capsys.readouterr().out
    assert main(["models", "check", str(tmp_path / "absent")]) == 2


def test_check_reads_each_file_of_a_release_once(tmp_path, monkeypatch, capsys):
    """The inspection and the trial import read the g_*, soft model and ECAPA files again each."""
    import voxanon.models.checkpoints.release_check as release_check

    write_release(tmp_path / "release")
    reads: list[str] = []
    real = release_check.safe_load
    monkeypatch.setattr(release_check, "safe_load", lambda path: reads.append(str(path)) or real(path))
    assert main(["models", "check", str(tmp_path / "release")]) == 0
    assert "would succeed" in capsys.readouterr().out
    assert len(reads) == len(set(reads)) >= 3, reads


def _install_random_set(home: Path, monkeypatch) -> Path:
    monkeypatch.setenv("VOXANON_HOME", str(home))
    assert main(["models", "import", "ssl-sas", "--random-init", "--size", "tiny"]) == 0
    return home / "models" / "ssl-sas"


def test_check_verifies_an_installed_set(tmp_path, monkeypatch, capsys):
    """`models check NAME` checks an installed set's checksums and loads every component as a
    run does."""
    folder = _install_random_set(tmp_path, monkeypatch)
    capsys.readouterr()
    assert main(["models", "check", "ssl-sas"]) == 0
    out = capsys.readouterr().out
    assert out.count("sha256 matches the manifest") == 4    # three weights files and config.json
    for component in ("content", "speaker", "generator"):
        assert f"{component} ({component}.safetensors): would succeed" in out
    content = folder / "content.safetensors"
    content.write_bytes(content.read_bytes()[: content.stat().st_size // 2])
    assert main(["models", "check", "ssl-sas"]) == 1
    out = capsys.readouterr().out
    assert f"{content}: does not match its manifest checksum" in out and "NOT OK" in out


def test_check_names_the_file_and_keys_of_an_installed_set_that_does_not_load(tmp_path, monkeypatch, capsys):
    """A set whose config no longer fits its weights (checksums re-made, as a hand edit would): the load fails
    with the file and the mis-shaped keys named, in the check and in a run alike."""
    from voxanon.data_prep.digest import sha256_file
    from voxanon.models.checkpoints.safe import CheckpointError
    from voxanon.models.checkpoints.registry import CONFIG, MANIFEST

    folder = _install_random_set(tmp_path, monkeypatch)
    config = json.loads((folder / CONFIG).read_text())
    config["generator"]["upsample_initial_channel"] *= 2
    (folder / CONFIG).write_text(json.dumps(config))
    manifest = json.loads((folder / MANIFEST).read_text())
    manifest["files"][CONFIG] = sha256_file(folder / CONFIG)
    (folder / MANIFEST).write_text(json.dumps(manifest))
    capsys.readouterr()
    assert main(["models", "check", "ssl-sas"]) == 1
    out = capsys.readouterr().out
    assert "generator (generator.safetensors): load would FAIL" in out
    assert f"{folder / 'generator.safetensors'}: not the HifiganGenerator its configuration describes: shapes differ:" \
        in out and "conv_pre.weight (32, 393, 7) (expected (64, 393, 7))" in out
    from voxanon.models.nets.hifigan import load_vocoder

    with pytest.raises(CheckpointError, match=r"generator\.safetensors: .*shapes differ:.*conv_pre\.weight"):
        load_vocoder(load_model_set("ssl-sas"))


def test_an_installed_set_whose_config_claims_absurd_sizes_is_refused_before_building(tmp_path, monkeypatch, capsys):
    """The same for an installed set (checksums re-made, as a hand edit would): its config.json claiming 100,000
    upsampling layers is named in the check's load line, and a run's load raises it in one line, in well under a
    second, instead of building them."""
    import time

    from voxanon.data_prep.digest import sha256_file
    from voxanon.models.checkpoints.registry import CONFIG, MANIFEST
    from voxanon.models.nets.hifigan import GeneratorSizeError, load_vocoder

    folder = _install_random_set(tmp_path, monkeypatch)
    config = json.loads((folder / CONFIG).read_text())
    config["generator"].update(upsample_rates=[2] * 100_000, upsample_kernel_sizes=[4] * 100_000)
    (folder / CONFIG).write_text(json.dumps(config))
    manifest = json.loads((folder / MANIFEST).read_text())
    manifest["files"][CONFIG] = sha256_file(folder / CONFIG)
    (folder / MANIFEST).write_text(json.dumps(manifest))
    capsys.readouterr()
    start = time.perf_counter()
    assert main(["models", "check", "ssl-sas"]) == 1
    assert time.perf_counter() - start < 5.0
    out = capsys.readouterr().out
    assert (f"generator (generator.safetensors): load would FAIL: {folder / CONFIG}: upsample_rates declares 100000; "
            "a HiFi-GAN generator has 1 to 8 upsampling layers") in out
    with pytest.raises(GeneratorSizeError, match=rf"{folder / CONFIG}: upsample_rates declares 100000"):
        load_vocoder(load_model_set("ssl-sas"))
