"""Several systems on the same sets: each anonymises them (reusing finished work), then one merged evaluation."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ...data_prep.corpus import DataDir, read_data_dir
from ...data_prep.errors import VoxanonError
from .computations import anonymisation_device, make_embedder, make_transcriber, run_computations_on
from ..systems.recipes import build_system, load_system_config

if TYPE_CHECKING:
    from .evaluate import Evaluation
    from .sets import EvaluationSet


def anonymise_for_evaluation(sets: list[EvaluationSet], system: str, out: Path, workers: int,
                             second_run: bool = False, *, backend=None, batch_size: int | None = None,
                             device: str = "cpu", progress: bool = True) -> list[EvaluationSet]:
    """Each set's enrolment and trial directories anonymised with ``system`` (reusing finished work), its models
    on ``device``.

    With ``second_run`` a stochastic system also anonymises the trials again with the next
    seed (``<set>_<system>_run2``), for the adversary-calibration extension.
    """
    from .sets import EvaluationSet
    from ..api import anonymise

    overrides = [f"batch_size={batch_size}"] if batch_size is not None else []
    device = anonymisation_device(device, backend)
    config = load_system_config(system, overrides, device=device, keep_placed=True)
    done: dict[tuple[str, str], DataDir] = {}

    def anonymised(data: DataDir, run_config: dict, suffix: str) -> DataDir:
        key = (str(data.path), suffix)
        if key not in done:
            result = anonymise(data, run_config, out / f"{data.name}_{system}{suffix}", workers=workers,
                               backend=backend, progress=progress)
            if not result.ok:
                raise VoxanonError(f"{system}: {len(result.failures)} utterance(s) of {data.name} failed; "
                                   f"see {result.out_dir / 'failures.tsv'}")
            done[key] = read_data_dir(result.out_dir)
        return done[key]

    second = (load_system_config(system, [f"seed={int(config.get('seed', 0)) + 1}"] + overrides, device=device,
                                 keep_placed=True)
              if second_run and build_system(config).stochastic else None)
    return [EvaluationSet(s.name, s.enroll, s.trials, anonymised(s.enroll, config, ""), anonymised(s.trials, config, ""),
                          anonymised(s.trials, second, "_run2") if second else None) for s in sets]


def compare(sets: list[EvaluationSet], systems: list[str], protocol: dict, out: Path, workers: int, cache,
            allow_missing: bool, *, backend=None, batch_size: int | None = None,
            trust_model_code: bool = False, device: str = "cpu", progress: bool = True) -> Evaluation:
    """One evaluation per system, merged: the o-o (original) rows once, every system's own rows.

    ``backend`` (None: local) runs the anonymisation and the embedding and transcription batches; every model
    runs on ``device``; ``progress``: the anonymisation's and the evaluation's progress bars.
    """
    from .evaluate import Evaluation, evaluate_sets
    from ..feature_cache import FileDigests

    embedder = make_embedder(protocol.get("asv", {}), device=device, digest=FileDigests(cache.root))
    transcriber = make_transcriber(protocol.get("asr"), trust_model_code, device=device,
                                   decoding=protocol.get("asr_decoding"))
    run_computations_on(backend, batch_size, embedder, transcriber, progress=progress)
    # Every system is anonymised before any evaluation model loads: the runner forks its workers from
    # this process, which must not hold the evaluation models' threads by then.
    anonymised = {system: anonymise_for_evaluation(sets, system, out / "anon", workers,
                                                   second_run=bool(protocol.get("adversary_calibration")),
                                                   backend=backend, batch_size=batch_size, device=device,
                                                   progress=progress)
                  for system in systems}
    merged = Evaluation([], [], {}, 0)
    for system in systems:
        found = evaluate_sets(anonymised[system], protocol, system, embedder=embedder, cache=cache, asr=transcriber,
                              allow_missing=allow_missing)
        known = {(r.set, r.system, r.condition, r.metric, r.variant, r.attacker, r.model) for r in merged.results}
        merged.results += [r for r in found.results
                           if (r.set, r.system, r.condition, r.metric, r.variant, r.attacker, r.model) not in known]
        seen = {(s.set_name, s.system, s.condition) for s in merged.scores}
        merged.scores += [s for s in found.scores if (s.set_name, s.system, s.condition) not in seen]
        merged.similarity.update({f"{name} {system}": m for name, m in found.similarity.items()})
        merged.computed += found.computed
        merged.remarks += [remark for remark in found.remarks if remark not in merged.remarks]
    return merged
