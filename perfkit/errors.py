"""Exceptions and warnings raised by perfkit."""

from __future__ import annotations

from os import PathLike


class PerfkitFormatError(ValueError):
    """A profile file does not match the format its reader expects.

    Carries ``path`` (the file), ``line`` (1-based line number, or ``None`` when the problem is not
    tied to a line, e.g. an XML element path given in the message) and ``member`` (for a file
    inside an archive, e.g. a CUBE ``.cubex``: the archive member ``line`` refers to, else ``None``).
    """

    def __init__(self, path: str | PathLike | None, line: int | None, message: str, *, member: str | None = None):
        self.path = None if path is None else str(path)
        self.line = line
        self.member = member
        self.reason = message
        where = self.path or "<data>"
        if member is not None:
            where = f"{where}, member {member}"
        if line is not None:
            where = f"{where}, line {line}"
        super().__init__(f"{where}: {message}")

    def __reduce__(self) -> tuple[type, tuple[str | None, int | None, str], dict[str, str | None]]:
        # pickled across processes (dask, the fuzzer): keep path, line and member
        return (type(self), (self.path, self.line, self.reason), {"member": self.member})

    def __setstate__(self, state: dict[str, str | None]) -> None:
        self.member = state.get("member")
        if self.member is not None:  # rebuild the message with the member named
            self.__init__(self.path, self.line, self.reason, member=self.member)


class ContractError(ValueError):
    """A Dataset breaks the canonical perfkit data contract."""


class PerfkitWarning(UserWarning):
    """Something in the input was odd but could be read honestly (kept in ``ds.attrs``)."""
