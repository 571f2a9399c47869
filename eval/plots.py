"""Figures: the ECE / ZEBRA profile, similarity matrices, zoo plot, empirical calibration, DET curves.

Each ``*_figure`` function builds and returns a matplotlib ``Figure`` (no pyplot, so no
global state and no display needed); :func:`save_figure` writes it atomically as PNG
and PDF.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import numpy as np
from matplotlib import colormaps
from matplotlib.figure import Figure
# The standard normal's quantile function (scipy.stats.norm.ppf's values), without scipy.stats's 0.5 s import.
from scipy.special import ndtri as probit

from ..data_prep.atomic import atomic_path
from .calibration import empirical_calibration
from .cllr import PRIOR_LOG_ODDS_GRID, ece, min_ece, prior_entropy
from .eer import roc_convex_hull, roc_points, rocch_eer
from .scores import ScoreError
from .similarity import SimilarityMatrices, ZooCoordinates
from .zebra import zebra

FIGURE_FORMATS = ("png", "pdf")
# A labelled score set: (legend label, target scores, non-target scores).
System = tuple[str, Sequence[float], Sequence[float]]


def save_figure(figure: Figure, stem: str | os.PathLike, formats: Sequence[str] = FIGURE_FORMATS) -> list[Path]:
    """Write ``<stem>.<format>`` for each format, each atomically; returns the paths."""
    written = []
    for extension in formats:
        target = Path(f"{stem}.{extension}")
        with atomic_path(target) as tmp:
            figure.savefig(tmp, format=extension, dpi=150, bbox_inches="tight")
        written.append(target)
    return written


def ece_profile_figure(systems: Sequence[System], *, show_actual: bool = False, normalized: bool = False,
                       prior_log_odds=PRIOR_LOG_ODDS_GRID) -> Figure:
    """The ZEBRA plot (Nautsch et al. 2020): ECE in bits against the prior log-odds logit(pi).

    Black: H(pi), "perfect privacy (0, 0, 0)". One minimum-ECE curve per system,
    labelled ``label (D_ECE, l_w, tag)``; the area between it and the black curve is
    D_ECE. ``show_actual`` adds each system's actual ECE (thin), reading the scores as
    LLRs; the y-limit then becomes ``1.4 max(1, min(actual ECE))`` as in the reference
    code, else [0, 1.4]. ``normalized`` divides every curve by H(pi) (NECE).
    """
    if not systems:
        raise ScoreError("ECE profile: no score set to plot")
    plo = np.asarray(prior_log_odds, dtype=np.float64)
    reference = prior_entropy(plo)
    scale = reference if normalized else np.ones_like(reference)
    figure = Figure(figsize=(6.4, 4.2))
    axes = figure.add_subplot()
    axes.plot(plo, reference / scale, color="black", linewidth=2, label="perfect privacy (0, 0, 0)")
    colours = _colours(len(systems))
    upper = 1.4
    for (label, tar, non), colour in zip(systems, colours):
        # The pure PAV LLRs: the 1e-6 ramp is invisible and one value per block is fast.
        axes.plot(plo, min_ece(tar, non, plo, monotonicity_epsilon=0.0) / scale, color=colour, linewidth=2,
                  label=f"{label} {zebra(tar, non)}")
        if show_actual:
            actual = ece(tar, non, plo)
            axes.plot(plo, actual / scale, color=colour, linewidth=0.8, linestyle="--", label=f"{label} actual ECE")
            upper = max(upper, 1.4 * max(1.0, float(np.min(actual / scale))))
    axes.axvline(0.0, color="grey", linewidth=0.5, linestyle=":")
    axes.set_xlim(plo[0], plo[-1])
    axes.set_ylim(0.0, upper)
    axes.set_xlabel(r"prior log-odds $\mathrm{logit}(\pi)$")
    axes.set_ylabel("normalised ECE" if normalized else "ECE [bits]")
    axes.legend(fontsize="small", loc="upper right")
    axes.grid(alpha=0.3)
    return figure


def _colours(count: int) -> list:
    palette = colormaps["tab20"]
    return [palette(2 * k % 20) for k in range(count)]


def similarity_figure(matrices: SimilarityMatrices, *, log_scale: bool = False) -> Figure:
    """The 2N x 2N block figure ``[[M_OO, M_OP], [M_OP^T, M_PP]]`` (Noé et al. 2020, Fig. 1), colours fixed on [0, 1].

    ``log_scale`` shows ``log2`` similarities instead (Noé 2023 thesis, Fig. 25), from the lowest
    value up to 0. Empty cells are left blank.
    """
    blocks = np.block([[matrices.oo.matrix, matrices.op.matrix], [matrices.op.matrix.T, matrices.pp.matrix]])
    n = len(matrices.speakers)
    figure = Figure(figsize=(6.4, 5.6))
    axes = figure.add_subplot()
    if log_scale:
        with np.errstate(divide="ignore"):
            values = np.log2(blocks)
        finite = values[np.isfinite(values)]
        low = float(finite.min()) if finite.size else -1.0
        image = axes.imshow(values, cmap="YlOrRd", vmin=min(low, -1e-3), vmax=0.0, interpolation="nearest")
        label = "log2 similarity"
    else:
        image = axes.imshow(blocks, cmap="YlOrRd", vmin=0.0, vmax=1.0, interpolation="nearest")
        label = "similarity"
    axes.axhline(n - 0.5, color="black", linewidth=1)
    axes.axvline(n - 0.5, color="black", linewidth=1)
    ticks = [(n - 1) / 2, n + (n - 1) / 2]
    axes.set_xticks(ticks, ["original", "protected"])
    axes.set_yticks(ticks, ["original", "protected"], rotation=90, va="center")
    axes.set_title(f"OO | OP over PO | PP   (DeID {100 * matrices.deid:.2f}%, G_VD {matrices.gvd_db:.2f} dB)",
                   fontsize="small")
    figure.colorbar(image, ax=axes, label=label)
    return figure


def zoo_figure(zoo: ZooCoordinates, *, quartiles: bool = True, title: str | None = None) -> Figure:
    """Zoo plot (Noé et al. 2022, §4.3): mean target LLR (x) against mean non-target LLR (y) per speaker.

    Points are annotated with the speaker's index in the matrix order. ``quartiles``
    draws the Dunstone-Yager lines at the 25% and 75% quantiles of each axis.
    """
    x, y = zoo.target_mean_llr, zoo.nontarget_mean_llr
    figure = Figure(figsize=(5.6, 5.0))
    axes = figure.add_subplot()
    axes.scatter(x, y, s=18, color="tab:blue")
    for index, (xi, yi) in enumerate(zip(x, y)):
        if np.isfinite(xi) and np.isfinite(yi):
            axes.annotate(str(index), (xi, yi), fontsize="x-small", xytext=(2, 2), textcoords="offset points")
    if quartiles:
        for quantile in (25, 75):
            axes.axvline(np.nanpercentile(x, quantile), color="grey", linewidth=0.6, linestyle="--")
            axes.axhline(np.nanpercentile(y, quantile), color="grey", linewidth=0.6, linestyle="--")
    axes.ticklabel_format(useOffset=False)
    axes.set_xlabel("mean target LLR")
    axes.set_ylabel("mean non-target LLR")
    if title:
        axes.set_title(title)
    axes.grid(alpha=0.3)
    return figure


def calibration_figure(tar_llr, non_llr, *, n_bins: int = 20) -> Figure:
    """Empirical calibration plot (Noé et al. 2022, §3.5): target fraction per posterior bin against the
    bin centre; calibrated LLRs follow the diagonal. Marker area grows with the bin count."""
    data = empirical_calibration(tar_llr, non_llr, n_bins=n_bins)
    figure = Figure(figsize=(5.0, 5.0))
    axes = figure.add_subplot()
    axes.plot([0, 1], [0, 1], color="black", linewidth=1, label="perfect calibration")
    sizes = 10 + 90 * data.counts / max(int(data.counts.max()), 1)
    axes.plot(data.bin_centres, data.target_fraction, color="tab:red", linewidth=1)
    axes.scatter(data.bin_centres, data.target_fraction, s=sizes, color="tab:red", label="scores read as LLRs")
    axes.set_xlim(0, 1)
    axes.set_ylim(0, 1)
    axes.set_xlabel("posterior at the empirical prior")
    axes.set_ylabel("fraction of target trials")
    axes.legend(fontsize="small", loc="upper left")
    axes.grid(alpha=0.3)
    return figure


DET_TICKS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.4)
_DET_RESOLUTION = 400


def det_figure(systems: Sequence[System]) -> Figure:
    """DET curves on probit axes: the empirical curve (solid) and its convex hull (dashed),
    labelled with the ROCCH-EER. Points closer than the plot resolution are merged."""
    if not systems:
        raise ScoreError("DET plot: no score set to plot")
    limit = (DET_TICKS[0] / 2, 0.5)
    figure = Figure(figsize=(5.6, 5.6))
    axes = figure.add_subplot()
    for (label, tar, non), colour in zip(systems, _colours(len(systems))):
        pmiss, pfa, _ = roc_points(tar, non)
        x, y = _pinned_probit(pfa, limit), _pinned_probit(pmiss, limit)
        keep = np.sort(np.unique(np.round(np.column_stack((x, y)) * _DET_RESOLUTION), axis=0,
                                 return_index=True)[1])
        axes.plot(x[keep], y[keep], color=colour, linewidth=1.5,
                  label=f"{label} (ROCCH-EER {100 * rocch_eer(tar, non):.2f}%)")
        hull_miss, hull_fa = roc_convex_hull(tar, non)
        axes.plot(_pinned_probit(hull_fa, limit), _pinned_probit(hull_miss, limit), color=colour, linewidth=0.8,
                  linestyle="--")
    ticks = probit(DET_TICKS)
    labels = [f"{100 * t:g}" for t in DET_TICKS]
    axes.plot(probit(limit), probit(limit), color="grey", linewidth=0.5, linestyle=":")
    axes.set_xticks(ticks, labels)
    axes.set_yticks(ticks, labels)
    axes.set_xlim(probit(limit))
    axes.set_ylim(probit(limit))
    axes.set_xlabel("false alarm rate [%]")
    axes.set_ylabel("miss rate [%]")
    axes.legend(fontsize="small", loc="upper right")
    axes.grid(alpha=0.3)
    return figure


def _pinned_probit(rates: np.ndarray, limit: tuple[float, float]) -> np.ndarray:
    # Rates of 0 or 1 sit at ±inf on probit axes: pin them just outside the visible range.
    return probit(np.clip(rates, limit[0] / 2, 1 - limit[0] / 2))
