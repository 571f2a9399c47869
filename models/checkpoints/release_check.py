"""``voxanon models check``'s reports: what an unpacked release, or one checkpoint file, holds, and whether it
imports; the checks of the SSL-SAS layout's folders (SSL-SAS, zLLR-VC), of B4's, and of each checkpoint file voxanon
reads. Which check a folder gets is the release catalogue's (:func:`voxanon.models.checkpoints.catalogue.folder_check`);
:mod:`voxanon.models.checkpoints.model_check` picks the check for a path.

Every file is read with :func:`~voxanon.models.checkpoints.safe.safe_load` (tensors and plain
containers only, nothing executed), and the import is run as ``voxanon models import`` runs it
(:func:`~voxanon.models.checkpoints.ssl_sas.import_ssl_sas_files`, :func:`~voxanon.models.checkpoints.sa_toolkit.import_sa_toolkit`
for an SA-toolkit ``final.pt`` or its tag's folder, and the other importers), writing
nothing. The report lists the components found with their key counts, the keys no component
holds, the vocoder's ``config.json``, and the import's outcome. A release is read once per check: the
inspection and the trial import share each file (:class:`OnceReader`).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ...data_prep.errors import VoxanonError
from .ssl_sas import RELEASES, SEX_FLOW_PREFIX, ecapa_from_state, front_end_problems, generator_families, import_ssl_sas_files, read_vocoder_config, soft_content_from_state, speaker_input_size
from .keymaps import FAIRSEQ_PRETRAINING_ONLY, fairseq_hubert_to_hf, is_fairseq_hubert_key, unknown_soft_content_keys
from .safe import CheckpointError, ImplausibleConfigError, key_list, safe_load
from .sa_toolkit import import_sa_toolkit

SOFT_MODEL = Path("HuBERT_soft") / "soft_model.pt"
EMBEDDING_MODEL = Path("ECAPA-TDNN") / "embedding_model.ckpt"
HUBERT_BASE = "hubert_base_ls960.pt"
CONFIG_SUMMARY_KEYS = ("model_in_dim", "num_mels", "sampling_rate", "upsample_rates", "upsample_kernel_sizes",
                       "upsample_initial_channel", "resblock", "resblock_kernel_sizes", "resblock_dilation_sizes",
                       "ssl_freeze", "xv_freeze", "xv_disentanglement", "xv_disentanglement_model", "xv_protect_dis",
                       "xv_protect_glob", "f0conv", "consistency_loss", "soft_model_path", "hubert_model_path",
                       "ecapa_fbank_model_path")
"""The ``config.json`` entries the summary shows: the generator's shape, what it was trained with, its paths."""


@dataclass
class FileReport:
    """One file: what it is, its keys per component, keys no component holds, and what is wrong with it."""

    name: str
    kind: str
    counts: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    keyed: bool = True


@dataclass
class CheckReport:
    target: Path
    files: list[FileReport] = field(default_factory=list)
    imports: list[tuple[str, str | None]] = field(default_factory=list)
    """(the import tried, None when it would succeed or the error it stops with)"""
    successes: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    action: str = "import"
    """What the trial runs are: the ``import`` of a release, or the ``load`` of an installed set."""

    def all_problems(self) -> list[str]:
        return self.problems + [problem for report in self.files for problem in report.problems] + \
            [f"{report.name}: unknown keys {key_list(report.unknown)}" for report in self.files if report.unknown]

    @property
    def ok(self) -> bool:
        return not self.all_problems() and all(error is None for _, error in self.imports)

    def lines(self) -> list[str]:
        lines = [f"voxanon models check {self.target}"]
        for report in self.files:
            lines.append(f"{report.name}  ({report.kind})")
            lines += [f"    {count}" for count in report.counts]
            if report.keyed:
                lines.append(f"    unknown keys: {key_list(report.unknown) if report.unknown else 'none'}")
            lines += [f"    {note}" for note in report.notes]
        if self.imports:
            lines.append(f"{self.action}:")
            for what, error in self.imports:
                outcome = (f"would succeed ({self.successes[what]})" if error is None
                           else f"{self.action} would FAIL: {error}")
                lines.append(f"    {what}: " + outcome.replace("\n", "\n        "))
        problems = self.all_problems()
        if problems:
            lines.append(f"PROBLEMS ({len(problems)}):")
            lines += [f"    - {problem}" for problem in problems]
        lines.append("OK" if self.ok else "NOT OK: see above")
        return lines


