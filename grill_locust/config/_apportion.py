"""A team's personas: which persona developer k of a tier plays (`persona_index`), the same at every tier.

Tijdeman's chairman assignment (Discrete Mathematics 32, 1980) hands developers out one by one: after
n developers each persona's count differs from its exact share n·w/Σw by at most
1 − 1/(2(m−1)) for m personas, which is below one, so the count is within one of its share at every n
and exactly the share where that share is whole. Developer k's persona depends on k alone: growing a
tier only adds developers.
"""

from __future__ import annotations

from fractions import Fraction

_sequences: dict[tuple[float, ...], list[int]] = {}  # by weights: the personas of developers 0, 1, …


def tijdeman_bound(personas: int) -> Fraction:
    """The largest |count − share| Tijdeman's assignment allows for this many personas."""
    return Fraction(0) if personas < 2 else 1 - Fraction(1, 2 * (personas - 1))


def persona_index(weights: tuple[float, ...], developer: int) -> int:
    """The persona (index into `weights`, all positive) of 0-based `developer`."""
    sequence = _sequences.setdefault(weights, [])
    if len(sequence) <= developer:
        _extend(tuple(Fraction(str(weight)) for weight in weights), sequence, developer + 1)
    return sequence[developer]


def persona_counts(weights: tuple[float, ...], developers: int) -> list[int]:
    """How many of a tier's first `developers` developers play each persona."""
    counts = [0] * len(weights)
    for developer in range(developers):
        counts[persona_index(weights, developer)] += 1
    return counts


def _extend(weights: tuple[Fraction, ...], sequence: list[int], length: int) -> None:
    """Grow `sequence` to `length`: at each step, of the personas that may take one more developer
    without passing share + bound, the one whose count would fall below share − bound soonest
    (earliest deadline first, ties to the lower index)."""
    total = sum(weights)
    shares = [weight / total for weight in weights]
    bound = tijdeman_bound(len(weights))
    counts = [0] * len(weights)
    for persona in sequence:
        counts[persona] += 1
    for n in range(len(sequence) + 1, length + 1):
        allowed = [i for i, share in enumerate(shares) if counts[i] + 1 <= n * share + bound]
        # persona i is owed a developer by the time n·share_i passes counts_i + bound
        chosen = min(allowed, key=lambda i: ((counts[i] + bound) / shares[i], i))
        counts[chosen] += 1
        sequence.append(chosen)
