"""SER utility: emotion recognition UAR on original and anonymised IEMOCAP sets, per fold.

As VoicePrivacy 2024 evaluates it: each IEMOCAP set carries ``utt2emo`` (neu, ang, hap,
sad) and ``spk2fold`` (leave one session out); each utterance is classified by the model
of its speaker's fold (``fold_<k>`` model directories, :mod:`voxanon.models.recognisers.ser`), so no
model ever scores a speaker it was trained on. Reported per side (original, anonymised):

* ``uar`` ``all``: UAR over every utterance of the set;
* ``uar`` ``fold <k>`` and ``fold-mean``: UAR within each fold and their mean, the figure
  the challenge's tables give;
* ``class_accuracy`` ``<emotion>``: the recall of each emotion over the set;

plus ``uar_decrease`` (original minus anonymised, ``all``). Values are in percent.
Log-probabilities are cached by audio content and model identity
(:mod:`voxanon.pipeline.feature_cache`), so a rerun computes nothing already done.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from ...data_prep.corpus import DataDir, read_data_dir, read_mapping
from ...data_prep.errors import VoxanonError
from ...eval.results import Result
from ..feature_cache import CachedComputation, ContentCache, FileDigests

SER_SET_FILES = ("utt2emo", "spk2fold")


def _set(data: DataDir | str | os.PathLike, allow_pipes: bool) -> DataDir:
    return data if isinstance(data, DataDir) else read_data_dir(data, allow_pipes=allow_pipes)


def ser_labels(data: DataDir) -> tuple[dict[str, str], dict[str, str]]:
    """``utt2emo`` and utterance -> fold of an IEMOCAP set; a clear error naming the set otherwise."""
    where = data.path if data.path is not None else data.name
    for name in SER_SET_FILES:
        if data.path is None or not (data.path / name).is_file():
            raise VoxanonError(f"{where}: no {name}; an IEMOCAP set for the SER evaluation needs utt2emo and "
                               "spk2fold (make it with 'voxanon prepare iemocap')")
    utt2emo = read_mapping(data.path / "utt2emo", key_kind="utterance")
    spk2fold = read_mapping(data.path / "spk2fold", key_kind="speaker")
    unlabelled = sorted(u for u in data.wav if u not in utt2emo)
    if unlabelled:
        raise VoxanonError(f"{data.path / 'utt2emo'}: no emotion for {len(unlabelled)} utterance(s) of the set, "
                           f"e.g. {unlabelled[0]}")
    no_fold = sorted({data.utt2spk[u] for u in data.wav if data.utt2spk.get(u) not in spk2fold})
    if no_fold:
        raise VoxanonError(f"{data.path / 'spk2fold'}: no fold for speaker(s) {', '.join(no_fold[:5])}")
    return ({u: utt2emo[u] for u in data.wav}, {u: spk2fold[data.utt2spk[u]] for u in data.wav})


class FoldClassifiers:
    """One :class:`~voxanon.models.recognisers.ser.EmotionClassifier` per fold, checked at once, loaded on ``device`` when
    first needed, and the cached computation of its scores (``batch_size`` utterances per call, a progress bar
    unless ``progress`` is false). ``digests`` (path -> sha256, e.g. a
    :class:`~voxanon.pipeline.feature_cache.FileDigests`) names each model in the cache; default: hash its files."""

    def __init__(self, model_dirs: str | os.PathLike | Mapping[str, str | os.PathLike], device: str = "cpu", *,
                 digests=None, batch_size: int = 16, progress: bool = True):
        from ...models.recognisers.ser import SER_FILES, fold_model_dirs
        from ...models.checkpoints.speechbrain_dirs import require_files

        self.dirs = (fold_model_dirs(model_dirs) if isinstance(model_dirs, (str, os.PathLike))
                     else {str(fold): Path(d) for fold, d in model_dirs.items()})
        for fold, directory in self.dirs.items():
            require_files(directory, SER_FILES, f"SER model (fold {fold})")
        self.device = device
        self.digests = digests if digests is not None else FileDigests(None)
        self.batch_size = batch_size
        self.progress = progress
        self._loaded: dict = {}
        self._computations: dict[str, CachedComputation] = {}

    def check_folds(self, folds: set[str], where: str) -> None:
        missing = sorted(folds - set(self.dirs))
        if missing:
            raise VoxanonError(f"{where}: no SER model for fold(s) {', '.join(missing)} "
                               f"(have {', '.join(sorted(self.dirs)) or 'none'})")

    def classifier(self, fold: str):
        if fold not in self._loaded:
            from ...models.recognisers.ser import EmotionClassifier
            from ..model_service import resolve_device

            self._loaded[fold] = EmotionClassifier(self.dirs[fold], device=resolve_device(self.device))
        return self._loaded[fold]

    def labels(self, fold: str) -> tuple[str, ...]:
        from ...models.recognisers.ser import read_label_encoder

        return read_label_encoder(self.dirs[fold] / "label_encoder.txt")

    def computation(self, fold: str) -> CachedComputation:
        """The fold model's log-probabilities of waves, cached under the model's identity."""
        if fold not in self._computations:
            from ...models.recognisers.ser import model_identity

            self._computations[fold] = CachedComputation(
                tag=f"ser-{model_identity(self.dirs[fold], self.digests)[:20]}", batch_size=self.batch_size,
                progress=self.progress,
                compute=lambda waves: list(self.classifier(fold).log_probabilities(waves, max_batch=len(waves))))
        return self._computations[fold]

    @property
    def computed(self) -> int:
        """Scores computed so far (not served from the cache), every fold."""
        return sum(computation.computed for computation in self._computations.values())


def _predictions(data: DataDir, folds: dict[str, str], classifiers: FoldClassifiers, cache: ContentCache,
                 failures: dict[str, str], prefix: str) -> dict[str, str]:
    predicted: dict[str, str] = {}
    for fold in sorted(set(folds.values())):
        utts = [u for u in sorted(data.wav) if folds[u] == fold]
        computation = classifiers.computation(fold)
        scores = computation.run({u: data.audio_path(u) for u in utts}, cache, f"{prefix} SER fold {fold}")
        failures.update(computation.take_failures(f"{prefix}:"))
        labels = classifiers.labels(fold)
        predicted.update({u: labels[int(np.argmax(s))] for u, s in scores.items()})
    return predicted


def _side_results(set_name: str, label: str, emotions: dict[str, str], folds: dict[str, str],
                  predicted: dict[str, str]) -> tuple[list[Result], float | None]:
    from ...eval.uar import unweighted_average_recall

    scored = sorted(predicted)
    if not scored:
        return [], None
    overall = unweighted_average_recall([emotions[u] for u in scored], [predicted[u] for u in scored])
    rows = [Result(set_name, label, "ser", "uar", "all", 100.0 * overall.uar, "%")]
    fold_uars = []
    for fold in sorted(set(folds[u] for u in scored)):
        utts = [u for u in scored if folds[u] == fold]
        value = 100.0 * unweighted_average_recall([emotions[u] for u in utts], [predicted[u] for u in utts]).uar
        fold_uars.append(value)
        rows.append(Result(set_name, label, "ser", "uar", f"fold {fold}", value, "%"))
    rows.append(Result(set_name, label, "ser", "uar", "fold-mean", float(np.mean(fold_uars)), "%"))
    rows += [Result(set_name, label, "ser", "class_accuracy", emotion, 100.0 * overall.recall[emotion], "%")
             for emotion in sorted(overall.recall) if overall.support[emotion]]
    rows.append(Result(set_name, label, "ser", "n_utterances", "", float(len(scored)), ""))
    return rows, 100.0 * overall.uar


def ser_results(original_set: DataDir | str | os.PathLike, anonymised_set: DataDir | str | os.PathLike | None,
                model_dirs: str | os.PathLike | Mapping[str, str | os.PathLike], *, system: str,
                cache: ContentCache | None = None, device: str = "cpu", allow_pipes: bool = False,
                failures: dict[str, str] | None = None, classifiers: FoldClassifiers | None = None) -> list[Result]:
    """UAR rows for one IEMOCAP set, original and (when given) anonymised, every utterance by its fold's model.

    ``model_dirs``: a folder of ``fold_<k>`` model directories, or fold -> directory.
    Utterances whose audio cannot be read go to ``failures`` (``<set>:<side>:<utt>`` -> message)
    and out of the scores; nothing else is left out. ``classifiers`` lets several sets share
    loaded models (default: this folder's, on ``device``).
    """
    original = _set(original_set, allow_pipes)
    emotions, folds = ser_labels(original)
    sides = {"o": original}
    if anonymised_set is not None:
        anonymised = _set(anonymised_set, allow_pipes)
        anon_emotions, anon_folds = ser_labels(anonymised)
        differing = sorted(u for u in anon_emotions if emotions.get(u, anon_emotions[u]) != anon_emotions[u]
                           or folds.get(u, anon_folds[u]) != anon_folds[u])
        if differing:
            raise VoxanonError(f"{anonymised.path}: utt2emo/spk2fold disagree with {original.path} "
                               f"for {len(differing)} utterance(s), e.g. {differing[0]}")
        emotions, folds = {**anon_emotions, **emotions}, {**anon_folds, **folds}
        sides["a"] = anonymised
    classifiers = classifiers or FoldClassifiers(model_dirs, device=device)
    for data in sides.values():
        classifiers.check_folds(set(folds[u] for u in data.wav), str(data.path or data.name))
    for fold in sorted(set(folds.values())):
        unknown = sorted(set(emotions[u] for u in folds if folds[u] == fold) - set(classifiers.labels(fold)))
        if unknown:
            raise VoxanonError(f"{original.path / 'utt2emo'}: emotion(s) {', '.join(unknown)} are not classes of "
                               f"the fold {fold} model ({', '.join(classifiers.labels(fold))})")
    cache = cache if cache is not None else ContentCache(None)
    failures = failures if failures is not None else {}
    rows: list[Result] = []
    uars: dict[str, float] = {}
    for side, data in sides.items():
        predicted = _predictions(data, folds, classifiers, cache, failures, f"{original.name}:{side}")
        side_rows, uar = _side_results(original.name, "original" if side == "o" else system, emotions, folds,
                                       predicted)
        rows += side_rows
        if uar is not None:
            uars[side] = uar
    if "o" in uars and "a" in uars:
        rows.append(Result(original.name, system, "ser", "uar_decrease", "all", uars["o"] - uars["a"], "%"))
    return rows
