"""`voxanon prepare subset`: training lists with per-sex speaker balance."""
from __future__ import annotations

import pytest

from voxanon.data_prep.corpus import DataDir, read_data_dir, write_data_dir
from voxanon.data_prep.errors import VoxanonError
from voxanon.data_prep.prepare.issues import PreparationIssues
from voxanon.data_prep.prepare.subsets import PURPOSES, SubsetOptions, select_training_subset
from voxanon.pipeline.cli import main


def pool_corpus() -> DataDir:
    """6 female and 3 male speakers with 4 utterances each (0.5 to 2 s), one unlabelled speaker."""
    speakers = {**{f"f{i}": "f" for i in range(6)}, **{f"m{i}": "m" for i in range(3)}, "x0": None}
    utt2spk = {f"{spk}_{j}": spk for spk in speakers for j in range(4)}
    return DataDir(name="pool", wav={u: f"/a/{u}.wav" for u in utt2spk}, utt2spk=utt2spk,
                   spk2gender={s: g for s, g in speakers.items() if g},
                   utt2dur={u: 0.5 * (1 + int(u[-1])) for u in utt2spk})


def select(options: SubsetOptions) -> tuple[DataDir, PreparationIssues]:
    issues = PreparationIssues("test")
    return select_training_subset(pool_corpus(), options, issues), issues


def sexes(data: DataDir) -> dict[str, int]:
    return {sex: sum(1 for s in data.speakers if data.spk2gender.get(s) == sex) for sex in ("f", "m")}


def test_vocoder_preset_keeps_everyone():
    rule = PURPOSES["vocoder"]
    subset, issues = select(SubsetOptions(need_sex=rule.need_sex, balance_sexes=rule.balance_sexes))
    assert len(subset.wav) == 40 and not issues


def test_pool_preset_needs_sex_labels_and_reports_the_rest():
    rule = PURPOSES["pool"]
    subset, issues = select(SubsetOptions(need_sex=rule.need_sex, balance_sexes=rule.balance_sexes))
    assert sexes(subset) == {"f": 6, "m": 3} and "x0" not in subset.speakers
    assert issues.counts() == {"speaker without an f/m sex label (left out: this subset needs sexes)": 1}


def test_sex_flow_preset_balances_speakers_deterministically():
    rule = PURPOSES["sex-flow"]
    options = SubsetOptions(need_sex=rule.need_sex, balance_sexes=rule.balance_sexes, seed="4")
    subset, _ = select(options)
    assert sexes(subset) == {"f": 3, "m": 3} and len(subset.wav) == 24
    again, _ = select(options)
    assert again.speakers == subset.speakers
    choices = {tuple(select(SubsetOptions(need_sex=True, balance_sexes=True, seed=str(seed)))[0].speakers)
               for seed in range(10)}
    assert len(choices) > 1  # the seed, not the speaker order, decides


def test_limits_and_durations():
    subset, _ = select(SubsetOptions(speakers_per_sex=2, utts_per_speaker=3, min_seconds=1.0, max_seconds=1.5,
                                     seed="1"))
    assert sexes(subset) == {"f": 2, "m": 2}
    assert all(1.0 <= subset.utt2dur[u] <= 1.5 for u in subset.wav)
    assert len(subset.wav) == 4 * 2  # two utterances per speaker are within the range
    with pytest.raises(VoxanonError, match="at least 1"):
        select(SubsetOptions(utts_per_speaker=0))
    no_durations = pool_corpus()
    no_durations.utt2dur = {}
    with pytest.raises(VoxanonError, match="need utt2dur"):
        select_training_subset(no_durations, SubsetOptions(min_seconds=1.0), PreparationIssues("x"))


def test_balance_needs_both_sexes():
    only_female = pool_corpus()
    only_female.spk2gender = {s: g for s, g in only_female.spk2gender.items() if g == "f"}
    with pytest.raises(VoxanonError, match="both sexes"):
        select_training_subset(only_female, SubsetOptions(balance_sexes=True), PreparationIssues("x"))


def test_cli_subset(tmp_path, capsys):
    source = pool_corpus()
    source.wav = {u: f"wav/{u}.wav" for u in source.wav}
    write_data_dir(source, tmp_path / "pool")
    out = tmp_path / "flow"
    assert main(["prepare", "subset", "--data", str(tmp_path / "pool"), "--out", str(out),
                 "--purpose", "sex-flow", "--strict"]) == 2
    assert main(["prepare", "subset", "--data", str(tmp_path / "pool"), "--out", str(out),
                 "--purpose", "sex-flow", "--utts-per-speaker", "2"]) == 0
    assert "12 utterances, 6 speakers (3 f, 3 m)" in capsys.readouterr().out
    written = read_data_dir(out)
    assert all(path == str((tmp_path / "pool" / f"wav/{u}.wav").resolve()) for u, path in written.wav.items())
    assert main(["prepare", "subset", "--data", str(tmp_path / "pool"), "--out", str(tmp_path / "all"),
                 "--purpose", "sex-flow", "--no-balance-sexes"]) == 0
    assert len(read_data_dir(tmp_path / "all").speakers) == 9
