"""B1 pseudo-speaker selection against hand-built pools, the pool folder format, and the stages."""
from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.spatial.distance

from voxanon.data_prep.vectors import Vectors, write_vectors
from voxanon.models.speakers.pseudo_speaker import (POOL_MANIFEST, PoolError, PseudoSpeakerSelector, SelectionSettings,
                                                    SpeakerPool, cosine_affinity, load_pool, pool_from_speakers,
                                                    pool_from_utterances, save_pool)
from voxanon.pipeline.systems.ssl_sas.pseudo_speaker import GlobalSpeakerStage, PseudoSpeakerStage
from voxanon.pipeline.systems.stage import Utterance
from voxanon.pipeline.systems.recipes import STAGES

DIM = 8
N_PER_SEX = 300


def angle_pool(seed: int = 0) -> tuple[SpeakerPool, np.ndarray]:
    """300 female speakers at known angles from e1 (f000 nearest ... f299 farthest), random norms, and
    300 male speakers pointing exactly away from e1 (farther than any female one)."""
    rng = np.random.default_rng(seed)
    ids, rows, sex = [], [], {}
    for i in range(N_PER_SEX):
        theta = np.pi * (i + 0.5) / (N_PER_SEX + 1)
        vector = np.zeros(DIM)
        vector[0], vector[1] = np.cos(theta), np.sin(theta)
        ids.append(f"f{i:03d}")
        rows.append(vector * rng.uniform(0.5, 3.0))
        sex[ids[-1]] = "f"
    for i in range(N_PER_SEX):
        vector = -np.eye(DIM)[0] * rng.uniform(0.5, 3.0) + 1e-3 * rng.standard_normal(DIM)
        ids.append(f"m{i:03d}")
        rows.append(vector)
        sex[ids[-1]] = "m"
    speakers = Vectors(tuple(ids), np.stack(rows))
    return pool_from_speakers(speakers, sex), np.eye(DIM)[0] * 2.0


def test_cosine_affinity_is_minus_scipy_cosine_distance():
    rng = np.random.default_rng(1)
    source, pool = rng.standard_normal(5), rng.standard_normal((7, 5))
    expected = [-scipy.spatial.distance.cosine(source, row) for row in pool]
    np.testing.assert_allclose(cosine_affinity(source, pool), expected, atol=1e-12)


def test_farthest_world_is_the_200_least_similar_same_sex_speakers_and_100_distinct_are_averaged():
    pool, source = angle_pool()
    selector = PseudoSpeakerSelector(pool, SelectionSettings())
    world = selector.world(source, "f")
    assert world == tuple(f"f{i:03d}" for i in range(299, 99, -1))
    selection = selector.select(source, "f", np.random.default_rng(5))
    assert len(selection.chosen) == len(set(selection.chosen)) == 100
    assert set(selection.chosen) <= set(world)
    expected = np.mean([pool.speakers.matrix[pool.speakers.ids.index(spk)] for spk in selection.chosen], axis=0)
    np.testing.assert_allclose(selection.vector, expected, atol=1e-12)
    # The draw is the reference's: rng.choice(world, region, replace=False) over the sorted world.
    picks = np.random.default_rng(5).choice(200, 100, replace=False)
    assert selection.chosen == tuple(world[i] for i in picks)


def test_sex_filter_cross_and_nearest():
    pool, source = angle_pool()
    cross = PseudoSpeakerSelector(pool, SelectionSettings(gender="cross"))
    assert cross.world(source, "m") == tuple(f"f{i:03d}" for i in range(299, 99, -1))
    assert all(spk.startswith("m") for spk in cross.world(source, "f"))
    same = PseudoSpeakerSelector(pool, SelectionSettings())
    assert all(spk.startswith("m") for spk in same.world(source, "M"))
    nearest = PseudoSpeakerSelector(pool, SelectionSettings(proximity="nearest"))
    assert nearest.world(source, "f") == tuple(f"f{i:03d}" for i in range(200))


def test_too_few_pool_speakers_names_the_counts():
    pool, source = angle_pool()
    selector = PseudoSpeakerSelector(pool, SelectionSettings(world=301, region=100))
    with pytest.raises(PoolError, match=r"300 speaker\(s\) of sex 'f'.*world of 301"):
        selector.world(source, "f")
    with pytest.raises(ValueError, match="region <= world"):
        SelectionSettings(world=50, region=100)
    with pytest.raises(ValueError, match="affinity"):
        SelectionSettings(affinity="euclid")


