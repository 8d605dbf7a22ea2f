"""The DCM-style solver scheduler (OR-tools CP-SAT, the optional ``solver`` extra; docs/SOLVER.md)."""
