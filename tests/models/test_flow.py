import math
import os
import pickle
import pickletools
import sys
import warnings
import zipfile

import numpy as np
import pytest
import torch
from scipy.optimize import minimize_scalar
from scipy.stats import multivariate_normal
from sklearn.datasets import make_moons
from torch import nn

from tests.reference import flow as reference_flow
from voxanon.data_prep.errors import VoxanonError
from voxanon.eval.cllr import min_cllr
from voxanon.models.checkpoints.ssl_sas import generator_families
from voxanon.models.checkpoints.safe import UnsafeCheckpointError
from voxanon.models.nets.flow import FlowConfig, TrainingConfig, ZeroLLRFlow, load_flow, mu_mle, save_flow, train_zero_llr_flow
from voxanon.models.checkpoints.zllr_flow import flow_from_reference_state_dict, import_reference_flow
from voxanon.models.speakers.lda import LinearDiscriminant, QuadraticDiscriminant, balanced_global_average


def random_flow(dim=6, hidden=16, seed=0):
    """An untrained flow with random (not identity) couplings, in float64."""
    torch.manual_seed(seed)
    model = ZeroLLRFlow(FlowConfig(dim=dim, hidden=hidden, zero_init=False)).double()
    with torch.no_grad():
        for layer in model.layers:
            layer.rescale.uniform_(0.5, 1.5)
        model.input_shift.normal_()
        model.input_scale.uniform_(0.5, 2.0)
        model.log_mu.fill_(math.log(3.0))
    return model.eval()


def test_change_of_variables_llr_is_z1_even_untrained():
    model = random_flow()
    x = torch.randn(50, 6, dtype=torch.float64) * 2
    with torch.no_grad():
        female = model.log_likelihood(x, torch.ones(50, dtype=torch.bool))
        male = model.log_likelihood(x, torch.zeros(50, dtype=torch.bool))
        z1 = model.llr(x)
    assert torch.max(torch.abs(z1)) > 0.1
    torch.testing.assert_close(female - male, z1, rtol=0, atol=1e-12)


def test_flow_is_invertible_and_log_det_is_the_jacobian():
    model = random_flow(dim=4)
    x = torch.randn(3, 4, dtype=torch.float64)
    with torch.no_grad():
        z, log_det = model.to_base(x)
        torch.testing.assert_close(model.from_base(z), x, rtol=0, atol=1e-12)
    for row in range(3):
        jacobian = torch.autograd.functional.jacobian(lambda v: model.to_base(v[None])[0][0], x[row])
        sign, logabs = torch.linalg.slogdet(jacobian)
        assert float(logabs) == pytest.approx(float(log_det[row]), abs=1e-10)


def test_zero_init_flow_starts_as_the_identity():
    model = ZeroLLRFlow(FlowConfig(dim=5, hidden=8)).double()
    x = torch.randn(4, 5, dtype=torch.float64)
    z, log_det = model.to_base(x)
    torch.testing.assert_close(z, x)
    torch.testing.assert_close(log_det, torch.zeros(4, dtype=torch.float64))


def test_protection_sets_z1_to_zero_and_keeps_the_residual():
    model = random_flow()
    x = torch.randn(40, 6, dtype=torch.float64)
    with torch.no_grad():
        protected = model.protect(x)
        z_before, _ = model.to_base(x)
        z_after, _ = model.to_base(protected)
    assert torch.max(torch.abs(z_after[:, 0])) < 1e-10
    torch.testing.assert_close(z_after[:, 1:], z_before[:, 1:], rtol=0, atol=1e-10)
    assert torch.max(torch.abs(protected - x)) > 1e-3


