"""Result tables, the report files (JSON, CSV, Markdown, self-contained HTML) and the Chromium screenshot."""
import base64
import csv
import io
import math
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from matplotlib.figure import Figure
from PIL import Image

from voxanon.data_prep.errors import VoxanonError
from voxanon.eval.plots import save_figure
from voxanon.eval.report import write_report
from voxanon.eval.results import COLUMNS, Result, from_json, to_json
from voxanon.eval.tables import MAX_COLUMNS, format_value, markdown_table, markdown_tables_by_condition

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "screenshot_report.py"
CHROMIUM = Path("/usr/bin/chromium")
RED = (255, 0, 0)
BLUE = (0, 0, 255)


def sample_results():
    results = []
    for set_name in ("libri_test_trials_f", "vctk_test_trials_m"):
        for k, system in enumerate(("b2", "original", "b1")):
            results += [
                Result(set_name, system, "o-a", "eer", "kaldi", 10.0 + 7.123 * k, "%"),
                Result(set_name, system, "o-o", "eer", "kaldi", 2.0 + 0.5 * k, "%"),
                Result(set_name, system, "o-a", "min_cllr", "", 0.25 * k + 0.111, "bits"),
                Result(set_name, system, "o-a", "zebra_dece", "", 0.00003 if k == 0 else 0.2 * k, "bits"),
                Result(set_name, system, "o-a", "zebra_worst_case", "", 1.5 * k + 0.31, "log10"),
                Result(set_name, system, "o-a", "zebra_tag", "", "ABC"[k], ""),
                Result(set_name, system, "asr", "wer", "", 4.0 + k, "%"),
            ]
            if system != "original":
                results += [Result(set_name, system, "o-a", "deid", "", 45.0 + 3.3 * k, "%"),
                            Result(set_name, system, "o-a", "gvd", "", -1.5 - k, "dB")]
    results.append(Result("vctk_test_trials_m", "b1", "a-a", "eer", "kaldi", math.nan, "%"))
    results.append(Result("<odd & set>", "b2", "a-a", "eer", "kaldi", 31.25, "%"))
    return results


def table_lines(text):
    return [line for line in text.splitlines() if line.startswith("|")]


def cells(line):
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_markdown_table_columns_rows_and_alignment():
    lines = table_lines(markdown_table(sample_results()))
    assert cells(lines[0]) == [
        "set", "system", "EER kaldi o-o (%)", "EER kaldi o-a (%)", "EER kaldi a-a (%)", "Cllr min o-a (bits)",
        "D_ECE o-a (bits)", "ZEBRA worst o-a (log10)", "tag o-a", "DeID o-a (%)", "G_VD o-a (dB)", "WER (%)"]
    assert len({len(line) for line in lines}) == 1, "pipes must line up"
    rows = [cells(line) for line in lines[2:]]
    assert [row[:2] for row in rows] == [
        ["libri_test_trials_f", "original"], ["libri_test_trials_f", "b2"], ["libri_test_trials_f", "b1"],
        ["vctk_test_trials_m", "original"], ["vctk_test_trials_m", "b2"], ["vctk_test_trials_m", "b1"],
        ["<odd & set>", "b2"]]
    assert rows[0] == ["libri_test_trials_f", "original", "2.50", "17.12", "-", "0.361", "0.200", "1.810", "B",
                       "-", "-", "5.00"]
    assert rows[1][5:9] == ["0.111", "3e-05", "0.310", "A"]
    assert rows[5][4] == "nan" and rows[6][2:4] == ["-", "-"] and rows[6][4] == "31.25"
    rule = cells(lines[1])
    assert rule[0].startswith(":") and rule[2].endswith(":") and rule[8].startswith(":")
    assert lines[2].split("|")[3].endswith("2.50 ") and lines[2].split("|")[9].startswith(" B ")


def test_tables_by_condition_drop_the_condition_from_titles():
    text = markdown_tables_by_condition(sample_results())
    headings = [line for line in text.splitlines() if line.startswith("### ")]
    assert headings == ["### o-o: original enrolment, original trials",
                        "### o-a: original enrolment, anonymised trials (ignorant attacker)",
                        "### a-a: anonymised enrolment, anonymised trials (lazy-informed attacker)",
                        "### asr: speech recognition"]
    sections = text.split("### ")[1:]
    assert cells(table_lines(sections[1])[0]) == [
        "set", "system", "EER kaldi (%)", "Cllr min (bits)", "D_ECE (bits)", "ZEBRA worst (log10)", "tag",
        "DeID (%)", "G_VD (dB)"]
    assert cells(table_lines(sections[3])[0]) == ["set", "system", "WER (%)"]
    assert len(table_lines(sections[2])) == 2 + 2