class OnceReader:
    """:func:`~voxanon.models.checkpoints.safe.safe_load` for one check: each file is read once, and the inspection
    and the trial import share what was read (a release's ``g_*`` file alone can be 1 GB)."""

    def __init__(self):
        self._read: dict[Path, object] = {}

    def __call__(self, path: str | Path):
        key = Path(path).resolve()
        if key not in self._read:
            self._read[key] = safe_load(path)
        return self._read[key]


def _keys(label: str, n: int, detail: str = "") -> str:
    return f"{label}: {n} key{'' if n == 1 else 's'}{detail}"


def _read(path: Path, report: FileReport, read: OnceReader):
    try:
        return read(path)
    except CheckpointError as error:
        report.problems.append(str(error))
        return None


def _pretraining_detail(fairseq_keys) -> str:
    n = sum(1 for key in fairseq_keys if FAIRSEQ_PRETRAINING_ONLY.match(key))
    return f" ({n} used only in HuBERT pretraining, dropped)" if n else ""


def _ssl_model_keys(state: dict) -> list[str]:
    return [key[len("ssl_model."):] for key in state if key.startswith("ssl_model.")]


def _release_kind(checkpoint, config: dict) -> str:
    """zLLR-VC when its ``g_*`` holds the sex flow or its config names one; SSL-SAS otherwise."""
    state = checkpoint.get("generator") if isinstance(checkpoint, dict) else None
    holds_flow = isinstance(state, dict) and any(str(key).startswith(SEX_FLOW_PREFIX) for key in state)
    return "zllr-vc" if holds_flow or config.get("xv_disentanglement_model") else "ssl-sas"


def inspect_generator(name: str, source: str, checkpoint, release: str) -> FileReport:
    variant = RELEASES[release]
    report = FileReport(name, f"{variant.name} vocoder checkpoint, jik876 g_* layout")
    try:
        families = generator_families(checkpoint, source, sex_flow=variant.sex_flow)
    except CheckpointError as error:
        report.problems.append(str(error))
        report.keyed = False
        return report
    weight_norm = any(key.endswith((".weight_g", ".original0")) for key in families["generator"])
    report.counts.append(_keys(f"generator (jik876 HiFi-GAN, {'weight norm' if weight_norm else 'plain weights'})",
                               len(families["generator"])))
    if families["content"]:
        report.counts.append(_keys("content (latent_encoder.*)", len(families["content"]),
                                   _pretraining_detail(_ssl_model_keys(families["content"]))))
    if families["speaker"]:
        report.counts.append(_keys("speaker (xv_model.*)", len(families["speaker"])))
    front_end_unknown, mismatched = front_end_problems(families["front_end"], speaker_input_size(families["speaker"]),
                                                       source)
    if families["front_end"]:
        agreement = "differs from" if mismatched else "equal to"
        report.counts.append(_keys("speaker front end (fbank.*, mean_var_norm.*)", len(families["front_end"]),
                                   f", {agreement} speechbrain's" if len(front_end_unknown) < len(families["front_end"])
                                   else ""))
    if families["sex_flow"]:
        report.counts.append(_keys("sex flow (xv_dis_model.*)", len(families["sex_flow"]),
                                   ", not used by the vocoder (the flow is imported from its own file)"))
    for family, prefix, instead in (("content", "latent_encoder.*", SOFT_MODEL), ("speaker", "xv_model.*",
                                                                                  EMBEDDING_MODEL)):
        if not families[family]:
            report.notes.append(f"no {prefix} inside: the import reads {instead} instead")
    report.unknown = list(families["unknown"]) + front_end_unknown + \
        [f"latent_encoder.{key}" for key in unknown_soft_content_keys(families["content"])]
    report.problems += mismatched
    return report


def inspect_soft_content(name: str, state) -> FileReport:
    report = FileReport(name, "SSL-SAS soft content model: centroids W + fairseq HuBERT ssl_model.*")
    if not isinstance(state, dict):
        report.problems.append(f"{name}: expected a state dict, got {type(state).__name__}")
        report.keyed = False
        return report
    report.counts.append(_keys("content", len(state), _pretraining_detail(_ssl_model_keys(state))))
    report.unknown = unknown_soft_content_keys(state)
    return report


