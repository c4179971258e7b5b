"""Metrics providers: each turns one backend into raw ``Series`` of percent samples.

Each provider is a sub-package that declares itself (``PROVIDER``); ``registry`` finds them.
"""
