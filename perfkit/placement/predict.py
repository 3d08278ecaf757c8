"""Predict a run's elapsed time under another placement or a faster network, with an interval.

Model (stated once). Elapsed time is the run's from the end of ``MPI_Init`` to the start of
``MPI_Finalize`` (``run_seconds``); the busiest rank's MPI time over that span, ``M``, is the part the
network can change; compute is kept as measured. ``L`` is the time the links need for the run's
traffic between nodes (``perfkit.placement.network``: the flows sharing each node's link fairly at
the described rate). The share of ``M`` the links explain, ``f = min(1, L / 0.95 / M)`` (TCP reaches
about 95% of a link), scales with ``L``; the rest scales with the bytes between nodes (a limit on
all traffic together: a switch backplane; on the testbed, the machine's own cores):
``elapsed_after = elapsed_before - M * (1 - (f * L_after / L_before + (1 - f) * B_after / B_before))``.
For faster links (``predict_network``) all of ``M`` scales with the links. Which way the rest goes
is the model's unknown: the interval spans it scaling with the links or with the bytes, staying as
it was while the links' time changes (``M - (L_before - L_after)``), and, when the links' time drops,
vanishing (``M_after = L_after / 0.95``), widened by the run-to-run spread of unchanged re-runs
(``REPEATABILITY``). Without a described network the link
rate is unknown: the network time ranges from 0 to ``M``, the point in the middle.

Time without a core (profiles that measured CPU, ``perfkit.placement.cpu_evidence``) is not network time.
Of ``M``, the busiest rank's wait for the critical rank's compute (the longest) is held fixed where that
compute did more CPU work or waited longer for a core than the busiest rank's own (a placement fills the
same cores, so each rank's share of a core is taken to stay); the links explain what they can of the rest
(``min(rest, L / 0.95)``: a busy-polling rank taken off its core while it waits for a link loses nothing);
the busiest rank's own run delay in MPI beyond that is held fixed too; only what is left scales as above.
What is not measured widens the interval: the held time off a core may shrink with the bytes between nodes
or vanish with the links' time as the old rest did (where the machine's cores also carry the bytes, fewer
bytes leave the ranks more of them; more bytes cost at most their links' time, above); the own run delay
may not have overlapped the links' time at all (held first, up to MPI's wall - CPU time); and the critical
rank's share of a core may move to the run's fair share (who shares its core changes with the launch).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

from perfkit.analysis.cpu import cpu_usage
from perfkit.analysis.whatif import whatif
from perfkit.placement.cpu_evidence import NOT_MEASURED, CpuEvidence, cpu_evidence
from perfkit.placement.network import ACHIEVED_FRACTION, REPEATABILITY, Network, link_seconds
from perfkit.placement.placement import Placement
from perfkit.placement.strategies import place
from perfkit.placement.topology import Topology
from perfkit.placement.traffic import select_traffic, wire_traffic
from perfkit.runs import run_labels, select_one

_NOT_RUN_TIME = ("MPI_Init", "MPI_Init_thread", "MPI_Finalize")
UNKNOWN = "unknown: describe the links (bandwidth) for a narrower interval"


def _network_or_unknown(network: Network | None) -> Network:
    """The described network, or unit rates (only ratios of link times are used) marked unknown."""
    if network is not None:
        return network
    return Network(1.0, 1.0, 0.0, {"node_link_Bps": UNKNOWN, "uplink_Bps": UNKNOWN, "latency_s": UNKNOWN})


@dataclass(frozen=True)
class Prediction:
    """A prediction of one run's elapsed time [s] and inter-node bytes [B], and what it assumed; ``cpu`` is the
    CPU evidence used (None: not measured) and ``held`` the seconds of ``mpi_seconds`` it held fixed for want
    of a core (the critical rank's compute, the busiest rank's own run delay in MPI)."""

    what: str
    inter_node_bytes_before: float
    inter_node_bytes_after: float
    elapsed_before: float
    elapsed_after: float
    elapsed_after_low: float
    elapsed_after_high: float
    link_before: dict[str, Any]
    link_after: dict[str, Any]
    mpi_seconds: float
    network: Network
    placement_before: str
    cpu: CpuEvidence | None = None
    held: tuple[float, float] = (0.0, 0.0)

    @property
    def speedup(self) -> float:
        return self.elapsed_before / self.elapsed_after

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: every number, the network with its sources, the busiest links (link seconds and
        rates are null when the network is unknown)."""
        unknown = self.network.sources.get("node_link_Bps") == UNKNOWN
        links = [{**link, "seconds": None if unknown else link["seconds"]}
                 for link in (self.link_before, self.link_after)]
        network = self.network.as_dict()
        if unknown:
            network.update(node_link_Bps=None, node_link_bit_s=None, uplink_Bps=None, latency_s=None)
        return {"what": self.what, "inter_node_bytes_before": self.inter_node_bytes_before,
                "inter_node_bytes_after": self.inter_node_bytes_after, "elapsed_before": self.elapsed_before,
                "elapsed_after": self.elapsed_after, "elapsed_after_low": self.elapsed_after_low,
                "elapsed_after_high": self.elapsed_after_high, "speedup": self.speedup,
                "mpi_seconds_busiest_rank": self.mpi_seconds, "link_before": links[0],
                "link_after": links[1], "network": network,
                "placement_before": self.placement_before, "model": _paragraph(1), "cpu": self.cpu_dict()}

    def cpu_dict(self) -> dict[str, Any] | str:
        """The CPU evidence used and the time it held fixed [s] (``held_peers_s``: the wait for the critical
        rank's extra CPU work and lack of a core; ``held_own_s``: the busiest rank's own run delay in MPI
        that the links do not explain), or ``CPU not measured``."""
        if self.cpu is None:
            return NOT_MEASURED
        peers, own = self.held
        return {**self.cpu.as_dict(), "held_peers_s": peers, "held_own_s": own, "held_s": peers + own,
                "mpi_seconds_scaled": self.mpi_seconds - peers - own, "model": _paragraph(2)}

    def compare(self, elapsed: float, inter_node_bytes: float | None = None) -> dict[str, Any]:
        """Predicted against measured: errors [%] and whether ``elapsed`` fell in the interval."""
        row = {"elapsed_predicted": self.elapsed_after, "elapsed_low": self.elapsed_after_low,
               "elapsed_high": self.elapsed_after_high, "elapsed_measured": elapsed,
               "elapsed_error_pct": 100 * (self.elapsed_after / elapsed - 1),
               "in_interval": bool(self.elapsed_after_low <= elapsed <= self.elapsed_after_high)}
        if inter_node_bytes is not None:
            row.update(bytes_predicted=self.inter_node_bytes_after, bytes_measured=inter_node_bytes,
                       bytes_error_pct=100 * (self.inter_node_bytes_after / inter_node_bytes - 1)
                       if inter_node_bytes else float("nan"))
        return row