def test_mu_mle_matches_numerical_maximisation():
    model = ZeroLLRFlow(FlowConfig(dim=3, hidden=4)).double()
    rng = np.random.default_rng(0)
    labels = rng.random(500) < 0.4
    z = torch.as_tensor(rng.normal(size=(500, 3)) + np.where(labels, 2.0, -2.0)[:, None] * [1, 0, 0])
    is_class1 = torch.as_tensor(labels)

    def negative_log_likelihood(mu):
        with torch.no_grad():
            model.log_mu.fill_(math.log(mu))
            return -float(model.base_log_density(z, is_class1).sum())

    numerical = minimize_scalar(negative_log_likelihood, bounds=(1e-3, 50), method="bounded",
                                options={"xatol": 1e-10}).x
    assert mu_mle(z[:, 0]) == pytest.approx(numerical, rel=1e-6)
    assert mu_mle(torch.zeros(4)) == 1e-6


def test_mu_mle_recovers_mu_of_calibrated_gaussian_llrs():
    rng = np.random.default_rng(1)
    mu = 4.0
    z1 = np.concatenate((rng.normal(mu, math.sqrt(2 * mu), 50000), rng.normal(-mu, math.sqrt(2 * mu), 50000)))
    assert mu_mle(z1) == pytest.approx(mu, rel=0.02)


def test_lda_protection_gives_exactly_zero_llr():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(400, 5)) + np.repeat([[1.0, 0.5, 0, 0, 0], [-1.0, 0, 0.3, 0, 0]], 200, axis=0)
    labels = np.repeat([True, False], 200)
    lda = LinearDiscriminant.fit(x, labels)
    assert np.max(np.abs(lda.llr(x))) > 1
    np.testing.assert_allclose(lda.llr(lda.protect(x)), 0.0, atol=1e-10)


def test_lda_and_qda_llrs_are_gaussian_log_density_ratios():
    rng = np.random.default_rng(3)
    x = np.concatenate((rng.normal(size=(300, 3)) * [1, 2, 1] + 1, rng.normal(size=(300, 3))))
    labels = np.repeat([True, False], 300)
    lda = LinearDiscriminant.fit(x, labels)
    pooled = np.linalg.inv(lda.precision)
    expected = multivariate_normal(lda.mean_1, pooled).logpdf(x) - multivariate_normal(lda.mean_2, pooled).logpdf(x)
    np.testing.assert_allclose(lda.llr(x), expected, atol=1e-8)
    qda = QuadraticDiscriminant.fit(x, labels)
    expected = (multivariate_normal(x[:300].mean(0), np.cov(x[:300].T, bias=True)).logpdf(x)
                - multivariate_normal(x[300:].mean(0), np.cov(x[300:].T, bias=True)).logpdf(x))
    np.testing.assert_allclose(qda.llr(x), expected, atol=1e-4)
    assert lda.kl_divergence == pytest.approx(0.5 * (lda.mean_1 - lda.mean_2) @ lda.direction)


def test_balanced_global_average_ignores_utterance_and_speaker_counts():
    vectors = np.concatenate((np.full((100, 2), 10.0), np.zeros((10, 2))))
    speakers = ["f0"] * 100 + [f"m{k}" for k in range(10)]
    sexes = ["f"] * 100 + ["m"] * 10
    np.testing.assert_allclose(balanced_global_average(vectors, speakers, sexes), [5.0, 5.0])
    with pytest.raises(VoxanonError, match="two sexes"):
        balanced_global_average(vectors[:100], speakers[:100], sexes[:100])


def test_save_and_load_round_trip(tmp_path):
    model = random_flow().float()
    save_flow(model, tmp_path / "model")
    assert sorted(os.listdir(tmp_path / "model")) == ["flow.json", "flow.safetensors"]
    loaded = load_flow(tmp_path / "model")
    x = np.random.default_rng(0).normal(size=(5, 6))
    np.testing.assert_array_equal(loaded.protect_numpy(x), model.protect_numpy(x))
    assert loaded.config == model.config and loaded.mu == pytest.approx(3.0)
    with pytest.raises(VoxanonError, match="flow.json"):
        load_flow(tmp_path)


def moons(n, seed):
    x, y = make_moons(n, noise=0.1, random_state=seed)
    return x, y == 0


