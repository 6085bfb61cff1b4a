"""Flows on a network: routes, max-min fair rates, completion times and the
bottleneck structure.

Every flow follows a route, a list of links; a link's capacity is shared
among the flows that cross it. Max-min fairness (water-filling) gives each
flow the largest rate it can have without taking from a flow that has less,
and a fluid simulation that recomputes those rates each time a flow finishes
gives the completion times. The bottleneck structure then says which link
limits which flow, and which links' congestion propagates to which. This is
the model the rest of the package is built on.
"""

from __future__ import annotations

import math
import numbers
from collections import Counter
from dataclasses import dataclass

import networkx as nx
import numpy as np


# Relative tolerance for "equal" rates and "full" links in float arithmetic.
RTOL = 1e-9

# -----------------------------------------------------------------------------
# Checking arguments


def _positive(name, value) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a number > 0, got {value!r}")
    x = float(value)
    if not math.isfinite(x) or x <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return x


def _count(name, value, minimum=1) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be a whole number >= {minimum}, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be a whole number >= {minimum}, got {value!r}")
    return int(value)


def _sizes(sizes, n_flows) -> np.ndarray:
    """Flow sizes in bytes as a float array, one per flow, each finite and >= 0."""
    if isinstance(sizes, numbers.Real) and not isinstance(sizes, (bool, np.bool_)):
        sizes = [sizes] * n_flows
    array = np.asarray(sizes)
    if array.dtype.kind not in "iuf" or array.ndim != 1:
        raise ValueError(f"sizes must be a number or a 1-D sequence of numbers, got {sizes!r}")
    if len(array) != n_flows:
        raise ValueError(f"sizes must have one entry per flow ({n_flows}), got {len(array)}")
    array = array.astype(float)
    if not np.all(np.isfinite(array)):
        raise ValueError("sizes must be finite (not NaN or infinite)")
    if np.any(array < 0):
        bad = int(np.argmax(array < 0))
        raise ValueError(f"sizes must be >= 0 bytes, got a negative size {array[bad]:g} for flow {bad}")
    return array


def link(u, v):
    """The order-independent name of the link between nodes u and v: the
    sorted pair, so that link(u, v) == link(v, u)."""
    if u == v:
        raise ValueError(f"a link joins two different nodes, got {u!r} twice")
    try:
        return (u, v) if u <= v else (v, u)
    except TypeError:  # nodes of types that do not compare: order by their repr
        return (u, v) if repr(u) <= repr(v) else (v, u)


@dataclass(frozen=True)
class Incidence:
    """Flows and links as index arrays: entry i says flow entry_flow[i]
    crosses link entry_link[i]. This is a sparse links x flows incidence
    matrix in coordinate form, which the vectorized solvers work on."""

    links: list  # the link names, in index order
    entry_flow: np.ndarray
    entry_link: np.ndarray
    n_flows: int

    @property
    def n_links(self) -> int:
        return len(self.links)

    def flows_per_link(self, active=None) -> np.ndarray:
        weights = None if active is None else active[self.entry_flow].astype(float)
        return np.bincount(self.entry_link, weights=weights, minlength=self.n_links)

    def load_per_link(self, per_flow) -> np.ndarray:
        """Sum of a per-flow quantity (a size, a rate) over the flows crossing each link."""
        return np.bincount(self.entry_link, weights=per_flow[self.entry_flow], minlength=self.n_links)


def incidence(flow_links) -> Incidence:
    """Check a list of flows (each a list of links) and index it.

    Each flow must cross at least one link and may not cross a link twice.
    """
    if isinstance(flow_links, Incidence):
        return flow_links
    if isinstance(flow_links, (str, bytes)) or not hasattr(flow_links, "__len__"):
        raise ValueError(f"flow_links must be a list with one list of links per flow, got {flow_links!r}")
    lengths = np.fromiter((len(path) for path in flow_links), dtype=np.int64, count=len(flow_links))
    if np.any(lengths == 0):
        bad = int(np.argmin(lengths))
        raise ValueError(f"flow_links: every flow must cross at least one link, flow {bad} has no links")
    index = {}
    entry_link = np.fromiter((index.setdefault(l, len(index)) for path in flow_links for l in path),
                             dtype=np.int64, count=int(lengths.sum()))
    entry_flow = np.repeat(np.arange(len(flow_links)), lengths)
    incidence = Incidence(list(index), entry_flow, entry_link, len(flow_links))
    # A flow that crosses one link twice would count twice against it.
    # (np.sort and np.diff: np.unique is much slower on millions of entries.)
    pair_ids = np.sort(entry_flow * max(1, len(index)) + entry_link)
    if np.any(np.diff(pair_ids) == 0):
        raise ValueError("flow_links: a flow may cross each link at most once")
    return incidence