def profile_nodes(ds: xr.Dataset, run: str, topology: Topology) -> tuple[np.ndarray, str]:
    """Node index of each rank of ``run`` as it ran: from the profile's host names when it has them
    (``host``), else block placement on ``topology`` (and it says so)."""
    nprocs = select_traffic(ds, run=run)[0].shape[0]
    if "host" in ds:
        hosts = np.asarray(ds["host"].sel(run=run).values[:nprocs]).astype(str)
        if hosts.size and all(hosts):
            names = list(topology.hosts) or [f"node{i:03d}" for i in range(topology.nodes)]
            order = {h: names.index(h) if h in names else None for h in np.unique(hosts)}
            if any(v is None for v in order.values()):
                order = {h: i for i, h in enumerate(sorted(order))}
            return np.array([order[h] for h in hosts], dtype=np.int64), "the profile's host names"
    return np.arange(nprocs, dtype=np.int64) // topology.cores, "block (the profile has no host names)"


def run_seconds(ds: xr.Dataset, run: str) -> tuple[float, float]:
    """The run's time [s] from the end of ``MPI_Init`` to the start of ``MPI_Finalize`` (the slowest
    rank's total without them: start-up is the launcher's, not the program's) and the largest MPI
    time [s] of a rank over the same span."""
    during, mpi = _rank_seconds(ds, run)
    return float(during.max()), float(mpi.max())


