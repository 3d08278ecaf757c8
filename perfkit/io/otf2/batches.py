"""One location's OTF2 events as batches of integer fields, read by the OTF2 library at C speed.

The library decodes the events file and calls one compiled callback (a numba ``cfunc``) per event;
each callback writes the event's ``NCOLS`` int64 fields into a batch buffer and returns. No Python
runs per event: Python sees a batch of at most ``BATCH`` events after each ``OTF2_EvtReader_ReadEvents`` call
(the library reads at most that many events per call, so the buffer never overflows).

The layout of a batch is ``perfkit.io.otf2.layout``.
"""

from __future__ import annotations

import ctypes
import importlib
from collections.abc import Iterator
from typing import Any

import numpy as np
from numba import carray, cfunc, njit, types

from perfkit.io.otf2.layout import (
    CANCELLED,
    COLL_END,
    ENTER,
    IRECV,
    IRECV_REQUEST,
    ISEND,
    LEAVE,
    METRIC,
    NCOLS,
    RECV,
    SEND,
)

#: Events read per library call: the rows of one batch.
BATCH = 65536
#: Buffer length: an event count, then ``NCOLS`` fields of ``BATCH`` events.
CAPACITY = 1 + BATCH * NCOLS

_u64, _u32, _u8, _ptr, _code = types.uint64, types.uint32, types.uint8, types.voidptr, types.int32
_HEAD = (_u64, _u64, _u64, _ptr, _ptr)  # location, time, event position, user data, attribute list


@njit(inline="always", cache=True)
def _event(user: Any, kind: int, time: int, a: int, b: int, c: int, d: int, e: int) -> None:
    buf = carray(user, (CAPACITY,), np.int64)
    n = buf[0]
    at = 1 + n
    buf[at] = kind
    buf[at + BATCH] = time
    buf[at + 2 * BATCH] = a
    buf[at + 3 * BATCH] = b
    buf[at + 4 * BATCH] = c
    buf[at + 5 * BATCH] = d
    buf[at + 6 * BATCH] = e
    buf[0] = n + 1


@cfunc(_code(*_HEAD, _u32), cache=True)
def _enter(location, time, position, user, attributes, region):
    _event(user, ENTER, time, region, 0, 0, 0, position)
    return 0


@cfunc(_code(*_HEAD, _u32), cache=True)
def _leave(location, time, position, user, attributes, region):
    _event(user, LEAVE, time, region, 0, 0, 0, position)
    return 0


@cfunc(_code(*_HEAD, _u32, _u32, _u32, _u64), cache=True)
def _send(location, time, position, user, attributes, receiver, comm, tag, length):
    _event(user, SEND, time, receiver, comm, tag, length, 0)
    return 0


@cfunc(_code(*_HEAD, _u32, _u32, _u32, _u64, _u64), cache=True)
def _isend(location, time, position, user, attributes, receiver, comm, tag, length,
          request):
    _event(user, ISEND, time, receiver, comm, tag, length, request)
    return 0


@cfunc(_code(*_HEAD, _u64), cache=True)
def _irecv_request(location, time, position, user, attributes, request):
    _event(user, IRECV_REQUEST, time, 0, 0, 0, 0, request)
    return 0


@cfunc(_code(*_HEAD, _u32, _u32, _u32, _u64), cache=True)
def _recv(location, time, position, user, attributes, sender, comm, tag, length):
    _event(user, RECV, time, sender, comm, tag, length, 0)
    return 0


@cfunc(_code(*_HEAD, _u32, _u32, _u32, _u64, _u64), cache=True)
def _irecv(location, time, position, user, attributes, sender, comm, tag, length,
          request):
    _event(user, IRECV, time, sender, comm, tag, length, request)
    return 0


@cfunc(_code(*_HEAD, _u64), cache=True)
def _cancelled(location, time, position, user, attributes, request):
    _event(user, CANCELLED, time, 0, 0, 0, 0, request)
    return 0