def inspect_state(name: str, state, kind: str, label: str) -> FileReport:
    report = FileReport(name, kind)
    if not isinstance(state, dict):
        report.problems.append(f"{name}: expected a state dict, got {type(state).__name__}")
        report.keyed = False
        return report
    report.counts.append(_keys(label, len(state)))
    return report


def summarise_config(name: str, path: Path) -> FileReport:
    report = FileReport(name, "vocoder config", keyed=False)
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as error:
        report.problems.append(f"{path}: not readable JSON ({error})")
        return report
    if not isinstance(config, dict):
        report.problems.append(f"{path}: expected a JSON object")
        return report
    try:
        generator = read_vocoder_config(path)
        report.notes.append(f"generator: {generator.in_channels} inputs, hop {generator.hop_length}")
    except CheckpointError as error:
        report.problems.append(str(error))
    line = ""
    for item in (f"{key} {json.dumps(config[key])}" for key in CONFIG_SUMMARY_KEYS if key in config):
        if line and len(line) + len(item) > 100:
            report.notes.append(line + ",")
            line = ""
        line += (", " if line else "") + item
    report.notes.append(line or "no generator settings (the import uses SSL-SAS's)")
    return report


def _parameters(components: dict) -> str:
    def millions(state):
        return sum(tensor.numel() for tensor in state.values()) / 1e6

    return ", ".join(f"{name} {millions(state):.2f} M parameters" for name, state in components.items())


def try_import(report: CheckReport, what: str, run) -> None:
    try:
        components = run()
    except VoxanonError as error:
        report.imports.append((what, str(error)))
        return
    report.imports.append((what, None))
    report.successes[what] = _parameters(components)


def check_release(root: Path, read: OnceReader | None = None) -> CheckReport:
    read = read or OnceReader()
    report = CheckReport(root)
    folders = sorted({path.parent for path in root.glob("HiFi-GAN/*/g_*")})
    if not folders:
        report.problems.append(f"no HiFi-GAN/<model>/g_* file in {root} (is it the unpacked "
                               "pretrained_models_anon_xv folder?)")
    hubert = root / HUBERT_BASE
    for folder in folders:
        generators = sorted(folder.glob("g_*"))
        g_path, relative = generators[-1], folder.relative_to(root)
        config_path = folder / "config.json"
        _refuse_implausible_config(config_path)
        config_report = summarise_config(str(relative / "config.json"), config_path) if config_path.is_file() else None
        try:
            config = json.loads(config_path.read_text(encoding="utf-8")) if config_path.is_file() else {}
        except (ValueError, UnicodeDecodeError):
            config = {}
        placeholder = FileReport(str(relative / g_path.name), "")
        checkpoint = _read(g_path, placeholder, read)
        release = _release_kind(checkpoint, config if isinstance(config, dict) else {})
        if checkpoint is None:
            placeholder.kind, placeholder.keyed = "unreadable", False
            generator_report = placeholder
        else:
            generator_report = inspect_generator(placeholder.name, str(g_path), checkpoint, release)
        generator_report.notes.insert(0, f"the newest of {len(generators)} g_* file(s): the one the import reads")
        report.files.append(generator_report)
        if config_report is not None:
            report.files.append(config_report)
        else:
            report.files.append(FileReport(str(relative / "config.json"), "absent: the import uses SSL-SAS's "
                                           "generator settings", keyed=False))
        default_dir = RELEASES[release].vocoder_dir
        read_by_default = str(relative) == default_dir if default_dir else len(folders) == 1
        option = "" if read_by_default else f" --vocoder-dir {relative}"
        command = f"voxanon models import {release} {root}{option}" + (f" --hubert {hubert}" if hubert.is_file()
                                                                         else "")
        try_import(report, command, lambda: import_ssl_sas_files(
            g_path, config_path=config_path, soft_model_path=root / SOFT_MODEL, embedding_path=root / EMBEDDING_MODEL,
            hubert_path=hubert if hubert.is_file() else None, release=release,
            layout=RELEASES[release].layout, read=read)[0])
    for relative, inspect in ((SOFT_MODEL, inspect_soft_content), (EMBEDDING_MODEL, _inspect_ecapa_state)):
        if (root / relative).is_file():
            file_report = FileReport(str(relative), "")
            state = _read(root / relative, file_report, read)
            report.files.append(inspect(str(relative), state) if state is not None else
                                _unreadable(file_report))
    if hubert.is_file():
        file_report = FileReport(HUBERT_BASE, "")
        checkpoint = _read(hubert, file_report, read)
        report.files.append(_inspect_fairseq(HUBERT_BASE, checkpoint) if checkpoint is not None else
                            _unreadable(file_report))
    for flow in sorted(root.rglob("xv_disentanglement_model/*.pt")):
        report.files.append(FileReport(str(flow.relative_to(root)), "the zLLR-VC sex flow, a pickled module",
                                       keyed=False, notes=["not read here; imported by voxanon zllr import --pickle FILE (or "
                                              "voxanon models fetch zllr-vc --import)"]))
    return report


