"""Capacity designs for a known traffic pattern: proportional and uniform.

A proportional design gives every link alpha times the bytes that cross it,
so that every flow finishes at 1 / alpha seconds; a uniform design spends the
same total capacity evenly. The interference-free test says when the
proportional design wastes nothing, and the comparison runs both on the same
flows (Table 1 of the case study's paper, Zanotelli et al., "Projeto de
Redes Ciente de Gargalos...", bibliography key zanotelli_bottleneck_design,
is here as data).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpucourse.network.flows import RTOL, _positive, _sizes, incidence, completion_times


# -----------------------------------------------------------------------------
# Designs


def proportional_design(flow_links, sizes, alpha) -> dict:
    """Give every crossed link alpha x (bytes crossing it) bytes/s.

    alpha is per second. For interference-free traffic every flow then gets
    alpha x its size, all flows finish together at 1 / alpha seconds, and
    every link is full the whole time: nothing is wasted.
    """
    alpha = _positive("alpha", alpha)
    inc = incidence(flow_links)
    loads = inc.load_per_link(_sizes(sizes, inc.n_flows))
    if np.any(loads <= 0):
        bad = inc.links[int(np.argmin(loads))]
        raise ValueError(f"sizes: link {bad!r} carries only empty flows, so its proportional capacity "
                         f"would be 0; give every flow a size > 0")
    return dict(zip(inc.links, (alpha * loads).tolist()))


def uniform_design(links, capacity) -> dict:
    """The same capacity (bytes/s, > 0) on every link of `links`."""
    capacity = _positive("capacity", capacity)
    links = list(links)
    if not links:
        raise ValueError("links must name at least one link")
    return {l: capacity for l in links}


def is_interference_free(flow_links, sizes) -> bool:
    """Whether the traffic is interference-free.

    Definition used here: every flow crosses at least one link on which no
    other flow is larger. That is exactly the condition under which, in the
    proportional design, the allocation "each flow gets alpha x its size" is
    max-min fair (each flow then has a full link where no flow is faster:
    its bottleneck), so that no flow can take bandwidth another leaves idle
    and no flow finishes early. Flows of equal size, as in data-parallel
    collectives, always are.
    """
    inc = incidence(flow_links)
    sizes = _sizes(sizes, inc.n_flows)
    largest = np.zeros(inc.n_links)
    np.maximum.at(largest, inc.entry_link, sizes[inc.entry_flow])
    is_largest = sizes[inc.entry_flow] >= largest[inc.entry_link] * (1 - RTOL)
    has = np.zeros(inc.n_flows, dtype=bool)
    has[inc.entry_flow[is_largest]] = True
    return bool(has.all())


# Table 1 of the case study's paper (Zanotelli, Sampaio, Martinello,
# Ros-Giralt and Comarella; zanotelli_bottleneck_design in the bibliography),
# as it reports it for the Rede Ipê topology with one host per point of
# presence and about 1 GB per flow: (design, total capacity, time in seconds).
PAPER_TABLE_1 = (
    ("proportional", 2493, 8.0),
    ("uniform at the proportional minimum", 530, 76.3),
    ("uniform at the proportional mean", 2493, 16.2),
    ("uniform at the proportional maximum", 5054, 8.0),
)
PAPER_ALPHA_SCALE, PAPER_ALPHA_SCALED_TIME_S = 0.2, 40.0


@dataclass(frozen=True)
class DesignResult:
    design: str
    total_capacity_bytes_per_s: float
    time_s: float  # when the last flow finishes
    first_finish_s: float
    capacity: dict


def compare_designs(flow_links, sizes, alpha, alpha_scale=0.2) -> list[DesignResult]:
    """Zanotelli et al.'s Table 1 for one traffic pattern: the proportional design at
    alpha; uniform designs at the smallest, mean and largest proportional
    capacity (over the links the traffic crosses); and the proportional
    design with alpha x alpha_scale."""
    alpha = _positive("alpha", alpha)
    alpha_scale = _positive("alpha_scale", alpha_scale)
    inc = incidence(flow_links)
    sizes = _sizes(sizes, inc.n_flows)
    proportional = proportional_design(inc, sizes, alpha)
    values = np.array(list(proportional.values()))
    designs = [("proportional", proportional),
               ("uniform at the proportional minimum", uniform_design(inc.links, values.min())),
               ("uniform at the proportional mean", uniform_design(inc.links, values.mean())),
               ("uniform at the proportional maximum", uniform_design(inc.links, values.max())),
               (f"proportional, alpha x {alpha_scale:g}", proportional_design(inc, sizes, alpha * alpha_scale))]
    results = []
    for name, capacity in designs:
        times = completion_times(inc, capacity, sizes)
        results.append(DesignResult(name, float(sum(capacity.values())), float(times.max()),
                                    float(times.min()), capacity))
    return results
