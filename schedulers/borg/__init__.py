"""The Borg-style scorer: equivalence classes, score caching, relaxed randomization (docs/BORG.md)."""
