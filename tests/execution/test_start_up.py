"""A run's start-up before its first utterance: the model sets' checksums beside the F0 tracker's loading, and the
garbage collector held back while the models load (then frozen in the parent of forked workers)."""
from __future__ import annotations

import contextlib
import gc
import threading
import weakref

import pytest
import torch

from voxanon.models.checkpoints import registry
from voxanon.models.checkpoints.registry import ModelNotInstalledError, write_model_set
from voxanon.pipeline import model_service
from voxanon.pipeline.execution import workers
from voxanon.pipeline.systems.recipes import build_system, load_system_config


@pytest.fixture
def tiny_set(voxanon_home, monkeypatch):
    monkeypatch.setattr(model_service, "_loaded", {})
    return write_model_set("tiny", {"content": {"weight": torch.ones(3)}}, {"content": {}}, source="test",
                           random=False)


@pytest.fixture
def collector_restored():
    yield
    gc.unfreeze()
    gc.enable()


def test_sets_are_verified_in_a_thread_while_the_body_runs_and_kept_for_the_models(tiny_set, monkeypatch):
    body_runs, verified_in = threading.Event(), []
    verify = registry.load_model_set

    def load_model_set(name, *args, **kwargs):
        assert body_runs.wait(30), "the check waited for a body that never ran beside it"
        verified_in.append(threading.current_thread())
        return verify(name, *args, **kwargs)

    monkeypatch.setattr(registry, "load_model_set", load_model_set)
    with model_service.model_sets_verified_meanwhile(["tiny", "tiny"]):
        body_runs.set()
    assert len(verified_in) == 1 and verified_in[0] is not threading.current_thread()
    assert model_service.model_set("tiny").name == "tiny"
    assert len(verified_in) == 1  # kept: the models' loading does not check the set again
    with model_service.model_sets_verified_meanwhile(["tiny"]):
        pass
    assert len(verified_in) == 1


def test_a_damaged_set_is_left_for_the_stage_that_loads_it_to_refuse(tiny_set):
    (tiny_set / "content.safetensors").write_bytes(b"damaged")
    with model_service.model_sets_verified_meanwhile(["tiny"]):
        pass
    with pytest.raises(ModelNotInstalledError, match="content.safetensors does not match its manifest checksum"):
        model_service.model_set("tiny")


class _Node:
    def __init__(self):
        self.me = self  # a cycle: only the collector frees it


@pytest.mark.usefixtures("collector_restored")
@pytest.mark.parametrize("before_fork", [False, True])
def test_models_load_without_collections_then_one_collects_their_garbage(monkeypatch, before_fork):
    system = build_system(load_system_config("resynth"))
    model_free = [stage.name for stage in system.stages if stage.model_free]
    calls, garbage = [], []

    @contextlib.contextmanager
    def verified_meanwhile(names):
        calls.append(("verifying", list(names)))
        yield
        calls.append(("verified",))

    def load_stage_models(system, stages, device_models):
        calls.append(([stage.name for stage in stages], gc.isenabled()))
        garbage.append(weakref.ref(_Node()))

    monkeypatch.setattr(workers, "model_sets_verified_meanwhile", verified_meanwhile)
    monkeypatch.setattr(workers, "load_stage_models", load_stage_models)
    gc.collect()
    gc.unfreeze()
    workers.init_worker(system, False, device_models=False, before_fork=before_fork)
    models = [stage.name for stage in system.stages if not stage.model_free]
    assert calls == [("verifying", ["ssl-sas"] * 3), (model_free, False), ("verified",), (models, False)]
    assert gc.isenabled()
    assert all(node() is None for node in garbage)  # collected before anything was frozen
    assert (gc.get_freeze_count() > 0) == before_fork
