"""The errors the Spark connector raises on purpose; each message says what to change."""

from __future__ import annotations


class StromSparkError(Exception):
    """Base of the connector's own errors."""


class OptionError(StromSparkError, ValueError):
    """An option that is unknown, malformed or contradicts another; `option` names it."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(f"strom: option {option!r}: {message}")
        self.option = option


class SchemaError(StromSparkError, ValueError):
    """A DataFrame whose columns cannot be read or written as records."""

    def __init__(self, message: str) -> None:
        super().__init__(f"strom: {message}")


class DataLossError(StromSparkError):
    """Records a query needed are gone (retention, a deleted topic) and failOnDataLoss is on."""


class WriteError(StromSparkError):
    """A row that cannot become a record, or records the broker did not acknowledge."""


class BrokerError(StromSparkError):
    """The broker refused or did not answer a request the connector needs."""
