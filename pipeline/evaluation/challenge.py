"""``voxanon challenge``: the whole VoicePrivacy 2024 evaluation of one system, stage by stage, cached.

Stages, in order (every one resumable, and skipped when its output is already there):

1. anonymise the training set(s) with the system (the runner resumes: finished utterances are
   kept, so a rerun anonymises nothing);
2. train the semi-informed attacker, ``ASV_eval^anon`` (:func:`voxanon.pipeline.training.asv.train_asv`)
   on the anonymised training sets, in ``<out>/attacker/<system>-<identity>``, the identity being a
   hash of the training settings and the anonymised sets' identities (name, size, anonymisation
   system and configuration hash from ``run.json``). A model whose ``training.json`` says it is
   complete for these settings and data is used as it is; an unfinished one resumes;
3. anonymise the evaluation sets' enrolment and trial directories (and the IEMOCAP sets, when given);
4. evaluate: ASV_eval (the protocol's encoder) on o-o, o-a (ignorant) and a-a (lazy-informed),
   ASV_eval^anon on a-a (semi-informed), WER, and SER UAR on the IEMOCAP sets; embeddings,
   transcripts and emotion scores are cached by audio content, so a rerun computes none of them.

Everything the user can get wrong (system, protocol, training settings, the evaluation's speaker encoder
and ASR model folders, output and cache folders that cannot be written, data directories, too few
training speakers or speakers without an utterance of one chunk, an attacker's batch that will not
fit in the memory left on the CPU, IEMOCAP sets without ``utt2emo``, SER model folders missing a
file) is checked before the first file is written; messages name ``--train-set`` for the
attacker's settings.
``challenge.json`` in the output folder records what each stage did in the last run.
"""
from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from ...data_prep.atomic import atomic_write_text, ensure_writable_folder
from ...data_prep.corpus import DataDir, read_data_dir
from ...data_prep.errors import VoxanonError
from ..feature_cache import ContentCache


log = logging.getLogger(__name__)

DEFAULT_PROTOCOL = "vpc2024"
STAGES_FILE = "challenge.json"
ANON_DIR = "anon"
ATTACKER_DIR = "attacker"
TRAIN_OPTION = "--train-set"   # the attacker's training settings, named in messages


@dataclass
class ChallengeInputs:
    system: str                                   # a system name or recipe path
    train: list[Path]                             # training data directories (original speech)
    data: Path                                    # evaluation sets (see voxanon.pipeline.evaluation.sets.discover_sets)
    out: Path
    iemocap: list[Path] = field(default_factory=list)
    ser_models: Path | None = None
    asr: str | None = None                        # None: the protocol's; "none": no WER
    asv_eval: str | None = None                   # None: the protocol's encoder
    protocol: str = DEFAULT_PROTOCOL
    system_overrides: list[str] = field(default_factory=list)
    train_overrides: list[str] = field(default_factory=list)
    protocol_overrides: list[str] = field(default_factory=list)
    device: str = "auto"                          # every model: anonymisation, attacker training, evaluation, SER
    workers: int = 1
    backend: object | None = None                 # None: local; a RayBackend
    batch_size: int | None = None
    cache: ContentCache | None = None             # None: no cache
    allow_pipes: bool = False
    allow_missing: bool = False
    trust_model_code: bool = False
    progress: bool = True
    notes: dict[str, str] = field(default_factory=dict)   # extra report notes (e.g. how the demo split its speakers)


@dataclass
class ChallengeOutcome:
    evaluation: object                            # voxanon.pipeline.evaluation.evaluate.Evaluation
    report: Path
    model_dir: Path
    stages: dict
    warnings: list[str]


def _protocol(inputs: ChallengeInputs) -> dict:
    from .protocols import load_protocol

    overrides = list(inputs.protocol_overrides)
    if inputs.asr is not None:
        overrides.append("asr=null" if inputs.asr.lower() == "none" else f"asr={json.dumps(inputs.asr)}")
    if inputs.asv_eval is not None:
        overrides.append(f"asv.encoder={json.dumps(inputs.asv_eval)}")
    return load_protocol(inputs.protocol, overrides)


