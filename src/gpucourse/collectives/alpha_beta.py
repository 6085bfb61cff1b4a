"""The alpha-beta cost model of the collectives, and its fit to measurements.

A message of n bytes costs ``alpha + n / beta``: a latency and a bandwidth.
Each algorithm sends a known number of messages of a known size, so its time
is ``a * alpha + b * n / beta`` with ``a`` and ``b`` depending only on the
number of ranks. This module holds those terms, the predicted times, and a
least-squares fit that reads alpha and beta back out of measured times.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpucourse.checks import (
    at_least as _at_least, count as _count, positive as _positive,
    scalar_or_array as _scalar_or_array,
)


# -----------------------------------------------------------------------------
# The alpha-beta cost model

# Each algorithm's time is  latency_terms * alpha + byte_fraction * bytes / beta,
# for a message of `bytes` (the full tensor) on N ranks, every link carrying
# `beta` bytes per second in each direction and every message paying `alpha`.
ALGORITHMS = ("ring_all_reduce", "naive_all_reduce", "ring_reduce_scatter", "ring_all_gather")


def alpha_beta_terms(algorithm, world_size):
    """(latency terms, bytes fraction) of an algorithm on ``world_size`` ranks.

    * ring all-reduce: 2(N-1) steps, each moving 1/N of the message:
      (2(N-1), 2(N-1)/N) (Patarasuk and Yuan, 2009);
    * ring reduce-scatter or all-gather alone: half of that, ((N-1), (N-1)/N);
    * naive all-reduce: the root receives N - 1 whole messages, then sends
      N - 1, one after the other on its link: (2(N-1), 2(N-1)).
    """
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm must be one of {', '.join(ALGORITHMS)}, got {algorithm!r}")
    n = _count("world_size", world_size)
    return {
        "ring_all_reduce": (2 * (n - 1), 2 * (n - 1) / n),
        "ring_reduce_scatter": (n - 1, (n - 1) / n),
        "ring_all_gather": (n - 1, (n - 1) / n),
        "naive_all_reduce": (2 * (n - 1), 2 * (n - 1)),
    }[algorithm]


def alpha_beta_time_s(message_bytes, world_size, latency_s, bandwidth_bytes_per_s,
                      algorithm="ring_all_reduce"):
    """Modelled time of a collective on a message of ``message_bytes`` (Hockney, 1994).

    For the ring all-reduce: 2(N-1)·latency + 2(N-1)/N · bytes / bandwidth.
    ``message_bytes`` may be an array. With uneven chunks the real ring moves
    the largest chunk, ceil(L/N) elements, per step; the model uses L/N.
    """
    size = _at_least("message_bytes", message_bytes, 0, array_ok=True)
    alpha = _at_least("latency_s", latency_s, 0)
    beta = _positive("bandwidth_bytes_per_s", bandwidth_bytes_per_s)
    latency_terms, byte_fraction = alpha_beta_terms(algorithm, world_size)
    return _scalar_or_array(latency_terms * alpha + byte_fraction * size / beta)


@dataclass(frozen=True)
class AlphaBetaFit:
    """Latency and bandwidth fitted to measured collective times."""

    latency_s: float
    bandwidth_bytes_per_s: float
    algorithm: str
    rms_relative_error: float  # of the model against the points it was fitted to
    points: int

    def time_s(self, message_bytes, world_size):
        return alpha_beta_time_s(message_bytes, world_size, self.latency_s,
                                 self.bandwidth_bytes_per_s, self.algorithm)


def fit_alpha_beta(message_bytes, times_s, world_sizes, algorithm="ring_all_reduce") -> AlphaBetaFit:
    """Least-squares latency and bandwidth from measured times.

    The model is linear in alpha and 1/beta: t = a·alpha + b·bytes·(1/beta),
    with (a, b) from ``alpha_beta_terms`` for each point's world size. The fit
    minimises the *relative* error, sum(((model - t) / t)^2), so that the
    microsecond-scale small messages (which carry the latency) count as much
    as the large ones (which carry the bandwidth). Latency is kept >= 0; the
    bandwidth must come out positive, or the data did not grow with size.
    ``world_sizes`` is one number or one per point.
    """
    size = _at_least("message_bytes", message_bytes, 0, array_ok=True)
    t = _positive("times_s", times_s, array_ok=True)
    if np.ndim(size) != 1 or np.shape(size) != np.shape(t):
        raise ValueError(f"message_bytes and times_s must be 1-d and of equal length, "
                         f"got shapes {np.shape(size)} and {np.shape(t)}")
    n = _at_least("world_sizes", world_sizes, 2, array_ok=True)
    n = np.broadcast_to(n, size.shape) if np.ndim(n) == 0 else n
    if np.shape(n) != size.shape or not np.all(n == np.round(n)):
        raise ValueError(f"world_sizes must be one whole number >= 2 or one per point "
                         f"({size.size}), got {np.shape(n)}")
    if len(np.unique(size)) < 2:
        raise ValueError("message_bytes must hold at least two different sizes to separate "
                         "latency from bandwidth")
    terms = np.array([alpha_beta_terms(algorithm, int(k)) for k in n])
    design = np.column_stack([terms[:, 0], terms[:, 1] * size]) / t[:, None]
    target = np.ones_like(t)
    (alpha, inverse_beta), *_ = np.linalg.lstsq(design, target, rcond=None)
    if alpha < 0:  # latency too small to resolve: fit bandwidth alone
        alpha = 0.0
        column = design[:, 1]
        inverse_beta = float(column @ target / (column @ column))
    if not inverse_beta > 0:
        raise ValueError("times_s must grow with message_bytes: the fitted bandwidth is not "
                         "positive")
    model = terms[:, 0] * alpha + terms[:, 1] * size * inverse_beta
    rms = float(np.sqrt(np.mean(((model - t) / t) ** 2)))
    return AlphaBetaFit(float(alpha), float(1 / inverse_beta), algorithm, rms, int(size.size))
