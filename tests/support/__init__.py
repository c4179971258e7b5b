"""The tests' helpers: real backends on loopback, protocol-faithful fakes, fault tools and
synthetic data, imported as ``tests.support.<module>`` (the repository root is on ``sys.path``
under pytest: ``tests`` is a package)."""