def _capacities(inc: Incidence, capacity) -> np.ndarray:
    """Capacity (bytes/s) of each indexed link, from a dict link -> capacity.
    A single number means that capacity on every link."""
    if isinstance(capacity, numbers.Real) and not isinstance(capacity, (bool, np.bool_)):
        return np.full(inc.n_links, _positive("capacity", capacity))
    if not hasattr(capacity, "get"):
        raise ValueError(f"capacity must be a dict link -> bytes per second, or a number, got {capacity!r}")
    values = np.empty(inc.n_links)
    for i, l in enumerate(inc.links):
        c = capacity.get(l)
        if c is None and isinstance(l, tuple) and len(l) == 2:
            c = capacity.get((l[1], l[0]))
        if c is None:
            raise ValueError(f"capacity has no entry for link {l!r}, which a flow crosses")
        values[i] = _positive(f"capacity of link {l!r}", c)
    return values


# -----------------------------------------------------------------------------
# Routing


def route_flows(graph, pairs):
    """Route each (source, destination) pair on `graph`, one after the other.

    Each flow takes a shortest path in hops. Among the shortest paths it
    takes the one whose links currently carry the fewest flows: the smallest
    largest link load, then the smallest total load, then the first in the
    graph's order. The flows routed before it count, so flows spread over
    equal-length paths. Returns one list of links per pair, each link named
    by link(u, v).
    """
    if not isinstance(graph, nx.Graph) or graph.is_directed():
        raise ValueError(f"graph must be an undirected networkx Graph, got {type(graph).__name__}")
    pairs = list(pairs)
    load = Counter()
    distance_cache = {}

    def distances(node):
        if node not in distance_cache:
            distance_cache[node] = nx.single_source_shortest_path_length(graph, node)
        return distance_cache[node]

    routes = []
    for pair in pairs:
        if not isinstance(pair, tuple) or len(pair) != 2:
            raise ValueError(f"pairs must hold (source, destination) tuples, got {pair!r}")
        source, destination = pair
        for name, node in (("source", source), ("destination", destination)):
            if node not in graph:
                raise ValueError(f"pairs: {name} {node!r} is not a node of the graph")
        if source == destination:
            raise ValueError(f"pairs: source and destination must differ, got {source!r} twice")
        to_destination = distances(destination)
        if source not in to_destination:
            raise ValueError(f"pairs: {source!r} and {destination!r} are disconnected: no path joins them")
        # Best (largest load, total load, path) from each node of the
        # shortest-path DAG to the destination, built outward from it.
        hops = to_destination[source]
        from_source = distances(source)
        layers = [[] for _ in range(hops + 1)]
        for node, d in to_destination.items():
            if d <= hops and from_source.get(node, math.inf) + d == hops:
                layers[d].append(node)
        best = {destination: (0, 0, [])}
        for d in range(1, hops + 1):
            for node in layers[d]:
                options = []
                for neighbour in graph.neighbors(node):
                    if neighbour in best and to_destination[neighbour] == d - 1:
                        l = link(node, neighbour)
                        worst, total, path = best[neighbour]
                        options.append((max(worst, load[l]), total + load[l], [l] + path))
                best[node] = min(options, key=lambda option: option[:2])
        path = best[source][2]
        load.update(path)
        routes.append(path)
    return routes


# -----------------------------------------------------------------------------
# Max-min fair rates and completion times


def _water_fill(inc: Incidence, capacities: np.ndarray, active: np.ndarray) -> np.ndarray:
    """Max-min fair rates of the active flows (zero for the others).

    Progressive filling, one bottleneck level at a time, with whole arrays:
    each link's fair share is its remaining capacity over its unfrozen flows;
    a link whose share is no larger than the share any of its flows sees
    elsewhere on its path is a bottleneck, and its flows freeze at that
    share. Links that are local minima resolve together, so the loop runs
    once per level of the bottleneck structure, not once per flow.
    """
    rates = np.zeros(inc.n_flows)
    unfrozen = active.copy()
    remaining = capacities.astype(float).copy()
    entry_flow, entry_link = inc.entry_flow, inc.entry_link
    while True:
        live = unfrozen[entry_flow]
        if not live.any():
            return rates
        flow_e, link_e = entry_flow[live], entry_link[live]
        count = np.bincount(link_e, minlength=inc.n_links)
        with np.errstate(divide="ignore", invalid="ignore"):
            share = np.where(count > 0, np.maximum(remaining, 0) / count, np.inf)
        # The tightest share on each flow's path, then the tightest such
        # share among each link's flows.
        flow_share = np.full(inc.n_flows, np.inf)
        np.minimum.at(flow_share, flow_e, share[link_e])
        link_floor = np.full(inc.n_links, np.inf)
        np.minimum.at(link_floor, link_e, flow_share[flow_e])
        bottleneck = (count > 0) & (share <= link_floor * (1 + RTOL))
        freezing = np.zeros(inc.n_flows, dtype=bool)
        freezing[flow_e[bottleneck[link_e]]] = True
        rates[freezing] = flow_share[freezing]
        unfrozen &= ~freezing
        # The frozen flows now hold their rate on every link they cross.
        taken = freezing[flow_e]
        remaining -= np.bincount(link_e[taken], weights=rates[flow_e[taken]], minlength=inc.n_links)


