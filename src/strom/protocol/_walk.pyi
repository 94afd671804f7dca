def record_lengths_fill(
    data: bytes | bytearray | memoryview, pos: int, end: int, count: int, min_varint: int
) -> bool: ...
def decode_columns(
    data: bytes | bytearray | memoryview,
    pos: int,
    end: int,
    count: int,
    base_offset: int,
    first_timestamp: int,
    max_timestamp: int,
    log_append_time: bool,
    with_headers: bool,
    out: tuple[bytearray, ...],
    /,
) -> None: ...
