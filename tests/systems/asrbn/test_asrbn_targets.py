"""B5/B6 target selection, with the VPC 2024 recipe's semantics (``anonymise_dir.py``'s ``anon_level``):
``random_per_utt``, ``random_per_spk``, ``random_per_spk_uniq`` and ``constant``, seeded per utterance,
speaker or run through :meth:`Utterance.rng`, and recorded in the run journal's record."""
from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace

import numpy as np
import pytest

from voxanon.data_prep.errors import VoxanonError
from voxanon.models.checkpoints.registry import write_model_set
from voxanon.pipeline.systems.asrbn.stages import AsrBnTargetStage
from voxanon.pipeline.systems.stage import Utterance
from voxanon.pipeline.systems.recipes import build_system, load_system_config

TARGETS = sorted(f"{100 + 7 * i}" for i in range(19)) + ["6081"]
SET = "converter"


@pytest.fixture
def converter(voxanon_home):
    """An installed converter's config (the stage reads its speakers only)."""
    write_model_set(SET, {}, {"release": "sa-toolkit", "kind": "converter", "speakers": sorted(TARGETS)},
                    source="test", random=True)
    return sorted(TARGETS)


def corpus(speakers: int, utterances: int = 4):
    utt2spk = {f"s{s:02d}-{u}": f"s{s:02d}" for s in range(speakers) for u in range(utterances)}
    return SimpleNamespace(name="set", utt2spk=utt2spk)


def select(stage: AsrBnTargetStage, data, seed: int = 0, order=None) -> dict[str, str]:
    """Each utterance's target, the utterances taken in ``order`` (default: sorted)."""
    chosen = {}
    for utt in order or sorted(data.utt2spk):
        utterance = Utterance.create(utt, data.utt2spk[utt], None, np.zeros(1600, np.float32), 16000, seed, "b5")
        stage.process(utterance)
        assert stage._target_list()[utterance.features["target"]] == utterance.record["target_speaker"]
        chosen[utt] = utterance.record["target_speaker"]
    return chosen


def prepared(selection: str, data, tmp_path, **options) -> AsrBnTargetStage:
    stage = AsrBnTargetStage(models=SET, selection=selection, **options)
    return AsrBnTargetStage(models=SET, selection=selection, **{**options, **stage.prepare_set(data, tmp_path)})


def by_speaker(data, chosen: dict[str, str]) -> dict[str, set[str]]:
    targets = defaultdict(set)
    for utt, target in chosen.items():
        targets[data.utt2spk[utt]].add(target)
    return targets


def test_random_per_utt_draws_for_every_utterance(converter, tmp_path):
    data = corpus(10, 12)
    chosen = select(prepared("random_per_utt", data, tmp_path), data)
    assert set(chosen.values()) <= set(converter)
    assert len(set(chosen.values())) >= 15  # 120 draws over 20 targets
    assert all(len(targets) > 1 for targets in by_speaker(data, chosen).values())  # not one per speaker
    assert select(prepared("random_per_utt", data, tmp_path), data) == chosen  # seeded by the utterance
    assert select(prepared("random_per_utt", data, tmp_path), data, seed=1) != chosen


def test_random_per_spk_draws_once_per_speaker_with_repeats_allowed(converter, tmp_path):
    data = corpus(30)  # more speakers than targets: some must share one
    stage = prepared("random_per_spk", data, tmp_path)
    chosen = select(stage, data)
    targets = by_speaker(data, chosen)
    assert all(len(t) == 1 for t in targets.values())
    assert len({next(iter(t)) for t in targets.values()}) < 30
    shuffled = sorted(data.utt2spk, key=lambda utt: utt[::-1])
    assert select(prepared("random_per_spk", data, tmp_path), data, order=shuffled) == chosen


def test_random_per_spk_uniq_gives_each_speaker_its_own_target(converter, tmp_path):
    data = corpus(20)  # as many speakers as targets: a one-to-one assignment
    chosen = select(prepared("random_per_spk_uniq", data, tmp_path), data)
    targets = by_speaker(data, chosen)
    assert all(len(t) == 1 for t in targets.values())
    assert sorted(next(iter(t)) for t in targets.values()) == converter
    # The same whatever order the utterances come in, and whichever process (a fresh stage) takes them.
    reversed_order = sorted(data.utt2spk, reverse=True)
    assert select(prepared("random_per_spk_uniq", data, tmp_path), data, order=reversed_order) == chosen
    assert select(prepared("random_per_spk_uniq", data, tmp_path), data, seed=5) != chosen
    with pytest.raises(VoxanonError, match=r"21 speakers and model set 'converter' 20 targets"):
        AsrBnTargetStage(models=SET, selection="random_per_spk_uniq").prepare_set(corpus(21), tmp_path)


def test_constant_target_is_the_recipes_6081(converter, tmp_path):
    data = corpus(3)
    assert set(select(prepared("constant", data, tmp_path), data).values()) == {"6081"}
    assert set(select(prepared("constant", data, tmp_path, constant="107"), data).values()) == {"107"}
    with pytest.raises(VoxanonError, match=r"asrbn_target.constant '1234' is not one of"):
        AsrBnTargetStage(models=SET, selection="constant", constant="1234").prepare_set(data, tmp_path)


def test_recipes_default_to_the_challenges_setting():
    for system in ("b5", "b6"):
        stage = build_system(load_system_config(system)).stages[0]
        assert (stage.name, stage.selection, stage.constant) == ("asrbn_target", "random_per_utt", "6081")
    with pytest.raises(VoxanonError, match="asrbn_target.selection must be one of"):
        build_system(load_system_config("b5", ["asrbn_target.selection=bad_for_evaluation"]))
