"""Sweeps: many fauxmaster replays over a grid of settings, traces and seeds, each run one task of an
engine (a local process pool or Ray). ``spec`` reads and expands a sweep spec, ``run`` executes one
run and writes its files, ``engines`` runs them, ``driver`` resumes, retries and merges (docs/SWEEP.md)."""
