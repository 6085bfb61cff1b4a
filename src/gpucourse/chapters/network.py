"""What chapter 7 shows: maps of networks with their link loads, the
bottleneck structure as a graph, completion times, the design frontier, the
dragonfly drawing and the scale benchmark's figure.

The models live in ``gpucourse.network``; this module only draws them.
matplotlib is imported inside each plotting function.
"""

from __future__ import annotations

import networkx as nx
import numpy as np

from gpucourse.network.flows import _positive, _sizes, link, incidence
from gpucourse.network.designs import compare_designs


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
