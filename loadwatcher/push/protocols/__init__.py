"""The push protocols: one module each, setting ``PROTOCOL`` (``push/protocol.py``)."""
