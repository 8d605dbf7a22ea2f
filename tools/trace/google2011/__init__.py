"""Import Google clusterdata-2011 task_events + job_events part files into an omega trace.

Two streaming passes over the task events. The survey (pass 1) collects what an event
needs before its time: the machine ids, task run times
and the job kills. Pass 2 emits the events (rules in docs/TRACE_FORMAT.md):

- time: ``t = max(0, timestamp_us / 1e6 - 600)`` (the window opens at 600 s; 0 = initial state);
- every machine id seen → ``machine_add`` at t = 0, capacity from the capacity model;
- the SUBMIT rows of one Google job that the real scheduler had pending together form one
  ``job_submit`` ("batch", importer revision 4): consecutive SUBMIT rows of the job with no
  SCHEDULE of that job in between (the scheduler had acted on the job) and no other row of a
  task already in the batch (it ended or changed), with the same priority, requests and
  different-machine flag (revision 5: the batch's ``different_machine`` is its rows' own flag)
  (a row that differs starts a new batch: nothing is inflated) and no task twice; after t = 0 a
  batch is submitted at its last row's time (the real cell scheduled none of its tasks before
  it: a SCHEDULE would have closed the group); at t = 0 (the recorded state) SCHEDULE rows do
  not close a group, and t = 0 rows never join a later batch. Ids ``g{job}`` then ``g{job}.1``,
  ``g{job}.2``… in the order the batches open; its tasks are the batch's task indices in
  ascending order; kind = service when priority >= 9 (production band) else batch;
- FINISH → ``task_end finished``; EVICT, FAIL, KILL, LOST → ``task_end failed`` (a task the
  trace resubmits later is a new batch); a job KILL → ``job_kill`` of every batch of that job
  with live tasks, emitted at the first task KILL of the job within 1 s before it;
- a SCHEDULE row at t = 0 (the task runs when the window opens) → ``task_placed`` at t = 0 on
  ``m{machine}`` (revision 5: with the SCHEDULE row's request, which its SUBMIT row may not carry:
  ``requests_at_open``), emitted once t = 0 is over for the tasks still live then (a replay may start
  from this recorded state); later SCHEDULE and UPDATE_* rows carry no event (the replayed
  schedulers decide placement).

The cell (``tools.trace.google2011.cell``): machine capacities from the seeded capacity model or,
with ``machine_events``, the trace's own table (machines added and removed after t = 0 become
``machine_add`` / ``machine_remove``); the cell model ``plain`` (every task against capacity) or
``overcommit`` (Borg's reclamation: production against physical capacity, every task against a
schedulable capacity with a reclaimable share; production requests carry ``prod_cpu`` /
``prod_memory``). Both are stated in the header's ``capacity_model``.

Modules: ``schema`` (the task_events columns and event types, the scales, the window, the
importer revision, ``GoogleTraceError``), ``cell`` (capacities and cell models), ``rows`` (reading
the part files), ``survey`` (pass 1 and the ground truth), ``batches`` (pass 2: jobs and events)
and ``importer`` (``import_google2011``, which writes the trace).
"""
