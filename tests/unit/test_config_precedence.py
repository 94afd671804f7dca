"""strom.config's precedence: file, then --set overrides, then CLI shortcuts; Kafka's
synonyms (log.dirs, retention units, roll and flush) and value trimming.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from strom.config import ConfigError, ConfigSource, Listener, load_config, shortcut_overrides

STATIC = ConfigSource.STATIC_BROKER_CONFIG

# ---------------------------------------------------------------- precedence


def test_file_then_set_then_shortcuts() -> None:
    file_text = "num.partitions=2\nlog.dirs=/from-file\nmessage.max.bytes=100\n"
    config = load_config(
        file_text=file_text,
        overrides=["num.partitions=3", "log.dirs=/from-set"],
        shortcuts={"log.dirs": "/from-shortcut"},
    )
    assert config.num_partitions == 3
    assert config.log_dir == Path("/from-shortcut")
    assert config.message_max_bytes == 100
    assert config.sources["num.partitions"] is STATIC
    assert config.sources["log.dirs"] is STATIC
    assert config.raw["log.dirs"] == "/from-shortcut"


def test_log_dirs_wins_over_log_dir() -> None:
    assert load_config(file_text="log.dir=/one").log_dir == Path("/one")
    assert load_config(file_text="log.dir=/one\nlog.dirs=/two").log_dir == Path("/two")
    assert load_config(file_text="metadata.log.dir=/meta").metadata_log_dir == Path("/meta")


@pytest.mark.parametrize(
    ("settings", "retention_ms"),
    [
        ([], 168 * 3_600_000),
        (["log.retention.hours=1"], 3_600_000),
        (["log.retention.hours=1", "log.retention.minutes=2"], 120_000),
        (["log.retention.hours=1", "log.retention.minutes=2", "log.retention.ms=5"], 5),
        (["log.retention.ms=5", "log.retention.hours=1"], 5),
        (["log.retention.ms=-1"], -1),
        (["log.retention.minutes=-1"], -1),
        (["log.retention.hours=-1"], -1),
        (["log.retention.ms=0"], 0),
    ],
)
def test_retention_ms_minutes_hours_precedence(settings: list[str], retention_ms: int) -> None:
    assert load_config(overrides=settings).log_retention_ms == retention_ms


def test_roll_and_flush_synonyms() -> None:
    assert load_config(overrides=["log.roll.hours=2"]).log_roll_ms == 7_200_000
    assert load_config(overrides=["log.roll.hours=2", "log.roll.ms=9"]).log_roll_ms == 9
    config = load_config(overrides=["log.flush.scheduler.interval.ms=500"])
    assert config.log_flush_interval_ms == 500
    config = load_config(
        overrides=["log.flush.scheduler.interval.ms=500", "log.flush.interval.ms=7"]
    )
    assert config.log_flush_interval_ms == 7


def test_values_are_trimmed_and_booleans_case_insensitive() -> None:
    config = load_config(
        file_text="num.partitions =  7  \nauto.create.topics.enable=FALSE\ndelete.topic.enable=True"
    )
    assert config.num_partitions == 7
    assert config.auto_create_topics_enable is False
    assert config.delete_topic_enable is True
    assert config.raw["auto.create.topics.enable"] == "false"


def test_blank_value_for_a_key_without_default_means_unset() -> None:
    config = load_config(file_text="log.retention.ms=\nadvertised.listeners=\n")
    assert config.log_retention_ms == 168 * 3_600_000
    assert "log.retention.ms" not in config.raw


# ---------------------------------------------------------------- CLI shortcuts


def test_shortcut_overrides() -> None:
    assert shortcut_overrides() == {}
    assert shortcut_overrides(data_dir="/d", listen="0.0.0.0:19092", node_id=3) == {
        "log.dirs": "/d",
        "listeners": "PLAINTEXT://0.0.0.0:19092",
        "advertised.listeners": "PLAINTEXT://localhost:19092",
        "node.id": "3",
    }
    assert shortcut_overrides(listen="[::1]:9092") == {
        "listeners": "PLAINTEXT://[::1]:9092",
        "advertised.listeners": "PLAINTEXT://[::1]:9092",
    }
    assert shortcut_overrides(listen=":9092") == {
        "listeners": "PLAINTEXT://:9092",
        "advertised.listeners": "PLAINTEXT://localhost:9092",
    }
    # --listen wins over a file's advertised.listeners, so clients follow the new port.
    kafka_file = "listeners=PLAINTEXT://:9092\nadvertised.listeners=PLAINTEXT://localhost:9092\n"
    moved = load_config(
        file_text=kafka_file, shortcuts=shortcut_overrides(listen="127.0.0.1:19092")
    )
    assert moved.advertised_listeners == (Listener("PLAINTEXT", "127.0.0.1", 19092),)
    config = load_config(shortcuts=shortcut_overrides(listen="[::1]:19092", node_id=0))
    assert config.listeners == (Listener("PLAINTEXT", "::1", 19092),)
    assert config.node_id == 0


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"listen": "localhost"}, "--listen"),
        ({"listen": "localhost:http"}, "--listen"),
        ({"listen": "localhost:70000"}, "--listen"),
        ({"data_dir": ""}, "--data-dir"),
        ({"data_dir": "/a,/b"}, "--data-dir"),
        ({"node_id": -1}, "--node-id"),
    ],
)
def test_bad_shortcut(kwargs: dict[str, object], name: str) -> None:
    with pytest.raises(ConfigError, match=name):
        shortcut_overrides(**kwargs)  # type: ignore[arg-type]
