"""Who talks to whom, and over what: the traffic patterns of data-parallel
training and the topologies that carry them.

The patterns are ring all-reduce neighbours, all-to-all and a parameter
server. The topologies are the RNP backbone of Brazil (read from
``gpucourse/data``), k-ary fat-trees with oversubscription and tapering, and
dragonflies, each with its routes (minimal or Valiant for the dragonfly) as
lists of links that the flow model of ``flows`` accepts.
"""

from __future__ import annotations

import json
from importlib import resources

import networkx as nx
import numpy as np

from gpucourse.network.flows import _positive, _count, link


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
