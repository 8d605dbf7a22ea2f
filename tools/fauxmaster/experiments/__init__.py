"""``omega experiment NAME``: the Omega paper's scheduler experiments on the fauxmaster.

Each experiment replays ONE trace (a seeded synthetic one by default, or ``--trace FILE``)
under a few scheduler set-ups, returns a table of the figures beside the paper's finding,
and a verdict on whether the DIRECTION of the finding was reproduced, computed from the
table's numbers. Decision times are modelled (``t_job + t_task × tasks``).

The synthetic workload is contention-heavy on purpose (a small cell, short batch tasks, a
high arrival rate, slow service decisions), so conflicts actually occur.

Modules: ``catalogue`` (the experiments by name, their sizes, ``run_experiment``),
``decision_time`` (architectures, tjob-sweep), ``modes`` (conflict-modes, commit-modes), ``scaling``
(batch-scaling); ``runs`` (one run of a trace → figures by job kind; ``Bench``), ``verdicts`` (the
report, its table and the rules of a verdict), ``architectures`` (monolithic multi-path and two-level
offers on the fauxmaster), ``synthetic`` (seeded synthetic traces).
"""