def test_flow_beats_lda_on_moons(one_torch_thread):
    x, y = moons(10000, 0)
    test_x, test_y = moons(2000, 1)
    model, history = train_zero_llr_flow(x, y, FlowConfig(dim=2, hidden=64),
                                         TrainingConfig(learning_rate=1e-3, max_epochs=8), progress=False)
    llr = model.llr_numpy(test_x)
    lda = LinearDiscriminant.fit(x, y).llr(test_x)
    flow_min_cllr = min_cllr(llr[test_y], llr[~test_y])
    assert flow_min_cllr < 0.2
    assert flow_min_cllr < min_cllr(lda[test_y], lda[~test_y])
    assert len(history.mu) == len(history.validation_nll) >= 1
    assert history.mu[0] != pytest.approx(history.mu[-1])


@pytest.mark.parametrize("strategy", ["mle", "learned"])
def test_mu_starts_from_the_shared_covariance_kl(strategy):
    rng = np.random.default_rng(5)
    x = rng.normal(size=(600, 3)) + np.repeat([[1.0, 0, 0], [-1.0, 0, 0]], 300, axis=0)
    y = np.repeat([True, False], 300)
    model, history = train_zero_llr_flow(x, y, FlowConfig(dim=3, hidden=8),
                                         TrainingConfig(mu_strategy=strategy, learning_rate=1e-9, max_epochs=1,
                                                        alpha=1.0), progress=False)
    train_rows_kl = LinearDiscriminant.fit(x, y).kl_divergence
    assert model.mu == pytest.approx(train_rows_kl, rel=0.3)
    assert not model.log_mu.requires_grad


def test_training_inputs_are_checked():
    with pytest.raises(VoxanonError, match="does not fit"):
        train_zero_llr_flow(np.zeros((10, 3)), np.zeros(10, bool), FlowConfig(dim=2))
    with pytest.raises(VoxanonError, match="μ strategy"):
        TrainingConfig(mu_strategy="guess")
    with pytest.raises(VoxanonError, match="one class"):
        train_zero_llr_flow(np.random.default_rng(0).normal(size=(20, 2)), np.ones(20, bool), FlowConfig(dim=2),
                            progress=False)


ZLLR_VC_GLOBALS = {("classes", "RealNVP"), ("classes", "CouplingLayer"), ("classes", "Rescale"), ("classes", "Linear"),
                   ("torch.nn.modules.container", "ModuleList"), ("torch.nn.modules.container", "Sequential"),
                   ("torch.nn.modules.linear", "Linear"), ("torch.nn.modules.activation", "LeakyReLU"),
                   ("torch.nn.modules.activation", "Tanh")}
"""The module classes a ``torch.save`` of the ICASSP 2023 ``classes.RealNVP`` names."""
BRIDGE_GLOBALS = ZLLR_VC_GLOBALS - {("classes", "Rescale"), ("classes", "Linear")}
"""The ICASSP 2022 bridge-features-evidence ``RealNVP``: no Rescale, torch's Linear at the end of ``t``."""


def published_keys(layers: int, zllr_vc: bool) -> list[str]:
    """``RealNVP.state_dict()`` keys in order, as the releases' ``classes.py`` defines them."""
    keys = ["lmu"] if zllr_vc else []
    for k in range(layers):
        linear = [f"{index}.{kind}" for index in (0, 2, 4) for kind in ("weight", "bias")]
        keys += [f"cpl.{k}.mask", *(f"cpl.{k}.s.{name}" for name in linear)]
        keys += [f"cpl.{k}.s.6.weight"] if zllr_vc else []
        keys += [f"cpl.{k}.t.{name}" for name in linear]
    return keys


def module_classes(path) -> set[tuple[str, str]]:
    """The ``classes`` and ``torch.nn`` globals a ``torch.save`` archive's pickle names."""
    with zipfile.ZipFile(path) as archive:
        data = archive.read(next(name for name in archive.namelist() if name.endswith("/data.pkl")))
    named = {tuple(arg.split(" ", 1)) for opcode, arg, _ in pickletools.genops(data) if opcode.name == "GLOBAL"}
    return {(module, name) for module, name in named if module == "classes" or module.startswith("torch.nn.")}


