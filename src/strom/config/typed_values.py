"""Typed access to a config's parsed values, by key name.

The key registry guarantees each key's type; these accessors only narrow it for mypy
(and assert it, so a wrong key type in the registry shows at once).
"""

from __future__ import annotations

from collections.abc import Mapping

from strom.config.schema import ConfigValue

__all__ = ["TypedValues"]


class TypedValues:
    """Typed access to the parsed values (whose types the key registry guarantees)."""

    def __init__(self, values: Mapping[str, ConfigValue]) -> None:
        self.all = values

    def integer(self, name: str) -> int:
        value = self.optional_integer(name)
        assert value is not None, name
        return value

    def optional_integer(self, name: str) -> int | None:
        value = self.all[name]
        assert value is None or (isinstance(value, int) and not isinstance(value, bool)), name
        return value

    def boolean(self, name: str) -> bool:
        value = self.all[name]
        assert isinstance(value, bool), name
        return value

    def string(self, name: str) -> str:
        value = self.optional_string(name)
        assert value is not None, name
        return value

    def optional_string(self, name: str) -> str | None:
        value = self.all[name]
        assert value is None or isinstance(value, str), name
        return value

    def strings(self, name: str) -> tuple[str, ...]:
        return self.optional_strings(name) or ()

    def optional_strings(self, name: str) -> tuple[str, ...] | None:
        value = self.all[name]
        assert value is None or isinstance(value, tuple), name
        return value
