"""Retry policy of the optimistic loop: bounded attempts without progress, jittered backoff.

The loop runs on tenacity; ``RetryPolicy`` supplies its stop and wait. The attempt count
resets whenever an attempt made progress (committed at least one claim), so a big job
that keeps winning a little each round is never abandoned; the backoff restarts with it.
Waits are "full jitter" exponential (as tenacity's ``wait_random_exponential``) drawn
from a seeded generator, so a replay is reproducible.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass(slots=True)
class RetryPolicy:
    """Give up after ``max_attempts`` attempts in a row without progress; before retry n
    (n >= 1 since the last progress) wait uniform(0, min(max_wait_s, base_wait_s * 2**(n-1)))."""

    max_attempts: int = 5
    base_wait_s: float = 0.01
    max_wait_s: float = 1.0
    seed: int | None = 0
    rng: random.Random = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if type(self.max_attempts) is not int or self.max_attempts < 1:
            raise ValueError(f"max_attempts must be an int >= 1, got {self.max_attempts!r}")
        if not (0 <= self.base_wait_s <= self.max_wait_s):
            raise ValueError(f"need 0 <= base_wait_s <= max_wait_s, got {self.base_wait_s!r} "
                             f"and {self.max_wait_s!r}")
        self.rng = random.Random(self.seed)

    def backoff(self, attempts_without_progress: int) -> float:
        """Seconds to wait before the next attempt (0 right after progress)."""
        if attempts_without_progress <= 0:
            return 0.0
        ceiling = min(self.max_wait_s, self.base_wait_s * 2 ** (attempts_without_progress - 1))
        return self.rng.uniform(0.0, ceiling)

    def exhausted(self, attempts_without_progress: int) -> bool:
        return attempts_without_progress >= self.max_attempts


# Batch jobs are cheap to re-queue and many: give up sooner. Services are few and matter:
# try harder. The Borg-style scheduler places both.
DEFAULT_ATTEMPTS = {"batch": 3, "service": 8, "borg": 5, "solver": 5}


def retry_policy_for(kind: str, seed: int | None = 0) -> RetryPolicy:
    """The default policy of a scheduler kind; ValueError naming the known kinds."""
    if kind not in DEFAULT_ATTEMPTS:
        raise ValueError(f"unknown scheduler kind {kind!r}; known: {', '.join(DEFAULT_ATTEMPTS)}")
    return RetryPolicy(max_attempts=DEFAULT_ATTEMPTS[kind], seed=seed)
