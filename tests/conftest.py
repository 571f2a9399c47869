"""Shared fixtures: small synthetic corpora written in the real on-disk formats."""
from __future__ import annotations

import os
from importlib.util import find_spec
from pathlib import Path

import pytest

from tests.helpers.corpora import make_corpus, single_torch_thread
from tests.helpers.demo_sets import write_demo_subset
from tests.helpers.model_homes import import_random_set
from tests.reference import flow as reference_flow
from voxanon.data_prep.corpus import DataDir, read_data_dir
from voxanon.data_prep.demo_corpus import demo_corpus_dir
from voxanon.pipeline.cli import main


os.environ.setdefault("HF_HUB_OFFLINE", "1")


# Parity with fairseq needs the optional extra (pip install -e '.[fairseq]'; make test-fairseq).
# (tests/models/test_hubert_fairseq.py; collect_ignore is relative to this folder).
collect_ignore = [] if find_spec("fairseq") else [os.path.join("models", "test_hubert_fairseq.py")]


@pytest.fixture
def toy_corpus(tmp_path: Path) -> DataDir:
    return make_corpus(tmp_path)


@pytest.fixture
def voxanon_home(tmp_path, monkeypatch):
    """An empty $VOXANON_HOME (models, pools, flows, caches) for one test."""
    home = tmp_path / "home"
    monkeypatch.setenv("VOXANON_HOME", str(home))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    return home


@pytest.fixture
def one_torch_thread():
    with single_torch_thread():
        yield


@pytest.fixture(scope="module")
def random_home(tmp_path_factory):
    """A models directory with a tiny random SSL-SAS set."""
    return import_random_set(tmp_path_factory.mktemp("home"), "ssl-sas")


@pytest.fixture
def reference_module():
    """The releases' ``classes`` (stand-ins) importable as ``classes``, so ``torch.save`` pickles them as they do."""
    with reference_flow.installed_as_classes() as module:
        yield module


@pytest.fixture(scope="module")
def installed_home(tmp_path_factory):
    home = tmp_path_factory.mktemp("home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("VOXANON_HOME", str(home))
        patch.setenv("OMP_NUM_THREADS", "1")
        demo = read_data_dir(demo_corpus_dir())
        speakers = ["de1", "de3", "slt", "us1", "awb", "joe", "kal", "ked"]
        training = write_demo_subset(demo, home / "demo24", [u for s in speakers for u in sorted(demo.spk2utt[s])[1:4]])
        data = write_demo_subset(demo, home / "demo8", [sorted(demo.spk2utt[s])[0] for s in speakers])
        for name in ("ssl-sas", "zllr-vc"):
            assert main(["models", "import", name, "--random-init", "--size", "tiny"]) == 0
        for tag in ("hifigan_bn_tdnnf_wav2vec2_vq_48_v1", "hifigan_bn_tdnnf_600h_vq_48_v1"):  # B5, B6
            assert main(["models", "import", "sa-toolkit", "--random-init", "--tag", tag, "--size", "tiny"]) == 0
        assert main(["pool", "build", "--data", str(training), "--out", "libritts-other-500",
                     "--models", "ssl-sas"]) == 0
        assert main(["train", "sex-flow", "--data", str(training), "--out", "sex", "--models", "zllr-vc",
                     "--epochs", "2", "--held-out", "0", "--quiet"]) == 0
        yield home, read_data_dir(data)
