"""Published VoicePrivacy 2024 baseline figures, shipped as data, beside the user's numbers (issue 17 item 5)."""
from voxanon.eval.published import load_published, published_beside, source_note
from voxanon.eval.results import Result
from voxanon.eval.tables import markdown_tables_by_condition


def _value(rows, set_name, system, metric, variant, attacker=""):
    found = [r.value for r in rows
             if (r.set, r.system, r.metric, r.variant, r.attacker) == (set_name, system, metric, variant, attacker)]
    assert len(found) == 1, (set_name, system, metric, variant, found)
    return found[0]


def test_figures_and_their_source():
    published = load_published("vpc2024")
    assert published.label == "published (VPC 2024)"
    assert published.source["commit"] == "400de3a86c2f33f7a6fc63f10869a88914ccd8bc"
    assert published.files["B2"] == "results/result_for_rank_mcadams"
    rows = published.results
    label = "published (VPC 2024)"
    # B2 McAdams semi-informed a-a EER, WER and UAR as printed in result_for_rank_mcadams.
    assert [_value(rows, f"libri_{s}_trials_{x}", f"{label} B2", "eer", "speechbrain", "semi-informed")
            for s in ("dev", "test") for x in "fm"] == [12.910, 2.045, 7.483, 1.557]
    assert _value(rows, "libri_dev_asr", f"{label} B2", "wer", "asr-wav2vec2-librispeech") == 10.442
    assert _value(rows, "IEMOCAP_test", f"{label} B2", "uar", "fold-mean") == 53.4914
    assert _value(rows, "libri_test_trials_m", f"{label} B6", "eer", "speechbrain", "semi-informed") == 21.137
    # Original speech: one row per distinct value; B4's file re-ran the original WER.
    assert _value(rows, "libri_dev_trials_f", f"{label} original", "eer", "speechbrain") == 10.511
    assert _value(rows, "libri_dev_asr", f"{label} original", "wer", "asr-wav2vec2-librispeech") == 1.807
    assert _value(rows, "libri_dev_asr", f"{label} original (B4 run)", "wer", "asr-wav2vec2-librispeech") == 1.805
    assert "400de3a86c2f33f7a6fc63f10869a88914ccd8bc" in source_note(published)


def test_published_rows_sit_beside_the_users_sets_only():
    published = load_published()
    mine = [Result("libri_test_trials_f", "b2", "a-a", "eer", "speechbrain", 3.1, "%"),
            Result("my_own_set", "b2", "a-a", "eer", "speechbrain", 5.0, "%")]
    beside = published_beside(mine, published)
    assert beside and {r.set for r in beside} == {"libri_test_trials_f"}
    table = markdown_tables_by_condition(mine + beside)
    lines = [line for line in table.splitlines() if "libri_test_trials_f" in line]
    assert any("| b2 " in line for line in lines)
    assert any("published (VPC 2024) B2" in line and "7.48" in line for line in lines)
    assert "figures published by the challenge" in table
    assert published_beside([Result("other", "b2", "a-a", "eer", "speechbrain", 1.0, "%")], published) == []
