"""Push ingestion: samples that senders push, decoded and mapped to node utilisation.

The service polls; with push, Prometheus (``remote_write``, also in agent mode) and
Telegraf (``outputs.influxdb``, ``outputs.influxdb_v2``) send their samples instead. This
package is the pure core of that: bytes in, ``SeriesBatch`` out, no I/O, no clock (the
caller passes the receive time). The HTTP handlers call it with each request's body.

    remote_write.proto / remote_write_pb2   the remote-write 1.0 messages (generated)
    remote_write.py   snappy + protobuf body -> the wanted series in columns (``select``)
    bulk.py, wire.py  the bulk protobuf reader behind ``select``
    line_protocol.py  InfluxDB line protocol -> the wanted fields' points
    mapping.py        series/points -> percent samples per (node, CPU | MEMORY): ``Decoded``
    state.py          raw node-exporter counters and gauges across pushes (CPU irate, memory)
    ha.py             one replica per HA pair (cluster) at a time
    errors.py         ``PushError``: a body refused as a whole

A remote-write endpoint keeps one ``mapping.RemoteWriteReceiver`` (its label-set index, HA
election and counters live from push to push) and calls, per request::

    request = remote_write.decode_write_request(body, max_decoded_bytes)  # PushError
    decoded = receiver.map(request, now)

A line-protocol endpoint keeps nothing::

    unit = line_protocol.precision_ns(query.get("precision"), v1=...)      # PushError
    decoded = mapping.map_line_protocol(body, line_mapping, unit_ns=unit, now=now)

``decoded.batch`` goes to the store like a provider's samples (which ignores samples not
newer than a series' newest, so a retried push adds nothing); ``decoded.counts`` says what
was kept and dropped, by reason.
"""