def _system_config(inputs: ChallengeInputs) -> dict:
    from .computations import anonymisation_device
    from ..systems.recipes import build_system, check_needs, load_system_config

    overrides = list(inputs.system_overrides)
    if inputs.batch_size is not None:
        overrides.append(f"batch_size={inputs.batch_size}")
    config = load_system_config(inputs.system, overrides, device=anonymisation_device(inputs.device, inputs.backend),
                                keep_placed=True)
    check_needs(build_system(config))
    return config


class _Anonymiser:
    """Anonymises sets into ``<out>/anon/<set>_<system>`` once each, counting what the runner did."""

    def __init__(self, inputs: ChallengeInputs, config: dict):
        self.inputs, self.config = inputs, config
        self.done: dict[str, DataDir] = {}
        self.counts = {"processed": 0, "resumed": 0, "failed": 0, "sets": 0}

    def target(self, data: DataDir) -> Path:
        return Path(self.inputs.out) / ANON_DIR / f"{data.name}_{self.config['name']}"

    def check_targets(self, sets: list[DataDir]) -> None:
        """Two different sets with one name would be anonymised into one folder: an error, before any work."""
        sources: dict[Path, str] = {}
        for data in sets:
            source = str(data.path.resolve()) if data.path else data.name
            if sources.setdefault(self.target(data), source) != source:
                raise VoxanonError(f"{sources[self.target(data)]} and {source} are both named {data.name!r}: their "
                                   f"anonymised twins would share {self.target(data)}; rename one")

    def __call__(self, data: DataDir) -> DataDir:
        from ..api import anonymise

        key = str(data.path.resolve()) if data.path else data.name
        if key not in self.done:
            result = anonymise(data, self.config, self.target(data), workers=self.inputs.workers,
                               allow_pipes=self.inputs.allow_pipes, progress=self.inputs.progress,
                               backend=self.inputs.backend)
            if not result.ok:
                message = (f"{self.config['name']}: {len(result.failures)} utterance(s) of {data.name} failed; see "
                           f"{result.out_dir / 'failures.tsv'}")
                if not self.inputs.allow_missing:
                    raise VoxanonError(f"{message} (--allow-missing goes on without them)")
                log.warning("%s; going on without them (--allow-missing)", message)
                self.counts["failed"] += len(result.failures)
            self.counts["processed"] += result.processed
            self.counts["resumed"] += result.resumed
            self.counts["sets"] += 1
            self.done[key] = read_data_dir(result.out_dir, allow_pipes=self.inputs.allow_pipes)
        return self.done[key]

    def take_counts(self) -> dict:
        counts, self.counts = self.counts, {"processed": 0, "resumed": 0, "failed": 0, "sets": 0}
        return counts


