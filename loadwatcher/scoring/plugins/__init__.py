"""The scoring plugins, one module each, found by ``loadwatcher.scoring.registry``.

A plugin module states its formula in its docstring, then its ``Args`` and ``parse_args``
(upstream JSON names and defaults), the math (pure functions transcribing the upstream Go
code, and their vectorised forms), and last the glue: ``score_batch`` reading the Cluster's
columns, and the module-level ``PLUGIN`` that registers it. Modules without a ``PLUGIN``
are helpers of one: ``koordinator`` (LoadAware's args, estimator and node usage) and
``beta`` (LowRiskOverCommitment's Beta distribution).

Adding a plugin is one module here with a ``PLUGIN = Plugin(...)``, and its tests.
"""
