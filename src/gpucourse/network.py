"""Week 7: the network between GPUs, seen through its bottlenecks.

Data-parallel training moves the same amount of data between many pairs of
hosts at once, so its communication time is set by how the network shares its
links among those flows. This module models that sharing and the designs that
follow from it:

* routing: shortest paths in hops, ties broken towards the least-loaded path;
* max-min fair rates (water-filling, vectorized over flows with numpy) and the
  completion times of a fluid simulation that recomputes them each time a flow
  finishes;
* the bottleneck structure of a network: which link limits which flow, and
  which links precede which (Ros-Giralt et al.);
* capacity designs: proportional (every link gets alpha times the bytes that
  cross it) and uniform (every link the same), and the interference-free test
  under which the proportional design wastes nothing;
* traffic patterns of data-parallel training (ring all-reduce neighbours,
  all-to-all, parameter server) and topologies (the RNP backbone of Brazil, as
  the Internet Topology Zoo recorded it in 2010, k-ary fat-trees with
  oversubscription and tapering, and dragonflies with minimal and Valiant
  routing);
* maps and drawings of all of this.

Units: sizes are bytes, capacities and rates bytes per second, times seconds,
alpha is per second (a proportional design with alpha finishes in 1 / alpha
seconds). A link is identified by the sorted pair of its end nodes, so (u, v)
and (v, u) are the same link; links are shared by the flows of both
directions.

Only numpy and networkx are imported here; matplotlib is imported inside the
plotting functions.
"""

from __future__ import annotations

import json
import math
import numbers
from collections import Counter
from dataclasses import dataclass
from importlib import resources

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


# Table 1 of the course's source paper, as it reports it for the Rede Ipê
# topology with one host per point of presence and about 1 GB per flow:
# (design, total capacity, time in seconds).
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
    """The paper's Table 1 for one traffic pattern: the proportional design at
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


# -----------------------------------------------------------------------------
# Traffic patterns of data-parallel training


def _hosts(hosts, minimum=2) -> list:
    hosts = list(hosts)
    if len(hosts) < minimum:
        raise ValueError(f"hosts must hold at least {minimum} hosts, got {len(hosts)}")
    if len(set(hosts)) != len(hosts):
        raise ValueError("hosts must not repeat a host")
    return hosts


def ring_pairs(hosts) -> list:
    """Ring all-reduce: each host sends to the next one in the given order,
    the last to the first. Every step of a ring all-reduce moves one chunk
    along each of these pairs at once."""
    hosts = _hosts(hosts)
    if len(hosts) == 2:
        return [(hosts[0], hosts[1]), (hosts[1], hosts[0])]
    return [(hosts[i], hosts[(i + 1) % len(hosts)]) for i in range(len(hosts))]


def all_to_all_pairs(hosts) -> list:
    """Every host sends to every other host: n (n - 1) flows."""
    hosts = _hosts(hosts)
    return [(a, b) for a in hosts for b in hosts if a != b]


def ring_order(graph, start):
    """An order of the graph's nodes for a ring: depth-first from `start`,
    so that ring neighbours tend to be close in the graph."""
    if start not in graph:
        raise ValueError(f"start must be a node of the graph, got {start!r}")
    return list(nx.dfs_preorder_nodes(graph, start))


def parameter_server_pairs(hosts, server) -> list:
    """Every worker pushes its gradients to the parameter server (the pull of
    the new weights is the same flows reversed, on the same links)."""
    hosts = _hosts(hosts)
    if server not in hosts:
        raise ValueError(f"server must be one of the hosts, got {server!r}")
    return [(h, server) for h in hosts if h != server]


# -----------------------------------------------------------------------------
# Topologies

RNP_DATA = "rnp_backbone.json"


def rnp_data() -> dict:
    """The project's RNP data file (nodes, links, capacities and source)."""
    text = resources.files("gpucourse").joinpath("data", RNP_DATA).read_text(encoding="utf-8")
    return json.loads(text)


