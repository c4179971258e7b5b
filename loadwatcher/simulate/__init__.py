"""``loadwatcher simulate``: what each scheduling profile would have done with a workload.

A replay puts the scoring plugins (``loadwatcher.scoring``) and the load watcher's own
pipeline (``loadwatcher.pipeline``: store, analysis, rollups; ``loadwatcher.wire`` and
``loadwatcher.client`` for the ``/watcher`` document in between) in one loop over simulated
time. Modules, one job each:

- ``cluster``    the nodes: capacity, allocatable, system overhead (``--nodes N`` of a shape)
- ``trace``      the workload: pods (arrival, duration, requests, limits) and their usage
- ``generator``  the built-in seeded trace (services with daily cycles, batch jobs, bursts)
- ``jsonl``      the project's own trace format (JSON lines)
- ``alibaba``    a streaming reader of Alibaba cluster-trace-v2018 files
- ``spill``      usage samples in a temporary SQLite file, read back a step at a time
- ``watcher``    the load watcher in the loop: scrape, reporting lag, poll, bad metrics
- ``profiles``   scheduling profiles: plugins, weights, args
- ``placement``  one pod placed as kube-scheduler does (filter, then weighted scores)
- ``replay``     the loop: usage, throttling, OOM kills, arrivals, departures, placement
- ``results``    the figures per profile; ``report`` the HTML report; ``cli`` the command
"""
