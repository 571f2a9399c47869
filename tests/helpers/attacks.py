"""Synthetic speaker vectors for the attack tests: clustered x-vector-like data, an anonymised set, sexed vectors."""
import numpy as np
from scipy.stats import ortho_group

from voxanon.data_prep.corpus import Trial
from voxanon.data_prep.vectors import Vectors, l2_normalise, speaker_means
from voxanon.eval.attacks.inversion import InversionInputs


def synthetic_attack_inputs(seed=0, dim=24, anonymiser=None):
    """Enrolment (train) and trial utterances of 6 F + 6 M speakers, anonymised by a rotation + noise."""
    rng = np.random.default_rng(seed)
    speakers = [f"{sex}{k}" for sex in "fm" for k in range(6)]
    spk2gender = {spk: spk[0] for spk in speakers}
    data = clustered(rng, speakers=len(speakers), per_speaker=14, dim=dim)
    ids = [f"{spk}-u{k:02d}" for spk in speakers for k in range(14)]
    utt2spk = {utt: utt.split("-")[0] for utt in ids}
    anonymiser = ortho_group.rvs(dim, random_state=seed + 7) if anonymiser is None else anonymiser
    anonymised = l2_normalise(data @ anonymiser + 0.02 * rng.normal(size=data.shape))
    train_ids = [utt for utt in ids if int(utt[-2:]) < 8]
    test_ids = [utt for utt in ids if int(utt[-2:]) >= 8]
    orig, anon = Vectors(tuple(ids), data), Vectors(tuple(ids), anonymised)
    trials = [Trial(spk, utt, utt2spk[utt] == spk) for utt in test_ids for spk in speakers
              if spk[0] == utt[0]]
    inputs = InversionInputs(train_orig=orig.select(train_ids), train_anon=anon.select(train_ids),
                             test_orig=orig.select(test_ids), test_anon=anon.select(test_ids),
                             enroll=speaker_means(orig.select(train_ids), utt2spk), trials=trials,
                             utt2spk=utt2spk)
    return inputs, spk2gender


def sexed_vectors(rng, speakers_per_sex, utterances, prefix):
    ids, rows, spk2gender = [], [], {}
    for sex in "fm":
        for k in range(speakers_per_sex):
            speaker = f"{prefix}{sex}{k}"
            spk2gender[speaker] = sex
            centre = rng.normal(size=6) + (1.5 if sex == "f" else -1.5) * np.eye(6)[0]
            for u in range(utterances):
                ids.append(f"{speaker}-{u}")
                rows.append(centre + 0.3 * rng.normal(size=6))
    return Vectors(tuple(ids), np.array(rows)), {utt: utt.split("-")[0] for utt in ids}, spk2gender


def clustered(rng, speakers, per_speaker, dim, offset=3.0):
    """x-vector-like data: a strong common direction plus speaker clusters, unit norm."""
    scales = np.linspace(3.0, 0.5, dim)
    centres = rng.normal(size=(speakers, dim)) * scales + offset * rng.normal(size=dim)
    return l2_normalise(np.repeat(centres, per_speaker, axis=0)
                        + 0.5 * rng.normal(size=(speakers * per_speaker, dim)) * scales)
