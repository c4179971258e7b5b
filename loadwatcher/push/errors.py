"""The one error push ingestion raises: a body that cannot be read at all.

A push body is refused as a whole only when nothing in it can be trusted (not snappy, too
large, not protobuf, an unknown precision). Anything smaller (a malformed line, a series
without its node label) is counted by reason and the rest is kept.
"""

from __future__ import annotations

from enum import StrEnum

from loadwatcher.errors import LoadwatcherError


class PushErrorKind(StrEnum):
    """Why a push body was refused; a label in logs and metrics."""

    NOT_SNAPPY = "not_snappy"
    TOO_LARGE = "too_large"
    NOT_PROTOBUF = "not_protobuf"
    BAD_PRECISION = "bad_precision"
    UNSUPPORTED_MEDIA_TYPE = "unsupported_media_type"
    NO_REPLICA_LABEL = "no_replica_label"


class PushError(LoadwatcherError):
    """A push body was refused as a whole; ``str()`` is one line that says what was expected."""

    def __init__(self, kind: PushErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