def run_challenge(inputs: ChallengeInputs) -> ChallengeOutcome:
    """Run (or resume, or find done) every stage; write results.json/.csv/.md and report.html into ``inputs.out``."""
    from .attackers import attacker_training_summary
    from ..model_service import torch_device
    from ..training.asv.run import plan_training, train_planned
    from .outputs import attacker_notes, write_outputs
    from .computations import check_device, encoder_label, make_embedder, make_transcriber, run_computations_on, semi_informed_attacker
    from .evaluate import evaluate_sets
    from .sets import EvaluationSet, discover_sets
    from ..feature_cache import FileDigests
    started = time.monotonic()
    out = Path(inputs.out)
    # Every check before the first file is written: the cheap ones (settings, model folders) first, then
    # those that read the sets.
    check_device(inputs.device, inputs.backend)
    torch_device(inputs.device)  # the attacker trains in this process, whatever the backend
    config = _system_config(inputs)
    system = config["name"]
    protocol = _protocol(inputs)
    asv = protocol.get("asv", {})
    # The attacker's training on the original sets, planned for its checks: settings now, the data below.
    original_plan = plan_training(inputs.train, set_options=inputs.train_overrides, device=inputs.device,
                                  progress=False, allow_pipes=inputs.allow_pipes, allow_missing=inputs.allow_missing,
                                  option=TRAIN_OPTION, prepare=False)
    cache = inputs.cache if inputs.cache is not None else ContentCache(None)
    if cache.root is not None:
        ensure_writable_folder(cache.root, "--cache")
    # The evaluation's models (--asv-eval, --asr), checked as evaluate checks them; they load when first needed.
    digest = FileDigests(cache.root)
    embedder = make_embedder(asv, device=inputs.device, digest=digest)
    transcriber = make_transcriber(protocol.get("asr"), inputs.trust_model_code, device=inputs.device,
                                   decoding=protocol.get("asr_decoding"))
    train_sets = original_plan.sets
    eval_sets = discover_sets(inputs.data, allow_pipes=inputs.allow_pipes)
    iemocap_sets = [read_data_dir(Path(p), allow_pipes=inputs.allow_pipes) for p in inputs.iemocap]
    classifiers = _check_ser(iemocap_sets, inputs)
    stages: dict = {}

    anonymise = _Anonymiser(inputs, config)
    anonymise.check_targets([*train_sets, *(d for s in eval_sets for d in (s.enroll, s.trials)), *iemocap_sets])
    if not _attacker_possibly_done(out, system, inputs, [anonymise.target(d) for d in train_sets]):
        # The training's checks on the data (speakers, chunk lengths, memory) hold for the originals, since
        # anonymisation keeps every utterance's length; running them here fails before anything is anonymised.
        # Their warnings wait for the training, which gives them once.
        original_plan.prepared(progress=False, warn=False)
    ensure_writable_folder(out, "--out")   # last: a run refused for any other input leaves --out untouched

    # 1. Anonymise the training sets.
    stage_start = time.monotonic()
    anonymised_train = [anonymise(d) for d in train_sets]
    stages["anonymise training sets"] = anonymise.take_counts() | {"seconds": _since(stage_start)}

    # 2. The semi-informed attacker.
    stage_start = time.monotonic()
    plan = _attacker_plan(out, system, inputs, anonymised_train, progress=inputs.progress)
    identities, model_dir = plan.identities, plan.out_dir
    attacker = train_planned(plan, progress=inputs.progress)
    stages["train attacker"] = {"model": str(model_dir), "trained": attacker.trained,
                                "training": attacker_training_summary(model_dir)}
    stages["train attacker"]["seconds"] = _since(stage_start)

    # 3. Anonymise the evaluation sets (and IEMOCAP).
    stage_start = time.monotonic()
    anonymised_eval = [EvaluationSet(s.name, s.enroll, s.trials, anonymise(s.enroll), anonymise(s.trials))
                       for s in eval_sets]
    anonymised_iemocap = [anonymise(d) for d in iemocap_sets]
    stages["anonymise evaluation sets"] = anonymise.take_counts() | {"seconds": _since(stage_start)}

    # 4. Evaluate.
    stage_start = time.monotonic()
    semi_informed, warnings = semi_informed_attacker(model_dir, asv, anonymised_eval, system, device=inputs.device,
                                                     digest=digest)
    run_computations_on(inputs.backend, inputs.batch_size, embedder, transcriber, semi_informed.embedder,
                        progress=inputs.progress)
    evaluation = evaluate_sets(anonymised_eval, protocol, system, embedder=embedder, cache=cache, asr=transcriber,
                               allow_missing=inputs.allow_missing,
                               asv_model=encoder_label(asv.get("encoder", "ge2e"), embedder.tag),
                               semi_informed=semi_informed)
    if iemocap_sets:
        evaluation.results += _ser_rows(iemocap_sets, anonymised_iemocap, classifiers, inputs, system, cache,
                                        protocol, evaluation.results)
    evaluation.computed += classifiers.computed if classifiers is not None else 0
    stages["evaluate"] = {"computed": evaluation.computed, "seconds": _since(stage_start)}

    hashes = sorted({i["anonymisation"]["config_hash"] for i in identities if i.get("anonymisation")})
    notes = {"protocol": protocol["name"], "system": f"{system} (config hash {', '.join(hashes)})",
             "training sets": ", ".join(str(d.path) for d in train_sets), "attacker model": str(model_dir),
             "evaluation sets": str(inputs.data)}
    if iemocap_sets:
        notes["IEMOCAP sets"] = ", ".join(str(d.path) for d in iemocap_sets)
    notes |= inputs.notes | attacker_notes(semi_informed, warnings)
    report = write_outputs(out, evaluation, f"voxanon challenge: {system} ({protocol['name']})", notes)
    stages["total seconds"] = _since(started)
    atomic_write_text(out / STAGES_FILE, json.dumps({"system": system, "stages": stages}, indent=2) + "\n")
    return ChallengeOutcome(evaluation, report, model_dir, stages, warnings)


def _since(start: float) -> float:
    return round(time.monotonic() - start, 3)


