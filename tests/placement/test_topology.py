"""Topology: slots, levels, hops and Scotch target architectures."""

from __future__ import annotations

import numpy as np
import pytest

from perfkit.placement.topology import LEVELS, Topology


def test_levels_of_core_pairs() -> None:
    topo = Topology(nodes=6, cores=8, sockets=2, switch_size=2)
    # slot 0: node 0 socket 0; 3: node 0 socket 0; 4: node 0 socket 1; 8: node 1; 16: node 2 (other switch)
    levels = topo.level(np.array([0, 0, 0, 0]), np.array([3, 4, 8, 16]))
    assert [LEVELS[i] for i in levels] == ["socket", "node", "switch", "network"]
    assert topo.capacity == 48 and topo.cores_per_socket == 4


def test_one_switch_when_no_switch_size() -> None:
    topo = Topology(nodes=4, cores=2)
    assert LEVELS[topo.level(np.array(0), np.array(7))] == "switch"
    assert topo.hops(np.array([0, 0]), np.array([0, 3])).tolist() == [0, 2]


def test_hops_on_tree_torus_and_hypercube() -> None:
    tree = Topology(nodes=6, cores=1, switch_size=3)
    assert tree.hops(np.array([0, 0, 0]), np.array([0, 2, 3])).tolist() == [0, 2, 4]
    torus = Topology.torus((4, 3), cores=2)
    # node 0 = (0,0), node 9 = (3,0): wrap-around distance 1; node 5 = (1,2): 1 + 1
    assert torus.hops(np.array([0, 0]), np.array([9, 5])).tolist() == [1, 2]
    assert LEVELS[torus.node_level(np.array(0), np.array(1), np.array(False))] == "network"
    cube = Topology.hypercube(3, cores=4)
    assert cube.nodes == 8
    assert cube.hops(np.array([0, 5]), np.array([7, 5])).tolist() == [3, 0]


def test_scotch_tleaf_levels() -> None:
    arch = Topology(nodes=4, cores=16).scotch_arch(64)
    assert (arch.kind, arch.sizes, arch.links, arch.sub) == ("tleaf", (4, 16), (10, 2), None)
    arch = Topology(nodes=5, cores=8, sockets=2, switch_size=2).scotch_arch(30)
    assert arch.sizes == (3, 2, 2, 4) and arch.links == (30, 10, 2, 1)
    assert arch.sub.tolist() == list(range(30)) and arch.terminals == 30
    arch.validate()


def test_scotch_node_targets() -> None:
    assert Topology(nodes=4, cores=16).scotch_node_arch(3).sub.tolist() == [0, 1, 2]
    torus = Topology.torus((2, 2, 2), cores=4).scotch_node_arch(8)
    assert (torus.kind, torus.sizes, torus.terminals) == ("torus", (2, 2, 2), 8)
    cube = Topology.hypercube(4, cores=4).scotch_node_arch(16)
    assert (cube.kind, cube.sizes, cube.terminals) == ("hcub", (4,), 16)
    with pytest.raises(ValueError, match="tree"):
        Topology.torus((2, 2), cores=4).scotch_arch(16)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"nodes": 0, "cores": 4}, "nodes"),
        ({"nodes": 2, "cores": 6, "sockets": 4}, "multiple of sockets"),
        ({"nodes": 2, "cores": 4, "shape": "ring"}, "shape"),
        ({"nodes": 6, "cores": 4, "shape": "hypercube"}, "power-of-two"),
        ({"nodes": 6, "cores": 4, "shape": "torus", "dims": (2, 2)}, "multiply"),
        ({"nodes": 2, "cores": 4, "link_cost": (1, 2, 3)}, "one value per level"),
        ({"nodes": 2, "cores": 4, "link_cost": (1, 2, 3.5, 4)}, "integers"),
        ({"nodes": 2, "cores": 4, "bandwidth_Bps": (1, 0, 1, 1)}, "positive"),
    ],
)
def test_bad_topologies(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Topology(**kwargs)


def test_from_nodelist_as_mpiplace_took_it():
    topo = Topology.from_nodelist("n001 24, n002 24, n003 24")
    assert (topo.nodes, topo.cores, topo.hosts) == (3, 24, ("n001", "n002", "n003"))
    assert Topology.from_nodelist("a:4\nb:4\n").hosts == ("a", "b")
    with pytest.raises(ValueError, match="different core counts"):
        Topology.from_nodelist("n001 24, n002 16")
    with pytest.raises(ValueError, match="each of the 2 nodes"):
        Topology(nodes=2, cores=4, hosts=("a", "a"))


def test_fewer_ranks_than_cores_and_host_names_in_launch_files():
    from perfkit.placement.strategies import place

    topo = Topology.from_nodelist("n001 24, n002 24, n003 24")
    rng = np.random.default_rng(0)
    matrix = rng.integers(0, 100, (50, 50)).astype(float)
    placement = place(matrix, topo, strategy="scotch")
    assert placement.node.size == 50
    text = placement.write("mpt")
    assert text.split(",")[0].split()[0] in {"n001", "n002", "n003"} and "node000" not in text


def test_node_route_targets() -> None:
    assert Topology(nodes=4, cores=48).group_levels() == (1, 8)
    assert Topology(nodes=4, cores=24, sockets=2).group_levels() == (2, 2)
    assert Topology(nodes=4, cores=16, sockets=2).group_levels() == (2, 1)
    assert Topology(nodes=4, cores=7).group_levels() == (1, 1)
    assert Topology.torus((2, 2), cores=48).group_levels() == (1, 1)
    arch = Topology(nodes=4, cores=24, sockets=2, switch_size=2).scotch_group_arch(13)
    assert (arch.sizes, arch.links, arch.sub.tolist()) == ((2, 2, 2, 2), (30, 10, 2, 1), list(range(13)))
    whole = Topology(nodes=4, cores=7).scotch_group_arch(3)
    assert (whole.sizes, whole.sub.tolist()) == ((4,), [0, 1, 2])