def tree(module) -> tuple[set[str], list[str], list[str]]:
    """Plain attributes, parameters and submodules, as pickled in the module's ``__dict__``."""
    plain = {name for name in vars(module) if not name.startswith("_") and name != "training"}
    return plain, list(module._parameters), list(module._modules)


@pytest.mark.parametrize("zllr_vc", [True, False])
def test_stand_ins_have_the_published_module_tree(tmp_path, zllr_vc):
    model = reference_flow.RealNVP(6, 12, zllr_vc=zllr_vc)
    assert tree(model) == ({"input_dim", "masks"}, ["lmu"] if zllr_vc else [], ["cpl"])
    assert list(model.state_dict()) == published_keys(6, zllr_vc)
    layer = model.cpl[3]
    assert tree(layer) == ({"input_dim", "hidden_dim"}, ["mask"], ["s", "t"])
    assert not layer.mask.requires_grad and torch.equal(layer.mask, model.masks[3])
    scale = [type(m).__module__ + "." + type(m).__name__ for m in layer.s]
    translation = [type(m).__module__ + "." + type(m).__name__ for m in layer.t]
    torch_nn = ["torch.nn.modules.linear.Linear", "torch.nn.modules.activation.LeakyReLU"] * 2
    assert scale == [*torch_nn, "torch.nn.modules.linear.Linear", "torch.nn.modules.activation.Tanh",
                     *(["classes.Rescale"] if zllr_vc else [])]
    assert translation == [*torch_nn, "classes.Linear" if zllr_vc else "torch.nn.modules.linear.Linear"]
    if zllr_vc:
        assert tree(layer.s[6]) == (set(), ["weight"], []) and not layer.s[6].weight.any()
        assert tree(layer.t[4]) == ({"in_features", "out_features"}, ["weight", "bias"], [])
        assert not layer.t[4].weight.any() and not layer.t[4].bias.any()
    reference_flow.save(model, tmp_path / "model.pt")
    assert module_classes(tmp_path / "model.pt") == (ZLLR_VC_GLOBALS if zllr_vc else BRIDGE_GLOBALS)
    assert "classes" not in sys.modules


