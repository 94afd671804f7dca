"""`strom dev`: the cluster plan, the configs it writes, and its argument errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from strom.cli.dev_cluster import NodeFailure, read_tail
from strom.cli.dev_plan import (
    PlanError,
    bootstrap_servers,
    check_plan,
    config_header,
    parse_settings,
    plan_local_cluster,
    plan_rows,
    render_config,
    secure_bootstrap_servers,
)
from strom.cli.main import app
from strom.config import ProcessRole, load_config, parse_properties
from strom.config.listeners import Listener, QuorumVoter

runner = CliRunner()
ROOT = Path("/srv/dev")


def test_three_nodes_get_consecutive_client_and_controller_ports() -> None:
    plans = plan_local_cluster(3, ROOT)
    assert [(p.node_id, p.client_address, p.controller_address) for p in plans] == [
        (1, "127.0.0.1:9092", "127.0.0.1:9192"),
        (2, "127.0.0.1:9093", "127.0.0.1:9193"),
        (3, "127.0.0.1:9094", "127.0.0.1:9194"),
    ]
    assert bootstrap_servers(plans) == "127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094"
    assert [(p.data_dir, p.config_path, p.log_path) for p in plans[:1]] == [
        (ROOT / "node-1", ROOT / "node-1.properties", ROOT / "node-1.log")
    ]


def test_each_config_loads_as_a_combined_kraft_node_with_every_voter() -> None:
    plans = plan_local_cluster(3, ROOT, base_port=19092)
    voters = tuple(QuorumVoter(i, "127.0.0.1", 19191 + i) for i in (1, 2, 3))
    for plan, config in zip(plans, check_plan(plans), strict=True):
        assert config.node_id == plan.node_id
        assert config.process_roles == frozenset({ProcessRole.BROKER, ProcessRole.CONTROLLER})
        assert config.controller_quorum_voters == voters
        port = 19091 + plan.node_id
        assert config.client_listeners == (Listener("PLAINTEXT", "127.0.0.1", port),)
        assert config.controller_listeners == (Listener("CONTROLLER", "127.0.0.1", port + 100),)
        assert config.advertised_listeners == (Listener("PLAINTEXT", "127.0.0.1", port),)
        assert config.controller_listener_names == ("CONTROLLER",)
        assert config.log_dir == ROOT / f"node-{plan.node_id}"
        assert config.default_replication_factor == 3
        assert config.offsets_topic_replication_factor == 3
        assert config.min_insync_replicas == 1


@pytest.mark.parametrize(("nodes", "factor"), [(1, 1), (2, 2), (3, 3), (5, 3)])
def test_replication_factors_follow_the_node_count_up_to_three(nodes: int, factor: int) -> None:
    for config in check_plan(plan_local_cluster(nodes, ROOT)):
        assert config.default_replication_factor == factor
        assert config.offsets_topic_replication_factor == factor


def test_the_written_file_is_the_plan_and_the_header_is_a_comment() -> None:
    [plan] = plan_local_cluster(1, ROOT)
    text = render_config(plan, header=config_header(1, 1))
    assert text.startswith("# Node 1 of a 1-node local strom cluster")
    assert parse_properties(text) == plan.config
    assert "controller.quorum.voters=1@127.0.0.1:9192\n" in text


def test_settings_win_and_go_last() -> None:
    settings = parse_settings(["num.partitions=6", "min.insync.replicas=2"])
    plan = plan_local_cluster(3, ROOT, settings=settings)[0]
    assert plan.properties[-2:] == (("num.partitions", "6"), ("min.insync.replicas", "2"))
    config = check_plan([plan])[0]
    assert (config.num_partitions, config.min_insync_replicas) == (6, 2)


def test_values_needing_escapes_survive_the_file() -> None:
    settings = [("log.dirs", "C:\\strom data"), ("cluster.name", " padded")]
    [plan] = plan_local_cluster(1, ROOT, settings=settings)
    text = render_config(plan)
    assert parse_properties(text) == plan.config
    assert load_config(file_text=text).raw["log.dirs"] == "C:\\strom data"


def test_ipv6_hosts_are_bracketed() -> None:
    plans = plan_local_cluster(2, ROOT, host="::1")
    assert plans[0].client_address == "[::1]:9092"
    assert plans[1].config["controller.quorum.voters"] == "1@[::1]:9192,2@[::1]:9193"
    check_plan(plans)


def test_given_ports_are_used_as_given() -> None:
    plans = plan_local_cluster(2, ROOT, client_ports=[4001, 4002], controller_ports=[5001, 5002])
    assert [(p.client_port, p.controller_port) for p in plans] == [(4001, 5001), (4002, 5002)]


def test_a_zookeeper_plan_keeps_the_metadata_there_with_client_listeners_only() -> None:
    connect = "zk1:2181,zk2:2181/strom"
    plans = plan_local_cluster(3, ROOT, zookeeper=connect)
    for plan, config in zip(plans, check_plan(plans), strict=True):
        assert plan.zookeeper == connect
        assert plan.config["broker.id"] == str(plan.node_id)
        assert "node.id" not in plan.config and "controller.quorum.voters" not in plan.config
        assert config.zookeeper is not None and str(config.zookeeper) == connect
        assert config.controller_quorum_voters == ()
        assert config.controller_listeners == ()
        assert config.process_roles == frozenset({ProcessRole.BROKER, ProcessRole.CONTROLLER})
    assert [row[2] for row in plan_rows(plans, ROOT)] == ["-", "-", "-"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"node_count": 0}, "--nodes must be from 1 to 64, got 0"),
        ({"node_count": 101}, "--nodes must be from 1 to 64, got 101"),
        ({"base_port": 65534}, "port 65536 is outside 1..65535 (see --base-port, --metrics-port)"),
        ({"host": "0.0.0.0"}, "--host must be an address clients can connect to, got '0.0.0.0'"),
        ({"client_ports": [1, 2]}, "3 nodes need 3 client and controller ports, got 2 and 3"),
        (
            {"client_ports": [1, 2, 3], "controller_ports": [4, 5, 1]},
            "port 1 would be used twice (see --base-port, --metrics-port and --nodes)",
        ),
        (
            {"metrics_base_port": 9093},
            "port 9093 would be used twice (see --base-port, --metrics-port and --nodes)",
        ),
    ],
)
def test_plans_that_cannot_work_are_refused(kwargs: dict[str, object], message: str) -> None:
    arguments: dict[str, object] = {"node_count": 3, "data_dir": ROOT, **kwargs}
    with pytest.raises(PlanError) as caught:
        plan_local_cluster(**arguments)  # type: ignore[arg-type]
    assert str(caught.value) == message


def test_a_setting_strom_refuses_names_the_node_and_the_key() -> None:
    plans = plan_local_cluster(2, ROOT, settings=[("num.partitions", "many")])
    with pytest.raises(PlanError, match=r"^node 1's config is invalid: .*num\.partitions"):
        check_plan(plans)


def test_each_node_gets_a_metrics_port_from_the_base() -> None:
    plans = plan_local_cluster(3, ROOT, metrics_base_port=9644)
    assert [p.metrics_port for p in plans] == [9644, 9645, 9646]
    for plan in plans:
        assert dict(plan.properties)["metrics.listener"] == f"127.0.0.1:{plan.metrics_port}"
    assert [row[3] for row in plan_rows(plans, ROOT)] == [
        f"http://127.0.0.1:{port}/metrics" for port in (9644, 9645, 9646)
    ]
    assert all("metrics.listener" not in dict(p.properties) for p in plan_local_cluster(2, ROOT))


def test_plan_rows_show_log_paths_relative_to_the_working_directory() -> None:
    plans = plan_local_cluster(2, ROOT)
    assert plan_rows(plans, ROOT) == [
        ("1", "127.0.0.1:9092", "127.0.0.1:9192", "node-1.log"),
        ("2", "127.0.0.1:9093", "127.0.0.1:9193", "node-2.log"),
    ]
    assert plan_rows(plans[:1], Path("/elsewhere"))[0][-1] == "/srv/dev/node-1.log"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "nokey"], "strom: --set expects KEY=VALUE, got 'nokey'\n"),
        (["--set", "=3"], "strom: --set expects KEY=VALUE, got '=3'\n"),
        (["--host", "0.0.0.0"], "strom: --host must be an address clients can connect to"),
        (["--set", "no.such.key=1"], "strom: node 1's config is invalid: "),
        (["--base-port", "65500"], "strom: port 65600 is outside 1..65535"),
        (["--zookeeper", "zk:2181/a/"], "strom: node 1's config is invalid: invalid value"),
        (
            ["--zookeeper", "zk:2181", "--set", "controller.quorum.voters=1@127.0.0.1:9192"],
            "strom: node 1's config is invalid: --zookeeper and 'controller.quorum.voters'",
        ),
    ],
)
def test_dev_refuses_bad_options_before_starting_anything(
    args: list[str], message: str, tmp_path: Path
) -> None:
    result = runner.invoke(app, ["dev", "--data-dir", str(tmp_path / "dev"), *args])
    assert result.exit_code == 2
    assert result.stderr.startswith(message)
    assert not (tmp_path / "dev").exists()


@pytest.mark.parametrize("nodes", ["0", "65"])
def test_dev_node_count_is_bounded(nodes: str) -> None:
    assert runner.invoke(app, ["dev", "--nodes", nodes]).exit_code == 2


def test_read_tail_keeps_the_last_lines_since_the_start_offset(tmp_path: Path) -> None:
    log = tmp_path / "node-1.log"
    log.write_text("old run\n" + "".join(f"line {i}\n" for i in range(30)))
    assert read_tail(log, 2) == "line 28\nline 29"
    assert read_tail(log, 100, start_bytes=len("old run\n")).splitlines()[0] == "line 0"
    assert read_tail(tmp_path / "missing.log") == ""


def test_node_failure_names_the_node_and_shows_its_log() -> None:
    failure = NodeFailure(2, "exited with code 1 before it was ready", Path("n2.log"), "boom\n")
    assert str(failure) == (
        "node 2 exited with code 1 before it was ready; the end of its log n2.log:\nboom"
    )
    assert str(NodeFailure(1, "x", Path("a"), "")).endswith(":\n(empty)")


def test_a_secure_plan_adds_a_sasl_ssl_listener_offering_scram() -> None:
    keystore = ROOT / "tls" / "server.pem"
    plans = plan_local_cluster(3, ROOT, base_port=19092, secure_keystore=keystore)
    assert [p.secure_address for p in plans] == [f"127.0.0.1:{19292 + i}" for i in range(3)]
    assert secure_bootstrap_servers(plans) == "127.0.0.1:19292,127.0.0.1:19293,127.0.0.1:19294"
    config = dict(plans[1].properties)
    assert config["listeners"].endswith(",SASL_SSL://127.0.0.1:19293")
    assert config["advertised.listeners"] == (
        "PLAINTEXT://127.0.0.1:19093,SASL_SSL://127.0.0.1:19293"
    )
    assert config["inter.broker.listener.name"] == "PLAINTEXT"
    assert config["sasl.enabled.mechanisms"] == "SCRAM-SHA-512"
    assert config["ssl.keystore.location"] == str(keystore)
    assert plan_local_cluster(3, ROOT)[0].secure_port is None
    with pytest.raises(PlanError, match="used twice"):
        plan_local_cluster(2, ROOT, secure_keystore=keystore, secure_ports=[9092, 9300])
