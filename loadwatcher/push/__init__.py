"""Push ingestion: samples that senders push, decoded and mapped to node utilisation.

The service polls; with push, Prometheus (``remote_write``, also in agent mode) and
Telegraf (``outputs.influxdb``, ``outputs.influxdb_v2``) send their samples instead. This
package is the pure core of that: bytes in, ``SeriesBatch`` out, no I/O, no clock (the
caller passes the receive time). The HTTP handlers (``http/push.py``) call it with each
request's body.

    protocol.py       ``PushProtocol``: one declaration per protocol, and their discovery
    protocols/        the declarations: remote_write.py, line_protocol.py
    remote_write.proto / remote_write_pb2   the remote-write 1.0 messages (generated)
    remote_write.py   snappy + protobuf body -> the wanted series in columns (``select``)
    bulk.py, wire.py  the bulk protobuf reader behind ``select``
    remote_write_mapping.py   series -> percent samples per (node, CPU | MEMORY)
    state.py          raw node-exporter counters and gauges across pushes (CPU irate, memory)
    ha.py             one replica per HA pair (cluster) at a time
    line_protocol.py  InfluxDB line protocol -> the wanted fields' points
    line_protocol_mapping.py  points -> percent samples
    samples.py        ``Decoded``, what every mapping hands on, and the batch it builds
    errors.py         ``PushError``: a body refused as a whole

Each protocol's ``Mapper`` (built once from the settings by its declaration) is called per
request::

    mapper.check(request)                                  # PushError
    pending = mapper.read(body, request, max_decoded_bytes)   # PushError
    decoded = pending.map(now)

``decoded.batch`` goes to the store like a provider's samples; ``decoded.counts`` says
what was kept and dropped, by reason.
"""
