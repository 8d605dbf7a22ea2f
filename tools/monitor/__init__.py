"""The conflict monitor: ``model`` builds a frame from a replica of the cell, ``render`` draws
it with rich, ``live`` keeps it refreshing from a watch (``omega monitor``)."""