def _refuse_implausible_config(config_path: Path) -> None:
    """Sizes no generator has (:class:`~voxanon.models.checkpoints.safe.ImplausibleConfigError`) end the check
    with that one line; any other fault of the config is reported with its summary."""
    try:
        read_vocoder_config(config_path)
    except ImplausibleConfigError:
        raise
    except CheckpointError:
        pass


def _unreadable(report: FileReport) -> FileReport:
    report.kind, report.keyed = "unreadable", False
    return report


def _inspect_ecapa_state(name: str, state) -> FileReport:
    return inspect_state(name, state, "speechbrain ECAPA_TDNN state dict", "speaker")


def _inspect_fairseq(name: str, checkpoint) -> FileReport:
    model = checkpoint.get("model") if isinstance(checkpoint, dict) else None
    report = inspect_state(name, model, "fairseq checkpoint: HuBERT", "HuBERT (model)")
    if isinstance(model, dict):
        report.counts[-1] += _pretraining_detail(model)
        report.unknown = [key for key in model if not is_fairseq_hubert_key(key)]
    return report


def check_file(path: Path, read: OnceReader | None = None) -> CheckReport:
    """One checkpoint file: a ``g_*`` (with the files beside it in its release), ``soft_model.pt``,
    ``embedding_model.ckpt``, a fairseq HuBERT or a bshall HuBERT-soft checkpoint."""
    read = read or OnceReader()
    report = CheckReport(path)
    name = str(path)
    file_report = FileReport(name, "")
    checkpoint = _read(path, file_report, read)
    if checkpoint is None:
        report.files.append(_unreadable(file_report))
        return report
    entries = set(checkpoint) if isinstance(checkpoint, dict) else set()
    if "generator" in entries:
        config_path = path.parent / "config.json"
        _refuse_implausible_config(config_path)
        try:
            config = json.loads(config_path.read_text(encoding="utf-8")) if config_path.is_file() else {}
        except (ValueError, UnicodeDecodeError):
            config = {}
        release = _release_kind(checkpoint, config if isinstance(config, dict) else {})
        folder = path.resolve().parent
        root = folder.parent.parent if folder.parent.name == "HiFi-GAN" else folder
        report.files.append(inspect_generator(name, name, checkpoint, release))
        if config_path.is_file():
            report.files.append(summarise_config(str(config_path), config_path))
        try_import(report, f"import of {path.name} as {release}", lambda: import_ssl_sas_files(
            path, config_path=config_path, soft_model_path=root / SOFT_MODEL, embedding_path=root / EMBEDDING_MODEL,
            release=release, layout=RELEASES[release].layout, read=read)[0])
    elif isinstance(checkpoint.get("model") if entries else None, dict):
        report.files.append(_inspect_fairseq(name, checkpoint))
        try_import(report, "fairseq HuBERT key conversion", lambda: _named(name, fairseq_hubert_to_hf,
                                                                             checkpoint["model"]))
    elif "hubert" in entries:
        from .hubert_soft import import_hubert_soft

        report.files.append(inspect_state(name, checkpoint["hubert"], "bshall HuBERT-soft checkpoint", "hubert"))
        try_import(report, f"voxanon models import hubert-soft {path}", lambda: import_hubert_soft(path, read)[0])
    elif "W" in entries or any(str(key).startswith("ssl_model.") for key in entries):
        report.files.append(inspect_soft_content(name, checkpoint))
        try_import(report, "SSL-SAS soft content model", lambda: {
            "content": soft_content_from_state(checkpoint, name).state_dict()})
    elif "blocks.0.conv.conv.weight" in entries:
        report.files.append(_inspect_ecapa_state(name, checkpoint))
        try_import(report, "speechbrain ECAPA_TDNN", lambda: {
            "speaker": ecapa_from_state(checkpoint, name).embedding_model.state_dict()})
    elif "base_model_state_dict" in entries:
        report.files.append(inspect_sa_toolkit(name, checkpoint))
        try_import(report, f"voxanon models import sa-toolkit {path}", lambda: import_sa_toolkit(path, read)[0])
    elif {"mpd", "msd"} <= entries:
        report.files.append(FileReport(name, "HiFi-GAN discriminators and optimiser states (do_*)", keyed=False,
                                       notes=["used only to resume training; the import does not read it"]))
    else:
        shown = key_list(map(str, entries)) if entries else type(checkpoint).__name__
        report.problems.append(f"{name}: not a checkpoint voxanon imports (it holds {shown})")
    return report


