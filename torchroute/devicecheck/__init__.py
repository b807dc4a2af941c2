"""The device check: every learner config and env run on a device and on the CPU with the
same random draws, compared within per-case tolerances, plus device placement and
throughput (``python -m torchroute.devicecheck``, or :func:`torchroute.devicecheck.main.main`).

- :mod:`~torchroute.devicecheck.problems`: the small float64 envs, found from the env configs;
- :mod:`~torchroute.devicecheck.cases`: the cases, found from the learner configs, and coverage;
- :mod:`~torchroute.devicecheck.compare`: tolerances and comparisons of states and results;
- :mod:`~torchroute.devicecheck.randomness`: feeding a device run the CPU's random draws;
- :mod:`~torchroute.devicecheck.check`: one case, CPU run against device run;
- :mod:`~torchroute.devicecheck.throughput`: trial-rounds per second on a device;
- :mod:`~torchroute.devicecheck.report`: the rows of a run as JSON;
- :mod:`~torchroute.devicecheck.main`: the command line.
"""
