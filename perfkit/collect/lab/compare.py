"""A measured profile in the truth's terms, and its deviations from the truth."""

from __future__ import annotations

import numpy as np
import xarray as xr

#: Variables ``measured`` returns, as in the truth.
QUANTITIES = ("compute_time", "send_late", "collective_wait", "calls", "traffic_bytes", "traffic_count")


def _by_call(time: xr.DataArray, kind: str) -> xr.DataArray:
    """Time of the functions of ``kind`` summed per MPI call -> dims (rank, function=call)."""
    sel = time.where(time["kind"] == kind, drop=True)
    if sel.sizes["function"] == 0:
        return xr.DataArray(np.zeros((time.sizes["rank"], 0)), dims=("rank", "function"),
                            coords={"rank": time["rank"].values, "function": np.array([], dtype=str)})
    out = sel.reset_coords("call").groupby("call").sum(skipna=True)["profile" if sel.name == "profile" else sel.name]
    return out.rename(call="function").transpose("rank", "function").reset_coords(drop=True)


def measured(ds: xr.Dataset, run: int = 0) -> xr.Dataset:
    """One run of a profile Dataset in the truth's terms.

    ``compute_time`` (rank) [s]; ``send_late`` and ``collective_wait`` (rank, function) [s], the
    ``w_`` / ``b_`` entries summed per MPI call (NaN throughout when the profile has no such entries,
    i.e. was not measured in that mode); ``calls`` (rank, function) of each MPI call's own entry;
    ``traffic_bytes`` [B] and ``traffic_count`` (sender, receiver) when the profile has matrices.
    """
    prof = ds["profile"].isel(run=run)
    ranks = prof["rank"].values[~np.isnan(prof.sel(metric="time", function="Compute").values)]
    prof = prof.sel(rank=ranks)
    time = prof.sel(metric="time")
    own = [str(f) for f, c, k in zip(prof["function"].values, prof["call"].values, prof["kind"].values)
           if str(f) == str(c) and str(k) != "compute"]
    out = xr.Dataset({
        "compute_time": time.sel(function="Compute").reset_coords(drop=True),
        "send_late": _by_call(time, "wait_late_sender"),
        "collective_wait": _by_call(time, "wait_collective"),
        "calls": prof.sel(metric="calls", function=own).reset_coords(drop=True),
    })
    for name, kind in (("send_late", "wait_late_sender"), ("collective_wait", "wait_collective")):
        if (prof["kind"] == kind).any():  # measured: a call without such an entry waited 0 s
            out[name] = out[name].fillna(0.0)
    if "traffic" in ds:
        tr = ds["traffic"].isel(run=run).sel(sender=ranks, receiver=ranks)
        for q in ("bytes", "count"):
            out[f"traffic_{q}"] = xr.DataArray(np.asarray(tr.sel(quantity=q).data.todense()
                                                          if hasattr(tr.data, "todense") else tr.sel(quantity=q)),
                                               dims=("sender", "receiver"),
                                               coords={"sender": ranks, "receiver": ranks})
    return out


def deviation(measured_value: float, true_value: float, rel: float, floor: float) -> float:
    """How far ``measured_value`` is outside ``true_value`` ± max(rel·|true|, floor) (0 when inside)."""
    return max(0.0, abs(measured_value - true_value) - max(rel * abs(true_value), floor))
