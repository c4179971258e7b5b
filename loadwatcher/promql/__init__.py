"""A PromQL subset over what the service holds, evaluated as Prometheus 2 evaluates it.

Pure: no aiohttp, no clock but the query budget's. ``storage`` builds the indexed series
sets, ``evaluate`` walks the tree ``promql_parser`` parses, ``render`` writes the answer in
Prometheus's ``data`` shape. What is supported, and the series the service offers, are in
docs/promql.md.
"""