def test_unknown_metrics_follow_the_catalogue_and_pipes_are_escaped():
    results = [Result("s", "x", "o-a", "top1", "", 0.5, ""), Result("s", "x", "asr", "wer", "", 3.0, "%"),
               Result("s", "x", "o-a", "eer", "rocch", 4.0, "%"), Result("s", "x", "o-a", "eer", "kaldi", 4.5, "%"),
               Result("s|t", "x", "o-a", "eer", "kaldi", 5.0, "%")]
    lines = table_lines(markdown_table(results))
    assert cells(lines[0]) == ["set", "system", "EER kaldi o-a (%)", "EER rocch o-a (%)", "WER (%)", "top1 o-a"]
    assert lines[-1].startswith("| s\\|t ")


def test_invalid_results_are_refused():
    good = Result("s", "x", "o-a", "eer", "kaldi", 1.0, "%")
    with pytest.raises(VoxanonError, match="two results for s / x, eer \\(kaldi\\) \\[o-a\\]"):
        markdown_table([good, good])
    with pytest.raises(VoxanonError, match="no results"):
        markdown_table([])
    with pytest.raises(VoxanonError, match="value must be a number or a tag"):
        markdown_table([Result("s", "x", "o-a", "eer", "kaldi", None, "%")])
    with pytest.raises(VoxanonError, match="not a Result"):
        markdown_table([("s", "x")])


def coloured_figure(colour, stem):
    figure = Figure(figsize=(4.0, 3.0))
    axes = figure.add_subplot()
    axes.fill_between([0, 1], [0, 0], [1, 1], color=np.array(colour) / 255)
    axes.set_xlim(0, 1)
    axes.set_ylim(0, 1)
    axes.set_title(stem.name)
    return save_figure(figure, stem, formats=("png",))[0]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("report")
    figures = [("Red profile <of> B2", coloured_figure(RED, tmp_path / "figs" / "red")),
               ("Blue DET & more", coloured_figure(BLUE, tmp_path / "figs" / "blue"))]
    notes = {"protocol": "VPC 2020 test, ignorant attacker", "encoder": "ECAPA <cosine>",
             "versions": "voxanon 0.1.0\nnumpy " + np.__version__}
    results = sample_results()
    path = write_report(tmp_path / "out", results, figures, "Privacy & utility <demo>", notes=notes)
    return path, results, figures