def clustered_utterances(n_speakers: int = 24, n_utts: int = 6, dim: int = 6, seed: int = 0):
    rng = np.random.default_rng(seed)
    means = rng.standard_normal((n_speakers, dim)) * 3.0
    ids, rows, utt2spk = [], [], {}
    for s in range(n_speakers):
        for u in range(n_utts):
            utt = f"s{s:02d}-{u}"
            ids.append(utt)
            rows.append(means[s] + 0.5 * rng.standard_normal(dim))
            utt2spk[utt] = f"s{s:02d}"
    sex = {f"s{s:02d}": "fm"[s % 2] for s in range(n_speakers)}
    return Vectors(tuple(ids), np.stack(rows)), utt2spk, sex


def test_plda_affinity_puts_a_planted_near_duplicate_first_for_nearest():
    utterances, utt2spk, sex = clustered_utterances()
    pool = pool_from_utterances(utterances, utt2spk, sex)
    target = pool.speakers.ids.index("s06")
    source = pool.speakers.matrix[target] + 0.01
    selector = PseudoSpeakerSelector(pool, SelectionSettings(affinity="plda", proximity="nearest", world=5,
                                                             region=2, plda_rank=4))
    assert selector.world(source, "f")[0] == "s06"
    farthest = PseudoSpeakerSelector(pool, SelectionSettings(affinity="plda", world=12, region=2, plda_rank=4))
    assert farthest.world(source, "f")[-1] == "s06"


def test_plda_on_a_speaker_level_or_too_small_pool_is_a_clear_error():
    pool, _ = angle_pool()
    with pytest.raises(PoolError, match="speaker-level vectors only.*affinity cosine"):
        PseudoSpeakerSelector(pool, SelectionSettings(affinity="plda"))
    utterances, utt2spk, sex = clustered_utterances(n_speakers=4, n_utts=2)
    with pytest.raises(PoolError, match=r"6 within-speaker degrees of freedom.*8 utterance vectors of 4 speakers \(4\)"):
        PseudoSpeakerSelector(pool_from_utterances(utterances, utt2spk, sex),
                              SelectionSettings(affinity="plda", world=2, region=1))


def test_pool_from_utterances_means_and_balanced_global_by_hand():
    utterances, utt2spk, sex = clustered_utterances(n_speakers=5, n_utts=3)
    # Unbalanced: drop utterances so speakers and sexes weigh differently in a pooled mean.
    keep = [u for u in utterances.ids if not (u.startswith("s00") and u.endswith(("1", "2")))]
    utterances = utterances.select(keep)
    pool = pool_from_utterances(utterances, utt2spk, sex)
    for spk in pool.speakers.ids:
        rows = [i for i, u in enumerate(utterances.ids) if utt2spk[u] == spk]
        np.testing.assert_allclose(pool.speakers.select([spk]).matrix[0], utterances.matrix[rows].mean(axis=0))
    unit = utterances.matrix / np.linalg.norm(utterances.matrix, axis=1, keepdims=True)
    by_speaker = {spk: unit[[i for i, u in enumerate(utterances.ids) if utt2spk[u] == spk]].mean(axis=0)
                  for spk in sorted(set(utt2spk.values()))}
    by_sex = [np.mean([v for spk, v in by_speaker.items() if sex[spk] == s], axis=0) for s in "fm"]
    expected = (by_sex[0] + by_sex[1]) / 2
    np.testing.assert_allclose(pool.global_vector, expected / np.linalg.norm(expected), atol=1e-12)
    pooled = unit.mean(axis=0)
    assert not np.allclose(pool.global_vector, pooled / np.linalg.norm(pooled), atol=1e-3)


def test_pool_folder_round_trip_manifest_last_and_checksums(tmp_path):
    utterances, utt2spk, sex = clustered_utterances(n_speakers=4, n_utts=2)
    pool = pool_from_utterances(utterances, utt2spk, sex)
    folder = save_pool(tmp_path / "p", pool, {"name": "p"})
    manifest = folder / POOL_MANIFEST
    assert all(manifest.stat().st_mtime_ns >= f.stat().st_mtime_ns for f in folder.iterdir())
    record = json.loads(manifest.read_text())
    assert record["speakers_per_sex"] == {"f": 2, "m": 2} and record["utterances"] == 8 and record["dim"] == 6
    loaded = load_pool(folder)
    np.testing.assert_allclose(loaded.speakers.matrix, pool.speakers.matrix, atol=1e-6)
    assert loaded.utterances is not None and load_pool(folder, with_utterances=False).utterances is None
    (folder / "global.npy").write_bytes((folder / "global.npy").read_bytes()[:-4] + b"\0\0\0\0")
    with pytest.raises(PoolError, match="global.npy does not match its checksum"):
        load_pool(folder)
    manifest.unlink()
    with pytest.raises(PoolError, match="pool.json missing.*voxanon pool build"):
        load_pool(folder)


