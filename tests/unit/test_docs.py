"""The docs stay true: every configuration key and every served API is documented."""

from pathlib import Path

from strom.config import CONFIG_KEYS, TOPIC_CONFIG_KEYS
from strom.protocol.apis import SUPPORTED_APIS

DOCS = Path(__file__).parents[2] / "docs"


def test_every_config_key_is_in_operations_md() -> None:
    text = (DOCS / "operations.md").read_text()
    missing = [k.name for k in CONFIG_KEYS if f"`{k.name}`" not in text]
    missing += [name for name in TOPIC_CONFIG_KEYS if f"`{name}`" not in text]
    assert not missing, f"document these keys in docs/operations.md: {missing}"


def test_every_api_version_range_is_in_protocol_md() -> None:
    text = (DOCS / "protocol.md").read_text()
    for key, versions in SUPPORTED_APIS.items():
        row = f"| {key.name} | {int(key)} | {versions.min_version}-{versions.max_version} |"
        assert row in text, f"docs/protocol.md lacks the row {row!r}"