def _rank_seconds(ds: xr.Dataset, run: str) -> tuple[xr.DataArray, xr.DataArray]:
    """Each rank's time [s] from the end of ``MPI_Init`` to the start of ``MPI_Finalize``, and its MPI time."""
    times = ds["profile"].sel(run=run, metric="time")
    kinds = ds["kind"].values if "kind" in ds.coords else np.array(["other"] * ds.sizes["function"])
    calls = ds["call"].values if "call" in ds.coords else ds["function"].values
    during = np.flatnonzero(~np.isin(calls, _NOT_RUN_TIME))
    mpi = np.flatnonzero((kinds != "compute") & ~np.isin(calls, _NOT_RUN_TIME))
    return times.isel(function=during).sum("function"), times.isel(function=mpi).sum("function")


def _paragraph(i: int) -> str:
    """The ``i``-th paragraph of this module's docstring, on one line (the model as the JSON states it)."""
    return __doc__.split("\n\n")[i].replace("\n", " ")


def _held(cpu: CpuEvidence | None, mpi: float, link_s: float) -> tuple[float, float, float]:
    """Of the busiest rank's MPI time ``mpi`` [s]: what the critical rank's compute holds (extra CPU work and
    lack of a core), the busiest rank's own run delay in MPI beyond what the links' time ``link_s`` explains,
    and that own part held first (it did not overlap the links); all 0 without CPU evidence."""
    if cpu is None:
        return 0.0, 0.0, 0.0
    peers = min(mpi, cpu.peer_extra_cpu + cpu.peer_off_core)
    left = mpi - peers
    own = min(cpu.own_off_core, left - min(left, link_s / ACHIEVED_FRACTION))
    return peers, own, min(cpu.own_off_core_high, left)


def _scenarios(elapsed: float, mpi: float, before: dict[str, Any], after: dict[str, Any], unknown: bool,
               rest_with_links: bool, capped: bool = False) -> tuple[float, list[float]]:
    """The point prediction [s] and the ends the interval spans when ``mpi`` [s] of the run is what the
    network can change (module docstring); ``capped``: vanishing never lengthens ``mpi``."""
    lb, la = before["seconds"], after["seconds"]
    bb, ba = before["inter_node_bytes"], after["inter_node_bytes"]
    if lb > 0 and unknown:
        ratio = la / lb
        return elapsed - 0.5 * mpi * (1 - ratio), [elapsed, elapsed - mpi * (1 - ratio)]
    if lb > 0:
        by_links, by_bytes = la / lb, ba / bb if bb else 1.0
        explained = min(1.0, lb / ACHIEVED_FRACTION / mpi) if mpi > 0 else 1.0
        mixed = explained * by_links + (1 - explained) * by_bytes
        point = elapsed - mpi * (1 - (by_links if rest_with_links else mixed))
        candidates = [elapsed - mpi * (1 - r) for r in (by_links, by_bytes, mixed)]
        # the rest (and any overlap with compute) unchanged: the links' time changes, at 100% or 95%
        candidates += [elapsed - min(mpi, (lb - la) / a) for a in (1.0, ACHIEVED_FRACTION)]
        if la < lb:  # the rest may vanish with the links' load: the run then waits for the links only
            candidates.append(elapsed - mpi + (min(mpi, la / ACHIEVED_FRACTION) if capped else la / ACHIEVED_FRACTION))
        return point, candidates
    # no traffic between nodes before: the new network time adds to the run
    return elapsed + la / ACHIEVED_FRACTION, [elapsed + la, elapsed + la / ACHIEVED_FRACTION ** 2]


