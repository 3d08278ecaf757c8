"""Compressed profiles (gzip, bzip2, xz) read to the same Dataset as the plain file; UTF-16 text and
a byte-order mark refused, saying so; corrupt and oversized streams refused in one line."""

from __future__ import annotations

import bz2
import gzip
import lzma
import shutil
import tempfile
from pathlib import Path

import pytest
import xarray as xr

import perfkit
from perfkit.errors import PerfkitFormatError
from perfkit.io.registry import sniff_format

ROOT = Path(__file__).resolve().parents[2]
PLAIN = {
    "mpip": next((ROOT / "tests" / "data" / "mpip" / "real" / "CloverLeaf-strong" / "4").glob("*.mpiP")),
    "mpinside": ROOT / "data" / "synthetic" / "192" / "slt.mpinside",
    "ipm": next((ROOT / "tests" / "data" / "ipm").rglob("*.ipm.xml")),
}
COMPRESS = {"gz": gzip.compress, "bz2": bz2.compress, "xz": lzma.compress}


@pytest.mark.parametrize("suffix", sorted(COMPRESS))
@pytest.mark.parametrize("fmt", sorted(PLAIN))
def test_a_compressed_profile_reads_as_the_plain_file(tmp_path: Path, fmt: str, suffix: str) -> None:
    plain = PLAIN[fmt]
    packed = tmp_path / f"{plain.name}.{suffix}"
    sidecar = plain.with_name(plain.name + ".perfkit.json")
    if sidecar.exists():  # kept beside the compressed file under the plain file's name
        shutil.copyfile(sidecar, tmp_path / sidecar.name)
    packed.write_bytes(COMPRESS[suffix](plain.read_bytes()))
    assert sniff_format(packed) == fmt
    ds = perfkit.open_profile(packed)
    expected = perfkit.open_profile(plain)
    assert ds["source"].values.tolist() == [str(packed)]
    assert ds["label"].values.tolist() == expected["label"].values.tolist()  # r.mpiP.gz labelled as r.mpiP
    xr.testing.assert_identical(ds.drop_vars("source"), expected.drop_vars("source"))
    assert not list(Path(tempfile.gettempdir()).glob(f".perfkit-decompressed-*/{plain.name}"))


def test_an_error_in_the_decompressed_text_names_the_compressed_file_and_the_line(tmp_path: Path) -> None:
    lines = PLAIN["mpip"].read_text().split("\n")
    lines[5] = "garbage"
    packed = tmp_path / "broken.mpiP.gz"
    packed.write_bytes(gzip.compress("\n".join(lines).encode()))
    with pytest.raises(PerfkitFormatError, match="line of the gzip-decompressed text") as err:
        perfkit.open_profile(packed)
    assert err.value.path == str(packed) and err.value.line == 6 and "\n" not in str(err.value)


@pytest.mark.parametrize("suffix", sorted(COMPRESS))
def test_a_truncated_compressed_file_is_refused_in_one_line(tmp_path: Path, suffix: str) -> None:
    data = COMPRESS[suffix](PLAIN["mpip"].read_bytes())
    packed = tmp_path / f"cut.mpiP.{suffix}"
    packed.write_bytes(data[: len(data) // 2])
    with pytest.raises(PerfkitFormatError, match="does not decompress") as err:
        perfkit.open_profile(packed)
    assert err.value.path == str(packed) and "\n" not in str(err.value)


def test_a_compressed_file_larger_than_max_bytes_once_decompressed_is_refused(tmp_path: Path) -> None:
    packed = tmp_path / "bomb.mpiP.gz"
    packed.write_bytes(gzip.compress(PLAIN["mpip"].read_bytes() + b"\n" * (8 << 20)))
    assert packed.stat().st_size < 100_000
    with perfkit.set_options(max_bytes=4 << 20):
        with pytest.raises(PerfkitFormatError, match="decompresses to more than 4 MiB"):
            perfkit.open_profile(packed)


@pytest.mark.parametrize(("encoding", "said"), [("utf-16", "UTF-16 text: convert it to UTF-8"),
                                                 ("utf-16-be", "UTF-16 text: convert it to UTF-8"),
                                                 ("utf-8-sig", "UTF-8 text with a byte-order mark")])
def test_utf16_and_a_byte_order_mark_are_named(tmp_path: Path, encoding: str, said: str) -> None:
    path = tmp_path / "report.mpiP"
    text = PLAIN["mpip"].read_text()
    path.write_bytes(("\ufeff" if encoding == "utf-16-be" else "").encode(encoding) + text.encode(encoding))
    with pytest.raises(PerfkitFormatError, match=said) as err:
        perfkit.open_profile(path)
    assert err.value.line == 1