@pytest.fixture
def pool_home(tmp_path, monkeypatch):
    """A hand-built pool installed as 'angles' under a temporary VOXANON_HOME, and a source-vector file."""
    home = tmp_path / "home"
    monkeypatch.setenv("VOXANON_HOME", str(home))
    pool, source = angle_pool()
    save_pool(home / "pools" / "angles", pool, {"name": "angles"})
    sources = tmp_path / "sources.npy"
    write_vectors(sources, Vectors(("alice", "bob"), np.stack([source, -source + 0.1])))
    return pool, sources


def utterance(utt_id: str, speaker: str, gender: str | None) -> Utterance:
    return Utterance.create(utt_id, speaker, gender, np.zeros(16000, np.float32), 16000, run_seed=0, system="b1")


def run_stage(stage, utts):
    stage.process_batch(utts)
    return [u.features["speaker"] for u in utts]


def test_stage_speaker_level_shares_the_vector_and_utterance_level_redraws(pool_home):
    pool, sources = pool_home
    speaker_level = PseudoSpeakerStage(pool="angles", source_vectors=str(sources))
    utts = [utterance(f"alice-{i}", "alice", "f") for i in range(3)]
    vectors = run_stage(speaker_level, utts)
    assert all(np.array_equal(vectors[0], v) for v in vectors[1:])
    assert np.array_equal(utts[0].vectors["pseudo_xvectors"], vectors[0]) and vectors[0].dtype == np.float32
    record = utts[0].record["pseudo_speaker"]
    assert record["level"] == "speaker" and len(record["chosen"]) == 100
    assert set(record["chosen"]) <= {f"f{i:03d}" for i in range(100, 300)}
    utterance_level = PseudoSpeakerStage(pool="angles", level="utterance", source_vectors=str(sources))
    redrawn = run_stage(utterance_level, [utterance(f"alice-{i}", "alice", "f") for i in range(3)])
    assert not np.array_equal(redrawn[0], redrawn[1]) and not np.array_equal(redrawn[1], redrawn[2])
    again = run_stage(PseudoSpeakerStage(pool="angles", level="utterance", source_vectors=str(sources)),
                      [utterance(f"alice-{i}", "alice", "f") for i in range(3)])
    assert all(np.array_equal(a, b) for a, b in zip(redrawn, again))


def test_stage_with_plda_affinity_reads_the_pool_utterance_vectors(tmp_path, monkeypatch):
    monkeypatch.setenv("VOXANON_HOME", str(tmp_path / "home"))
    utterances, utt2spk, sex = clustered_utterances()
    pool = pool_from_utterances(utterances, utt2spk, sex)
    save_pool(tmp_path / "home" / "pools" / "clusters", pool, {"name": "clusters"})
    sources = tmp_path / "sources.npy"
    write_vectors(sources, Vectors(("alice",), pool.speakers.select(["s06"]).matrix + 0.01))
    stage = PseudoSpeakerStage(pool="clusters", affinity="plda", proximity="nearest", world=1, region=1,
                               plda_rank=4, source_vectors=str(sources))
    utt = utterance("alice-0", "alice", "f")
    stage.process(utt)
    assert utt.record["pseudo_speaker"]["chosen"] == ["s06"]
    np.testing.assert_allclose(utt.features["speaker"], pool.speakers.select(["s06"]).matrix[0], atol=1e-5)


def test_stage_errors_name_the_utterance(pool_home):
    _, sources = pool_home
    stage = PseudoSpeakerStage(pool="angles", source_vectors=str(sources))
    with pytest.raises(Exception, match="alice-0: speaker 'alice' has no sex"):
        stage.process(utterance("alice-0", "alice", None))
    with pytest.raises(Exception, match="carol-0: no source vector for speaker 'carol'"):
        stage.process(utterance("carol-0", "carol", "f"))
    with pytest.raises(Exception, match="prepare_set"):
        PseudoSpeakerStage(pool="angles").process(utterance("alice-0", "alice", "f"))
    with pytest.raises(ValueError, match="level"):
        PseudoSpeakerStage(level="corpus")
    assert PseudoSpeakerStage(pool="angles", models="m").needs() == ["checkpoint:m", "pool:angles", "spk2gender"]


def test_global_stage_gives_every_utterance_the_pool_global_vector(pool_home):
    pool, _ = pool_home
    stage = GlobalSpeakerStage(pool="angles")
    assert stage.needs() == ["pool:angles"]
    vectors = run_stage(stage, [utterance("a-0", "a", "f"), utterance("b-0", "b", None)])
    np.testing.assert_allclose(vectors[0], pool.global_vector, atol=1e-6)
    assert np.array_equal(vectors[0], vectors[1])


def test_stages_are_registered():
    assert STAGES["pseudo_speaker"] is PseudoSpeakerStage and STAGES["global_speaker"] is GlobalSpeakerStage
