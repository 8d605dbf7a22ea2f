"""Reports of replays: JSON, and an HTML page with PNG plots (matplotlib, the ``report`` extra) of one
replay or of several side by side (``omega report A.json B.json``: the same plots, each run's curves
overlaid and labelled).

Modules: ``result`` (a replay result as a report reads it: writing and loading the JSON, checking it),
``summary`` (the figures of results side by side, utilization means), ``plots`` (utilization over time,
the CDFs of job wait times, scheduler busyness, the conflict fraction over time, the fidelity plots),
``page`` (the HTML page and its PNG files).
"""
