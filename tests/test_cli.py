"""The perfkit command line, end to end on a MapLib matrix."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from perfkit.cli import build_parser, main
from perfkit.placement.launch import read_launch
from perfkit.placement.topology import Topology

MATRIX = Path(__file__).resolve().parent / "data" / "matrices" / "MapLib_lulesh_64_p2p.size.csv"


def test_place_writes_rankfile_and_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "rankfile"
    assert main(["place", str(MATRIX), "--nodes", "4", "--ppn", "16", "--sockets", "2", "-o", str(out)]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""  # the summary is output, not an error: stdout, as the launch file went to -o
    assert "inter-node bytes" in captured.out and "block" in captured.out
    change = next(line for line in captured.out.splitlines() if line.startswith("inter-node bytes")).split()[-1]
    assert float(change.rstrip("%")) < 0  # Scotch cuts inter-node bytes vs block on LULESH
    placement = read_launch(out, "rankfile", Topology(nodes=4, cores=16, sockets=2))
    assert np.unique(placement.slot).size == 64


def test_place_to_stdout_with_hosts_and_npy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    np.save(tmp_path / "m.npy", np.loadtxt(MATRIX, delimiter=","))
    (tmp_path / "hosts").write_text("n001\nn002\nn003\nn004\n")
    args = ["place", str(tmp_path / "m.npy"), "--nodes", "4", "--ppn", "16", "--format", "mpt",
            "--hosts", str(tmp_path / "hosts"), "--strategy", "block"]
    assert main(args) == 0
    assert capsys.readouterr().out.startswith("n001 1, n001 1,")


def test_place_reports_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["place", str(MATRIX), "--nodes", "2", "--ppn", "16"]) == 1
    assert "64 ranks do not fit" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["place", str(MATRIX), "--nodes", "2"])


def test_subcommands_are_registered() -> None:
    assert "place" in build_parser().format_help()


def test_place_help_explains_every_strategy(capsys: pytest.CaptureFixture[str]) -> None:
    from perfkit.placement.strategies import STRATEGIES

    with pytest.raises(SystemExit):
        main(["place", "--help"])
    explained = capsys.readouterr().out.split("strategies (--strategy):")[1]
    named = [line.split()[0] for line in explained.splitlines() if line.startswith("  ") and not line.startswith("   ")]
    assert named == list(STRATEGIES)
    assert "standard output" in explained


DATA = Path(__file__).resolve().parents[1] / "data"


def test_place_reads_the_traffic_of_an_mpinside_profile(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import perfkit

    profile = DATA / "synthetic" / "384" / "basic.mpinside"  # MPInside tables with transfer matrices
    out = tmp_path / "rankfile"
    assert main(["place", str(profile), "--nodes", "16", "--ppn", "24", "-o", str(out)]) == 0
    err = capsys.readouterr().out
    topology = Topology(nodes=16, cores=24)
    library = perfkit.place(perfkit.open_profile(profile), topology, strategy="scotch")
    assert library.info["decision"] in err.splitlines()  # the CLI prints the library's decision
    assert np.array_equal(read_launch(out, "rankfile", topology).slot, library.slot)


def test_place_reads_one_run_of_a_store_as_it_reads_its_file(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """A study converted to a store places its run as the run's own file does: the same launch file, byte for
    byte (the store's traffic read lazily from its sparse pairs); without --run a store of several runs is
    refused naming them, and --run on a single profile is refused."""
    folder = DATA / "synthetic" / "384"
    store = tmp_path / "study.zarr"
    assert main(["convert", str(folder / "basic.mpinside"), str(folder / "slt.mpinside"), "-o", str(store)]) == 0
    args = ["--nodes", "16", "--ppn", "24", "--format", "permutation"]
    assert main(["place", str(folder / "slt.mpinside"), *args, "-o", str(tmp_path / "from_file")]) == 0
    assert main(["place", str(store), "--run", "slt", *args, "-o", str(tmp_path / "from_store")]) == 0
    assert (tmp_path / "from_store").read_bytes() == (tmp_path / "from_file").read_bytes()
    capsys.readouterr()
    assert main(["place", str(store), *args]) == 1
    assert "holds 2 runs (basic, slt); choose the one to place with --run LABEL" in capsys.readouterr().err
    assert main(["place", str(store), "--run", "nope", *args]) == 1
    assert "has no run 'nope'; its runs: basic, slt" in capsys.readouterr().err
    assert main(["place", str(folder / "slt.mpinside"), "--run", "slt", *args]) == 1
    assert "holds one run" in capsys.readouterr().err


def test_place_reads_an_ipm_log(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = next((DATA / "real" / "IPM" / "HPCCG-strong" / "16").glob("*.ipm.xml"))
    out = tmp_path / "hosts"
    assert main(["place", str(log), "--nodes", "2", "--ppn", "8", "--format", "machinefile", "-o", str(out)]) == 0
    assert len(out.read_text().splitlines()) == 16
    assert "inter-node bytes" in capsys.readouterr().out


@pytest.mark.parametrize(("path", "reason"), [
    ("real/mpiP/HPCCG-strong/16/test_HPCCG.16.27942.1.mpiP", "this mpiP report has no rank-to-rank traffic"),
    ("lab/pipeline-np4.mpinside", "this MPInside profile has no rank-to-rank traffic"),
])
def test_place_says_why_a_profile_cannot_be_placed(path: str, reason: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["place", str(DATA / path), "--nodes", "2", "--ppn", "16"]) == 1
    err = capsys.readouterr().err
    assert reason in err and "'>>>>' is not a number" not in err


def test_place_names_both_readings_of_an_unreadable_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "run.txt"
    bad.write_text(">>>> not a matrix\n1,2\n")
    assert main(["place", str(bad), "--nodes", "1", "--ppn", "2"]) == 1
    err = capsys.readouterr().err
    assert "neither a profile with traffic" in err and "not a number" in err


def test_place_keeps_block_for_cg_as_the_library_does(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import perfkit

    cg = MATRIX.with_name("MapLib_cg_64_p2p.size.csv")
    out = tmp_path / "rankfile"
    assert main(["place", str(cg), "--nodes", "4", "--ppn", "16", "-o", str(out)]) == 0
    err = capsys.readouterr().out
    assert "kept block: scotch does not beat it by more than 1%" in err
    assert np.array_equal(read_launch(out, "rankfile", Topology(nodes=4, cores=16)).slot, np.arange(64))
    matrix = np.loadtxt(cg, delimiter=",")
    assert perfkit.place(matrix, Topology(nodes=4, cores=16), strategy="scotch").info["kept_block"] is True


def test_place_prints_the_choice_with_its_gain(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["place", str(MATRIX), "--nodes", "4", "--ppn", "16", "--format", "permutation"]) == 0
    err = capsys.readouterr().err  # the launch file is on stdout: the summary stays out of it
    change = next(line for line in err.splitlines() if line.startswith("inter-node bytes")).split()[-1]
    assert f"chose scotch: {float(change.rstrip('%')):+.1f}% inter-node bytes" in err


SCRIPT = Path(sys.executable).with_name("perfkit")


@pytest.mark.skipif(not SCRIPT.exists(), reason="console script not installed next to the interpreter")
def test_console_script() -> None:
    result = subprocess.run(
        [str(SCRIPT), "place", str(MATRIX), "--nodes", "4", "--ppn", "16", "--format", "permutation"],
        capture_output=True, text=True, timeout=120, check=True,
    )
    assert sorted(int(x) for x in result.stdout.split()) == list(range(64))


def test_info_and_convert(tmp_path, capsys):
    from tests.helpers import ROOT

    seed = str(ROOT / "data" / "seed" / "mpinside_seed_tables.txt")
    assert main(["info", seed]) == 0
    out = capsys.readouterr().out
    assert "mpinside" in out and "w_MPI_Recv" in out and "warning:" in out
    store = tmp_path / "cube.nc"
    assert main(["convert", seed, "-o", str(store)]) == 0
    import perfkit

    assert perfkit.load(store)["profile"].sel(rank=0, function="Compute", metric="time").item() == 868.484133
    assert main(["info", str(tmp_path / "nothing*.txt")]) == 1


def test_convert_refuses_an_unknown_output_extension(tmp_path, capsys):
    from tests.helpers import ROOT

    seed = str(ROOT / "data" / "seed" / "mpinside_seed_tables.txt")
    assert main(["convert", seed, "-o", str(tmp_path / "seed.csv")]) == 1
    assert ".zarr" in capsys.readouterr().err
    assert not (tmp_path / "seed.csv").exists()


def test_convert_to_zarr_lists_and_records_refused_files(tmp_path, capsys):
    import json

    import perfkit
    from tests.helpers import ROOT

    seed = str(ROOT / "data" / "seed" / "mpinside_seed_tables.txt")
    bad = tmp_path / "bad.txt"
    bad.write_text("not a profile\n")
    store = tmp_path / "study.zarr"
    assert main(["convert", seed, str(bad), "-o", str(store)]) == 1  # errors=raise: nothing written
    assert "bad.txt" in capsys.readouterr().err and not store.exists()
    assert main(["convert", seed, str(bad), "-o", str(store), "--errors", "warn"]) == 0
    err = capsys.readouterr().err
    assert "refused:" in err and "bad.txt" in err and "1 file(s) could not be read" in err
    refused = json.loads(perfkit.load(store, chunks={}).attrs["refused"])
    assert [Path(r["path"]).name for r in refused] == ["bad.txt"]
    other = tmp_path / "other.txt"
    other.write_text(Path(seed).read_text())
    assert main(["convert", str(other), "-o", str(store), "--append"]) == 0
    assert list(perfkit.load(store)["run"].values) == ["mpinside_seed_tables", "other"]


@pytest.mark.parametrize(("argv", "said"), [
    (["convert", "x.csv", "-o", "y.zarr", "--workers", "-3"], "argument --workers: must be >= 1, got -3"),
    (["convert", "x.csv", "-o", "y.zarr", "--workers", "1.5"], "argument --workers: not an integer: '1.5'"),
    (["collect", "--timeout", "-5", "-o", "run.mpinside", "--", "true"], "argument --timeout: must be > 0, got -5"),
    (["place", "x.csv", "--nodes", "0", "--ppn", "4"], "argument --nodes: must be >= 1, got 0"),
    (["place", "x.csv", "--nodes", "2", "--ppn", "-4"], "argument --ppn: must be >= 1, got -4"),
    (["place", "x.csv", "--nodes", "2", "--ppn", "4", "--sockets", "0"], "argument --sockets: must be >= 1"),
    (["place", "x.csv", "--nodes", "2", "--ppn", "4", "--switch-size", "0"], "argument --switch-size: must be >= 1"),
    (["place", "x.csv", "--nodes", "2", "--ppn", "4", "--seed", "-1"], "argument --seed: must be >= 0"),
    (["place", "x.csv", "--nodes", "2", "--ppn", "4", "--balance", "nan"], "argument --balance: must be >= 0"),
    (["place", "x.csv", "--nodes", "2", "--ppn", "4", "--timeout", "0"], "argument --timeout: must be > 0"),
    (["explore", "x.mpinside", "--port", "99999"], "argument --port: must be in 1..65535, got 99999"),
    (["explore", "x.mpinside", "--port", "-1"], "argument --port: must be in 1..65535, got -1"),
    (["explore", "x.mpinside", "--address", "999.1.1.1"], "argument --address: not an IP address (e.g. 127.0.0.1"),
    (["explore", "x.mpinside", "--address", "host name"], "argument --address: not an IP address"),
])
def test_a_numeric_option_out_of_range_is_refused_in_one_line(argv, said, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err == f"perfkit {argv[0]}: error: {err.split('error: ', 1)[1]}" and err.count("\n") == 1
    assert said in err


@pytest.mark.parametrize(("content", "said"), [
    ("[1, 2]", "it holds a JSON array"),
    ('{"a.mpiP": 3}', "it maps a file name to a JSON number"),
    ("{a", "not JSON: "),
])
def test_metadata_that_is_not_an_object_of_objects_is_a_one_line_error(content, said, tmp_path, capsys):
    meta = tmp_path / "meta.json"
    meta.write_text(content)
    assert main(["convert", str(MATRIX), "-o", str(tmp_path / "out.zarr"), "--metadata", str(meta)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"perfkit convert: error: {meta}: ") and said in err and err.count("\n") == 1
    assert not (tmp_path / "out.zarr").exists()


@pytest.mark.parametrize("argv", [["info", "{missing}"], ["convert", "{missing}", "-o", "{out}"],
                                  ["place", "{missing}", "--nodes", "1", "--ppn", "4"],
                                  ["convert", str(MATRIX), "-o", "{out}", "--metadata", "{missing}"]])
def test_a_missing_file_is_named_as_missing(argv, tmp_path, capsys):
    missing = tmp_path / "nowhere.mpiP"
    assert main([a.format(missing=missing, out=tmp_path / "out.zarr") for a in argv]) == 1
    assert capsys.readouterr().err == f"perfkit {argv[0]}: error: no such file: {missing}\n"


SEED_TABLES = Path(__file__).resolve().parents[1] / "data" / "seed" / "mpinside_seed_tables.txt"


def test_convert_replaces_an_output_only_with_force_and_says_what_became_of_it(tmp_path, capsys):
    from tests.kill_harness import temporaries, tree_hash

    store = tmp_path / "study.zarr"
    assert main(["convert", str(SEED_TABLES), "-o", str(store)]) == 0
    capsys.readouterr()
    before = tree_hash(store)
    bad = tmp_path / "bad.txt"
    bad.write_text("not a profile\n")
    assert main(["convert", str(bad), "-o", str(store)]) == 1  # refused before reading anything
    assert capsys.readouterr().err == f"perfkit convert: error: {store} exists; --force replaces it\n"
    assert main(["convert", str(bad), "-o", str(store), "--force"]) == 1  # a failed run: the old store stays
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bad.txt" in err and err.endswith(f"; {store} left as it was\n")
    assert tree_hash(store) == before and not temporaries(tmp_path)
    other = tmp_path / "other.txt"
    other.write_text(SEED_TABLES.read_text())
    assert main(["convert", str(other), "-o", str(store), "--force"]) == 0
    assert list(__import__("perfkit").load(store)["run"].values) == ["other"]


@pytest.mark.parametrize(("output", "said"), [
    ("nowhere/out.zarr", "no such folder: {tmp}/nowhere (to write out.zarr in)"),
    ("run.nc", "{tmp}/run.nc is also an input: write the output elsewhere"),
    ("folder.zarr", "{tmp}/folder.zarr is a folder perfkit did not write; not replaced"),
])
def test_convert_checks_its_output_before_reading(output, said, tmp_path, capsys):
    run = tmp_path / "run.nc"  # the input, named as an output could be: refused before it is read
    run.write_text(SEED_TABLES.read_text())
    (tmp_path / "folder.zarr").mkdir()
    (tmp_path / "folder.zarr" / "notes").write_text("mine")
    assert main(["convert", str(run), "-o", str(tmp_path / output), "--force"]) == 1
    assert capsys.readouterr().err == f"perfkit convert: error: {said.format(tmp=tmp_path)}\n"
    assert (tmp_path / "folder.zarr" / "notes").read_text() == "mine" and run.read_text() == SEED_TABLES.read_text()


@pytest.mark.parametrize("command", ["convert", "place", "collect"])
def test_a_missing_output_folder_is_refused_alike_before_any_work(command, tmp_path, capsys):
    """convert, place and collect name the missing folder in the same words, create nothing and run nothing."""
    folder, ran = tmp_path / "nowhere", tmp_path / "ran"
    output = folder / "out"
    argv = {"convert": ["convert", str(SEED_TABLES), "-o", str(output)],
            "place": ["place", str(MATRIX), "--nodes", "4", "--ppn", "16", "-o", str(output)],
            "collect": ["collect", "-o", str(output), "--", "sh", "-c", f"touch {ran}"]}[command]
    assert main(argv) == 1
    assert capsys.readouterr().err == f"perfkit {command}: error: no such folder: {folder} (to write out in)\n"
    assert not folder.exists() and not ran.exists()


def test_place_replaces_its_files_only_with_force(tmp_path, capsys):
    out, prediction = tmp_path / "rankfile", tmp_path / "prediction.json"
    out.write_text("mine\n")
    argv = ["place", str(MATRIX), "--nodes", "4", "--ppn", "16", "-o", str(out)]
    assert main(argv) == 1
    assert capsys.readouterr().err == f"perfkit place: error: {out} exists; --force replaces it\n"
    assert out.read_text() == "mine\n"
    assert main([*argv, "--prediction", str(out), "--force"]) == 1
    assert "the same file is given for two outputs" in capsys.readouterr().err
    assert main([*argv[:-1], str(MATRIX), "--force"]) == 1
    assert "is also an input" in capsys.readouterr().err
    assert main([*argv, "--force"]) == 0
    assert read_launch(out, "rankfile", Topology(nodes=4, cores=16)).nranks == 64
    capsys.readouterr()
    profile = DATA / "synthetic" / "48" / "basic.mpinside"
    prediction.write_text("{}")
    assert main(["place", str(profile), "--nodes", "2", "--ppn", "24", "--prediction", str(prediction), "-o",
                 str(tmp_path / "new-rankfile")]) == 1
    assert capsys.readouterr().err == f"perfkit place: error: {prediction} exists; --force replaces it\n"
    assert not (tmp_path / "new-rankfile").exists() and prediction.read_text() == "{}"


@pytest.mark.parametrize(("content", "said"), [
    ('{"a.mpiP": {"nodez": 4}}', "'a.mpiP': unknown run metadata ['nodez']"),
    ('{"a.mpiP": {"nodes": "four"}}', "'a.mpiP': run metadata nodes='four' is not a number"),
    ('{"a.mpiP": {"ppn": -2}}', "'a.mpiP': run metadata ppn=-2 must be a finite number >= 0"),
    ('{"a.mpiP": {"mode": "fast"}}', "'a.mpiP': run mode 'fast' is not one of"),
])
def test_metadata_fields_are_checked_before_reading_in_one_line(content, said, tmp_path, capsys):
    meta = tmp_path / "meta.json"
    meta.write_text(content)
    assert main(["convert", str(SEED_TABLES), "-o", str(tmp_path / "out.zarr"), "--metadata", str(meta)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"perfkit convert: error: {meta}: {said}") and err.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["meta.json"]


def test_a_failed_place_leaves_its_files_and_says_so(tmp_path, capsys):
    out, prediction = tmp_path / "rankfile", tmp_path / "prediction.json"
    out.write_text("mine\n")
    argv = ["place", str(MATRIX), "--nodes", "2", "--ppn", "16", "-o", str(out), "--prediction", str(prediction),
            "--force"]
    assert main(argv) == 1  # 64 ranks do not fit on 2 x 16 cores
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "64 ranks do not fit" in err
    assert err.endswith(f"; {out} left as it was; {prediction} not written\n")
    assert out.read_text() == "mine\n" and sorted(tmp_path.iterdir()) == [out]


@pytest.mark.parametrize("argv", [["info", "{file}"], ["pop", "{file}", "--format", "json"],
                                  ["compare", "{file}", "{file}"]])
def test_running_out_of_memory_is_one_line_naming_the_file(argv, monkeypatch, capsys):
    import perfkit.io.mpinside

    def exhausted(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(perfkit.io.mpinside, "read", exhausted)  # the reader the format registry calls
    assert main([a.format(file=SEED_TABLES) for a in argv]) == 1
    err = capsys.readouterr().err
    assert err == (f"perfkit {argv[0]}: error: out of memory reading {SEED_TABLES}: convert the files into a store "
                   "('perfkit convert FILES -o runs.zarr'), which is read lazily (in Python: perfkit.load(store, "
                   "chunks=...)), or use a machine with more memory\n")


def test_running_out_of_memory_after_reading_names_the_inputs(monkeypatch, capsys):
    import perfkit.analysis.pop

    def exhausted(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(perfkit.analysis.pop, "pop_metrics", exhausted)
    assert main(["pop", str(SEED_TABLES)]) == 1
    assert capsys.readouterr().err.startswith(f"perfkit pop: error: out of memory with {SEED_TABLES}: convert")