def inspect_sa_toolkit(name: str, checkpoint: dict) -> FileReport:
    """An SA-toolkit ``final.pt``: its config, options and keys by family (:func:`~voxanon.models.checkpoints.sa_toolkit.key_families`)."""
    from .sa_toolkit import key_families

    state = checkpoint["base_model_state_dict"]
    converter = isinstance(state, dict) and any(str(key).startswith("hifigan.") for key in state)
    report = FileReport(name, f"SA-toolkit final.pt: {'an anonymisation model' if converter else 'an ASR-BN extractor'}"
                              f", built by {checkpoint.get('base_model_path')!r}")
    if not isinstance(state, dict):
        report.problems.append(f"{name}: base_model_state_dict is a {type(state).__name__}, not a state dict")
        report.keyed = False
        return report
    families = key_families(state)
    report.unknown = families.pop("unknown", [])
    report.counts += [_keys(family, len(keys)) for family, keys in families.items()]
    params = checkpoint.get("base_model_params")
    speakers = params.get("utt2spk") if isinstance(params, dict) else None
    if isinstance(speakers, dict):
        report.notes.append(f"targets: {len(set(speakers.values()))} speakers of {len(speakers)} training utterances")
    report.notes.append(f"options: {json.dumps(checkpoint.get('base_model_args'), default=str)}")
    return report


def _named(source: str, convert, state) -> dict:
    try:
        return {"content": convert(state)}
    except CheckpointError as error:
        raise CheckpointError(f"{source}: {error}") from None


NAC_PARTS = {"coarse": "Bark coarse GPT (model_args, _orig_mod. model, best_val_loss)", "fine": "Bark fine GPT",
             "encodec": "EnCodec 24 kHz state dict (decoder and codebooks used)",
             "quantiser": "HuBERT quantiser (LSTM + fc, .info)", "hubert": "transformers HubertModel state dict"}


def check_nac_release(root: Path, read: OnceReader | None = None) -> CheckReport:
    """B4's files under ``root`` (:func:`voxanon.models.checkpoints.nac.find_release_files`) and a trial import."""
    from .nac import find_release_files, find_voices, import_nac

    read = read or OnceReader()
    report = CheckReport(root)
    try:
        files = find_release_files(root)
        voices = find_voices(root)
    except CheckpointError as error:
        report.problems.append(str(error))
        return report
    for part, path in files.items():
        report.files.append(FileReport(str(path.relative_to(root)), NAC_PARTS[part], keyed=False))
    report.files.append(FileReport(f"{len(voices)} voice prompts (*.npz)", "Bark voices: semantic_prompt, "
                                   "coarse_prompt, fine_prompt", keyed=False, notes=[", ".join(sorted(voices)[:8])
                                                                                     + (", ..." if len(voices) > 8 else "")]))
    try_import(report, f"voxanon models import nac {root}", lambda: import_nac(root, read)[0])
    return report
