"""Scheduler scoring against a load watcher: the upstream plugins, reproduced exactly.

One module per plugin, each with its formula in the docstring and pure functions that
transcribe the upstream Go code (``score``, ``compute_score``, ...) next to a vectorised
``score_batch`` that the command line uses and the tests hold equal to them:

- ``targetloadpacking``   Trimaran TargetLoadPacking
- ``loadvariation``       Trimaran LoadVariationRiskBalancing
- ``lowriskovercommit``   Trimaran LowRiskOverCommitment
- ``loadaware``           Koordinator LoadAwareScheduling (``koordinator``: args, estimator)
- ``allocatable``         NodeResourcesAllocatable
- ``fallback``            the KEP's allocation fallback for stale or missing metrics
- ``predict``             node peak prediction and Mid-tier reclaimable resources

Plumbing: ``pods`` and ``nodes`` (inputs), ``cluster`` (columns), ``plugins`` (a profile
run), ``cases`` (``score --case``), ``kube`` and ``inputs`` (command-line sources),
``gomath`` (Go arithmetic), ``cli`` (``register`` for the main command line).

Where the KEP or proposal documents and the upstream unit tables disagree, the tables win:
LoadVariationRiskBalancing halves μ + σ (the KEP writes S = M + r + V), TargetLoadPacking
predicts a best-effort container as ``defaultRequests.cpu`` = 1000m (the KEP says "a number
like 1 millicore"), and LoadAware's usage filter rejects only above the threshold and
counts the estimated pod (the v0.7 proposal says ``>=`` on the reported usage alone).
"""
