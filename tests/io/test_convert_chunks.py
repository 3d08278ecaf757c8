"""Runs moved into a convert store by renaming chunk files: only where they line up, and equal to combine_runs."""

from __future__ import annotations

import numcodecs
import numpy as np
import xarray as xr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import perfkit
from perfkit.io import convert, convert_chunks
from perfkit.model import combine_runs, make_run
from perfkit.storage import stored

FUNCTIONS = ["Compute", "MPI_Send", "MPI_Recv", "MPI_Allreduce"]


@given(n_union=st.integers(1, 40), chunk=st.integers(1, 9), data=st.data())
def test_chunk_offsets_only_for_consecutive_labels_from_a_chunk_boundary(n_union, chunk, data):
    union = np.sort(data.draw(st.lists(st.integers(0, 10**6), min_size=n_union, max_size=n_union, unique=True)))
    ranks = np.sort(data.draw(st.lists(st.sampled_from(union.tolist()), min_size=1, unique=True)))
    run = xr.Dataset(coords={"rank": ranks})
    got = convert_chunks.chunk_offsets(run, {"rank": union}, ("run", "rank"), {"rank": chunk})
    first = int(np.searchsorted(union, ranks[0]))
    lines_up = np.array_equal(union[first:first + ranks.size], ranks) and first % chunk == 0
    assert got == ((first // chunk,) if lines_up else None)


def test_chunk_offsets_of_text_labels_and_unlabelled_dims():
    run = xr.Dataset({"v": (("run", "function", "bin"), np.zeros((1, 2, 3)))}, coords={"function": ["b", "c"]})
    coords = {"function": np.array(["a", "b", "c"], dtype=object), "bin": np.arange(3)}
    assert convert_chunks.chunk_offsets(run, coords, ("run", "function", "bin"), {"function": 1, "bin": 3}) == (1, 0)
    assert convert_chunks.chunk_offsets(run, coords, ("run", "function", "bin"), {"function": 3, "bin": 3}) is None


def _run(label: str, ranks: np.ndarray, functions: list[str], seed: int, hosts: bool) -> xr.Dataset:
    rng = np.random.default_rng(seed)
    profile = rng.random((ranks.size, len(functions), 2))
    profile[rng.random(profile.shape) < 0.2] = np.nan
    return make_run(profile, ranks=ranks, functions=functions, metrics=["time", "calls"], run={"label": label},
                    hosts=[f"n{r // 3}" for r in ranks] if hosts else None)


@st.composite
def studies(draw):
    """1-4 runs: rank ranges that may start anywhere, function sets that may differ, host names or not."""
    runs = []
    for k in range(draw(st.integers(1, 4))):
        first, n = draw(st.integers(0, 12)), draw(st.integers(1, 20))
        functions = draw(st.lists(st.sampled_from(FUNCTIONS), min_size=1, unique=True))
        runs.append(_run(f"r{k}", np.arange(first, first + n), functions, k, draw(st.booleans())))
    return runs


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(runs=studies(), chunk=st.sampled_from([1, 4, 8]))
def test_a_store_of_moved_and_written_runs_equals_combine_runs(tmp_path_factory, monkeypatch, runs, chunk):
    monkeypatch.setattr(convert, "RANK_CHUNK", chunk)
    work = tmp_path_factory.mktemp("study")
    sources = [convert.to_part(run, work / f"{k}.zarr") for k, run in enumerate(runs)]
    store = convert.write_runs(sources, work / "study.zarr", convert._store_attrs(None, runs, []))
    xr.testing.assert_identical(perfkit.load(store), combine_runs(runs))
    xr.testing.assert_identical(perfkit.load(store, chunks={}).load(), combine_runs(runs))


def test_runs_that_line_up_are_moved_and_only_the_others_reindexed(tmp_path, monkeypatch):
    """Three runs on the union's ranks and functions are moved whole; the fourth lacks two functions: its
    profile is reindexed and written, its host names (same ranks, same width) are moved."""
    monkeypatch.setattr(convert, "RANK_CHUNK", 4)
    runs = [_run(f"r{k}", np.arange(10), FUNCTIONS if k < 3 else FUNCTIONS[:2], k, hosts=True) for k in range(4)]
    sources = [convert.to_part(run, tmp_path / f"{k}.zarr") for k, run in enumerate(runs)]
    reindexed = []
    aligned = convert._aligned
    monkeypatch.setattr(convert, "_aligned", lambda run, *a: reindexed.append((str(run["run"].values[0]),
                                                                               *a[1])) or aligned(run, *a))
    store = convert.write_runs(sources, tmp_path / "study.zarr", convert._store_attrs(None, runs, []))
    xr.testing.assert_identical(perfkit.load(store), combine_runs(runs))
    assert reindexed == [("r3", "profile")]

    def chunk_files(k: int, name: str) -> list[str]:
        return [p.name for p in (tmp_path / f"{k}.zarr" / name).iterdir() if p.name[0] != "."]

    assert not any(chunk_files(k, name) for k in range(3) for name in ("profile", "host"))
    assert chunk_files(3, "profile") and not chunk_files(3, "host")


def test_parts_written_flat_are_moved_with_their_metadata_known(tmp_path, monkeypatch):
    """A reader's part is its chunk files only, beside its name (no folder), the same bytes as a group's; its runs
    are still moved (none reindexed), no metadata of a part read, and the store equals combine_runs."""
    monkeypatch.setattr(convert, "RANK_CHUNK", 4)
    runs = [_run(f"r{k}", np.arange(10), FUNCTIONS, k, hosts=False) for k in range(3)]
    group = tmp_path / "group.zarr"
    convert_chunks.write_group(stored(perfkit.validate(runs[0])).drop_vars(list(runs[0].coords)), group, {"rank": 4})
    parts = tmp_path / "parts"
    parts.mkdir()
    sources = [convert.to_part(run, parts / f"{k}.zarr") for k, run in enumerate(runs)]
    flat = {p.name: p.read_bytes() for p in parts.iterdir() if p.name.startswith("0.zarr.")}
    assert all(p.is_file() for p in parts.iterdir())
    assert flat == {f"0.zarr.profile.{p.name}": p.read_bytes() for p in (group / "profile").glob("[0-9]*")}
    read = []
    array_metadata = convert_chunks.array_metadata
    monkeypatch.setattr(convert_chunks, "array_metadata", lambda folder: read.append(folder) or array_metadata(folder))
    monkeypatch.setattr(convert, "_aligned", lambda *a: (_ for _ in ()).throw(AssertionError("reindexed")))
    store = convert.write_runs(sources, tmp_path / "study.zarr", convert._store_attrs(None, runs, []))
    assert read and all(folder.parent == store for folder in read)
    assert not any(parts.iterdir())
    xr.testing.assert_identical(perfkit.load(store), combine_runs(runs))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(shape=st.tuples(st.integers(1, 2), st.integers(1, 13), st.integers(1, 4)), chunk=st.integers(1, 6),
       nan=st.floats(0, 1), seed=st.integers(0, 2**16))
def test_write_group_reads_back_as_to_zarr_writes_it(tmp_path_factory, shape, chunk, nan, seed):
    """The same values, metadata and chunk files as xarray and zarr write with the same encoding; a chunk
    of NaN only is left out by both."""
    rng = np.random.default_rng(seed)
    values = rng.random(shape)
    values[rng.random(shape) < nan] = np.nan
    ds = xr.Dataset({"v": (("run", "rank", "metric"), values, {"units": "s"}),
                     "w": (("run", "rank"), values[..., 0])})
    work = tmp_path_factory.mktemp("groups")
    assert convert_chunks.writable(ds)
    convert_chunks.write_group(ds, work / "mine.zarr", {"rank": chunk})
    encoding = {name: {"chunks": tuple(min(chunk, n) if dim == "rank" else n for dim, n in var.sizes.items()),
                       "compressors": (convert_chunks.COMPRESSOR,)} for name, var in ds.data_vars.items()}
    ds.to_zarr(work / "zarr.zarr", mode="w", consolidated=True, zarr_format=2, encoding=encoding)
    mine, theirs = (xr.open_zarr(work / f"{name}.zarr", consolidated=True) for name in ("mine", "zarr"))
    xr.testing.assert_identical(mine.load(), theirs.load())
    xr.testing.assert_identical(mine.load(), ds)
    for name in ds.data_vars:
        folders = [work / f"{group}.zarr" / name for group in ("mine", "zarr")]
        assert convert_chunks.array_metadata(folders[0]) == convert_chunks.array_metadata(folders[1])
        assert {p.name for p in folders[0].iterdir()} == {p.name for p in folders[1].iterdir()}


def test_only_float_arrays_in_memory_are_written_directly():
    values = np.zeros((1, 3))
    assert convert_chunks.writable(xr.Dataset({"v": (("run", "rank"), values)}))
    assert not convert_chunks.writable(xr.Dataset({"v": (("run", "rank"), values.astype(np.float32))}))
    assert not convert_chunks.writable(xr.Dataset({"v": (("run", "rank"), np.array([["a", "b", "c"]]))}))
    assert not convert_chunks.writable(xr.Dataset({"v": (("run", "rank"), values)}).chunk())
    assert not convert_chunks.writable(xr.Dataset({"v": (("run", "rank"), np.zeros((1, 0)))}))
    assert not convert_chunks.writable(xr.Dataset({"v": (("run", "rank"), values, {"n": np.int64(1)})}))


def test_write_region_writes_runs_into_a_laid_out_store_as_zarr_does(tmp_path):
    rng = np.random.default_rng(3)
    values = rng.random((5, 7, 3))
    values[1] = np.nan  # a run of NaN only: no chunk file
    values[2, 4:] = np.nan
    laid = xr.Dataset({"v": (("run", "rank", "metric"), np.full((6, 7, 3), np.nan))}).chunk({"run": 1, "rank": 4})
    encoding = {"v": {"chunks": (1, 4, 3), "compressors": (convert_chunks.COMPRESSOR,)}}
    for name in ("mine", "zarr"):
        laid.to_zarr(tmp_path / f"{name}.zarr", mode="w", compute=False, zarr_format=2, encoding=encoding)
    assert convert_chunks.write_region(tmp_path / "mine.zarr", "v", values, 1)
    xr.Dataset({"v": (("run", "rank", "metric"), values)}).to_zarr(tmp_path / "zarr.zarr", region={"run": slice(1, 6)},
                                                                   zarr_format=2)
    mine, theirs = (xr.open_zarr(tmp_path / f"{name}.zarr", consolidated=False).load() for name in ("mine", "zarr"))
    xr.testing.assert_identical(mine, theirs)
    np.testing.assert_array_equal(mine["v"].values[1:], values)
    assert ({p.name for p in (tmp_path / "mine.zarr" / "v").iterdir()}
            == {p.name for p in (tmp_path / "zarr.zarr" / "v").iterdir()})
    assert not convert_chunks.write_region(tmp_path / "mine.zarr", "v", values[:, :6], 0)  # not whole along rank
    assert not convert_chunks.write_region(tmp_path / "mine.zarr", "v", values, 2)  # past the last run
    assert not convert_chunks.write_region(tmp_path / "mine.zarr", "v", values.astype(np.float32), 0)
    laid.to_zarr(tmp_path / "zstd.zarr", mode="w", compute=False, zarr_format=2,
                 encoding={"v": {"chunks": (1, 4, 3), "compressors": (numcodecs.Zstd(),)}})
    assert not convert_chunks.write_region(tmp_path / "zstd.zarr", "v", values, 0)
    assert not any(p.name[0] != "." for p in (tmp_path / "zstd.zarr" / "v").iterdir())


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(runs=st.integers(1, 5), ranks=st.integers(1, 30), chunk=st.integers(1, 8))
def test_blank_arrays_have_the_metadata_xarray_writes_for_dask_arrays_and_no_chunk(tmp_path_factory, runs, ranks,
                                                                                    chunk):
    """add_blank_arrays against xarray's own to_zarr(compute=False) of a dask array of NaN with the same encoding: the
    same .zarray and .zattrs, consolidated, no chunk file; reading gives NaN everywhere."""
    import json

    import dask.array as da

    folder = tmp_path_factory.mktemp("blank")
    coords = {"run": [f"r{k}" for k in range(runs)], "rank": np.arange(ranks), "label": ("run", ["x"] * runs)}
    dims = ("run", "rank")
    blank = xr.Dataset({"profile": (dims, da.full((runs, ranks), np.nan, chunks=(1, chunk)))}, coords=coords)
    encoding = {"profile": {"chunks": (1, chunk), "compressors": (convert_chunks.COMPRESSOR,)}}
    blank.to_zarr(folder / "xarray.zarr", mode="w", compute=False, consolidated=True, zarr_format=2, encoding=encoding)
    ours = folder / "ours.zarr"
    blank.drop_vars("profile").to_zarr(ours, mode="w", consolidated=True, zarr_format=2)
    attrs = xr.conventions.encode_dataset_coordinates(blank)[0]["profile"].attrs
    convert_chunks.add_blank_arrays(ours, {"profile": ((runs, ranks), (1, chunk),
                                                        {"_ARRAY_DIMENSIONS": list(dims), **attrs})})
    for key in (".zarray", ".zattrs"):
        assert json.loads((ours / "profile" / key).read_text()) == json.loads(
            (folder / "xarray.zarr" / "profile" / key).read_text())
    assert json.loads((ours / ".zmetadata").read_text())["metadata"]["profile/.zarray"]["shape"] == [runs, ranks]
    assert sorted(p.name for p in (ours / "profile").iterdir()) == [".zarray", ".zattrs"]
    back = xr.open_zarr(ours, consolidated=True)
    assert back["profile"].isnull().all() and set(back.coords) == {"run", "rank", "label"}


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(runs=st.integers(1, 4), ranks=st.integers(1, 12), chunk=st.integers(1, 5), unknown=st.booleans())
def test_write_layout_writes_what_to_zarr_writes(tmp_path_factory, runs, ranks, chunk, unknown):
    """write_layout against xarray's own to_zarr of the same layout (float, int, fixed-width and variable-length text
    coordinates, all-NaN and all-empty ones among them; blank float and text variables): the same .zarray of every
    array, the same chunk files, the same Dataset read back; a coordinate of another dtype is left to xarray."""
    import json

    folder = tmp_path_factory.mktemp("layout")
    dims = ("run", "rank", "function")
    shape = (runs, ranks, 2)
    nodes = np.full(runs, np.nan) if unknown else np.arange(runs) + 1.0
    layout = xr.Dataset(
        {"profile": (dims, np.broadcast_to(np.nan, shape), {"units": "s"}),
         "host": (dims[:2], np.broadcast_to(np.array("", dtype="<U7"), shape[:2]))},
        coords={"run": [f"r{k}" for k in range(runs)], "rank": np.arange(ranks) * 3,
                "function": np.array(["MPI_Send", "MPI_Allreduce"], dtype=object),
                "nodes": ("run", nodes), "system": ("run", np.array(["" if unknown else "hpc"] * runs)),
                "kind": ("function", ["p2p", "collective"])},
        attrs={"reader": "perfkit.io.mpinside", "runs": np.int64(runs), "shares": np.array([0.5, 0.25])})
    chunks = {"profile": (1, chunk, 2), "host": (1, chunk)}
    layout.to_zarr(folder / "xarray.zarr", mode="w", consolidated=True, zarr_format=2, write_empty_chunks=False,
                   encoding={"profile": {"chunks": chunks["profile"], "compressors": (convert_chunks.COMPRESSOR,)},
                             "host": {"chunks": chunks["host"]}})
    variables, attrs = xr.conventions.encode_dataset_coordinates(layout)
    assert convert_chunks.write_layout(folder / "ours.zarr", variables, attrs, chunks)
    for name in layout.variables:
        theirs, ours = folder / "xarray.zarr" / str(name), folder / "ours.zarr" / str(name)
        assert json.loads((ours / ".zarray").read_text()) == json.loads((theirs / ".zarray").read_text()), name
        assert sorted(p.name for p in ours.iterdir()) == sorted(p.name for p in theirs.iterdir()), name
    xr.testing.assert_identical(xr.open_zarr(folder / "ours.zarr").load(), xr.open_zarr(folder / "xarray.zarr").load())
    dated = layout.assign_coords(start=("run", np.array(["2026-11-26"] * runs, dtype="datetime64[ns]")))
    variables, attrs = xr.conventions.encode_dataset_coordinates(dated)
    assert not convert_chunks.write_layout(folder / "dated.zarr", variables, attrs, chunks)
    assert not (folder / "dated.zarr").exists()


def test_add_attrs_marks_a_store_as_mark_complete_does(tmp_path):
    """The completeness mark added by add_attrs: the same group attributes and consolidated metadata as
    storage.mark_complete's (zarr's), and the store loads."""
    import json
    import shutil

    from perfkit import storage

    run = make_run(np.ones((3, 1, 1)), ranks=[0, 1, 2], functions=["f"], metrics=["time"], run={"label": "r0"})
    run.to_zarr(tmp_path / "zarr.zarr", mode="w", consolidated=True, zarr_format=2)
    shutil.copytree(tmp_path / "zarr.zarr", tmp_path / "ours.zarr")
    storage.mark_complete(tmp_path / "zarr.zarr", 1)
    convert_chunks.add_attrs(tmp_path / "ours.zarr", {storage.COMPLETE: 1})
    for key in (".zattrs", ".zmetadata"):
        assert json.loads((tmp_path / "ours.zarr" / key).read_text()) == json.loads(
            (tmp_path / "zarr.zarr" / key).read_text())
    xr.testing.assert_identical(storage.load(tmp_path / "ours.zarr"), storage.load(tmp_path / "zarr.zarr"))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(shape=st.tuples(st.integers(1, 3), st.integers(1, 11), st.integers(1, 4)), chunk=st.integers(1, 5),
       nan_share=st.sampled_from([0.0, 0.5, 1.0]), data=st.data())
def test_lazy_array_reads_back_what_write_group_wrote(tmp_path_factory, shape, chunk, nan_share, data):
    """Any slice of a group's array read back lazily equals the array, chunks of NaN only (not written) included."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    values = rng.random(shape)
    values[rng.random(shape) < nan_share] = np.nan
    part = tmp_path_factory.mktemp("part") / "g.zarr"
    ds = xr.Dataset({"v": (("run", "rank", "metric"), values)})
    chunks = convert_chunks.write_group(ds, part, {"rank": chunk})
    lazy = convert_chunks.lazy_array(part / "v", shape, chunks["v"])
    assert lazy.chunksize == chunks["v"] == (shape[0], min(chunk, shape[1]), shape[2])
    np.testing.assert_array_equal(lazy.compute(), values)
    np.testing.assert_array_equal(xr.open_zarr(part, chunks=None)["v"].values, values)
    bounds = [sorted(data.draw(st.lists(st.integers(0, n), min_size=2, max_size=2))) for n in shape]
    key = tuple(slice(a, b) for a, b in bounds)
    np.testing.assert_array_equal(lazy[key].compute(), values[key])
    np.testing.assert_array_equal(convert_chunks._ChunkFiles(part / "v", shape, chunks["v"])[key], values[key])


def test_a_run_written_by_write_group_is_opened_without_reading_its_group(tmp_path, monkeypatch):
    """Its variables come back lazily with the run's dims, attributes and values; no zarr metadata is read."""
    run = _run("r0", np.arange(10), FUNCTIONS, 0, hosts=False)
    run["profile"].attrs["note"] = "kept"
    written = convert.write_part(run, tmp_path / "0.zarr")
    assert written.arrays is not None
    monkeypatch.setattr(xr, "open_zarr", lambda *a, **k: (_ for _ in ()).throw(AssertionError("group opened")))
    lazy = written.opened()
    assert lazy["profile"].chunks is not None
    xr.testing.assert_identical(lazy.load(), perfkit.validate(run))
