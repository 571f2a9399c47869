"""Stage needs, set-level preparation and per-utterance vectors, through the runner."""
from __future__ import annotations

import numpy as np
import pytest
import yaml

from tests.helpers.corpora import make_corpus
from voxanon.data_prep.corpus import read_data_dir
from voxanon.data_prep.errors import VoxanonError
from voxanon.pipeline.systems import recipes
from voxanon.pipeline.runner import anonymise_set
from voxanon.pipeline.systems.stage import Stage


class SpeakerTagStage(Stage):
    """Scales audio by a per-speaker factor computed from the whole set, and keeps a vector."""

    name = "speaker_tag"

    def __init__(self, pool: str = "nowhere", factors: dict | None = None):
        self.pool = pool
        self.factors = factors

    def needs(self):
        return [f"pool:{self.pool}", "spk2gender"]

    def prepare_set(self, data, work_dir, progress=True):
        speakers = sorted(set(data.utt2spk.values()))
        return {"factors": {spk: 0.5 + 0.1 * i for i, spk in enumerate(speakers)}}

    def process(self, utt):
        factor = self.factors[utt.speaker]
        utt.audio = utt.audio * factor
        utt.vectors["tags"] = np.array([factor, len(utt.audio)], dtype=np.float32)


@pytest.fixture
def tag_stage(monkeypatch, tmp_path):
    monkeypatch.setitem(recipes.STAGES, "speaker_tag", SpeakerTagStage)
    monkeypatch.setenv("VOXANON_HOME", str(tmp_path / "home"))
    return {"name": "tag", "stages": ["speaker_tag"], "speaker_tag": {"pool": "small"}}


def test_missing_need_names_file_and_install_command(tag_stage, tmp_path):
    data = read_data_dir(make_corpus(tmp_path, n_speakers=2, n_utts=1).path)
    with pytest.raises(VoxanonError, match=r"pool 'small' is not installed \(.*pool.json missing\).*voxanon pool build"):
        anonymise_set(data, tag_stage, tmp_path / "out", progress=False)
    system = recipes.build_system(tag_stage)
    assert system.needs == ["pool:small", "spk2gender"] and system.needs_gender


def test_prepared_options_reach_the_stage_and_vectors_are_saved(tag_stage, tmp_path):
    pool = tmp_path / "home" / "pools" / "small"
    pool.mkdir(parents=True)
    (pool / "pool.json").write_text("{}")
    data = read_data_dir(make_corpus(tmp_path, n_speakers=2, n_utts=2).path)
    result = anonymise_set(data, tag_stage, tmp_path / "out", progress=False)
    assert result.ok and result.processed == 4
    speakers = sorted(set(data.utt2spk.values()))
    for utt, speaker in data.utt2spk.items():
        saved = np.fromfile(tmp_path / "out" / "tags" / f"{utt}.xvector", dtype="<f4")
        assert saved[0] == pytest.approx(0.5 + 0.1 * speakers.index(speaker))
    manifest = yaml.safe_load((tmp_path / "out" / "run.json").read_text())
    assert set(manifest["config"]["speaker_tag"]["factors"]) == set(speakers)


def test_unknown_need_kind_is_refused(tag_stage, monkeypatch):
    monkeypatch.setattr(SpeakerTagStage, "needs", lambda self: ["licence:gpl"])
    with pytest.raises(VoxanonError, match="unknown need 'licence:gpl'"):
        recipes.missing_needs(recipes.build_system(tag_stage))


def test_a_rebuilt_pool_changes_the_configuration_so_outputs_are_redone(tmp_path, monkeypatch):
    from voxanon.data_prep.vectors import Vectors
    from voxanon.models.speakers.pseudo_speaker import pool_from_speakers, save_pool
    from voxanon.pipeline.runner import prepare_set
    from voxanon.pipeline.systems.recipes import config_hash

    monkeypatch.setenv("VOXANON_HOME", str(tmp_path / "home"))
    data = read_data_dir(make_corpus(tmp_path, n_speakers=2, n_utts=1).path)
    config = {"name": "g", "stages": ["global_speaker"], "global_speaker": {"pool": "p"}}
    hashes = []
    for seed in (0, 1):
        vectors = Vectors(("a", "b"), np.random.default_rng(seed).standard_normal((2, 4)))
        save_pool(tmp_path / "home" / "pools" / "p", pool_from_speakers(vectors, {"a": "f", "b": "m"}), {})
        prepared = prepare_set(recipes.build_system(config), data, tmp_path / "work")
        hashes.append(config_hash(prepared))
        stage = recipes.build_system(prepared).stages[0]
        utt = recipes.build_system(prepared).new_utterance("u", "a", "f", np.zeros(10, dtype=np.float32))
        stage.process(utt)
        assert np.allclose(np.linalg.norm(utt.features["speaker"]), 1.0)
    assert hashes[0] != hashes[1]
