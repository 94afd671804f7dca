"""Responses kio's generated readers cannot read as Kafka writes them, with readable twins.

kio reads an int64 `datetime_i64` field as an aware datetime and refuses a negative one,
but DescribeTransactions v0 answers `transaction_start_time` -1 for an id with no open
transaction, and for an id it does not know. The twin here reads that field as a plain
int64 (epoch ms, -1 for none); everything else is kio's class unchanged. codec.py's
`decode_response` reads with these instead of kio's. (No `from __future__ import
annotations` here: kio's reader reads the field types, which must not be strings.)
"""

from dataclasses import dataclass, field
from typing import Any

from kio.schema.describe_transactions.v0 import response as describe_transactions_v0
from kio.static.primitive import i64


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribedTransactionV0(describe_transactions_v0.TransactionState):
    transaction_start_time: i64 = field(metadata={"kafka_type": "int64"})  # type: ignore[assignment]
    """Epoch ms of the open transaction's start; -1 for none."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeTransactionsResponseV0(describe_transactions_v0.DescribeTransactionsResponse):
    transaction_states: tuple[DescribedTransactionV0, ...]


LENIENT_RESPONSES: dict[tuple[int, int], type[Any]] = {
    (65, 0): DescribeTransactionsResponseV0,
}
