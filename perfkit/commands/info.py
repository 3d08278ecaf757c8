"""What ``perfkit info`` and ``perfkit place`` print: the runs read, and a placement against block, in words."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from perfkit import text as fmt
from perfkit.commands.render import Column, Table, render_text

if TYPE_CHECKING:
    import xarray as xr


def describe(ds: xr.Dataset) -> str:
    """The runs of ``ds`` (ranks, nodes, ranks per node, mode, elapsed, format), then its ranks,
    functions, metrics, variables and the warnings raised while reading."""
    from perfkit.model import read_warnings

    def value(name: str, i: int) -> Any:
        return ds[name].values[i] if name in ds.coords else None

    rows = [{"run": str(run), **{name: value(name, i) for name in ("nprocs", "nodes", "ppn", "mode", "elapsed",
                                                                    "format")}}
            for i, run in enumerate(ds["run"].values)]
    columns = [Column("run", "run"), Column("nprocs", "ranks", "count", missing="unknown"),
               Column("nodes", "nodes", "count", missing="unknown"),
               Column("ppn", "ranks per node", "count", missing="unknown"), Column("mode", "mode", missing="-"),
               Column("elapsed", "elapsed", "s", missing="not in the profile"), Column("format", "format", missing="-")]
    lines = [render_text(Table("runs", fmt.plural(len(rows), "run"), columns, rows)).rstrip("\n"), "",
             f"{fmt.plural(ds.sizes['rank'], 'rank')}; functions: {', '.join(map(str, ds['function'].values))}",
             f"metrics: {', '.join(map(str, ds['metric'].values))}; variables: {', '.join(map(str, ds.data_vars))}"]
    lines += [f"warning: {warning}" for warning in read_warnings(ds)]
    return "\n".join(lines) + "\n"


def placement_summary(strategy: str, cost: Any, block: Any, info: dict[str, Any]) -> str:
    """The written placement's costs (``PlacementCost``) against block placement's: bytes, hop-bytes,
    busiest NIC [B], estimated communication time [s], change, inter-node share; then the decision."""
    written = "block (kept)" if info.get("kept_block") else strategy
    rows = [["", written, "block", "change"]]
    for label, field, say in (("inter-node bytes", "inter_node_bytes", fmt.nbytes),
                              ("hop-bytes", "hop_bytes", fmt.nbytes), ("max NIC bytes", "max_nic_bytes", fmt.nbytes),
                              ("est. comm time", "time_s", fmt.seconds)):
        mine, base = float(getattr(cost, field)), float(getattr(block, field))
        rows.append([label, say(mine), say(base), f"{100 * (mine / base - 1):+.1f}%" if base else "n/a"])
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = ["  ".join([row[0].ljust(widths[0]), *(cell.rjust(w) for cell, w in zip(row[1:], widths[1:]))])
             for row in rows]
    lines.append(f"inter-node share: {fmt.percent(cost.inter_node_fraction)} ({written}) vs "
                 f"{fmt.percent(block.inter_node_fraction)} (block)")
    return "\n".join(lines + ([info["decision"]] if "decision" in info else []))


def prediction_line(prediction: Any, written_to: str) -> str:
    """One line on a placement's predicted re-run: inter-node bytes and elapsed time before -> after."""
    p = prediction
    return (f"predicted: inter-node bytes {fmt.nbytes(p.inter_node_bytes_before)} -> "
            f"{fmt.nbytes(p.inter_node_bytes_after)}; elapsed {fmt.seconds(p.elapsed_before)} -> "
            f"{fmt.seconds(p.elapsed_after)} [{fmt.seconds(p.elapsed_after_low)}, {fmt.seconds(p.elapsed_after_high)}] "
            f"(before: {p.placement_before}; network {p.network.sources.get('node_link_Bps', 'not stated')}); "
            f"written to {written_to}")