def rnp_backbone(include_external=False):
    """The RNP backbone of Brazil in August 2010 (Internet Topology Zoo).

    Nodes are the points of presence, named by their city, with longitude
    and latitude attributes; edges carry capacity_bits_per_s and
    capacity_bytes_per_s. The three external peers (RedCLARA, a commercial
    Internet exit and Americas Light) have no coordinates and are left out
    unless include_external is True. The graph's "source" attribute cites
    where the data comes from.
    """
    if not isinstance(include_external, bool):
        raise ValueError(f"include_external must be True or False, got {include_external!r}")
    data = rnp_data()
    graph = nx.Graph(name=data["name"], source=data["source"], network_date=data["network_date"])
    names = {}
    for node in data["nodes"]:
        names[node["id"]] = node["name"]
        if node["internal"] or include_external:
            graph.add_node(node["name"], internal=node["internal"],
                           **({"longitude": node["longitude"], "latitude": node["latitude"]}
                              if "longitude" in node else {}))
    for edge in data["links"]:
        u, v = names[edge["source"]], names[edge["target"]]
        if u in graph and v in graph:
            bits = edge["capacity_bits_per_s"]
            graph.add_edge(u, v, capacity_bits_per_s=bits, capacity_bytes_per_s=bits / 8)
    return graph


def central_node(graph):
    """The node with the smallest total hop distance to all others (closeness)."""
    closeness = nx.closeness_centrality(graph)
    return max(graph.nodes, key=lambda n: (closeness[n], -list(graph.nodes).index(n)))


def fat_tree(k, host_capacity=1.0, oversubscription=1.0, taper=1.0):
    """A k-ary fat-tree (Al-Fares et al., 2008): k pods of k/2 edge and k/2
    aggregation switches, (k/2)^2 core switches and k^3/4 hosts.

    Capacities (bytes/s) are on the edges as `capacity`: host links get
    host_capacity; edge-aggregation links host_capacity / oversubscription
    (an edge switch with oversubscription 2 has half as much bandwidth up as
    down); aggregation-core links that, times taper (taper < 1 thins the top
    of the tree). Nodes are named "h<i>", "e<pod>.<j>", "a<pod>.<j>",
    "c<i>.<j>" and carry their layer and pod.
    """
    k = _count("k", k, minimum=2)
    if k % 2:
        raise ValueError(f"k must be even, got {k}")
    host_capacity = _positive("host_capacity", host_capacity)
    oversubscription = _positive("oversubscription", oversubscription)
    if oversubscription < 1:
        raise ValueError(f"oversubscription must be >= 1, got {oversubscription!r}")
    taper = _positive("taper", taper)
    if taper > 1:
        raise ValueError(f"taper must be in (0, 1], got {taper!r}")
    half = k // 2
    up = host_capacity / oversubscription
    graph = nx.Graph(k=k)
    for i in range(half):
        for j in range(half):
            graph.add_node(f"c{i}.{j}", layer="core", pod=None)
    for pod in range(k):
        for j in range(half):
            edge, agg = f"e{pod}.{j}", f"a{pod}.{j}"
            graph.add_node(edge, layer="edge", pod=pod)
            graph.add_node(agg, layer="aggregation", pod=pod)
            for h in range(half):
                host = f"h{(pod * half + j) * half + h}"
                graph.add_node(host, layer="host", pod=pod)
                graph.add_edge(host, edge, capacity=host_capacity)
        for j in range(half):
            for a in range(half):
                graph.add_edge(f"e{pod}.{j}", f"a{pod}.{a}", capacity=up)
            for c in range(half):
                graph.add_edge(f"a{pod}.{j}", f"c{j}.{c}", capacity=up * taper)
    return graph


def hosts_of(graph) -> list:
    """The hosts of a fat-tree or a dragonfly, in index order."""
    return sorted((n for n, d in graph.nodes(data=True) if d.get("layer") == "host"),
                  key=lambda n: int(n[1:]))


def capacities_of(graph, attribute="capacity") -> dict:
    """dict link -> capacity from an edge attribute of a graph."""
    return {link(u, v): d[attribute] for u, v, d in graph.edges(data=True)}


def _check_pairs(pairs, n_hosts) -> np.ndarray:
    """(source, destination) host pairs as an (n, 2) integer array, checked:
    indices in [0, n_hosts), no host sending to itself."""
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    if pairs.size and (pairs.min() < 0 or pairs.max() >= n_hosts):
        raise ValueError(f"pairs must hold host indices in [0, {n_hosts}), got {pairs.min()}..{pairs.max()}")
    if np.any(pairs[:, 0] == pairs[:, 1]):
        raise ValueError("pairs: source and destination must differ")
    return pairs