def max_min_rates(flow_links, capacity) -> np.ndarray:
    """The max-min fair rate (bytes/s) of each flow (Bertsekas and Gallager).

    flow_links: one list of links per flow (as route_flows returns).
    capacity: dict link -> capacity in bytes/s (every crossed link needs one,
    and each must be > 0), or one number for every link.

    An allocation is max-min fair when no flow's rate can grow without
    shrinking the rate of a flow that is no faster; equivalently, every flow
    crosses a full link on which no other flow is faster (its bottleneck).
    """
    inc = incidence(flow_links)
    capacities = _capacities(inc, capacity)
    return _water_fill(inc, capacities, np.ones(inc.n_flows, dtype=bool))


def completion_times(flow_links, capacity, sizes) -> np.ndarray:
    """When each flow finishes (seconds), all starting at time 0.

    A fluid simulation: the flows share the links max-min fairly; when a flow
    finishes, the rates of the others are recomputed (so they speed up into
    the bandwidth it frees), as the G2 tool of Ros-Giralt et al. does.
    sizes: bytes per flow (a list, or one number for all), each >= 0; a flow
    of size 0 finishes at time 0.
    """
    inc = incidence(flow_links)
    capacities = _capacities(inc, capacity)
    remaining = _sizes(sizes, inc.n_flows)
    finish_s = np.zeros(inc.n_flows)
    active = remaining > 0
    now_s = 0.0
    while active.any():
        rates = _water_fill(inc, capacities, active)
        with np.errstate(divide="ignore"):
            time_left_s = np.where(active, remaining / np.where(active, rates, 1.0), np.inf)
        step_s = time_left_s.min()
        now_s += step_s
        # Every flow within round-off of the first to finish finishes with it.
        done = active & (time_left_s <= step_s * (1 + 1e-9) + 1e-300)
        remaining = np.where(active, remaining - rates * step_s, remaining)
        finish_s[done] = now_s
        remaining[done] = 0.0
        active &= ~done
    return finish_s


def link_loads(flow_links, sizes) -> dict:
    """Bytes crossing each link: the sum of the sizes of the flows on it."""
    inc = incidence(flow_links)
    loads = inc.load_per_link(_sizes(sizes, inc.n_flows))
    return dict(zip(inc.links, loads.tolist()))


def link_utilization(flow_links, capacity, rates) -> dict:
    """The share of each crossed link's capacity that `rates` use (1 = full)."""
    inc = incidence(flow_links)
    capacities = _capacities(inc, capacity)
    rates = np.asarray(rates, dtype=float)
    if rates.shape != (inc.n_flows,):
        raise ValueError(f"rates must have one entry per flow ({inc.n_flows}), got shape {rates.shape}")
    return dict(zip(inc.links, (inc.load_per_link(rates) / capacities).tolist()))


# -----------------------------------------------------------------------------
# The bottleneck structure


def bottleneck_structure(flow_links, capacity, rates=None):
    """The bottleneck precedence graph of a network (Ros-Giralt et al.).

    A networkx DiGraph whose vertices are links, ("link", l), and flows,
    ("flow", i). An edge link -> flow means the link is a bottleneck of the
    flow: it is full and no flow on it is faster, so the link sets that
    flow's rate. An edge flow -> link means the flow crosses the link without
    being limited there: it takes a fixed share of that link, which the
    link's own flows must live with. So a path l1 -> f -> l2 says link l1
    precedes link l2: a change at l1 ripples to l2 through f, never the other
    way round. Vertices carry kind, rate or capacity and fair_share.
    """
    inc = incidence(flow_links)
    capacities = _capacities(inc, capacity)
    if rates is None:
        rates = _water_fill(inc, capacities, np.ones(inc.n_flows, dtype=bool))
    used = inc.load_per_link(rates)
    fastest = np.zeros(inc.n_links)
    np.maximum.at(fastest, inc.entry_link, rates[inc.entry_flow])
    full = used >= capacities * (1 - 1e-7)
    graph = nx.DiGraph()
    for i, l in enumerate(inc.links):
        graph.add_node(("link", l), kind="link", link=l, capacity=float(capacities[i]),
                       fair_share=float(fastest[i]), saturated=bool(full[i]))
    for f in range(inc.n_flows):
        graph.add_node(("flow", f), kind="flow", flow=f, rate=float(rates[f]))
    for f, i in zip(inc.entry_flow.tolist(), inc.entry_link.tolist()):
        limits = full[i] and rates[f] >= fastest[i] * (1 - 1e-7)
        if limits:
            graph.add_edge(("link", inc.links[i]), ("flow", f))
        else:
            graph.add_edge(("flow", f), ("link", inc.links[i]))
    return graph


def link_precedence(structure) -> nx.DiGraph:
    """Links only: an edge l1 -> l2 when a flow bottlenecked at l1 crosses l2."""
    graph = nx.DiGraph()
    graph.add_nodes_from(n for n, d in structure.nodes(data=True) if d["kind"] == "link")
    for node, data in structure.nodes(data=True):
        if data["kind"] == "flow":
            for upstream in structure.predecessors(node):
                for downstream in structure.successors(node):
                    graph.add_edge(upstream, downstream)
    return graph