def _predict(what: str, ds: xr.Dataset, run: str, before: dict[str, Any], after: dict[str, Any],
             network: Network, placement_before: str, *, rest_with_links: bool = False) -> Prediction:
    during, ranks_mpi = _rank_seconds(ds, run)
    elapsed, mpi = float(during.max()), float(ranks_mpi.max())
    cpu = cpu_evidence(ds, run, ranks_mpi.values, elapsed)
    peers, own, own_first = _held(cpu, mpi, before["seconds"])
    unknown = network.sources.get("node_link_Bps") == UNKNOWN
    capped = cpu is not None
    point, candidates = _scenarios(elapsed, mpi - peers - own, before, after, unknown, rest_with_links, capped)
    if cpu is not None:  # what the CPU evidence does not settle (module docstring)
        moved = mpi - min(mpi, cpu.peer_extra_cpu)  # time off a core going as the old rest did: only down
        candidates.append(min(_scenarios(elapsed, moved, before, after, unknown, rest_with_links, capped)[1]))
        candidates += _scenarios(elapsed, mpi - peers - own_first, before, after, unknown, rest_with_links, capped)[1]
        candidates += [c + cpu.share_shift for c in candidates]  # the critical rank at the run's fair share
    low, high = min(candidates) * (1 - REPEATABILITY), max(candidates) * (1 + REPEATABILITY)
    return Prediction(what, before["inter_node_bytes"], after["inter_node_bytes"], elapsed, point, low, high, before,
                      after, mpi, network, placement_before, cpu, (peers, own))


def _matrices(ds: xr.Dataset, run: str) -> tuple[Any, Any]:
    """Bytes on the wire (point to point and collectives') and point-to-point message counts of ``run`` (dense or
    sparse-backed), ranks absent from it dropped."""
    return wire_traffic(ds, run=run)


def _switches(topology: Topology) -> np.ndarray | None:
    if topology.switch_size is None:
        return None
    return topology.switch_of(np.arange(topology.nodes))


def predict_placement(ds: xr.Dataset, new: Placement, network: Network | None = None, *,
                      run: int | str | None = None) -> Prediction:
    """Elapsed time [s] and inter-node bytes of ``run`` re-run placed as ``new`` (module docstring)."""
    run = _one_run(ds, run)
    network = _network_or_unknown(network)
    traffic, counts = _matrices(ds, run)
    old, where = profile_nodes(ds, run, new.topology)
    switches = _switches(new.topology)
    before = link_seconds(traffic, old, network, counts=counts, switch_of=switches)
    after = link_seconds(traffic, new.node, network, counts=counts, switch_of=switches)
    return _predict(f"placement {new.strategy or 'given'}", ds, run, before, after, network, where)


def predict_network(ds: xr.Dataset, k: float, network: Network | None, topology: Topology, *,
                    run: int | str | None = None) -> Prediction:
    """Elapsed time [s] of ``run`` re-run on the same nodes with every link ``k`` times faster."""
    network = _network_or_unknown(network)
    if not k > 0:
        raise ValueError(f"k = {k!r}: expected a positive factor")
    run = _one_run(ds, run)
    traffic, counts = _matrices(ds, run)
    node, where = profile_nodes(ds, run, topology)
    switches = _switches(topology)
    before = link_seconds(traffic, node, network, counts=counts, switch_of=switches)
    after = link_seconds(traffic, node, network.scaled(k), counts=counts, switch_of=switches)
    return _predict(f"network x{k:g}", ds, run, before, after, network.scaled(k), where, rest_with_links=True)


