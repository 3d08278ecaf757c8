"""Launch files: the text of each format, and writer -> reader round trips (property-based)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfkit.placement.launch import FORMATS, host_names, parse_launch, read_hosts, read_launch, write_launch
from perfkit.placement.placement import Placement
from perfkit.placement.topology import Topology

TOPO = Topology(nodes=2, cores=4, sockets=2)
# ranks 0..7 -> cores: rank 0 on node 1 core 0, rank 1 on node 0 core 3, ...
EXAMPLE = Placement.from_slots(np.array([4, 3, 0, 1, 5, 6, 7, 2]), TOPO)


def test_example_texts() -> None:
    assert EXAMPLE.write("permutation") == "2\n3\n7\n1\n0\n4\n5\n6\n"
    assert EXAMPLE.write("cray") == "2-3,7,1\n0,4-6\n"
    assert EXAMPLE.write("rankfile").splitlines()[:2] == ["rank 0=node001 slot=0:0", "rank 1=node000 slot=1:1"]
    assert EXAMPLE.write("machinefile", hosts=["a", "b"]) == "b\na\na\na\nb\nb\nb\na\n"
    assert write_launch(EXAMPLE, "machinefile", hosts=["a", "b"], compact=True) == "b:1\na:3\nb:3\na:1\n"
    assert EXAMPLE.write("mpt", hosts=["n001", "n002"]).startswith("n002 1, n001 1, n001 1, n001 1, n002 1,")
    assert write_launch(EXAMPLE, "mpt", compact=True) == "node001 1, node000 3, node001 3, node000 1\n"


def test_reads_mpt_command_line_and_files(tmp_path) -> None:
    text = "mpirun -v n003 1, n002 2,\n n003 1 ./a.out arg\n"
    placement = parse_launch(text, "mpt", Topology(nodes=3, cores=2), hosts=["n001", "n002", "n003"])
    assert placement.node.tolist() == [2, 1, 1, 2] and placement.core.tolist() == [0, 0, 1, 1]
    (tmp_path / "hosts").write_text("# cluster\nn001:24\nn002\n\nn003  # spare\n")
    assert read_hosts(tmp_path / "hosts") == ["n001", "n002", "n003"]
    EXAMPLE.write("rankfile", tmp_path / "rankfile")
    assert np.array_equal(read_launch(tmp_path / "rankfile", "rankfile", TOPO).slot, EXAMPLE.slot)


def test_an_existing_launch_file_is_replaced_only_when_asked(tmp_path) -> None:
    path = tmp_path / "ranks"
    path.write_text("precious\n")
    with pytest.raises(FileExistsError, match="overwrite=True"):
        EXAMPLE.write("permutation", path)
    assert path.read_text() == "precious\n"
    EXAMPLE.write("permutation", path, overwrite=True)
    assert path.read_text() == EXAMPLE.write("permutation")


@pytest.mark.parametrize(
    ("fmt", "text", "message"),
    [
        ("permutation", "0\n0\n", "exactly once"),
        ("permutation", "0\nx\n", "line 2"),
        ("cray", "0-2,4", "exactly once"),
        ("rankfile", "rank 0=node000 slot=0\n", "line 1"),
        ("rankfile", "rank 0=node009 slot=0:0\n", "host 'node009'"),
        ("rankfile", "rank 1=node000 slot=0:0\n", "ranks 0..N-1"),
        ("machinefile", "node000:5\n", "5 ranks but has 4 cores"),
        ("machinefile", "other\n", "not in the host list"),
        ("mpt", "node000 1, node001", "not 'host count'"),
        ("slurm", "", "unknown launch format"),
    ],
)
def test_bad_files(fmt: str, text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_launch(text, fmt, TOPO)


def test_unpacked_placement_cannot_be_a_permutation_file() -> None:
    with pytest.raises(ValueError, match="first N cores"):
        Placement.from_slots(np.array([0, 5]), TOPO).write("permutation")


def test_host_names() -> None:
    assert host_names(2) == ["node000", "node001"]
    with pytest.raises(ValueError, match="1 host names given for 2 nodes"):
        host_names(2, ["a"])
    with pytest.raises(ValueError, match="distinct"):
        host_names(2, ["a", "a"])


@st.composite
def placements(draw: st.DrawFn, packed: bool) -> tuple[Placement, list[str] | None]:
    nodes = draw(st.integers(1, 5))
    sockets = draw(st.sampled_from([1, 2]))
    topology = Topology(nodes=nodes, cores=sockets * draw(st.integers(1, 4)), sockets=sockets)
    n = draw(st.integers(1, topology.capacity))
    slots = draw(st.permutations(range(n if packed else topology.capacity)))[:n]
    hosts = draw(st.none() | st.just([f"r{i}c{i % 3}" for i in range(nodes)]))
    return Placement.from_slots(np.array(slots), topology), hosts


@settings(max_examples=60, deadline=None)
@given(placements(packed=True), st.sampled_from(["permutation", "cray"]))
def test_rank_order_round_trip(case: tuple[Placement, list[str] | None], fmt: str) -> None:
    placement, _ = case
    back = parse_launch(placement.write(fmt), fmt, placement.topology)
    assert np.array_equal(back.slot, placement.slot)


@settings(max_examples=60, deadline=None)
@given(placements(packed=False))
def test_rankfile_round_trip(case: tuple[Placement, list[str] | None]) -> None:
    placement, hosts = case
    back = parse_launch(placement.write("rankfile", hosts=hosts), "rankfile", placement.topology, hosts=hosts)
    assert np.array_equal(back.node, placement.node) and np.array_equal(back.core, placement.core)


@settings(max_examples=60, deadline=None)
@given(placements(packed=False), st.sampled_from(["machinefile", "mpt"]), st.booleans())
def test_host_list_round_trip(case: tuple[Placement, list[str] | None], fmt: str, compact: bool) -> None:
    placement, hosts = case
    text = write_launch(placement, fmt, hosts=hosts, compact=compact)
    back = parse_launch(text, fmt, placement.topology, hosts=hosts)
    assert np.array_equal(back.node, placement.node)
    # host lists carry no core numbers: each host's cores are taken in rank order
    for node in np.unique(placement.node):
        assert back.core[placement.node == node].tolist() == list(range(int((placement.node == node).sum())))


def test_formats_listed() -> None:
    assert set(FORMATS) == {"permutation", "rankfile", "machinefile", "mpt", "cray"}