class Collector(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.links, self.images, self.cells, self.text = [], [], [], [], []
        self._in_cell = False

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        attributes = dict(attrs)
        self.links += [value for key, value in attrs if key in ("src", "href", "srcset", "action", "poster")]
        if tag == "img":
            self.images.append(attributes)
        self._in_cell = tag == "td"

    def handle_endtag(self, tag):
        self._in_cell = False

    def handle_data(self, data):
        self.text.append(data)
        if self._in_cell:
            self.cells.append(data)


def test_report_files(report):
    path, results, _ = report
    out = path.parent
    assert path.name == "report.html"
    assert sorted(p.name for p in out.iterdir()) == ["report.html", "results.csv", "results.json", "results.md"]
    loaded = from_json((out / "results.json").read_text())
    assert len(loaded) == len(results)
    for got, want in zip(loaded, results):
        if isinstance(want.value, float) and math.isnan(want.value):
            assert math.isnan(got.value) and got.label == want.label
        else:
            assert got == want
    assert to_json(loaded) == (out / "results.json").read_text()
    rows = list(csv.reader(io.StringIO((out / "results.csv").read_text())))
    assert tuple(rows[0]) == COLUMNS and len(rows) == 1 + len(results)
    markdown_text = (out / "results.md").read_text()
    assert markdown_text.startswith("# Privacy & utility <demo>\n")
    assert "- **encoder**: ECAPA <cosine>" in markdown_text
    assert markdown_table(results) in markdown_text
    assert "### o-a: original enrolment, anonymised trials (ignorant attacker)" in markdown_text
    assert "![Red profile <of> B2](../figs/red.png)" in markdown_text


def test_html_is_self_contained_escaped_and_complete(report):
    path, results, figures = report
    page = path.read_text()
    parsed = Collector()
    parsed.feed(page)
    assert not [tag for tag in parsed.tags if tag in ("script", "link", "iframe", "object", "embed")]
    assert "http://" not in page and "https://" not in page and "url(" not in page and "@import" not in page
    assert all(link.startswith("data:image/png;base64,") for link in parsed.links)
    assert [image["alt"] for image in parsed.images] == [caption for caption, _ in figures]
    for image, (_, png) in zip(parsed.images, figures):
        assert base64.b64decode(image["src"].split(",", 1)[1]) == png.read_bytes()
    for caption, _ in figures:
        assert f"<figcaption>{caption.replace('&', '&amp;').replace('<', '&lt;').replace('>', '&gt;')}" in page
    assert "<title>Privacy &amp; utility &lt;demo&gt;</title>" in page
    assert "ECAPA &lt;cosine&gt;" in page and "<odd & set>" not in page and "&lt;odd &amp; set&gt;" in page
    text = "".join(parsed.text)
    assert "VPC 2020 test, ignorant attacker" in text and "numpy " + np.__version__ in text
    for result in results:
        assert format_value(result) in parsed.cells, result
    assert page.count("<table>") == 4 + 1 and "<details>" in page
    assert f"<summary>{len(results)} labelled results" in page


def test_report_refuses_a_missing_or_non_png_figure(tmp_path):
    results = sample_results()
    with pytest.raises(VoxanonError, match="missing.png"):
        write_report(tmp_path, results, [("gone", tmp_path / "missing.png")], "t")
    (tmp_path / "fake.png").write_text("not an image")
    with pytest.raises(VoxanonError, match="fake.png is not a PNG"):
        write_report(tmp_path, results, [("fake", tmp_path / "fake.png")], "t")
    assert not (tmp_path / "report.html").exists()


def run_script(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True,
                          timeout=180)


def test_screenshot_script_names_the_missing_browser(tmp_path, report):
    path, _, _ = report
    finished = run_script(path, tmp_path / "shot.png", "--chromium", tmp_path / "no-chromium")
    assert finished.returncode == 2
    assert "apt-get install -y chromium" in finished.stderr and "no-chromium" in finished.stderr
    assert not (tmp_path / "shot.png").exists()


def test_report_renders_in_chromium_with_its_figures(tmp_path, report):
    assert CHROMIUM.is_file(), (f"{CHROMIUM} is missing: the report screenshot test needs Chromium; "
                                "install it with `apt-get update && apt-get install chromium` (Debian package chromium)")
    path, _, _ = report
    shot = tmp_path / "shot.png"
    finished = run_script(path, shot)
    assert finished.returncode == 0, finished.stderr
    pixels = np.asarray(Image.open(shot).convert("RGB"))
    assert pixels.shape == (2400, 1280, 3)
    assert pixels.reshape(-1, 3).std(axis=0).max() > 10, "the screenshot is blank"
    # Each figure is mostly one pure colour: finding it proves the embedded PNG was decoded and drawn.
    for colour in (RED, BLUE):
        found = np.argwhere(np.all(np.abs(pixels.astype(int) - colour) < 40, axis=-1))
        assert len(found) > 20_000, f"figure coloured {colour} not drawn"
        top, left = found.min(axis=0)
        bottom, right = found.max(axis=0)
        region = pixels[max(top - 40, 0):bottom + 40, max(left - 60, 0):right + 20]
        assert len(np.unique(region.reshape(-1, 3), axis=0)) > 10, "figure region is uniform"


WIDTH_PROBE = ("<script>const root = document.documentElement, box = document.querySelector('.table-scroll');"
               "document.body.setAttribute('data-page-width', root.scrollWidth);"
               "document.body.setAttribute('data-window-width', window.innerWidth);"
               "document.body.setAttribute('data-widest-table', Math.max(...Array.from("
               "document.querySelectorAll('table'), t => t.scrollWidth)));</script>")


def wide_results():
    """Forty numeric columns for one condition: far wider than a 1280 px window."""
    return [Result(f"libri_test_trials_{sex}", system, "o-a", f"metric_{k:02d}_with_a_long_name", "variant", 0.123 * k,
                   "bits") for sex in "fm" for system in ("original", "b2") for k in range(40)]


def test_wide_tables_stay_inside_a_1280_px_window(tmp_path):
    assert CHROMIUM.is_file(), f"{CHROMIUM} is missing; install it with `apt-get update && apt-get install chromium`"
    page = write_report(tmp_path / "out", wide_results(), [], "wide", notes={"data": "/a/" + "long_path_" * 40})
    probe = tmp_path / "probe.html"
    probe.write_text(page.read_text().replace("</body>", WIDTH_PROBE + "</body>"))
    finished = subprocess.run([str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                               "--disable-background-networking", "--disable-component-update", "--hide-scrollbars",
                               f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1280,800", "--dump-dom",
                               probe.as_uri()], capture_output=True, text=True, timeout=120)
    assert finished.returncode == 0, finished.stderr[-2000:]
    found = {name: int(value) for name, value in
             __import__("re").findall(r'data-(page-width|window-width|widest-table)="(\d+)"', finished.stdout)}
    assert found["window-width"] == 1280, found
    assert found["widest-table"] > 1280, found       # the table really is wider than the window ...
    assert found["page-width"] <= 1280, found        # ... yet the page is not: the table scrolls in its box


def vpc2024_results():
    """One vpc2024 evaluation of B2 with a semi-informed attacker on two sets, and WER: before, results.md printed
    these in a 40-column all-metrics table and a 22-column a-a table."""
    from dataclasses import replace

    from voxanon.pipeline.evaluation.evaluate import results_from_metrics

    results = []
    for k, set_name in enumerate(("libri_dev_trials_f", "libri_dev_trials_m")):
        for system, condition, attacker, model in (("original", "o-o", "", "ge2e"), ("b2", "o-a", "ignorant", "ge2e"),
                                                   ("b2", "a-a", "lazy-informed", "ge2e"),
                                                   ("b2", "a-a", "semi-informed", "asv_b2")):
            metrics = {"eer_speechbrain": 10.0 + k + len(results), "cllr": 0.99, "min_cllr": 0.4, "linkability": 0.3,
                       "zebra_dece": 0.2, "zebra_worst_case": 1.0, "zebra_tag": "B", "n_target": 10,
                       "n_nontarget": 90}
            results += [replace(r, attacker=attacker, model=model) for r in results_from_metrics(
                set_name, system, condition, metrics, ["speechbrain"], calibrated_cllr=0.5)]
    results += [Result("libri_dev_asr", system, "asr", "wer", "whisper-tiny.en", wer, "%", model="whisper-tiny.en")
                for system, wer in (("original", 4.1), ("b2", 9.3))]
    return results


def markdown_tables(text):
    """Each Markdown table of ``text`` as (header cells, data rows of cells)."""
    tables, lines = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            lines.append(cells(line))
        elif lines:
            tables.append((lines[0], lines[2:]))
            lines = []
    return tables


def test_no_table_of_results_md_is_wider_than_twelve_columns(tmp_path):
    results = vpc2024_results()
    write_report(tmp_path, results, [], "vpc2024 with a semi-informed attacker")
    text = (tmp_path / "results.md").read_text()
    tables = markdown_tables(text)
    assert MAX_COLUMNS == 12 and max(len(header) for header, _ in tables) <= 12, [len(h) for h, _ in tables]
    # The all-metrics view, split by metric family, still shows every record once.
    every = markdown_tables(text.split("## All metrics")[1])
    assert len(every) > 1 and all(header[:2] == ["set", "system"] for header, _ in every)
    assert sum(cell != "-" for _, rows in every for row in rows for cell in row[2:]) == len(results)
    assert "### ASV (EER, Cllr min)" in text


def test_a_a_table_has_one_row_per_attacker():
    text = markdown_tables_by_condition(vpc2024_results())
    section = text.split("### a-a")[1].split("\n### ")[0]
    tables = markdown_tables(section)
    for header, rows in tables:
        assert header[:3] == ["set", "system", "attacker"]
        assert not any("informed" in title for title in header), header
        assert [(row[0], row[2]) for row in rows] == [(s, a) for s in ("libri_dev_trials_f", "libri_dev_trials_m")
                                                      for a in ("lazy-informed", "semi-informed")]
    assert tables[0][0][3] == "EER speechbrain (%)"
    # One attacker per condition elsewhere: no attacker column.
    assert cells(table_lines(text.split("### o-a")[1])[0])[:3] == ["set", "system", "EER speechbrain (%)"]


def test_figures_are_drawn_again_only_when_what_they_show_changes(tmp_path, monkeypatch):
    """write_outputs keeps a figure whose scores, labels and drawing code are those of its files
    (``plots/<name>.inputs``), and draws it again when any of them changed or a file is missing."""
    from voxanon.pipeline.evaluation import outputs
    from voxanon.pipeline.evaluation.evaluate import Evaluation, SetScores

    rng = np.random.default_rng(0)
    tar, non = rng.normal(2, 1, 40), rng.normal(-2, 1, 400)

    def write(tar_scores):
        evaluation = Evaluation([Result("dev", "b2", "o-a", "eer", "kaldi", 10.0, "%")],
                                [SetScores("dev", "b2", "o-a", tar_scores, non)], {}, 0)
        outputs.write_outputs(tmp_path, evaluation, "figures", {})
        return {p.name: p.stat().st_mtime_ns for p in (tmp_path / "plots").glob("*.p*")}

    first = write(tar)
    assert sorted(first) == ["dev_det.pdf", "dev_det.png", "dev_ece_profile.pdf", "dev_ece_profile.png"]
    assert write(tar.copy()) == first
    assert all(write(tar + 0.5)[name] != first[name] for name in first)   # other scores
    second = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "plots").glob("*.p*")}
    (tmp_path / "plots" / "dev_det.png").unlink()
    third = write(tar + 0.5)
    assert third["dev_det.png"] != second["dev_det.png"]
    assert third["dev_ece_profile.png"] == second["dev_ece_profile.png"]
    monkeypatch.setattr(outputs, "_package_source_digest", lambda package: "other code")
    assert all(write(tar + 0.5)[name] != third[name] for name in third)   # other drawing code
