"""A team's personas: which persona developer k of a tier plays (`persona_index`), the same at every tier.

Tijdeman's chairman assignment (Discrete Mathematics 32, 1980) hands developers out one by one: after
n developers each persona's count differs from its exact share n·w/Σw by at most
1 − 1/(2(m−1)) for m personas, which is below one, so the count is within one of its share at every n
and exactly the share where that share is whole. Developer k's persona depends on k alone: growing a
tier only adds developers.

The sequence is kept per mix with its running counts, so that each new developer costs one step over
the personas (a rate tier takes one per send), and in whole numbers: the weights scaled by their common
denominator, the bound by 2(m−1).
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass, field
from fractions import Fraction


def tijdeman_bound(personas: int) -> Fraction:
    """The largest |count − share| Tijdeman's assignment allows for this many personas."""
    return Fraction(0) if personas < 2 else 1 - Fraction(1, 2 * (personas - 1))


@dataclass
class _Sequence:
    """The personas of developers 0, 1, … of one mix, and how many of them each persona has."""

    weights: tuple[int, ...]  # the mix's weights times their common denominator: whole numbers
    personas: array[int] = field(default_factory=lambda: array("I"))
    counts: list[int] = field(default_factory=list)

    @classmethod
    def of(cls, weights: tuple[float, ...]) -> _Sequence:
        exact = [Fraction(str(weight)) for weight in weights]
        scale = math.lcm(*(weight.denominator for weight in exact))
        return cls(tuple(int(weight * scale) for weight in exact), counts=[0] * len(weights))

    def extend(self, length: int) -> None:
        """Grow to `length`: at each step, of the personas that may take one more developer without
        passing share + bound, the one whose count would fall below share − bound soonest (earliest
        deadline first, ties to the lower index). With bound B/D and share w/W: persona i may take one
        when (c_i + 1)·W·D <= n·w_i·D + B·W; it is owed one by the time n·share_i passes c_i + B/D, so its
        deadline orders as (c_i·D + B) / w_i."""
        weights, counts, personas = self.weights, self.counts, self.personas
        total = sum(weights)
        bound = tijdeman_bound(len(weights))
        slack, scale = bound.numerator, bound.denominator
        for n in range(len(personas) + 1, length + 1):
            chosen, chosen_due, chosen_weight = -1, 0, 1
            for i, weight in enumerate(weights):
                if (counts[i] + 1) * total * scale > n * weight * scale + slack * total:
                    continue
                due = counts[i] * scale + slack
                if chosen < 0 or due * chosen_weight < chosen_due * weight:
                    chosen, chosen_due, chosen_weight = i, due, weight
            counts[chosen] += 1
            personas.append(chosen)


_sequences: dict[tuple[float, ...], _Sequence] = {}  # by the mix's weights


def _sequence(weights: tuple[float, ...], length: int) -> _Sequence:
    sequence = _sequences.get(weights)
    if sequence is None:
        sequence = _sequences[weights] = _Sequence.of(weights)
    if len(sequence.personas) < length:
        sequence.extend(length)
    return sequence


def persona_index(weights: tuple[float, ...], developer: int) -> int:
    """The persona (index into `weights`, all positive) of 0-based `developer`."""
    if len(weights) == 1:
        return 0
    return int(_sequence(weights, developer + 1).personas[developer])


def persona_counts(weights: tuple[float, ...], developers: int) -> list[int]:
    """How many of a tier's first `developers` developers play each persona."""
    if len(weights) == 1:
        return [developers]
    sequence = _sequence(weights, developers)
    if len(sequence.personas) == developers:
        return list(sequence.counts)
    first = sequence.personas[:developers]
    return [first.count(i) for i in range(len(weights))]
