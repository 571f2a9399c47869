"""Orthogonal alignment of two embedding spaces (Champion et al. 2021; deep-privacy/x-vector-procrustes).

Rows are vectors. Both estimators return an orthogonal ``W`` with ``source @ W ≈ target``;
an attacker who aligned clear vectors (source) to anonymised ones (target) inverts the
anonymisation with ``anonymised @ W.T``. ``W`` may be a reflection (no determinant
correction, as in the reference code).
"""
from __future__ import annotations

import logging
import warnings
import numpy as np

from ...data_prep.errors import VoxanonError
from .settings import WassersteinProcrustesConfig

log = logging.getLogger(__name__)


def orthogonal_procrustes(source: np.ndarray, target: np.ndarray) -> np.ndarray:
    """``argmin_{W orthogonal} ||source W − target||_F`` from paired rows: ``W = U Vᵀ``, ``U Σ Vᵀ = sourceᵀ target``."""
    source, target = _checked_pair(source, target)
    if source.shape[0] != target.shape[0]:
        raise VoxanonError(f"Procrustes needs paired rows, got {source.shape[0]} source and "
                           f"{target.shape[0]} target vectors")
    left, _, right = np.linalg.svd(source.T @ target)
    return left @ right


def wasserstein_procrustes(source: np.ndarray, target: np.ndarray,
                           config: WassersteinProcrustesConfig | None = None) -> np.ndarray:
    """Orthogonal ``W`` with ``source @ W ≈ target`` up to an unknown row correspondence.

    Grave et al. (2018) as in the reference attack: convex-relaxation initialisation
    (Frank–Wolfe with Sinkhorn), stochastic alternating optimisation with the batch
    size doubling and the iterations halving each epoch, then a Procrustes refinement on
    matched pairs. Rows are expected L2-normalised. The two sets may differ in size.

    The stochastic phase can also walk away from a good initialisation: with the reference
    learning rate and small batches it does so on centred (e.g. PCA-reduced) vectors. The
    refinement therefore starts from whichever of the two rotations transports the source
    onto the target at the lower cost, a criterion that needs no labels.

    The refinement matches each source row to the target row that receives most of its
    mass in the entropic transport plan ``P``. (The reference code instead indexes the
    target by the position of the nearest row of ``P target``, which is right only when
    both sets are stored in the same order, i.e. it silently uses the pairing.)
    """
    config = config or WassersteinProcrustesConfig()
    source, target = _checked_pair(source, target)
    rng = np.random.default_rng(config.seed)
    initial = _convex_init(source, target, config, rng)
    refined = _stochastic_alignment(source, target, initial, config, rng)
    initial_cost, initial_plan = _transport(source, target, initial, config.refine_sinkhorn_reg)
    refined_cost, refined_plan = _transport(source, target, refined, config.refine_sinkhorn_reg)
    log.debug("Wasserstein-Procrustes transport cost: %.4f after initialisation, %.4f after the "
              "stochastic phase", initial_cost, refined_cost)
    plan = refined_plan if refined_cost <= initial_cost else initial_plan
    return orthogonal_procrustes(source, target[np.argmax(plan, axis=1)])


def _transport(source, target, rotation, reg) -> tuple[float, np.ndarray]:
    """The entropic plan between ``source @ rotation`` and ``target``, and its mean cost (−cosine)."""
    cost = -(source @ rotation) @ target.T
    plan = _sinkhorn(cost, reg)
    return float(np.sum(plan * cost) / len(source)), plan


def _convex_init(source, target, config, rng) -> np.ndarray:
    samples = min(len(source), len(target), config.init_samples)
    x = _sqrt_eig(source[rng.permutation(len(source))[:samples]])
    y = _sqrt_eig(target[rng.permutation(len(target))[:samples]])
    gram_x, gram_y = x @ x.T, y @ y.T
    gram_y *= np.linalg.norm(gram_x) / np.linalg.norm(gram_y)
    gram_x2, gram_y2 = gram_x @ gram_x, gram_y @ gram_y
    plan = np.full((samples, samples), 1.0 / samples)
    for step in range(1, config.init_iterations + 1):
        gradient = plan @ gram_x2 + gram_y2 @ plan - 2.0 * gram_y @ plan @ gram_x
        direction = _sinkhorn(gradient, config.sinkhorn_reg)
        weight = 2.0 / (2.0 + step)
        plan = weight * direction + (1.0 - weight) * plan
    # plan @ x puts source samples in the order of the target samples they match.
    return orthogonal_procrustes(plan @ x, y)


def _stochastic_alignment(source, target, rotation, config, rng) -> np.ndarray:
    n = min(len(source), len(target))
    batch, iterations = min(config.batch_size, n), config.iterations
    for epoch in range(1, config.max_epochs + 1):
        for _ in range(iterations):
            x = source[rng.permutation(len(source))[:batch]]
            y = target[rng.permutation(len(target))[:batch]]
            plan = _sinkhorn(-(x @ rotation) @ y.T, config.sinkhorn_reg)
            rotation = rotation + (config.learning_rate / batch) * (x.T @ plan @ y)
            left, _, right = np.linalg.svd(rotation)
            rotation = left @ right
        log.debug("Wasserstein-Procrustes epoch %d: batch %d, %d iterations", epoch, batch, iterations)
        batch, iterations = min(2 * batch, n), iterations // 2
        if iterations == 0 or batch >= n:
            break
    return rotation


def _sinkhorn(cost: np.ndarray, reg: float) -> np.ndarray:
    """Entropic OT with one unit of mass per source row (target mass spread evenly to match)."""
    import ot  # POT loads torch and scikit-learn backends: seconds that only this attack needs

    rows, cols = cost.shape
    source_mass = np.ones(rows)
    target_mass = np.full(cols, rows / cols)
    with warnings.catch_warnings():
        # Like the reference, accept the plan reached after POT's iteration cap.
        warnings.filterwarnings("ignore", message="Sinkhorn did not converge")
        warnings.filterwarnings("ignore", message="Numerical errors")
        plan = ot.sinkhorn(source_mass, target_mass, cost, reg, stopThr=1e-3)
        if not np.all(np.isfinite(plan)):
            # exp(−cost/reg) underflowed: the log-domain solver computes the same plan safely.
            plan = ot.sinkhorn(source_mass, target_mass, cost, reg, method="sinkhorn_log", stopThr=1e-3)
    return plan


def _sqrt_eig(matrix: np.ndarray) -> np.ndarray:
    left, singular, right = np.linalg.svd(matrix, full_matrices=False)
    return (left * np.sqrt(singular)) @ right


def _checked_pair(source, target) -> tuple[np.ndarray, np.ndarray]:
    source = np.asarray(source, dtype=np.float64)
    target = np.asarray(target, dtype=np.float64)
    if source.ndim != 2 or target.ndim != 2:
        raise VoxanonError("alignment needs two (n, d) matrices")
    if source.shape[1] != target.shape[1]:
        raise VoxanonError(f"alignment needs vectors of one size, got {source.shape[1]} and {target.shape[1]}")
    if len(source) == 0 or len(target) == 0:
        raise VoxanonError("alignment needs at least one vector on each side")
    if not (np.all(np.isfinite(source)) and np.all(np.isfinite(target))):
        raise VoxanonError("alignment input contains non-finite values")
    return source, target
