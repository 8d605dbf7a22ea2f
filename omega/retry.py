"""Retry policy of the optimistic loop: bounded attempts without progress, jittered backoff.

The loop runs on tenacity; ``RetryPolicy`` supplies its stop and wait. The attempt count
resets whenever an attempt made progress (committed at least one claim), so a big job
that keeps winning a little each round is never abandoned; the backoff restarts with it.
Waits are "full jitter" exponential (as tenacity's ``wait_random_exponential``) drawn
from a seeded generator, so a replay is reproducible. The core keeps no table of kinds: a
scheduler kind's default number of attempts is registered with the kind in the policy layer
(``schedulers.chains.register_kind``), and a host hands the placer the policy explicitly
(``schedulers.chains.retry_policy_for``).
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