def _attacker_plan(out: Path, system: str, inputs: ChallengeInputs, anonymised: list, progress: bool = False,
                   prepare: bool = True):
    """The semi-informed attacker's training on the ``anonymised`` training sets, in its folder under ``out``
    (named by the system and the training's identity)."""
    from ..training.asv.run import plan_training

    return plan_training(anonymised, lambda identity: out / ATTACKER_DIR / f"{system}-{identity}",
                         set_options=inputs.train_overrides, device=inputs.device, progress=progress,
                         allow_pipes=inputs.allow_pipes, allow_missing=inputs.allow_missing, option=TRAIN_OPTION,
                         prepare=prepare)


def _attacker_possibly_done(out: Path, system: str, inputs: ChallengeInputs, anonymised: list[Path]) -> bool:
    """Whether the anonymised training sets of an earlier run exist and name a complete attacker for these
    settings (then their data passed the training's checks when it was trained)."""
    if not all((p / "wav.scp").is_file() for p in anonymised):
        return False
    try:
        return _attacker_plan(out, system, inputs, anonymised, prepare=False).done
    except VoxanonError:
        return False


def _check_ser(iemocap_sets: list[DataDir], inputs: ChallengeInputs):
    from .ser import FoldClassifiers, ser_labels
    from ..feature_cache import FileDigests

    if not iemocap_sets:
        if inputs.ser_models is not None:
            raise VoxanonError("--ser-models needs --iemocap (the IEMOCAP sets to score)")
        return None
    folds = {str(data.path): set(ser_labels(data)[1].values()) for data in iemocap_sets}
    if inputs.ser_models is None:
        raise VoxanonError("--iemocap needs --ser-models DIR (a folder of fold_<k> emotion model directories)")
    classifiers = FoldClassifiers(inputs.ser_models, device=inputs.device, progress=inputs.progress,
                                  digests=FileDigests(inputs.cache.root if inputs.cache is not None else None))
    for where, needed in folds.items():
        classifiers.check_folds(needed, where)
    return classifiers


def _ser_rows(originals: list[DataDir], anonymised: list[DataDir], classifiers, inputs: ChallengeInputs,
              system: str, cache, protocol: dict, results: list) -> list:
    from .ser import ser_results

    failures: dict[str, str] = {}
    rows = []
    for original, twin in zip(originals, anonymised):
        rows += ser_results(original, twin, inputs.ser_models, system=system, cache=cache,
                            allow_pipes=inputs.allow_pipes, failures=failures, classifiers=classifiers)
    if failures and not inputs.allow_missing:
        shown = "\n  ".join(f"{k}: {v}" for k, v in list(failures.items())[:10])
        raise VoxanonError(f"{len(failures)} IEMOCAP utterance(s) could not be used:\n  {shown}\n"
                           "fix them, or pass --allow-missing to evaluate without them")
    for key, message in failures.items():
        log.warning("left out %s: %s", key, message)
    model = Path(inputs.ser_models).name
    rows = [replace(r, model=model) for r in rows]
    if protocol.get("name") == DEFAULT_PROTOCOL:
        from ...eval.published import load_published, published_beside

        present = {(r.set, r.system) for r in results}
        rows += [r for r in published_beside(rows, load_published(DEFAULT_PROTOCOL))
                 if (r.set, r.system) not in present]
    return rows


def stage_summary(stages: dict) -> str:
    """One line per stage: what it did (or that it was cached) and how long it took."""
    lines = []
    for name, record in stages.items():
        if not isinstance(record, dict):
            lines.append(f"{name}: {record}")
            continue
        if "processed" in record:
            what = (f"{record['processed']} utterance(s) anonymised, {record['resumed']} already done"
                    + (f", {record['failed']} failed (left out)" if record.get("failed") else ""))
        elif "trained" in record:
            what = ("trained " if record["trained"] else "cached, not retrained: ") + record["model"]
            if record.get("training"):
                what += f"; {record['training']['line']}" + (
                    "; HARDLY TRAINED: the semi-informed rows come from a model close to its random start"
                    if record["training"]["undertrained"] else "")
        else:
            what = f"{record['computed']} embedding(s)/transcript(s)/score(s) computed, the rest from the cache"
        lines.append(f"{name}: {what} ({record['seconds']:.1f} s)")
    return "\n".join(lines)