@cfunc(_code(*_HEAD, _u8, _u32, _u32, _u64, _u64), cache=True)
def _collective_end(location, time, position, user, attributes, op, comm, root,
                   sent, received):
    _event(user, COLL_END, time, op, comm, root, sent, received)
    return 0


@cfunc(_code(*_HEAD, _u32, _u8, _ptr, _ptr), cache=True)
def _metric(location, time, position, user, attributes, metric, members, types, values):
    if members:
        _event(user, METRIC, time, metric, members, carray(types, (1,), np.uint8)[0],
               carray(values, (1,), np.int64)[0], position)
    else:
        _event(user, METRIC, time, metric, 0, 0, 0, position)
    return 0


#: The callbacks, by OTF2 event name.
CALLBACKS = {"Enter": _enter, "Leave": _leave, "MpiSend": _send, "MpiIsend": _isend,
             "MpiIrecvRequest": _irecv_request, "MpiRecv": _recv, "MpiIrecv": _irecv,
             "MpiRequestCancelled": _cancelled, "MpiCollectiveEnd": _collective_end, "Metric": _metric}


class EventsError(Exception):
    """The library could not deliver a location's events."""


def new_callbacks(metrics: bool = True) -> Any:
    """A new ``OTF2_EvtReaderCallbacks`` with every callback above set, ``Metric`` only with ``metrics`` (free it
    with ``_otf2.EvtReaderCallbacks_Delete``)."""
    import _otf2
    from _otf2.Config import conf

    module = importlib.import_module("_otf2.EvtReaderCallbacks")
    callbacks = _otf2.EvtReaderCallbacks_New()
    for name, function in CALLBACKS.items():
        if name == "Metric" and not metrics:
            continue
        setter = getattr(conf.lib, f"OTF2_EvtReaderCallbacks_Set{name}Callback")
        setter.argtypes = [ctypes.POINTER(module.EvtReaderCallbacks), ctypes.c_void_p]
        setter.restype = ctypes.c_int
        if setter(callbacks, function.address) != 0:
            raise RuntimeError(f"the OTF2 library refused a callback for {name} events")
    return callbacks


def read_batches(handle: Any, ref: int, callbacks: Any, batch: int = BATCH) -> Iterator[np.ndarray]:
    """The events of location ``ref`` of the reader ``handle`` as (``NCOLS``, events) int64 arrays of
    at most ``batch`` (<= ``BATCH``) events.

    Each array is a view of one buffer reused for the next batch: use it before asking for the next.
    Errors of the library (a truncated or missing file) raise ``_otf2.Error`` or ``EventsError``.
    """
    import _otf2
    from _otf2.Config import conf
    from _otf2.EvtReader import EvtReader

    if not 0 < batch <= BATCH:
        raise ValueError(f"batch must be in 1..{BATCH}, got {batch}")
    module = importlib.import_module("_otf2.EvtReaderCallbacks")
    set_callbacks = conf.lib.OTF2_EvtReader_SetCallbacks
    set_callbacks.argtypes = [ctypes.POINTER(EvtReader), ctypes.POINTER(module.EvtReaderCallbacks), ctypes.c_void_p]
    set_callbacks.restype = ctypes.c_int
    buffer = np.zeros(CAPACITY, dtype=np.int64)
    fields = buffer[1:].reshape(NCOLS, BATCH)
    reader = _otf2.Reader_GetEvtReader(handle, ref)
    if not reader:
        raise EventsError("the OTF2 library could not open the events")
    try:
        if set_callbacks(reader, callbacks, buffer.ctypes.data) != 0:
            raise EventsError("the OTF2 library refused the event callbacks")
        while True:
            buffer[0] = 0
            read = _otf2.EvtReader_ReadEvents(reader, batch)
            if buffer[0]:
                yield fields[:, : buffer[0]]
            if read < batch:
                break
    finally:
        _otf2.Reader_CloseEvtReader(handle, reader)
