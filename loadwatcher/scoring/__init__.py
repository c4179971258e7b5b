"""Scheduler scoring against a load watcher: the upstream plugins, reproduced exactly.

One module per plugin under ``plugins``, each with its formula in the docstring, pure
functions that transcribe the upstream Go code (``score``, ``compute_score``, ...) next to a
vectorised form that the command line uses and the tests hold equal to them, and a ``PLUGIN``
declaration that ``registry`` collects:

- ``plugins.targetloadpacking``   Trimaran TargetLoadPacking
- ``plugins.loadvariation``       Trimaran LoadVariationRiskBalancing
- ``plugins.lowriskovercommit``   Trimaran LowRiskOverCommitment (``plugins.beta``)
- ``plugins.loadaware``           Koordinator LoadAwareScheduling (``plugins.koordinator``:
                                  args, estimator, node usage)
- ``plugins.allocatable``         NodeResourcesAllocatable
- ``plugins.resourcefit``         the default scheduler's NodeResourcesFit (filter; scores
                                  LeastAllocated, MostAllocated, RequestedToCapacityRatio)
- ``plugins.balancedallocation``  the default scheduler's NodeResourcesBalancedAllocation

The last two are baselines for ``simulate``: registered (``score --plugin Fit`` runs them)
but not in ``score``'s default set (``Plugin.default``).

Plumbing: ``registry`` (the plugins by name), ``profile`` (a profile run and the ranking),
``pods`` and ``nodes`` (inputs), ``cluster`` (columns), ``common`` (batch results, argument
readers), ``fallback`` (the KEP's allocation fallback for stale or missing metrics),
``predict`` (node peak prediction, Mid-tier reclaimable resources), ``cases``
(``score --case``), ``kube`` and ``inputs`` (command-line sources), ``gomath`` (Go
arithmetic), ``cli`` (``register`` for the
main command line; ``score``, ``predict``, ``table``).

Where the KEP or proposal documents and the upstream unit tables disagree, the tables win:
LoadVariationRiskBalancing halves μ + σ (the KEP writes S = M + r + V), TargetLoadPacking
predicts a best-effort container as ``defaultRequests.cpu`` = 1000m (the KEP says "a number
like 1 millicore"), and LoadAware's usage filter rejects only above the threshold and
counts the estimated pod (the v0.7 proposal says ``>=`` on the reported usage alone).
"""
