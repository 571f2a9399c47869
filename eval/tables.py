"""Result tables: one row per (set, system), one column per (metric, variant, condition, unit).

:func:`wide_table` lays a list of :class:`~voxanon.eval.results.Result` out as a
:class:`Table` of display strings; :func:`markdown` renders any table with aligned
pipes, so it reads in a terminal and renders as GitHub Markdown. The HTML report
(:mod:`voxanon.eval.report`) renders the same tables.

Columns come in a fixed order: ASV privacy (EER, Cllr, linkability), then ZEBRA,
voice similarity, utility, then metrics this module does not know (by name). Within
a metric, variants then conditions follow their catalogue order (``o-o``, ``o-a``,
``a-a``, ...), then attackers (an a-a column per attacker: lazy-informed, semi-informed),
or, with ``attacker_rows``, one row per attacker instead. Rows keep the order in which sets
first appear, with ``original`` first within a set. Missing cells show as ``-``.

:func:`narrow_tables` deals a wide table's columns into tables of at most :data:`MAX_COLUMNS`
columns (a metric family, such as ASV or ZEBRA, kept whole where it fits), so that no printed or
Markdown table runs far past a screen; ``results.csv`` holds every record in one table.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Real
from typing import Iterable, Sequence

from ..data_prep.errors import VoxanonError
from .results import CONDITIONS, Result
from .zebra import format_zebra_value

MISSING = "-"
GROUPS = ("asv", "zebra", "similarity", "utility", "other")
GROUP_TITLES = {"asv": "ASV", "zebra": "ZEBRA", "similarity": "voice similarity", "utility": "utility",
                "other": "counts and other metrics"}
# The widest table :func:`narrow_tables` makes, its row-label columns (set, system, attacker) included.
MAX_COLUMNS = 12


@dataclass(frozen=True)
class MetricStyle:
    title: str
    group: str
    # The condition a metric always has (WER is always "asr"); it is left out of column titles.
    implied_condition: str = ""


METRICS = {
    "eer": MetricStyle("EER", "asv"),
    "min_cllr": MetricStyle("Cllr min", "asv"),
    "cllr": MetricStyle("Cllr", "asv"),
    "cllr_calibrated": MetricStyle("Cllr speaker-CV calibrated", "asv"),
    "linkability": MetricStyle("D_sys", "asv"),
    "zebra_dece": MetricStyle("D_ECE", "zebra"),
    "zebra_worst_case": MetricStyle("ZEBRA worst", "zebra"),
    "zebra_tag": MetricStyle("tag", "zebra"),
    "dece_relative": MetricStyle("D_ECE rel.", "zebra"),
    "min_cllr_relative": MetricStyle("Cllr min rel.", "zebra"),
    "dece_gain": MetricStyle("D_ECE gain", "zebra"),
    "min_cllr_gain": MetricStyle("Cllr min gain", "zebra"),
    "cece": MetricStyle("C_ECE", "zebra"),
    "cece_cllr": MetricStyle("Cllr calibrated", "zebra"),
    "deid": MetricStyle("DeID", "similarity"),
    "gvd": MetricStyle("G_VD", "similarity"),
    "pitch_correlation": MetricStyle("rho_F0", "similarity"),
    "wer": MetricStyle("WER", "utility", implied_condition="asr"),
    "wer_increase": MetricStyle("WER increase", "utility", implied_condition="asr"),
    "wer_substitutions": MetricStyle("S", "utility", implied_condition="asr"),
    "wer_deletions": MetricStyle("D", "utility", implied_condition="asr"),
    "wer_insertions": MetricStyle("I", "utility", implied_condition="asr"),
    "wer_reference_words": MetricStyle("words", "utility", implied_condition="asr"),
    "uar": MetricStyle("UAR", "utility", implied_condition="ser"),
    "n_trials": MetricStyle("trials", "other"),
    "top1_speaker": MetricStyle("top-1 speaker", "asv"),
    "top1_segment": MetricStyle("top-1 segment", "asv"),
}
# Counts print as integers.
COUNT_METRICS = frozenset({"n_trials", "wer_substitutions", "wer_deletions", "wer_insertions", "wer_reference_words"})
# The reference tools print ZEBRA numbers as %.3f, or %.e below 5e-4 (Voice-Privacy-Challenge/zebra).
ZEBRA_FORMATTED = frozenset({"zebra_dece", "zebra_worst_case"})
VARIANT_ORDER = ("", "kaldi", "rocch", "speechbrain", "sweep")
DIGITS_BY_UNIT = {"%": 2, "dB": 2}
DEFAULT_DIGITS = 3
REFERENCE_SYSTEM = "original"


@dataclass(frozen=True)
class Table:
    """Display strings: ``header`` titles, ``rows`` of cells, ``numeric[j]`` right-aligns column j."""

    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    numeric: tuple[bool, ...]


def metric_style(metric: str) -> MetricStyle:
    return METRICS.get(metric, MetricStyle(metric, "other"))


def column_title(metric: str, variant: str, condition: str, unit: str, *, show_condition: bool = True,
                 attacker: str = "") -> str:
    """E.g. ``EER kaldi o-a (%)``, ``EER speechbrain a-a semi-informed (%)``, ``tag o-a``, ``WER (%)``."""
    style = metric_style(metric)
    parts = [style.title]
    if variant:
        parts.append(variant)
    if show_condition and condition and condition != style.implied_condition:
        parts.append(condition)
    if attacker:
        parts.append(attacker)
    title = " ".join(parts)
    return f"{title} ({unit})" if unit else title


def format_value(result: Result, digits: int | None = None) -> str:
    """The value without its unit. ``digits`` defaults to 2 for % and dB, else 3; ZEBRA
    D_ECE and worst case use the reference formatting unless ``digits`` is given."""
    value = result.value
    if isinstance(value, str):
        return value
    value = float(value)
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if digits is None and result.metric in ZEBRA_FORMATTED:
        return format_zebra_value(value)
    if result.metric in COUNT_METRICS and value.is_integer():
        return f"{value:.0f}"
    places = DIGITS_BY_UNIT.get(result.unit, DEFAULT_DIGITS) if digits is None else digits
    return f"{value:.{places}f}"


def validate_results(results: Iterable[Result]) -> list[Result]:
    """The results as a list; raises VoxanonError for non-records, bad values or duplicates."""
    checked: list[Result] = []
    seen: set[tuple[str, ...]] = set()
    for index, result in enumerate(results):
        if not isinstance(result, Result):
            raise VoxanonError(f"result {index} is a {type(result).__name__}, not a Result record")
        if isinstance(result.value, bool) or not isinstance(result.value, (str, Real)):
            raise VoxanonError(f"result {index} ({result.set} / {result.system}, {result.label}): "
                               f"value must be a number or a tag, got {result.value!r}")
        key = (result.set, result.system, result.condition, result.metric, result.variant, result.attacker)
        if key in seen:
            raise VoxanonError(f"two results for {result.set} / {result.system}, {result.label}")
        seen.add(key)
        checked.append(result)
    if not checked:
        raise VoxanonError("no results to tabulate")
    return checked


ATTACKER_ORDER = ("", "ignorant", "lazy-informed", "semi-informed")


def attacker_rank(attacker: str) -> tuple[int, str]:
    return ((ATTACKER_ORDER.index(attacker), "") if attacker in ATTACKER_ORDER
            else (len(ATTACKER_ORDER), attacker))


def condition_rank(condition: str) -> tuple[int, str]:
    known = list(CONDITIONS)
    if condition in known:
        return known.index(condition), ""
    return len(known) + (condition == ""), condition


def _column_key(result: Result, attacker_rows: bool = False) -> tuple:
    style = metric_style(result.metric)
    metric_rank = list(METRICS).index(result.metric) if result.metric in METRICS else len(METRICS)
    variant_rank = ((VARIANT_ORDER.index(result.variant), "") if result.variant in VARIANT_ORDER
                    else (len(VARIANT_ORDER), result.variant))
    return (GROUPS.index(style.group), metric_rank, result.metric, variant_rank, condition_rank(result.condition),
            attacker_rank("" if attacker_rows else result.attacker), result.unit)


def _row_key(result: Result, attacker_rows: bool) -> tuple[str, ...]:
    return (result.set, result.system, result.attacker) if attacker_rows else (result.set, result.system)


def _row_keys(results: Sequence[Result], attacker_rows: bool) -> list[tuple[str, ...]]:
    set_order: dict[str, int] = {}
    system_order: dict[str, int] = {}
    for result in results:
        set_order.setdefault(result.set, len(set_order))
        system_order.setdefault(result.system, len(system_order))
    rows = {_row_key(result, attacker_rows) for result in results}
    return sorted(rows, key=lambda row: (set_order[row[0]], row[1] != REFERENCE_SYSTEM, system_order[row[1]],
                                         *(attacker_rank(attacker) for attacker in row[2:])))


def _columns(results: Sequence[Result], attacker_rows: bool) -> list[tuple[tuple, Result]]:
    """(column key, a record of the column) in column order."""
    return sorted({_column_key(r, attacker_rows): r for r in results}.items())


def wide_table(results: Iterable[Result], *, show_condition: bool = True, digits: int | None = None,
               attacker_rows: bool = False) -> Table:
    """Rows (set, system), one column per metric / variant / condition / unit (and attacker); with
    ``attacker_rows``, rows (set, system, attacker) and no column per attacker."""
    results = validate_results(results)
    columns = _columns(results, attacker_rows)
    column_index = {key: j for j, (key, _) in enumerate(columns)}
    rows = _row_keys(results, attacker_rows)
    row_index = {row: i for i, row in enumerate(rows)}
    cells = [[MISSING] * len(columns) for _ in rows]
    numeric = [True] * len(columns)
    for result in results:
        j = column_index[_column_key(result, attacker_rows)]
        cells[row_index[_row_key(result, attacker_rows)]][j] = format_value(result, digits)
        numeric[j] = numeric[j] and not isinstance(result.value, str)
    # Without conditions (one table per condition) the attacker is named only where the table has several.
    show_attacker = not attacker_rows and (show_condition or len(named_attackers(results)) > 1)
    labels = ("set", "system", "attacker") if attacker_rows else ("set", "system")
    header = labels + tuple(
        column_title(r.metric, r.variant, r.condition, r.unit, show_condition=show_condition,
                     attacker=r.attacker if show_attacker else "") for _, r in columns)
    return Table(header=header, rows=tuple((*row, *cells_of_row) for row, cells_of_row in zip(rows, cells)),
                 numeric=(False,) * len(labels) + tuple(numeric))


def narrow_tables(results: Iterable[Result], *, show_condition: bool = True, digits: int | None = None,
                  attacker_rows: bool = False, max_columns: int = MAX_COLUMNS) -> list[tuple[str, Table]]:
    """:func:`wide_table`'s columns dealt into tables of at most ``max_columns`` columns, row labels included, as
    ``(title, table)``: metric families (:data:`GROUP_TITLES`) whole and packed in order where they fit, a wider
    family by metric, a metric wider still in pieces. One table (title ``""``) when it fits; each table keeps
    the rows that have a value in it."""
    results = validate_results(results)
    wide = wide_table(results, show_condition=show_condition, digits=digits, attacker_rows=attacker_rows)
    columns = [record for _, record in _columns(results, attacker_rows)]
    labels = len(wide.header) - len(columns)
    budget = max(1, max_columns - labels)
    if len(columns) <= budget:
        return [("", wide)]
    units: list[list[int]] = []
    for group in GROUPS:
        family = [j for j, r in enumerate(columns) if metric_style(r.metric).group == group]
        if len(family) <= budget:
            units += [family] if family else []
            continue
        for metric in dict.fromkeys(columns[j].metric for j in family):
            chosen = [j for j in family if columns[j].metric == metric]
            units += [chosen[start:start + budget] for start in range(0, len(chosen), budget)]
    parts: list[list[int]] = []
    for unit in units:
        if parts and len(parts[-1]) + len(unit) <= budget:
            parts[-1] += unit
        else:
            parts.append(list(unit))
    return [(_part_title([columns[j] for j in part], columns), _table_part(wide, labels, part)) for part in parts]


def _part_title(chosen: list[Result], every: list[Result]) -> str:
    """The metric families a part of a split table holds, with its metrics where it holds part of a family."""
    titles = []
    for group in dict.fromkeys(metric_style(r.metric).group for r in chosen):
        held = [r for r in chosen if metric_style(r.metric).group == group]
        whole = len(held) == sum(metric_style(r.metric).group == group for r in every)
        metrics = ", ".join(dict.fromkeys(metric_style(r.metric).title for r in held))
        titles.append(GROUP_TITLES[group] if whole else f"{GROUP_TITLES[group]} ({metrics})")
    return "; ".join(titles)


def _table_part(table: Table, labels: int, columns: list[int]) -> Table:
    """The row labels and ``columns`` (indices past the labels) of ``table``, rows with no value in them left out."""
    keep = list(range(labels)) + [labels + j for j in columns]
    rows = tuple(tuple(row[k] for k in keep) for row in table.rows
                 if any(row[labels + j] != MISSING for j in columns))
    return Table(tuple(table.header[k] for k in keep), rows, tuple(table.numeric[k] for k in keep))


def long_table(results: Iterable[Result], *, digits: int | None = None) -> Table:
    """One row per result, in the given order: set, system, condition, attacker, model, metric, variant, value, unit."""
    results = validate_results(results)
    rows = tuple((r.set, r.system, r.condition, r.attacker, r.model, r.metric, r.variant, format_value(r, digits),
                  r.unit) for r in results)
    return Table(header=("set", "system", "condition", "attacker", "model", "metric", "variant", "value", "unit"),
                 rows=rows, numeric=(False,) * 7 + (True, False))


def condition_groups(results: Iterable[Result]) -> list[tuple[str, list[Result]]]:
    """The results split by condition, conditions in catalogue order (``o-o``, ``o-a``, ``a-a``, ``asr``, ...)."""
    results = validate_results(results)
    groups: dict[str, list[Result]] = {}
    for result in results:
        groups.setdefault(result.condition, []).append(result)
    return sorted(groups.items(), key=lambda item: condition_rank(item[0]))


def condition_heading(condition: str, attackers: Iterable[str] = ()) -> str:
    """E.g. ``o-a: original enrolment, anonymised trials (ignorant attacker)``; ``attackers`` (those a
    group's results name) replace the catalogue's, e.g. ``(lazy-informed and semi-informed attackers)``."""
    if not condition:
        return "no condition"
    description = CONDITIONS.get(condition)
    named = sorted({a for a in attackers if a}, key=attacker_rank)
    if named:
        sides = (description or "").split(" (")[0]
        who = f"{' and '.join(named)} attacker{'s' if len(named) > 1 else ''}"
        return f"{condition}: {sides} ({who})" if sides else f"{condition} ({who})"
    return f"{condition}: {description}" if description else condition


def named_attackers(results: Iterable[Result]) -> set[str]:
    """The attackers that records name (records such as DeID or G_VD name none)."""
    return {r.attacker for r in results if r.attacker}


def group_attackers(group: Iterable[Result]) -> list[str]:
    return [r.attacker for r in group]


def _escape_markdown(cell: str) -> str:
    return cell.replace("|", "\\|").replace("\n", " ")


def markdown(table: Table) -> str:
    """GitHub Markdown with aligned pipes; numeric columns right-aligned."""
    header = [_escape_markdown(cell) for cell in table.header]
    rows = [[_escape_markdown(cell) for cell in row] for row in table.rows]
    widths = [max(3, len(header[j]), *(len(row[j]) for row in rows)) for j in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        padded = (cell.rjust(width) if right else cell.ljust(width)
                  for cell, width, right in zip(cells, widths, table.numeric))
        return "| " + " | ".join(padded) + " |"

    rule = "|" + "|".join(("-" * (width + 1) + ":") if right else (":" + "-" * (width + 1))
                          for width, right in zip(widths, table.numeric)) + "|"
    return "\n".join([line(header), rule, *(line(row) for row in rows)]) + "\n"


PUBLISHED_PREFIX = "published ("


def table_notes(results: Iterable[Result]) -> list[str]:
    """What the Cllr columns and any published rows in these results mean, one sentence each."""
    results = list(results)
    metrics = {(r.metric, r.variant) for r in results}
    notes = []
    uncalibrated = sorted(variant for metric, variant in metrics
                          if metric == "cllr" and variant.startswith("uncalibrated"))
    if uncalibrated:
        notes.append(f"Cllr {uncalibrated[0]}: Cllr of the raw scores, which are not LLRs (uncalibrated); near 1 bit "
                     "whatever the discrimination, so it says little on its own.")
    if any(metric == "cllr" and not variant for metric, variant in metrics):
        notes.append("Cllr: Cllr of the scores taken as LLRs as they are (no calibration).")
    if any(metric == "cllr_calibrated" for metric, _ in metrics):
        notes.append("Cllr speaker-CV calibrated: Cllr after linear (logistic-regression) calibration cross-validated "
                     "over speakers: speakers are dealt into 5 folds, and each trial (enrolment speaker, test "
                     "speaker) is scored by a map fitted only on trials involving neither speaker's fold (ridge "
                     "logistic regression: a weak Gaussian prior on the slope; each LLR bounded by what its Nt target "
                     "and Nn non-target fitting trials support, [-ln(Nt+1), ln(Nn+1)]).")
    if any(metric == "min_cllr" for metric, _ in metrics):
        notes.append("Cllr min: Cllr after oracle PAV calibration on the very trials scored (the discrimination "
                     "part; calibrated Cllr minus Cllr min is the calibration loss left).")
    notes += model_notes(results) + record_notes(results)
    published = sorted({r.system.split(")")[0] + ")" for r in results if r.system.startswith(PUBLISHED_PREFIX)})
    for label in published:
        notes.append(f"Rows '{label} ...' are figures published by the challenge for its baselines (data shipped "
                     "with voxanon, source in recipes/published/), not computed here; their a-a EER is the "
                     "semi-informed attacker's.")
    return notes


def model_notes(results: Iterable[Result]) -> list[str]:
    """Which model each condition and attacker used (the user's records; published rows say theirs in a note)."""
    models: dict[tuple[str, str], set[str]] = {}
    for r in results:
        if r.model and not r.system.startswith(PUBLISHED_PREFIX):
            models.setdefault((r.condition, r.attacker), set()).add(r.model)
    return [f"{condition}{f' {attacker} attacker' if attacker else ''}: model {', '.join(sorted(names))}."
            for (condition, attacker), names in sorted(models.items(),
                                                       key=lambda item: (condition_rank(item[0][0]),
                                                                         attacker_rank(item[0][1])))]


def record_notes(results: Iterable[Result]) -> list[str]:
    """The caveats that single records carry (a calibration fitted on separable folds, a value not estimable)."""
    return [f"{r.set}, {r.system}, {r.condition}{f' {r.attacker} attacker' if r.attacker else ''}, "
            f"{METRICS[r.metric].title if r.metric in METRICS else r.metric}: {r.note}."
            for r in results if r.note]


def markdown_table(results: Iterable[Result], *, digits: int | None = None) -> str:
    """Every metric in one table: rows (set, system), columns such as ``EER kaldi o-a (%)``."""
    return markdown(wide_table(results, digits=digits))


def condition_tables(group: Sequence[Result], *, digits: int | None = None) -> list[tuple[str, Table]]:
    """The tables of one condition's results: columns titled without the condition, one row per attacker where
    the condition has several (a-a: lazy- and semi-informed), split where wider than :data:`MAX_COLUMNS`."""
    return narrow_tables(group, show_condition=False, digits=digits, attacker_rows=len(named_attackers(group)) > 1)


def _markdown_parts(parts: list[tuple[str, Table]], heading: str) -> str:
    return "\n".join((f"{heading} {_escape_markdown(title)}\n\n" if title else "") + markdown(table)
                     for title, table in parts)


def markdown_tables_by_condition(results: Iterable[Result], *, digits: int | None = None) -> str:
    """One narrower table per condition (or several, each at most :data:`MAX_COLUMNS` wide), then the notes."""
    results = validate_results(results)
    sections = [f"### {_escape_markdown(condition_heading(condition, group_attackers(group)))}\n\n"
                + _markdown_parts(condition_tables(group, digits=digits), "####")
                for condition, group in condition_groups(results)]
    notes = table_notes(results)
    if notes:
        sections.append("".join(f"- {_escape_markdown(note)}\n" for note in notes))
    return "\n".join(sections)


def markdown_tables_by_family(results: Iterable[Result], *, digits: int | None = None) -> str:
    """Every metric, rows (set, system): the wide table dealt into tables of at most :data:`MAX_COLUMNS` columns by
    metric family, each under a ``###`` heading naming what it holds."""
    return _markdown_parts(narrow_tables(results, digits=digits), "###")
