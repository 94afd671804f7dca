"""The transaction coordinator: transactional ids, their producer ids and epochs, and
the state of each transaction, kept in the compacted internal topic `__transaction_state`."""
