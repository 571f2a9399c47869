"""Challenge-style evaluation of an anonymised corpus against its original.

An evaluation set (:mod:`voxanon.pipeline.evaluation.sets`) pairs an enrolment list with a trials
list, for the original and the anonymised speech.

ASV conditions (VoicePrivacy 2020/2022 ``local/main_eval_asv.sh``): o-o (original enrolment and trials), o-a (original
enrolment, anonymised trials: the ignorant attacker) and a-a (anonymised enrolment and
trials: the lazy-informed attacker). Given a :class:`SemiInformed` model (an ASV model
trained on anonymised speech, ``voxanon train asv``), a-a is also scored with it, cosine as
the challenge does: the semi-informed attacker. Every ASV record names its attacker and
model (:data:`voxanon.eval.results.ATTACKERS`). Enrolment is the mean of each speaker's enrolment
utterance embeddings; scores are cosine similarities. Embeddings and transcripts are
cached per audio file content, so reruns only compute what changed.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterable

import numpy as np

from ...data_prep.corpus import read_data_dir
from ...data_prep.errors import VoxanonError
from ...eval.results import ATTACKERS, SEMI_INFORMED, Result
from .attackers import SemiInformed
from .scoring import (cosine_trial_scores, enrolment_vectors, pair_score_table, plda_trial_scores,
                      scored_trial_speakers, speaker_enrolment)
from .sets import EvaluationSet, audio_files, check_anonymised

log = logging.getLogger(__name__)

ASV_CONDITIONS = ("o-o", "o-a", "a-a")


# Scorers whose scores are LLRs; Cllr of any other scorer's raw scores is labelled uncalibrated.
LLR_SCORERS = frozenset({"plda"})


def results_from_metrics(set_name: str, system: str, condition: str, metrics: dict[str, object],
                         eer_variants: Iterable[str], *, scorer: str = "cosine",
                         calibrated_cllr: float | None = None, calibrated_cllr_note: str = "") -> list[Result]:
    """Labelled records from ``compute_metrics`` output (EERs in %, Cllr/D_ECE in bits, worst case in log10).

    The raw-score Cllr has variant ``uncalibrated <scorer>`` unless ``scorer`` gives LLRs;
    ``calibrated_cllr`` (speaker-cross-validated linear calibration) is its own metric, with
    ``calibrated_cllr_note`` (its caveats, or why it is NaN) as the record's note.
    """
    rows = [Result(set_name, system, condition, "eer", v, float(metrics[f"eer_{v}"]), "%") for v in eer_variants]
    raw_variant = "" if scorer in LLR_SCORERS else f"uncalibrated {scorer}"
    if calibrated_cllr is not None:
        rows.append(Result(set_name, system, condition, "cllr_calibrated", "", float(calibrated_cllr), "bits",
                           note=calibrated_cllr_note))
    rows += [
        Result(set_name, system, condition, "cllr", raw_variant, float(metrics["cllr"]), "bits"),
        Result(set_name, system, condition, "min_cllr", "", float(metrics["min_cllr"]), "bits"),
        Result(set_name, system, condition, "linkability", "", float(metrics["linkability"]), ""),
        Result(set_name, system, condition, "zebra_dece", "", float(metrics["zebra_dece"]), "bits"),
        Result(set_name, system, condition, "zebra_worst_case", "", float(metrics["zebra_worst_case"]), "log10"),
        Result(set_name, system, condition, "zebra_tag", "", str(metrics["zebra_tag"]), ""),
        Result(set_name, system, condition, "n_trials", "target", float(metrics["n_target"]), ""),
        Result(set_name, system, condition, "n_trials", "nontarget", float(metrics["n_nontarget"]), ""),
    ]
    return rows



@dataclass
class SetScores:
    """Target/non-target scores of one set and condition, kept for the figures."""

    set_name: str
    system: str
    condition: str
    tar: np.ndarray
    non: np.ndarray


@dataclass
class Evaluation:
    results: list[Result]
    scores: list[SetScores]
    similarity: dict[str, object]     # set name -> SimilarityMatrices
    computed: int                     # embeddings, transcripts and pitch tracks computed (not served from cache)
    remarks: list[str] = field(default_factory=list)   # what was not computed and why, for under the tables



def evaluate_sets(sets: list[EvaluationSet], protocol: dict, system: str, *, embedder, cache,
                  asr=None, allow_missing: bool = False, asv_model: str | None = None,
                  semi_informed: SemiInformed | None = None) -> Evaluation:
    """ASV conditions, similarity matrices and WER of every set, as labelled results.

    ``embedder`` and ``asr`` are :class:`~voxanon.pipeline.feature_cache.CachedComputation`
    objects (``asr`` may be None); ``cache`` their :class:`ContentCache`. ``asv_model`` labels
    the evaluation model in the records (default: the embedder's cache tag); ``semi_informed``
    adds the a-a scores of a model trained on anonymised speech.
    """
    from ...eval.similarity import similarity_matrices
    from ...eval.summary import compute_metrics

    asv = protocol.get("asv", {})
    conditions = asv.get("conditions", list(ASV_CONDITIONS))
    scoring = str(asv.get("scoring", "cosine"))
    plda = _fit_plda(asv, embedder, cache) if scoring == "plda" else None
    eer_variants = asv.get("eer_variants", ["rocch"])
    results: list[Result] = []
    kept: list[SetScores] = []
    matrices: dict[str, object] = {}
    failures: dict[str, str] = {}
    without_text: list[EvaluationSet] = []
    pitch_tracker = _pitch_tracker(embedder.progress) if protocol.get("pitch_correlation") else None
    for evaluation in sets:
        missing = set(check_anonymised(evaluation, allow_missing)) if evaluation.anon_trials is not None else set()
        sides = {"o": (evaluation.enroll, evaluation.trials)}
        if evaluation.anon_trials is not None:
            sides["a"] = (evaluation.anon_enroll, evaluation.anon_trials)
        vectors: dict[str, dict[str, dict]] = {}
        for side, (enroll_dir, trials_dir) in sides.items():
            skip = missing if side == "a" else set()
            enroll = embedder.run(audio_files(enroll_dir, [u for u in evaluation.enroll_utts if u not in skip]),
                                  cache, f"{evaluation.name} {side} enrol")
            tests = embedder.run(audio_files(trials_dir, [u for u in evaluation.test_utts if u not in skip]),
                                 cache, f"{evaluation.name} {side} trials")
            vectors[side] = {"enroll": enroll, "test": tests}
            failures.update(embedder.take_failures(f"{evaluation.name}:{side}:"))
        utt2spk = evaluation.trials.utt2spk | evaluation.enroll.utt2spk
        for condition in conditions:
            enrol_side, test_side = condition[0], condition[-1]
            if enrol_side not in vectors or test_side not in vectors:
                continue
            if plda is None:
                enrolment = speaker_enrolment(vectors[enrol_side]["enroll"], evaluation.enroll_utts, utt2spk)
                tar, non, left_out = cosine_trial_scores(enrolment, vectors[test_side]["test"], evaluation.trials.trials)
            else:
                tar, non, left_out = plda_trial_scores(plda, vectors[enrol_side]["enroll"], evaluation.enroll_utts,
                                                       utt2spk, vectors[test_side]["test"], evaluation.trials.trials)
            if left_out:
                log.warning("%s %s: %d trial(s) left out (no embedding for one side)", evaluation.name,
                            condition, left_out)
            scored_system = "original" if condition == "o-o" else system
            metrics = compute_metrics(tar, non)
            calibrated, caveats = _calibrated_cllr(evaluation, condition, tar, non, vectors[enrol_side]["enroll"],
                                                   vectors[test_side]["test"], utt2spk)
            results += results_from_metrics(evaluation.name, scored_system, condition, metrics, eer_variants,
                                            scorer=scoring, calibrated_cllr=calibrated, calibrated_cllr_note=caveats)
            kept.append(SetScores(evaluation.name, scored_system, condition, tar, non))
        if semi_informed is not None and "a" in vectors:
            found, scores = _semi_informed_results(evaluation, system, semi_informed, cache, missing, utt2spk,
                                                   eer_variants, failures)
            results += found
            kept.append(scores)
        by_condition = {s.condition: s for s in kept if s.set_name == evaluation.name}
        if protocol.get("relative"):
            results += _relative_results(evaluation.name, system, by_condition)
        if protocol.get("adversary_calibration") and evaluation.anon_trials_run2 is not None and "o-a" in by_condition:
            results += _calibration_distortion_results(evaluation, system, embedder, cache, vectors["o"]["enroll"],
                                                       utt2spk, by_condition["o-a"], missing, failures)
        if protocol.get("similarity") and "a" in vectors:
            tests_o, tests_a = vectors["o"]["test"], vectors["a"]["test"]
            found = similarity_matrices(pair_score_table(tests_o, tests_o), pair_score_table(tests_o, tests_a),
                                        pair_score_table(tests_a, tests_a), utt2spk)
            matrices[evaluation.name] = found
            results += [Result(evaluation.name, system, "o-a", "deid", "", 100.0 * found.deid, "%"),
                        Result(evaluation.name, system, "a-a", "gvd", "", found.gvd_db, "dB")]
        if protocol.get("inversion_attack") and "a" in vectors:
            results += _inversion_results(evaluation, system, vectors, utt2spk, protocol["inversion_attack"])
        if protocol.get("sex_attack"):
            results += _sex_results(evaluation, system, vectors, utt2spk, protocol["sex_attack"])
        if pitch_tracker is not None and evaluation.anon_trials is not None:
            results += _pitch_results(evaluation, missing, pitch_tracker, cache, system, failures)
        if asr is not None and evaluation.trials.text:
            results += _wer_results(evaluation, sides, missing, asr, cache, system, failures)
        elif asr is not None:
            without_text.append(evaluation)
    if failures and not allow_missing:
        shown = "\n  ".join(f"{k}: {v}" for k, v in list(failures.items())[:10])
        raise VoxanonError(f"{len(failures)} utterance(s) could not be used:\n  {shown}\n"
                           "fix them, or pass --allow-missing to evaluate without them")
    for key, message in failures.items():
        log.warning("left out %s: %s", key, message)
    results = _attributed(results, asv_model or embedder.tag)
    if asr is not None:
        from ...eval.averages import pooled_asr_results
        results += _attributed(pooled_asr_results(results), asv_model or embedder.tag)
    if protocol.get("weighted_averages"):
        from ...eval.averages import weighted_averages
        results += weighted_averages(results)
    if protocol.get("name") == "vpc2024":
        from ...eval.published import load_published, published_beside
        results += published_beside(results, load_published("vpc2024"))
    computations = [embedder, asr, semi_informed.embedder if semi_informed else None, pitch_tracker]
    return Evaluation(results, kept, matrices, sum(c.computed for c in computations if c is not None),
                      remarks=[_no_transcripts_remark(without_text)] if without_text else [])


def _no_transcripts_remark(sets: list[EvaluationSet]) -> str:
    """Why WER is missing for these sets: their trials have no transcripts."""
    where = ", ".join(f"{s.name} ({s.trials.path / 'text' if s.trials.path else 'no text'})" for s in sets)
    return (f"WER not computed for {len(sets)} set(s) whose trials have no transcripts (the data directory's "
            f"text file is missing): {where}")


# Records derived from speaker embeddings but attacked by no one in particular (voice similarity).
_NO_ATTACKER_METRICS = frozenset({"deid", "gvd"})


def _attributed(results: list[Result], asv_model: str) -> list[Result]:
    """Records with their attacker and model filled in where still empty: the ASV conditions' attacker
    (o-o: none) and the evaluation model; the attribute attacks' embedding model; WER's ASR model."""
    labelled = []
    for r in results:
        if not r.attacker and not r.model:
            if r.condition in ("o-o", *ATTACKERS) and r.metric != "pitch_correlation":
                attacker = "" if r.metric in _NO_ATTACKER_METRICS else ATTACKERS.get(r.condition, "")
                r = replace(r, attacker=attacker, model=asv_model)
            elif r.condition.startswith(("sex-", "inversion-")):
                r = replace(r, model=asv_model)
            elif r.condition == "asr":
                r = replace(r, model=r.variant)
        labelled.append(r)
    return labelled


def _semi_informed_results(evaluation: EvaluationSet, system: str, semi_informed: SemiInformed, cache,
                           missing: set[str], utt2spk: dict[str, str], eer_variants, failures: dict[str, str]
                           ) -> tuple[list[Result], SetScores]:
    """a-a scored with the model trained on anonymised speech (cosine, enrolment = mean embedding)."""
    from ...eval.summary import compute_metrics

    embedder = semi_informed.embedder
    enroll = embedder.run(audio_files(evaluation.anon_enroll, [u for u in evaluation.enroll_utts if u not in missing]),
                          cache, f"{evaluation.name} a enrol ({SEMI_INFORMED})")
    tests = embedder.run(audio_files(evaluation.anon_trials, [u for u in evaluation.test_utts if u not in missing]),
                         cache, f"{evaluation.name} a trials ({SEMI_INFORMED})")
    failures.update(embedder.take_failures(f"{evaluation.name}:a:{SEMI_INFORMED}:"))
    enrolment = speaker_enrolment(enroll, evaluation.enroll_utts, utt2spk)
    tar, non, left_out = cosine_trial_scores(enrolment, tests, evaluation.trials.trials)
    if left_out:
        log.warning("%s a-a %s: %d trial(s) left out (no embedding for one side)", evaluation.name, SEMI_INFORMED,
                    left_out)
    calibrated, caveats = _calibrated_cllr(evaluation, "a-a", tar, non, enroll, tests, utt2spk)
    rows = results_from_metrics(evaluation.name, system, "a-a", compute_metrics(tar, non), eer_variants,
                                calibrated_cllr=calibrated, calibrated_cllr_note=caveats)
    rows = [replace(r, attacker=SEMI_INFORMED, model=semi_informed.model) for r in rows]
    return rows, SetScores(evaluation.name, system, f"a-a {SEMI_INFORMED}", tar, non)



def _calibrated_cllr(evaluation: EvaluationSet, condition: str, tar: np.ndarray, non: np.ndarray,
                     enrol_vectors: dict, test_vectors: dict, utt2spk: dict[str, str]) -> tuple[float, str]:
    """Cllr after linear calibration cross-validated over speakers (the folds deal out speakers, and a
    trial (enrolment speaker, test speaker) is scored by a map fitted on trials that involve neither
    speaker's fold), and its caveats for the tables: fits on separable or few trials. NaN, with the reason
    why it is not estimable, when there are too few speakers for such folds."""
    from ...eval.cllr import calibrated_cllr_with_caveats
    from ...eval.scores import ScoreError

    enrolled = set(enrolment_vectors(enrol_vectors, evaluation.enroll_utts, utt2spk))
    tar_groups, non_groups = scored_trial_speakers(evaluation.trials.trials, enrolled, set(test_vectors), utt2spk)
    if (len(tar_groups), len(non_groups)) != (len(tar), len(non)):
        raise VoxanonError(f"{evaluation.name} {condition}: trial speakers do not match the scored trials")
    try:
        value, calibration = calibrated_cllr_with_caveats(np.concatenate((tar, non)),
                                                          np.arange(len(tar) + len(non)) < len(tar),
                                                          tar_groups + non_groups)
    except ScoreError as error:
        log.warning("%s %s: no calibrated Cllr (%s)", evaluation.name, condition, error)
        return float("nan"), f"not estimable: {error}"
    return value, calibration.caveats()


def _wer_results(evaluation: EvaluationSet, sides: dict, missing: set[str], asr, cache, system: str,
                 failures: dict[str, str]) -> list[Result]:
    from ...eval.wer import word_error_rate

    references = {u: evaluation.trials.text[u] for u in evaluation.test_utts if u in evaluation.trials.text}
    rows = []
    rates = {}
    for side, (_, trials_dir) in sides.items():
        utts = [u for u in references if not (side == "a" and u in missing)]
        hypotheses = asr.run(audio_files(trials_dir, utts), cache, f"{evaluation.name} {side} ASR")
        failures.update(asr.take_failures(f"{evaluation.name}:{side}:"))
        scored = {u: references[u] for u in hypotheses}
        if not scored:
            continue
        wer = word_error_rate(scored, {u: str(h) for u, h in hypotheses.items()})
        label = "original" if side == "o" else system
        rates[side] = wer.wer
        rows += [Result(evaluation.name, label, "asr", "wer", asr.tag, wer.wer, "%"),
                 Result(evaluation.name, label, "asr", "wer_substitutions", asr.tag, float(wer.substitutions), ""),
                 Result(evaluation.name, label, "asr", "wer_deletions", asr.tag, float(wer.deletions), ""),
                 Result(evaluation.name, label, "asr", "wer_insertions", asr.tag, float(wer.insertions), ""),
                 Result(evaluation.name, label, "asr", "wer_reference_words", asr.tag, float(wer.n_reference_words),
                        "")]
    if "o" in rates and "a" in rates:
        rows.append(Result(evaluation.name, system, "asr", "wer_increase", asr.tag, rates["a"] - rates["o"], "%"))
    return rows


def _relative_results(set_name: str, system: str, scores: dict[str, SetScores]) -> list[Result]:
    """Noé et al. 2022, §7.1: DeID-style percentages (OP against OO) and gains in dB (PP against OO)."""
    from ...eval.cllr import min_cllr
    from ...eval.zebra import (dece_deidentification_percent, dece_gain_db, expected_disclosure,
                               min_cllr_deidentification_percent, min_cllr_gain_db)

    if "o-o" not in scores:
        return []
    summary = {c: (expected_disclosure(s.tar, s.non), min_cllr(s.tar, s.non)) for c, s in scores.items()}
    oo_dece, oo_cmin = summary["o-o"]
    rows = []
    if "o-a" in summary:
        rows += [Result(set_name, system, "o-a", "dece_relative", "OP/OO",
                        dece_deidentification_percent(summary["o-a"][0], oo_dece), "%"),
                 Result(set_name, system, "o-a", "min_cllr_relative", "OP/OO",
                        min_cllr_deidentification_percent(summary["o-a"][1], oo_cmin), "%")]
    if "a-a" in summary:
        rows += [Result(set_name, system, "a-a", "dece_gain", "PP/OO", dece_gain_db(summary["a-a"][0], oo_dece), "dB"),
                 Result(set_name, system, "a-a", "min_cllr_gain", "PP/OO",
                        min_cllr_gain_db(summary["a-a"][1], oo_cmin), "dB")]
    return rows


def _calibration_distortion_results(evaluation: EvaluationSet, system: str, embedder, cache,
                                    enrolment_vectors: dict, utt2spk: dict, first_run: SetScores,
                                    missing: set[str], failures: dict[str, str]) -> list[Result]:
    """C_ECE (Noé et al. 2022, §5.3): calibrate run 2's o-a scores with maps fitted on run 1's."""
    from ...eval.zebra import calibration_distortion

    run2 = evaluation.anon_trials_run2
    tests = embedder.run(audio_files(run2, [u for u in evaluation.test_utts if u not in missing]), cache,
                         f"{evaluation.name} a (run 2) trials")
    failures.update(embedder.take_failures(f"{evaluation.name}:a2:"))
    enrolment = speaker_enrolment(enrolment_vectors, evaluation.enroll_utts, utt2spk)
    tar, non, _ = cosine_trial_scores(enrolment, tests, evaluation.trials.trials)
    rows = []
    for method in ("linear", "isotonic"):
        found = calibration_distortion(first_run.tar, first_run.non, tar, non, method=method)
        rows += [Result(evaluation.name, system, "o-a", "cece", method, found.cece_bits, "bits"),
                 Result(evaluation.name, system, "o-a", "cece_cllr", method, found.cllr_bits, "bits")]
    return rows


def _pitch_tracker(progress: bool):
    """Praat pitch tracks (VoicePrivacy settings), cached."""
    from ...models.f0.praat_pitch import praat_f0
    from ..feature_cache import CachedComputation

    return CachedComputation("praat-f0-10ms", lambda waves: [praat_f0(w, 16000) for w in waves], progress=progress)


def _pitch_results(evaluation: EvaluationSet, missing: set[str], tracker, cache, system: str,
                   failures: dict[str, str]) -> list[Result]:
    """rho_F0 between original and anonymised trial utterances."""
    from ...eval.pitch import pitch_correlation_summary

    utts = [u for u in evaluation.test_utts if u not in missing]
    original = tracker.run(audio_files(evaluation.trials, utts), cache, f"{evaluation.name} o F0")
    anonymised = tracker.run(audio_files(evaluation.anon_trials, utts), cache, f"{evaluation.name} a F0")
    failures.update(tracker.take_failures(f"{evaluation.name}:f0:"))
    pairs = [(original[u], anonymised[u]) for u in utts if u in original and u in anonymised]
    if not pairs:
        return []
    mean, std = pitch_correlation_summary(pairs)
    return [Result(evaluation.name, system, "o-a", "pitch_correlation", "mean", mean, ""),
            Result(evaluation.name, system, "o-a", "pitch_correlation", "std", std, "")]


def _as_vectors(vectors: dict[str, np.ndarray]):
    from ...data_prep.vectors import Vectors

    ids = sorted(vectors)
    return Vectors(tuple(ids), np.stack([np.asarray(vectors[u], dtype=np.float64) for u in ids]))


def _inversion_results(evaluation: EvaluationSet, system: str, vectors: dict, utt2spk: dict,
                       settings: dict) -> list[Result]:
    """The Procrustes inversion attack (Champion et al. 2021): rotation learnt on enrolment pairs, then ASV."""
    from ...data_prep.vectors import speaker_means
    from ...eval.attacks.inversion import InversionInputs, inversion_attack

    settings = settings if isinstance(settings, dict) else {}
    paired = sorted(set(vectors["o"]["enroll"]) & set(vectors["a"]["enroll"]))
    tested = sorted(set(vectors["o"]["test"]) & set(vectors["a"]["test"]))
    inputs = InversionInputs(
        train_orig=_as_vectors({u: vectors["o"]["enroll"][u] for u in paired}),
        train_anon=_as_vectors({u: vectors["a"]["enroll"][u] for u in paired}),
        test_orig=_as_vectors({u: vectors["o"]["test"][u] for u in tested}),
        test_anon=_as_vectors({u: vectors["a"]["test"][u] for u in tested}),
        enroll=speaker_means(_as_vectors({u: vectors["o"]["enroll"][u] for u in paired}), utt2spk),
        trials=[t for t in evaluation.trials.trials if t.test_utt in set(tested)], utt2spk=utt2spk)
    method = settings.get("method", "procrustes")
    found = inversion_attack(inputs, method, pca_dim=settings.get("pca"))
    condition = f"inversion-{method}"
    return [Result(evaluation.name, system, condition, "top1_speaker", "test", found.test_top1_speaker, "%"),
            Result(evaluation.name, system, condition, "top1_segment", "test", found.test_top1_segment, "%"),
            Result(evaluation.name, system, condition, "eer", "rocch", found.eer_rocch, "%"),
            Result(evaluation.name, system, condition, "min_cllr", "", found.min_cllr, "bits"),
            Result(evaluation.name, system, condition, "linkability", "", found.linkability, "")]


def _sex_results(evaluation: EvaluationSet, system: str, vectors: dict, utt2spk: dict, settings: dict) -> list[Result]:
    """Sex-attribute attacks on the speaker embeddings, tested on protected (or, for reference, original) speech.

    Speakers are split into two folds (sha256 order, so deterministic); a classifier trained
    on one fold's utterances is tested on the other fold's, and the LLRs of both folds are
    pooled. Ignorant attackers train on original speech, informed ones on protected speech.
    """
    import hashlib

    from ...eval.attacks.sex import SexAttackError, assess_sex_llrs, train_sex_classifier

    settings = settings if isinstance(settings, dict) else {}
    kind = settings.get("classifier", "logistic")
    genders = evaluation.trials.spk2gender | evaluation.enroll.spk2gender
    speakers = sorted({utt2spk[u] for side in vectors.values() for part in side.values() for u in part
                       if utt2spk.get(u) in genders}, key=lambda s: hashlib.sha256(s.encode()).hexdigest())
    folds = (set(speakers[0::2]), set(speakers[1::2]))

    def pooled(side: str) -> dict[str, np.ndarray]:
        found = {}
        for part in vectors[side].values():
            found.update({u: v for u, v in part.items() if utt2spk.get(u) in genders})
        return found

    plans = [("sex-original", "o", "o")]
    if "a" in vectors:
        plans = [("sex-ignorant", "o", "a"), ("sex-informed", "a", "a")] + plans
    rows = []
    for condition, train_side, test_side in plans:
        train, test = pooled(train_side), pooled(test_side)
        llrs, labels = [], []
        for train_fold, test_fold in (folds, folds[::-1]):
            train_ids = [u for u in sorted(train) if utt2spk[u] in train_fold]
            test_ids = [u for u in sorted(test) if utt2spk[u] in test_fold]
            try:
                # The outer folds are speaker-disjoint; the classifier's inner calibration folds are
                # not (a fold of a small set may hold one sex only), which affects the actual Cllr only.
                classifier = train_sex_classifier(np.stack([train[u] for u in train_ids]),
                                                  [genders[utt2spk[u]] == "f" for u in train_ids], kind)
            except (SexAttackError, ValueError) as error:
                log.warning("%s %s: no sex attack (%s)", evaluation.name, condition, error)
                return rows
            llrs += list(classifier.llr(np.stack([test[u] for u in test_ids])))
            labels += [genders[utt2spk[u]] == "f" for u in test_ids]
        found = assess_sex_llrs(llrs, labels)
        label = "original" if test_side == "o" else system
        rows += [Result(evaluation.name, label, condition, "eer", "rocch", found.eer, "%"),
                 Result(evaluation.name, label, condition, "zebra_dece", "", found.dece, "bits"),
                 Result(evaluation.name, label, condition, "cllr", "", found.cllr, "bits"),
                 Result(evaluation.name, label, condition, "min_cllr", "", found.min_cllr, "bits")]
    return rows


def _fit_plda(asv: dict, embedder, cache):
    """PLDA trained on the embeddings of ``asv.plda_train`` (a data directory of other speakers)."""
    from ...eval.plda import fit_plda

    train_dir = asv.get("plda_train")
    if not train_dir:
        raise VoxanonError("asv.scoring=plda needs asv.plda_train=DIR, a data directory to train the PLDA on")
    data = read_data_dir(Path(train_dir))
    vectors = embedder.run({u: data.audio_path(u) for u in data.utterances}, cache, f"{data.name} PLDA training")
    if embedder.failures:
        raise VoxanonError(f"PLDA training set {train_dir}: {len(embedder.failures)} utterance(s) unusable, e.g. "
                           f"{next(iter(embedder.failures.items()))}")
    utts = sorted(vectors)
    try:
        return fit_plda(np.stack([vectors[u] for u in utts]), [data.utt2spk[u] for u in utts],
                        dim=int(asv.get("plda_dim", 100)))
    except ValueError as error:
        raise VoxanonError(f"PLDA training set {train_dir}: {error}") from None

