"""Which links of a test cluster's network are cut: a pure core, no I/O.

An endpoint is a node id or `CLIENTS`, every connection that does not come from a node
of the cluster (the application under test, an admin tool). A cut link is undirected:
no byte crosses it either way, as when a switch port dies.

    all healed -> cut(a, b) / isolate(n) / cut_clients(n) -> ... -> heal() -> all healed
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

CLIENTS: Final = -1
"""The endpoint of every connection that does not come from a node of the cluster."""


def _link(a: int, b: int) -> frozenset[int]:
    if a == b:
        raise ValueError(f"a link joins two different endpoints, got {a} twice")
    return frozenset((a, b))


@dataclass(slots=True)
class LinkRules:
    _cut: set[frozenset[int]] = field(default_factory=set)

    def cut(self, a: int, b: int) -> None:
        self._cut.add(_link(a, b))

    def isolate(self, node: int, others: Iterable[int]) -> None:
        """Cut `node` from every one of `others` and from the clients."""
        for other in others:
            if other != node:
                self._cut.add(_link(node, other))
        self._cut.add(_link(node, CLIENTS))

    def heal(self, a: int | None = None, b: int | None = None) -> None:
        """Heal one link (both ends given), every link of one endpoint (one given), or
        the whole network (none given)."""
        if a is None:
            self._cut.clear()
        elif b is None:
            self._cut = {link for link in self._cut if a not in link}
        else:
            self._cut.discard(_link(a, b))

    def is_cut(self, a: int, b: int) -> bool:
        return a != b and frozenset((a, b)) in self._cut

    @property
    def cut_links(self) -> list[tuple[int, int]]:
        """Every cut link as (lower, higher) endpoint, sorted."""
        pairs = (tuple(sorted(link)) for link in self._cut)
        return sorted((a, b) for a, b in pairs)