def fat_tree_routes(k, pairs) -> list:
    """Routes on fat_tree(k) for pairs of host indices, computed in closed
    form (fast enough for a million flows).

    Flows between hosts of one edge switch cross two host links; flows
    within a pod go up to aggregation switch (source + destination) mod k/2;
    flows between pods also choose core (source // (k/2) + destination)
    mod k/2 under it, which spreads all-to-all and ring traffic evenly, as
    equal-cost multipath routing aims to. All paths are shortest paths.
    """
    k = _count("k", k, minimum=2)
    if k % 2:
        raise ValueError(f"k must be even, got {k}")
    half = k // 2
    n_hosts = k * half * half
    pairs = _check_pairs(pairs, n_hosts)
    # Names of every link, made once, then picked by index.
    host_link = [link(f"h{h}", f"e{h // half // half}.{h // half % half}") for h in range(n_hosts)]
    edge_agg = {(p, e, a): link(f"e{p}.{e}", f"a{p}.{a}")
                for p in range(k) for e in range(half) for a in range(half)}
    agg_core = {(p, a, c): link(f"a{p}.{a}", f"c{a}.{c}")
                for p in range(k) for a in range(half) for c in range(half)}
    src, dst = pairs[:, 0], pairs[:, 1]
    s_edge, d_edge = src // half, dst // half
    s_pod, d_pod = src // (half * half), dst // (half * half)
    agg = (src + dst // half + dst // (half * half)) % half
    core = (src // half + dst) % half
    routes = []
    for s, d, se, de, sp, dp, a, c in zip(src.tolist(), dst.tolist(), s_edge.tolist(), d_edge.tolist(),
                                          s_pod.tolist(), d_pod.tolist(), agg.tolist(), core.tolist()):
        if se == de:
            routes.append([host_link[s], host_link[d]])
        elif sp == dp:
            routes.append([host_link[s], edge_agg[sp, se % half, a], edge_agg[dp, de % half, a],
                           host_link[d]])
        else:
            routes.append([host_link[s], edge_agg[sp, se % half, a], agg_core[sp, a, c],
                           agg_core[dp, a, c], edge_agg[dp, de % half, a], host_link[d]])
    return routes


# Dragonflies (Kim, Dally, Scott and Abts, ISCA 2008). A dragonfly has groups
# of a routers; the routers of a group are all joined to each other by local
# links, each router has p hosts and h global links, and the global links join
# every group to every other one. With a x h global ports per group, at most
# a h + 1 groups can be fully connected, one global link per pair: the
# maximal dragonfly. It is balanced (global links as loaded as host links
# under uniform traffic) when a = 2p = 2h.


def _dragonfly_global_wiring(groups, routers_per_group, global_links_per_router) -> dict:
    """The global links of a dragonfly: dict (i, j), i < j, -> list of
    (router of group i, router of group j), one entry per global link.

    Absolute ("consecutive") arrangement: group i numbers its a x h global
    ports router by router (router r owns ports r h ... r h + h - 1) and
    gives port k to the (k mod (g - 1))-th other group in increasing order.
    With g = a h + 1 every pair of groups gets exactly one link; with fewer
    groups every pair gets m = floor(a h / (g - 1)) links, ports m (g - 1)
    and up stay unused.
    """
    g, h = groups, global_links_per_router
    per_pair = routers_per_group * h // (g - 1)
    wiring = {}
    for i in range(g):
        for j in range(i + 1, g):
            # j is other group number j - 1 of group i, and i is number i of group j.
            wiring[i, j] = [((j - 1 + t * (g - 1)) // h, (i + t * (g - 1)) // h) for t in range(per_pair)]
    return wiring


def dragonfly(groups=None, routers_per_group=4, hosts_per_router=2, global_links_per_router=2,
              host_capacity=1.0, local_capacity=None, global_capacity=None):
    """A dragonfly network (Kim et al., 2008) as an undirected graph.

    routers_per_group (a), hosts_per_router (p), global_links_per_router (h)
    and groups (g; None means the maximal a h + 1). The defaults are the
    balanced 72-host dragonfly a = 4, p = h = 2, g = 9 (balanced: a = 2p = 2h).

    The routers of a group are fully connected by local links; the global
    links follow the absolute (consecutive) arrangement: group i gives its
    global ports, router 0's first, to the other groups in increasing
    order, so in the maximal dragonfly groups i < j are joined by router
    (j - 1) // h of group i and router i // h of group j, exactly one link
    per pair. With fewer groups each pair gets m = floor(a h / (g - 1))
    links (the same rule, repeated) and leftover ports stay unused; links
    that would join the same two routers twice are merged into one edge
    with m times the capacity (its "links" attribute counts them).

    Capacities (bytes/s) are on the edges as `capacity`, as in fat_tree:
    host links host_capacity, local links local_capacity and global links
    global_capacity (both default to host_capacity). Nodes: hosts "h<n>"
    (numbered router by router, group by group) and routers "r<group>.<j>",
    with attributes layer ("host" or "router"), group and, for hosts, router.
    Edges carry kind: "host", "local" or "global". The graph's attributes
    record the parameters.

    Route flows with dragonfly_routes (minimal: local-global-local, or
    Valiant). route_flows' shortest paths in hops can cross two global links
    where that is one hop shorter than going through a local link, which
    is not how a dragonfly routes.
    """
    a = _count("routers_per_group", routers_per_group)
    p = _count("hosts_per_router", hosts_per_router)
    h = _count("global_links_per_router", global_links_per_router)
    largest = a * h + 1
    if groups is None:
        groups = largest
    g = _count("groups", groups, minimum=2)
    if g > largest:
        raise ValueError(f"groups must be at most routers_per_group x global_links_per_router + 1 = {largest} "
                         f"(more groups cannot all be joined by global links), got {g}")
    host_capacity = _positive("host_capacity", host_capacity)
    local_capacity = host_capacity if local_capacity is None else _positive("local_capacity", local_capacity)
    global_capacity = host_capacity if global_capacity is None else _positive("global_capacity", global_capacity)
    wiring = _dragonfly_global_wiring(g, a, h)
    graph = nx.Graph(topology="dragonfly", groups=g, routers_per_group=a, hosts_per_router=p,
                     global_links_per_router=h, global_links_per_group_pair=len(wiring[0, 1]))
    for i in range(g):
        for r in range(a):
            router = f"r{i}.{r}"
            graph.add_node(router, layer="router", group=i)
            for t in range(p):
                host = f"h{(i * a + r) * p + t}"
                graph.add_node(host, layer="host", group=i, router=router)
                graph.add_edge(host, router, capacity=host_capacity, kind="host")
        for r in range(a):
            for s in range(r + 1, a):
                graph.add_edge(f"r{i}.{r}", f"r{i}.{s}", capacity=local_capacity, kind="local")
    for (i, j), ends in wiring.items():
        for ri, rj in ends:
            u, v = f"r{i}.{ri}", f"r{j}.{rj}"
            if graph.has_edge(u, v):
                graph.edges[u, v]["links"] += 1
                graph.edges[u, v]["capacity"] += global_capacity
            else:
                graph.add_edge(u, v, capacity=global_capacity, kind="global", links=1)
    return graph


def dragonfly_routes(graph, pairs, routing="minimal", seed=None) -> list:
    """Routes on a dragonfly() graph for pairs of host indices.

    routing="minimal": local-global-local. A flow between hosts of one router
    crosses the two host links; within a group it adds the local link
    between the two routers; between groups it goes to the router of its
    group that owns a global link to the destination group (a local hop
    unless it is already there), across that link, and on to the
    destination's router (a local hop unless it landed there): at most three
    router-to-router hops, one of them global. Where two groups are joined
    by m > 1 global links, the flow from host s to host d takes link number
    (s + d) mod m, which spreads flows over them evenly.

    routing="valiant" (Valiant's randomized routing, as Kim et al. apply it):
    flows between groups first go minimally to an intermediate group, then
    minimally on to the destination: two global hops, which spreads
    adversarial traffic at the cost of longer paths. Flows within a group
    route minimally. With seed=None the flow from s to d goes through the
    ((s + d) mod (g - 2))-th group that is neither end, which spreads many
    flows evenly, as per-packet random choices do on average; with an
    integer seed each flow draws its intermediate group at random (numpy's
    default_rng(seed)), which with few flows per pair loads links unevenly.
    """
    if not isinstance(graph, nx.Graph) or graph.graph.get("topology") != "dragonfly":
        raise ValueError("graph must be a dragonfly() graph")
    if routing not in ("minimal", "valiant"):
        raise ValueError(f"routing must be 'minimal' or 'valiant', got {routing!r}")
    g, a, p = graph.graph["groups"], graph.graph["routers_per_group"], graph.graph["hosts_per_router"]
    wiring = _dragonfly_global_wiring(g, a, graph.graph["global_links_per_router"])
    n_hosts = g * a * p
    pairs = _check_pairs(pairs, n_hosts)
    src, dst = pairs[:, 0].tolist(), pairs[:, 1].tolist()
    if routing == "valiant":
        between = [s // (a * p) != d // (a * p) for s, d in zip(src, dst)]
        if any(between) and g < 3:
            raise ValueError(f"routing='valiant' needs groups >= 3 (an intermediate group), got groups={g}")
        # The intermediate group of each flow, as a number among the g - 2
        # groups that are neither end: spread evenly, or drawn at random.
        if seed is None:
            draws = [(s + d) % max(1, g - 2) for s, d in zip(src, dst)]
        else:
            draws = np.random.default_rng(seed).integers(0, max(1, g - 2), size=len(src)).tolist()
    host_link = [link(f"h{n}", f"r{n // (a * p)}.{n // p % a}") for n in range(n_hosts)]

    def local(group, r_from, r_to):
        """The local link between two routers of a group (none if they are one)."""
        return [] if r_from == r_to else [link(f"r{group}.{r_from}", f"r{group}.{r_to}")]

    def gateways(i, j, choice):
        """Global link number `choice` (mod m) between groups i and j: its
        router in group i and its router in group j."""
        ends = wiring[min(i, j), max(i, j)]
        ri, rj = ends[choice % len(ends)]
        return (ri, rj) if i < j else (rj, ri)

    routes = []
    for f, (s, d) in enumerate(zip(src, dst)):
        i, j = s // (a * p), d // (a * p)
        rs, rd = s // p % a, d // p % a
        if i == j:
            middle = local(i, rs, rd)
        elif routing == "minimal":
            gi, gj = gateways(i, j, s + d)
            middle = local(i, rs, gi) + [link(f"r{i}.{gi}", f"r{j}.{gj}")] + local(j, gj, rd)
        else:
            # The draw-th group that is neither i nor j, in increasing order.
            k = draws[f]
            k += k >= min(i, j)
            k += k >= max(i, j)
            gi, gk_in = gateways(i, k, s + d)
            gk_out, gj = gateways(k, j, s + d)
            middle = (local(i, rs, gi) + [link(f"r{i}.{gi}", f"r{k}.{gk_in}")] + local(k, gk_in, gk_out)
                      + [link(f"r{k}.{gk_out}", f"r{j}.{gj}")] + local(j, gj, rd))
        routes.append([host_link[s]] + middle + [host_link[d]])
    return routes


# -----------------------------------------------------------------------------
# Plotting


def plot_network_map(graph, capacity=None, ax=None, title=None, max_width=9.0, unit_scale=8e-9,
                     unit="Gbit/s", label_links=False):
    """Draw a graph from its longitude/latitude with each link's width
    proportional to its capacity: `capacity` (dict link -> bytes/s), or the
    graph's own capacity_bytes_per_s when None. Links missing from
    `capacity` are drawn thin and dashed (unused)."""
    import matplotlib.pyplot as plt

    if capacity is None:
        capacity = {link(u, v): d["capacity_bytes_per_s"] for u, v, d in graph.edges(data=True)}
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 7))
    position = {n: (d["longitude"], d["latitude"]) for n, d in graph.nodes(data=True)}
    largest = max(capacity.values())
    for u, v in graph.edges:
        (x0, y0), (x1, y1) = position[u], position[v]
        c = capacity.get(link(u, v))
        if c is None:
            ax.plot([x0, x1], [y0, y1], color="0.7", lw=0.8, ls="--", zorder=1)
            continue
        ax.plot([x0, x1], [y0, y1], color="C0", lw=max(0.6, max_width * c / largest),
                solid_capstyle="round", alpha=0.8, zorder=1)
        if label_links:
            ax.text((x0 + x1) / 2, (y0 + y1) / 2, f"{c * unit_scale:.3g}", fontsize=6, color="C3")
    xs, ys = zip(*position.values())
    ax.scatter(xs, ys, s=18, color="k", zorder=3)
    for n, (x, y) in position.items():
        # Label to the left when another node sits just east at about the same latitude.
        crowded = any(0 < x2 - x < 2.5 and abs(y2 - y) < 1.2 for m, (x2, y2) in position.items() if m != n)
        ax.annotate(n, (x, y), textcoords="offset points", xytext=(-3, 3) if crowded else (3, 3),
                    ha="right" if crowded else "left", fontsize=6.5)
    ax.set_aspect("equal")
    ax.set_xlim(min(xs) - 2, max(xs) + 6)  # room for the labels on the east coast
    ax.set_xlabel("longitude (°)")
    ax.set_ylabel("latitude (°)")
    if title:
        ax.set_title(title, fontsize=10)
    # A legend of widths.
    for fraction in (1.0, 0.5, 0.1):
        ax.plot([], [], color="C0", lw=max(0.6, max_width * fraction), alpha=0.8,
                label=f"{largest * fraction * unit_scale:.3g} {unit}")
    ax.legend(loc="lower right", fontsize=7, title="capacity", title_fontsize=7)
    return ax


def plot_bottleneck_structure(structure, ax=None, label_flows=True):
    """Draw a bottleneck structure in layers: links (squares) and flows
    (circles), each placed below what limits it, edges link -> flow where the
    link is the flow's bottleneck and flow -> link where the flow only
    crosses the link."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(8, 4.5))
    # Level of each vertex: links by rising fair share, flows under their bottleneck.
    shares = sorted({round(d["fair_share"], 12) for _, d in structure.nodes(data=True)
                     if d["kind"] == "link"})
    level = {}
    for node, data in structure.nodes(data=True):
        if data["kind"] == "link":
            level[node] = 2 * shares.index(round(data["fair_share"], 12))
        else:
            level[node] = 2 * shares.index(round(data["rate"], 12)) + 1 if round(
                data["rate"], 12) in shares else 1
    for node in structure.nodes:
        nx.set_node_attributes(structure, {node: level[node]}, "level")
    position = nx.multipartite_layout(structure, subset_key="level", align="horizontal", scale=1)
    position = {n: (x, -y) for n, (x, y) in position.items()}
    links = [n for n, d in structure.nodes(data=True) if d["kind"] == "link"]
    flows = [n for n, d in structure.nodes(data=True) if d["kind"] == "flow"]
    bottleneck_edges = [(u, v) for u, v in structure.edges if u[0] == "link"]
    crossing_edges = [(u, v) for u, v in structure.edges if u[0] == "flow"]
    nx.draw_networkx_edges(structure, position, edgelist=bottleneck_edges, ax=ax, edge_color="C3",
                           width=1.6, arrows=True, arrowsize=10, node_size=420)
    nx.draw_networkx_edges(structure, position, edgelist=crossing_edges, ax=ax, edge_color="0.55",
                           style="dashed", width=1.0, arrows=True, arrowsize=8, node_size=420)
    nx.draw_networkx_nodes(structure, position, nodelist=links, node_shape="s", node_color="C1",
                           node_size=420, ax=ax)
    nx.draw_networkx_nodes(structure, position, nodelist=flows, node_shape="o", node_color="C0",
                           node_size=300, ax=ax)
    labels = {n: "-".join(str(x) for x in n[1]) if n[0] == "link" else f"f{n[1]}" for n in links + flows}
    if not label_flows:
        labels = {n: t for n, t in labels.items() if n[0] == "link"}
    nx.draw_networkx_labels(structure, position, labels, font_size=7, ax=ax)
    ax.plot([], [], color="C3", lw=1.6, label="link -> flow: the link is the flow's bottleneck")
    ax.plot([], [], color="0.55", lw=1.0, ls="--", label="flow -> link: the flow crosses, limited elsewhere")
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, -0.18), fontsize=8, ncol=1, frameon=False)
    ax.set_axis_off()
    return ax


def plot_completion_times(results, ax=None, unit_scale=8e-9):
    """Bars of the time of each design in a compare_designs result, labelled
    with the total capacity (Gbit/s by default)."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(7.5, 3.2))
    names = [r.design for r in results]
    times = [r.time_s for r in results]
    colours = ["C2" if r.design.startswith("proportional") else "C0" for r in results]
    rows = np.arange(len(results))
    ax.barh(rows, times, color=colours)
    for row, r in zip(rows, results):
        ax.text(r.time_s, row, f"  {r.time_s:.1f} s, total {r.total_capacity_bytes_per_s * unit_scale:.0f}",
                va="center", fontsize=8)
    ax.set_yticks(rows, names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, max(times) * 1.45)
    ax.set_xlabel("time until the last flow finishes (s)")
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    return ax


def plot_design_frontier(flow_links, sizes, alpha, ax=None, unit_scale=8e-9, unit="Gbit/s",
                         alpha_scale=None, results=None):
    """Time against total capacity for proportional and uniform designs.

    With the same total capacity C spread over the L crossed links, a
    proportional design finishes in (sum of link loads) / C and a uniform
    one in L x (largest link load) / C: two hyperbolas whose ratio is the
    largest load over the mean load. The designs of compare_designs are
    marked (simulated, not from the formulas); alpha_scale adds a point for
    the proportional design at alpha x alpha_scale.
    """
    import matplotlib.pyplot as plt

    inc = incidence(flow_links)
    sizes = _sizes(sizes, inc.n_flows)
    loads = inc.load_per_link(sizes)
    if results is None:
        results = compare_designs(inc, sizes, alpha)
    if ax is None:
        _, ax = plt.subplots(figsize=(7.5, 4.5))
    totals = np.array([r.total_capacity_bytes_per_s for r in results])
    c = np.geomspace(totals.min() / 3, totals.max() * 2, 200)
    ax.plot(c * unit_scale, loads.sum() / c, color="C2", lw=2, label="proportional designs")
    ax.plot(c * unit_scale, inc.n_links * loads.max() / c, color="C0", lw=2,
            label="uniform designs")
    for r in results:
        marker = "o" if r.design.startswith("proportional") else "s"
        ax.plot(r.total_capacity_bytes_per_s * unit_scale, r.time_s, marker, color="k", ms=6)
        ax.annotate(r.design, (r.total_capacity_bytes_per_s * unit_scale, r.time_s),
                    textcoords="offset points", xytext=(6, 4), fontsize=7.5)
    if alpha_scale is not None:
        scale = _positive("alpha_scale", alpha_scale)
        total = alpha * scale * loads.sum()
        ax.plot(total * unit_scale, 1 / (alpha * scale), "*", color="C3", ms=14,
                label=f"proportional, alpha x {scale:g}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(f"total capacity of the crossed links ({unit}, log scale)")
    ax.set_ylabel("time until the last flow finishes (s, log scale)")
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(loc="upper right", fontsize=8)
    return ax


def plot_scale_benchmark(record, ax=None):
    """Seconds against the number of hosts, from a network_scale benchmark
    record (the JSON file as a dict): max-min rates and completion times for
    each traffic pattern, log-log."""
    import matplotlib.pyplot as plt

    if not isinstance(record, dict) or record.get("benchmark") != "network_scale":
        raise ValueError("record must be a network_scale benchmark record (the JSON file as a dict)")
    if ax is None:
        _, ax = plt.subplots(figsize=(7.5, 4.5))
    styles = {"ring": "--", "all-to-all": "-"}
    for pattern, ls in styles.items():
        rows = sorted((r for r in record["results"] if r["variant"] == pattern), key=lambda r: r["hosts"])
        if not rows:
            continue
        hosts = [r["hosts"] for r in rows]
        ax.plot(hosts, [r["max_min_s"] for r in rows], ls, marker="o", color="C0",
                label=f"max_min_rates, {pattern}")
        ax.plot(hosts, [r["completion_times_s"] for r in rows], ls, marker="s", color="C1",
                label=f"completion_times, {pattern}")
        ax.plot(hosts, [r["index_s"] for r in rows], ls, marker="^", color="0.5",
                label=f"indexing the flows, {pattern}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("hosts of the fat-tree (log scale)")
    ax.set_ylabel("seconds (log scale)")
    ax.set_title(f"Solver time on {record['machine']}", fontsize=9)
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=7.5, ncol=2)
    return ax


def dragonfly_layout(graph) -> dict:
    """Positions for drawing a dragonfly() graph: the groups on a circle,
    each group's routers on a small circle around its place, and each
    router's hosts just outside its router."""
    if not isinstance(graph, nx.Graph) or graph.graph.get("topology") != "dragonfly":
        raise ValueError("graph must be a dragonfly() graph")
    g, a, p = graph.graph["groups"], graph.graph["routers_per_group"], graph.graph["hosts_per_router"]
    small = min(0.32, 2.2 / g)  # the radius of a group, so that neighbouring groups do not touch
    position = {}
    for i in range(g):
        centre_angle = np.pi / 2 - 2 * np.pi * i / g
        cx, cy = np.cos(centre_angle), np.sin(centre_angle)
        for r in range(a):
            angle = centre_angle + np.pi + 2 * np.pi * (r + 0.5) / a if a > 1 else centre_angle
            position[f"r{i}.{r}"] = (cx + small * np.cos(angle), cy + small * np.sin(angle))
            for t in range(p):
                spread = (t - (p - 1) / 2) * 0.35
                position[f"h{(i * a + r) * p + t}"] = (cx + 1.45 * small * np.cos(angle + spread / a),
                                                       cy + 1.45 * small * np.sin(angle + spread / a))
    return position


def plot_dragonfly(graph, loads=None, ax=None, title=None, show_hosts=True, max_width=6.0, full_width_bytes=None):
    """Draw a dragonfly() graph: groups on a circle, local links (inside a
    group) and global links (between groups) in different colours. With
    `loads` (dict link -> bytes, as link_loads returns), each router-to-router
    link is drawn with a width proportional to its load and unused ones
    dotted, so the most loaded links stand out. full_width_bytes is the load
    drawn max_width wide (default: the largest load); give two drawings the
    same one to compare them."""
    import matplotlib.pyplot as plt

    position = dragonfly_layout(graph)
    if ax is None:
        _, ax = plt.subplots(figsize=(6.5, 6.5))
    colour = {"local": "C0", "global": "C3", "host": "0.6"}
    largest = None
    if loads:
        largest = max(loads.values()) if full_width_bytes is None else _positive("full_width_bytes",
                                                                                  full_width_bytes)
    for u, v, data in graph.edges(data=True):
        if data["kind"] == "host" and not show_hosts:
            continue
        (x0, y0), (x1, y1) = position[u], position[v]
        width, style = {"host": 0.6, "local": 1.2, "global": 0.9}[data["kind"]], "-"
        if loads is not None and data["kind"] != "host":
            load = loads.get(link(u, v), 0.0)
            width, style = (max(0.4, max_width * load / largest), "-") if load > 0 else (0.5, ":")
        ax.plot([x0, x1], [y0, y1], color=colour[data["kind"]], lw=width, ls=style,
                alpha=0.85 if data["kind"] == "global" else 1.0, zorder=2 if data["kind"] == "local" else 1)
    routers = [n for n, d in graph.nodes(data=True) if d["layer"] == "router"]
    xs, ys = zip(*(position[n] for n in routers))
    ax.scatter(xs, ys, s=22, color="k", zorder=3)
    if show_hosts:
        hosts = [n for n, d in graph.nodes(data=True) if d["layer"] == "host"]
        xs, ys = zip(*(position[n] for n in hosts))
        ax.scatter(xs, ys, s=5, color="0.45", zorder=3)
    for i in range(graph.graph["groups"]):
        angle = np.pi / 2 - 2 * np.pi * i / graph.graph["groups"]
        ax.annotate(f"group {i}", (1.32 * np.cos(angle), 1.32 * np.sin(angle)), ha="center", va="center",
                    fontsize=7.5)
    ax.plot([], [], color="C0", lw=1.2, label="local link (within a group)")
    ax.plot([], [], color="C3", lw=0.9, label="global link (between groups)")
    if show_hosts:
        ax.plot([], [], color="0.6", lw=0.6, marker="o", ms=2, label="host link (hosts in grey)")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, 0.0), fontsize=7.5, ncol=3 if show_hosts else 2,
              frameon=False)
    ax.set_xlim(-1.5, 1.5)
    ax.set_ylim(-1.5, 1.5)
    ax.set_aspect("equal")
    ax.set_axis_off()
    if title:
        ax.set_title(title, fontsize=10)
    return ax
