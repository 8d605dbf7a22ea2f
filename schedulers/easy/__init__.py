"""EASY backfilling (docs/EASY.md): the FCFS queue with one reservation (``plan``) and the
scheduler kind ``easy`` with the replay's holds (``scheduler``)."""
