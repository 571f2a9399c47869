"""The attacker's training is planned once (:func:`~voxanon.pipeline.training.asv.run.plan_training`: settings,
data, identity, memory, whether it is done already), and its run checks nothing again."""
from __future__ import annotations

import pytest

from voxanon.pipeline.training.asv import run
from voxanon.pipeline.training.asv.run import plan_training, train_planned

from tests.helpers.corpora import make_corpus, single_torch_thread

TINY = {"channels": [16, 16, 16, 16, 48], "lin_neurons": 16, "attention_channels": 8, "se_channels": 8,
        "sentence_len": 1.5, "batch_size": 4, "number_of_epochs": 1}


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    with single_torch_thread():
        yield


def test_a_plan_checks_once_and_its_training_does_not_check_again(tmp_path, monkeypatch):
    corpus = make_corpus(tmp_path, n_speakers=2, n_utts=3, seconds=2.0)
    checks = {"data": 0, "memory": 0}

    def counted(kind, real):
        def call(*args, **kwargs):
            checks[kind] += 1
            return real(*args, **kwargs)
        return call

    monkeypatch.setattr(run, "prepare_training_data", counted("data", run.prepare_training_data))
    monkeypatch.setattr(run, "check_cpu_memory", counted("memory", run.check_cpu_memory))

    def folder(identity):
        return tmp_path / f"attacker-{identity}"

    plan = plan_training([corpus.path], folder, hparams=TINY, device="cpu", progress=False)
    assert plan.out_dir == folder(plan.identity) and not plan.done and plan.data is not None
    assert [d.path for d in plan.sets] == [corpus.path] and plan.identities[0]["utterances"] == 6
    assert checks == {"data": 1, "memory": 1}
    assert train_planned(plan, progress=False).trained
    assert checks == {"data": 1, "memory": 1}
    # The same training planned again is done: its folder holds the finished model; no audio is read.
    again = plan_training([corpus.path], folder, hparams=TINY, device="cpu", progress=False)
    assert again.done and again.data is None and again.out_dir == plan.out_dir
    assert not train_planned(again, progress=False).trained and checks == {"data": 1, "memory": 1}
    # A plan for the checks alone (no folder) trains nothing.
    checks_only = plan_training([corpus.path], hparams=TINY, device="cpu", progress=False, prepare=False)
    assert checks_only.out_dir is None and checks_only.data is None and checks == {"data": 1, "memory": 1}
    with pytest.raises(ValueError, match="only checks its inputs"):
        train_planned(checks_only)