def predict_elapsed(ds: xr.Dataset, new: Placement, *, old: Placement | None = None, run: int | str | None = None,
                    quantity: str = "bytes") -> xr.Dataset:
    """What-if result for running ``run`` of ``ds`` placed as ``new`` instead of ``old`` (default: block),
    from the topology's per-level cost model alone (no network description; see ``predict_placement``).

    Returns the ``whatif`` Dataset (``elapsed_before``, ``elapsed_after`` [s], ...) with attributes
    ``comm_time_old_s``, ``comm_time_new_s`` (cost-model estimates), ``network_factor`` and ``cpu_held_s``
    (the busiest rank's run delay in MPI [s], held as compute: a rank's time without a core is not the
    network's; ``CPU not measured`` for profiles without it).
    """
    run = _one_run(ds, run)
    if old is None:
        old = place(ds, new.topology, strategy="block", run=run, quantity=quantity)
    traffic = ds["traffic"].sel(run=run, quantity=quantity)
    before, after = old.cost(traffic).time_s, new.cost(traffic).time_s
    if not after > 0:
        raise ValueError("the new placement has no inter-rank communication cost; nothing to scale")
    held, moved = _off_core_as_compute(ds, run)
    result = whatif(held, "network", k=before / after, run=run)
    return result.assign_attrs(comm_time_old_s=before, comm_time_new_s=after, network_factor=before / after,
                               cpu_held_s=NOT_MEASURED if moved is None else moved)


def _off_core_as_compute(ds: xr.Dataset, run: str) -> tuple[xr.Dataset, float | None]:
    """``ds`` with each rank's run delay in MPI (``cpu_usage``'s ``delay_mpi`` [s]) of ``run`` moved out of its
    MPI calls, in proportion to their time, into its compute; the busiest rank's moved time [s]. ``ds`` and
    None when the profile did not measure CPU."""
    one = ds.sel(run=[run])
    delay = cpu_usage(one)["delay_mpi"]
    if not delay.notnull().any():
        return ds, None
    compute = one["kind"].values == "compute"
    mpi = ~compute & ~np.isin(one["call"].values, _NOT_RUN_TIME)
    time = one["profile"].sel(metric="time")
    in_mpi = time.isel(function=np.flatnonzero(mpi)).sum("function")
    delay = delay.fillna(0.0).clip(max=in_mpi)
    scale = xr.where(in_mpi > 0, 1 - delay / in_mpi.where(in_mpi > 0), 1.0)
    first = xr.DataArray(np.arange(compute.size) == np.flatnonzero(compute)[0], dims="function")
    held = (time * xr.where(xr.DataArray(mpi, dims="function"), scale, 1.0) + delay.where(first, 0.0))
    profile = one["profile"].copy(data=one["profile"].values.copy())
    profile.loc[{"metric": "time"}] = held.transpose(*time.dims)
    return one.assign(profile=profile), float(delay.max())


def compare_measured(prediction: xr.Dataset, measured: xr.Dataset, run: int | str | None = None) -> pd.DataFrame:
    """Predicted vs measured elapsed time [s] of the re-placed run, with the prediction error [%]."""
    run = _one_run(measured, run)
    elapsed = float(measured["elapsed"].sel(run=run).values)
    if elapsed != elapsed:  # NaN: fall back on the slowest rank's total time
        elapsed = float(measured["profile"].sel(run=run, metric="time").sum("function").max().values)
    row: dict[str, Any] = {
        "elapsed_before_s": float(prediction["elapsed_before"].values.squeeze()),
        "predicted_s": float(prediction["elapsed_after"].values.squeeze()),
        "measured_s": elapsed,
    }
    row["error_pct"] = 100 * (row["predicted_s"] / elapsed - 1)
    return pd.DataFrame([row], index=[run])


def _one_run(ds: xr.Dataset, run: int | str | None) -> str:
    """The label of the run ``run`` names in ``ds`` (:mod:`perfkit.runs`; None: the only one)."""
    labels = run_labels(ds)
    return labels[select_one(labels, run)]
