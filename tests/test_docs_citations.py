"""Every citation in the source tree names something a reader can find: a published paper, a public repository
and file, or a page of docs/. Short tags of documents that were never part of the repository (a maths
specification's sections, a reference-facts file's parts, bracketed seed-paper tags) are refused.
"""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("pipeline", "models", "eval", "data_prep", "recipes", "docs", "tests", "benchmarks", "scripts", "api", "examples")
TOP_FILES = ("README.md", "CHANGELOG.md")
SUFFIXES = {".py", ".md", ".yaml", ".yml", ".toml", ".txt", ".cfg"}
SECTION = "\u00a7"
# Written with escapes and character classes so that this file does not match its own patterns.
UNFINDABLE = {
    "a section of the maths specification": re.compile(rf"\bspec(?:\.md)?'?s? ?{SECTION}", re.IGNORECASE),
    "the maths specification file": re.compile(r"\bspec[.]md\b"),
    "the specification's assumption tag": re.compile(r"\bspec\b\W{0,3}ASSUMPTION|ASSUMPTION of the sp" r"ec\b"),
    "the specification itself": re.compile(r"\bthe sp" r"ec(?:'s\b|\))"),
    "a seed-paper tag": re.compile(r"\[S[0-9]+\]"),
    "the reference-facts file": re.compile(r"\banchors(?:[.]md)?,? +(?:Part|" + SECTION + ")|\banchors[.]md\b"),
    "a part of the reference-facts file": re.compile(r"\bPart [ABC] " + SECTION),
    "the specification's external-code tag": re.compile(r"\bE" r"XT\b"),
    "a bare section number": re.compile(r"\(" + SECTION + r"[0-9]"),
}


def _source_files():
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix in SUFFIXES and path.is_file() and "__pycache__" not in path.parts:
                yield path
    for name in TOP_FILES:
        if (ROOT / name).is_file():
            yield ROOT / name


def _citations(text: str) -> list[tuple[int, str, str]]:
    return [(number, what, line.strip()) for number, line in enumerate(text.splitlines(), 1)
            for what, pattern in UNFINDABLE.items() if pattern.search(line)]


def test_patterns_catch_each_kind_of_unfindable_citation():
    cited = {
        "spec " + SECTION + "6.5": "a section of the maths specification",
        "Spec " + SECTION + "3 and " + SECTION + "5": "a section of the maths specification",
        "see spec" + ".md": "the maths specification file",
        "[" + "S4] Eq. 69": "a seed-paper tag",
        "(anchors" + " Part A " + SECTION + "1.6)": "the reference-facts file",
        "anchors" + ".md Part B": "the reference-facts file",
        "Part" + " B " + SECTION + "1.2)": "a part of the reference-facts file",
        "start at 0 (E" + "XT)": "the specification's external-code tag",
        "Architecture (" + SECTION + "9.2)": "a bare section number",
        "(ASSUMPTION of the " + "spec)": "the specification's assumption tag",
    }
    for line, kind in cited.items():
        assert kind in {what for _, what, _ in _citations(line)}, line


def test_patterns_leave_findable_citations_and_ordinary_words_alone():
    for line in ("Noé, PhD thesis (Avignon, 2023), " + SECTION + "5.4",
                 "Nautsch et al., The Privacy ZEBRA, Interspeech 2020, Eq. 6",
                 "duplicate keys, anchors and merges of the YAML",
                 "Part 3 on CUDA: speed of the batched torch version",
                 "an encoder spec (see ENCODERS)", "spec = torch.stft(audio)"):
        assert _citations(line) == [], line


def test_no_citation_of_a_document_outside_the_repository():
    found = [f"{path.relative_to(ROOT)}:{number}: {what}: {line}"
             for path in _source_files() for number, what, line in _citations(path.read_text(encoding="utf-8"))]
    assert not found, "cite the published source or a docs/ page instead:\n" + "\n".join(found)


# A path into this repository: one of its folders, then names, ending in a file's suffix.
REPOSITORY_PATH = re.compile(r"(?<![\w./-])((?:" + "|".join(FOLDERS) + r")/[\w./-]*\w\.(?:py|md|yaml|txt|sh))\b")
PLACEHOLDERS = {"tests/test_x.py"}   # docs/development.md's pattern of a command line


def test_every_repository_file_named_in_the_docs_and_the_code_exists():
    named = [(path, number, cited) for path in _source_files()
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             for cited in REPOSITORY_PATH.findall(line)
             if cited not in PLACEHOLDERS and "*" not in cited and not (ROOT / cited).exists()]
    assert not named, "names a file that is not in the repository:\n" + "\n".join(
        f"{path.relative_to(ROOT)}:{number}: {cited}" for path, number, cited in named)
