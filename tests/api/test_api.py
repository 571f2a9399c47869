"""``import voxanon``: the public facade loads nothing heavy, every public name resolves, ``voxanon.metrics`` is the
evaluation's own code with its checks."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import voxanon
from voxanon.eval import cllr as eval_cllr, eer as eval_eer, similarity as eval_similarity, zebra as eval_zebra
from voxanon.eval.linkability import linkability as eval_linkability

HEAVY = ("numpy", "torch", "torchaudio", "scipy", "soundfile", "yaml", "lhotse", "speechbrain", "ray")


def test_import_voxanon_imports_nothing_heavy():
    probe = textwrap.dedent(f"""
        import json, sys
        import voxanon
        print(json.dumps({{"loaded": sorted(set({list(HEAVY)!r}) & {{m.partition(".")[0] for m in sys.modules}}),
                          "all": voxanon.__all__, "version": voxanon.__version__}}))
    """)
    completed = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    found = json.loads(completed.stdout)
    assert found["loaded"] == []
    assert found["version"] == voxanon.__version__


def test_every_public_name_resolves_and_is_listed():
    for name in voxanon.__all__:
        assert getattr(voxanon, name) is not None, name
    assert set(voxanon.__all__) <= set(dir(voxanon))
    assert voxanon.Stage.__module__.startswith("voxanon.pipeline")
    with pytest.raises(AttributeError, match="no attribute 'load_sistem'"):
        voxanon.load_sistem  # noqa: B018


def test_the_package_is_typed():
    from importlib import resources

    assert resources.files("voxanon").joinpath("py.typed").is_file()


TAR = [2.1, 1.5, 0.3, 0.9, -0.2]
NON = [0.1, -1.0, 0.4, -2.0, -0.5, 0.0]


def test_metrics_are_the_evaluation_functions():
    metrics = voxanon.metrics
    assert metrics.eer is eval_eer.eer and metrics.min_cllr is eval_cllr.min_cllr
    assert metrics.eer(TAR, NON) == eval_eer.eer(np.array(TAR), np.array(NON))
    assert metrics.eer(TAR, NON, variant="kaldi") == eval_eer.kaldi_eer(TAR, NON)
    assert metrics.cllr(TAR, NON) == eval_cllr.cllr(TAR, NON)
    assert metrics.linkability(TAR, NON) == eval_linkability(TAR, NON)
    assert metrics.zebra(TAR, NON) == eval_zebra.zebra(TAR, NON)
    assert set(metrics.__all__) <= set(dir(metrics))


@pytest.mark.parametrize("tar, non, message", [
    ([], NON, "target scores: empty"),
    ([1.0, float("nan")], NON, "target scores: 1 NaN"),
    ([[1.0, 2.0]], NON, "expected a 1-D array"),
    (TAR, ["a", "b"], "non-target scores: not an array of numbers"),
])
def test_metrics_refuse_bad_arrays_naming_them(tar, non, message):
    for metric in (voxanon.metrics.eer, voxanon.metrics.min_cllr, voxanon.metrics.linkability, voxanon.metrics.zebra):
        with pytest.raises(voxanon.metrics.ScoreError, match=message):
            metric(tar, non)


def test_similarity_matrices_from_pair_arrays():
    rng = np.random.default_rng(0)
    utt2spk = {f"s{s}-{u}": f"s{s}" for s in range(3) for u in range(4)}
    utts = sorted(utt2spk)
    pairs = [(a, b) for i, a in enumerate(utts) for b in utts[i + 1:]]
    first, second = [a for a, _ in pairs], [b for _, b in pairs]
    same = np.array([utt2spk[a] == utt2spk[b] for a, b in pairs])
    tables = [voxanon.metrics.pair_scores(first, second, same * shift + rng.normal(size=len(pairs)))
              for shift in (3.0, 0.5, 2.0)]
    matrices = voxanon.metrics.similarity_matrices(*tables, utt2spk, symmetrize_op=True)
    expected = eval_similarity.similarity_matrices(*tables, utt2spk, symmetrize_op=True)
    assert matrices.speakers == ["s0", "s1", "s2"]
    np.testing.assert_array_equal(matrices.oo.matrix, expected.oo.matrix)
    assert matrices.deid == expected.deid and 0 < matrices.deid < 1


@pytest.mark.parametrize("first, second, scores, message", [
    (["a", "b"], ["c"], [1.0, 2.0], "columns of 2, 1 and 2 entries"),
    (["a"], ["b"], [float("inf")], "infinite"),
    ([1], ["b"], [0.5], "first ids must be strings"),
])
def test_pair_scores_are_checked(first, second, scores, message):
    with pytest.raises(voxanon.metrics.ScoreError, match=message):
        voxanon.metrics.pair_scores(first, second, scores)