def assert_same_maps(model, reference, dim=6):
    """Our z, log-determinant and zero-LLR vector against the reference's ``f`` and ``g``."""
    x = torch.randn(7, dim, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        z, log_det = reference.f(x)
        zeroed = z.clone()
        zeroed[:, 0] = 0
        protected = reference.g(zeroed)
        ours_z, ours_log_det = model.to_base(x)
        assert torch.max(torch.abs(z - x)) > 0.1 and torch.max(torch.abs(log_det)) > 0.1
        torch.testing.assert_close(ours_z, z, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(ours_log_det, log_det, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(model.llr(x), z[:, 0], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(model.protect(x), protected, atol=1e-5, rtol=1e-5)


RANDOM_MASKS = torch.tensor([[1, 0, 0, 1, 1, 0], [0, 1, 1, 0, 0, 1], [1, 1, 0, 0, 0, 1],
                             [0, 0, 1, 1, 1, 0], [0, 1, 0, 1, 0, 1], [1, 0, 1, 0, 1, 0]], dtype=torch.float32)


@pytest.mark.parametrize("zllr_vc", [True, False])
def test_import_of_the_pickled_reference_flow(tmp_path, zllr_vc):
    reference = reference_flow.randomise(reference_flow.RealNVP(6, 12, RANDOM_MASKS, muinit=2.5, zllr_vc=zllr_vc))
    reference_flow.save(reference, tmp_path / "model.pt")
    mu = None if zllr_vc else 9.0
    model = import_reference_flow(tmp_path / "model.pt", l2_normalise_input=False, mu=mu)
    assert "classes" not in sys.modules
    assert_same_maps(model, reference)
    assert torch.equal(torch.stack([layer.mask for layer in model.layers]), RANDOM_MASKS)
    assert model.config.hidden == 12 and model.config.negative_slope == 0.01
    assert model.mu == pytest.approx(2.5 if zllr_vc else 9.0, rel=1e-6)
    assert import_reference_flow(tmp_path / "model.pt", mu=mu).config.l2_normalise_input
    with pytest.raises(VoxanonError, match="mu.txt" if mu else "holds lmu"):
        import_reference_flow(tmp_path / "model.pt", mu=None if mu else 3.0)
    with reference_flow.installed_as_classes():
        torch.save(reference, tmp_path / "legacy.pt", _use_new_zipfile_serialization=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert_same_maps(import_reference_flow(tmp_path / "legacy.pt", mu=mu), reference)


def test_flow_inside_a_zllr_vc_generator_is_the_same_state_dict():
    reference = reference_flow.randomise(reference_flow.RealNVP(6, 12, RANDOM_MASKS, muinit=2.5), seed=3)
    checkpoint = {"generator": {f"xv_dis_model.{key}": value for key, value in reference.state_dict().items()}}
    families = generator_families(checkpoint, "g_00100000", sex_flow=True)
    assert not families["unknown"] and len(families["sex_flow"]) == len(published_keys(6, True))
    model = flow_from_reference_state_dict(families["sex_flow"], l2_normalise_input=False, source="g_00100000")
    assert_same_maps(model, reference)
    assert model.mu == pytest.approx(2.5, rel=1e-6)
    damaged = {key: value for key, value in families["sex_flow"].items() if key != "cpl.2.t.4.bias"}
    with pytest.raises(VoxanonError, match=r"g_00100000: .*missing cpl\.2\.t\.4\.bias"):
        flow_from_reference_state_dict(damaged, source="g_00100000")
    with pytest.raises(VoxanonError, match="unexpected cpl.0.s.8.weight"):
        flow_from_reference_state_dict({**families["sex_flow"], "cpl.0.s.8.weight": torch.zeros(6)})


def test_other_module_trees_are_refused(tmp_path):
    reference = reference_flow.RealNVP(6, 8)
    reference.cpl[1].s[5] = nn.Sigmoid()
    reference_flow.save(reference, tmp_path / "sigmoid.pt")
    with pytest.raises(VoxanonError, match="sigmoid.pt: .*coupling layer 1 has s = .*Sigmoid"):
        import_reference_flow(tmp_path / "sigmoid.pt")
    reference = reference_flow.RealNVP(6, 8)
    reference.masks = reference.masks[:4]
    reference_flow.save(reference, tmp_path / "masks.pt")
    with pytest.raises(VoxanonError, match="masks.pt: RealNVP.masks"):
        import_reference_flow(tmp_path / "masks.pt")
    torch.save(nn.Linear(3, 3), tmp_path / "linear.pt")
    with pytest.raises(VoxanonError, match="holds torch.nn.modules.linear.Linear"):
        import_reference_flow(tmp_path / "linear.pt")


class _Exploit:
    def __reduce__(self):
        return (os.system, ("echo pwned > /dev/null",))


def test_pickled_code_is_refused(tmp_path):
    torch.save({"weights": torch.zeros(2), "payload": _Exploit()}, tmp_path / "evil.pt")
    with pytest.raises(UnsafeCheckpointError, match="evil.pt.*system"):
        import_reference_flow(tmp_path / "evil.pt")
    with open(tmp_path / "plain.pkl", "wb") as handle:
        pickle.dump({"a": 1}, handle)
    with pytest.raises(VoxanonError):
        import_reference_flow(tmp_path / "plain.pkl")


def test_zllr_import_takes_the_bridge_flows_mu_from_the_command_line(tmp_path, capsys):
    from voxanon.pipeline.cli import main

    reference = reference_flow.randomise(reference_flow.RealNVP(6, 12, RANDOM_MASKS, zllr_vc=False))
    reference_flow.save(reference, tmp_path / "model_9.pt")
    command = ["zllr", "import", "--pickle", str(tmp_path / "model_9.pt"), "--no-l2-normalise"]
    assert main(command + ["--out", str(tmp_path / "without")]) == 2
    assert "mu.txt" in capsys.readouterr().err
    assert main(command + ["--out", str(tmp_path / "flow"), "--mu", "4.5"]) == 0
    model = load_flow(tmp_path / "flow")
    assert model.mu == pytest.approx(4.5)
    assert_same_maps(model, reference)
