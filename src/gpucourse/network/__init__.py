"""Week 7: the network between GPUs, seen through its bottlenecks.

Data-parallel training moves the same amount of data between many pairs of
hosts at once, so its communication time is set by how the network shares its
links among those flows. This package models that sharing and the designs that
follow from it, in three modules:

* ``flows``: routing (shortest paths in hops, ties broken towards the
  least-loaded path); max-min fair rates (water-filling, vectorized over flows
  with numpy) and the completion times of a fluid simulation that recomputes
  them each time a flow finishes; and the bottleneck structure of a network:
  which link limits which flow, and which links precede which (Ros-Giralt et
  al.);
* ``designs``: capacity designs, proportional (every link gets alpha times the
  bytes that cross it) and uniform (every link the same), and the
  interference-free test under which the proportional design wastes nothing;
* ``topologies``: traffic patterns of data-parallel training (ring all-reduce
  neighbours, all-to-all, parameter server) and topologies (the RNP backbone
  of Brazil, as the Internet Topology Zoo recorded it in 2010, k-ary
  fat-trees with oversubscription and tapering, and dragonflies with minimal
  and Valiant routing).

The maps and drawings of all of this live in ``gpucourse.chapters.network``;
every name is still importable from here, as ``gpucourse.network.NAME``.

Units: sizes are bytes, capacities and rates bytes per second, times seconds,
alpha is per second (a proportional design with alpha finishes in 1 / alpha
seconds). A link is identified by the sorted pair of its end nodes, so (u, v)
and (v, u) are the same link; links are shared by the flows of both
directions.

Only numpy and networkx are imported here; matplotlib is imported inside the
plotting functions.
"""

from gpucourse.network.flows import (  # noqa: F401 (re-exported)
    RTOL, _positive, _count, _sizes, link, Incidence, incidence, _capacities, route_flows,
    _water_fill, max_min_rates, completion_times, link_loads, link_utilization,
    bottleneck_structure, link_precedence,
)
from gpucourse.network.designs import (  # noqa: F401 (re-exported)
    proportional_design, uniform_design, is_interference_free, PAPER_TABLE_1, PAPER_ALPHA_SCALE,
    PAPER_ALPHA_SCALED_TIME_S, DesignResult, compare_designs,
)
from gpucourse.network.topologies import (  # noqa: F401 (re-exported)
    _hosts, ring_pairs, all_to_all_pairs, ring_order, parameter_server_pairs, RNP_DATA, rnp_data,
    rnp_backbone, central_node, fat_tree, hosts_of, capacities_of, _check_pairs, fat_tree_routes,
    _dragonfly_global_wiring, dragonfly, dragonfly_routes,
)
from gpucourse.moved import publish, served_from

# The functions answer to the package's name (gpucourse.network.NAME), the address
# students call them by and the one the grader names in its messages.
publish(__name__, globals())

# The maps and drawings live with chapter 7 (gpucourse.chapters.network), which imports
# the models above; they are served from here for old imports.
__getattr__ = served_from(__name__, "gpucourse.chapters.network", (
    'plot_network_map', 'plot_bottleneck_structure', 'plot_completion_times',
    'plot_design_frontier', 'plot_scale_benchmark', 'dragonfly_layout', 'plot_dragonfly',
))
