"""The layout of a batch of events (``perfkit.io.otf2.batches``): one int64 array per field.

An event is a column of ``kind, time, a, b, c, d, e`` (``time`` in ticks; the batch is stored
column by column, so that each field is a contiguous array):

========================  =====================================================================
kind                      a, b, c, d, e
========================  =====================================================================
``ENTER``, ``LEAVE``      region; e: the event's position in its location
``SEND``, ``ISEND``       receiver (communicator rank), comm, tag, bytes, request (ISEND)
``IRECV_REQUEST``         e: request
``RECV``, ``IRECV``       sender (communicator rank), comm, tag, bytes, request (IRECV)
``CANCELLED``             e: request
``COLL_END``              operation, comm, root (communicator rank), bytes sent, bytes received
``METRIC``                metric (class or instance), members, type of the first member (``OTF2_Type``),
                          its value (the 64 bits of ``OTF2_MetricValue``), the event's position
========================  =====================================================================
"""

NCOLS = 7
KIND, TIME, A, B, C, D, E = range(NCOLS)
ENTER, LEAVE, SEND, ISEND, IRECV_REQUEST, RECV, IRECV, CANCELLED, COLL_END, METRIC = range(10)
#: ``OTF2_Type`` of metric values read other than as int64 (the third type a metric can have).
UINT64, DOUBLE = 4, 10
