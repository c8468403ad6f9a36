"""The standard workloads of ``fastreplay bench``, on fastreplay and its peers.

- :mod:`fastreplay.bench.workloads`: fastreplay's side of every workload;
- :mod:`fastreplay.bench.peers`: cpprb, TorchRL, Tianshou and SB3 (imported
  lazily; a missing peer is recorded in ``peers.UNAVAILABLE``);
- :mod:`fastreplay.bench.reverb_peer`: dm-reverb, in process;
- :mod:`fastreplay.bench.processes`: actors and a learner in other processes
  than the server, fastreplay's and dm-reverb's (the children run
  :mod:`fastreplay.bench.process_worker`);
- :mod:`fastreplay.bench.env`: machine, versions and commit of a run;
- :mod:`fastreplay.bench.runner`: ``fastreplay bench``: the workloads and the run;
- :mod:`fastreplay.bench.results`: rows (medians with min-max), runs, ratios;
- :mod:`fastreplay.bench.report`: tables and the chart.

The pytest-benchmark suites in the repository's ``benchmarks/`` folder drive
the same workload objects (``benchmarks/net_processes.py``: the same processes).
"""
