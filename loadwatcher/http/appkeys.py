"""What the aiohttp application carries for its handlers (one module, so that the routes and
the status page share it without importing each other)."""

from __future__ import annotations

from aiohttp import web

from loadwatcher.engine import Engine
from loadwatcher.http.prepared import EncodingsCache

ENGINE_KEY = web.AppKey("engine", Engine)
ENCODINGS_KEY = web.AppKey("encodings", EncodingsCache)
RECEIVING_KEY = web.AppKey("receiving", bool)  # the push endpoints are routed
AUTH_KEY = web.AppKey("auth", bool)  # server.auth_token_file is set
# The query API's state (its series cache and gate), made at its first request
# (http/promapi.py, imported late).
PROMQL_KEY = web.AppKey("promql", dict)
