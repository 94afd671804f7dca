"""A private, real, standalone ZooKeeper server for tests, from Debian's `zookeeper` package.

    with ZooKeeperServer(tmp_path / "zk") as server:
        ensure_chroot(server.connect_string, "/strom")
        with kazoo_client(f"{server.connect_string}/strom") as client:
            client.create("/brokers", b"")
        server.kill()
        server.restart()

The server runs `QuorumPeerMain` (what zkServer.sh runs; with no `server.N` lines it serves
standalone, and unlike ZooKeeperServerMain it runs the autopurge task) in its own process
group, with everything under `root`: zoo.cfg, log4j.properties, data/, zookeeper.log (the
server's log) and zookeeper.out (the JVM's own stdout and stderr). It listens on
127.0.0.1 only, on a free port kept across restarts.

Written by hand because kazoo's own harness (kazoo.testing.common.ManagedZooKeeper) wants
TLS keystores, picks its own temporary directory, never waits for the server to answer and
cannot kill it; what is needed here is a start that waits for `ruok`/`srvr`, a SIGKILL and
a restart on the same port and data.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from broker import free_port
from kazoo.client import KazooClient

# Debian's layout. zookeeper.jar's manifest Class-Path names its own dependencies (netty,
# jute, slf4j-api, ...) but no slf4j binding, so the log4j 1.2 binding and log4j itself
# (both dependencies of libzookeeper-java) are added for the server to log at all.
JAVA_DIR = Path("/usr/share/java")
CLASSPATH_JARS = ("zookeeper.jar", "slf4j-log4j12.jar", "log4j-1.2.jar")
MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"

READY_TIMEOUT_S = 60.0  # the JVM starts slowly on a loaded 2-core machine
STOP_TIMEOUT_S = 20.0
POLL_INTERVAL_S = 0.1
COMMAND_TIMEOUT_S = 2.0
LOG_LINES = 40

# tickTime 500 ms: ZooKeeper's default minSessionTimeout is 2 ticks (1 s); the maximum is
# set so that anything from 1 s to 30 s is granted as asked.
TICK_TIME_MS = 500
MIN_SESSION_TIMEOUT_MS = 1_000
MAX_SESSION_TIMEOUT_MS = 30_000

JVM_OPTIONS = (
    "-Xmx256m",
    "-XX:+UseSerialGC",  # no parallel GC threads to compete for 2 cores
    "-XX:TieredStopAtLevel=1",  # a faster start; a test load needs no C2 compiler
    "-XX:-UsePerfData",  # no /tmp/hsperfdata_* files
    "-Djava.awt.headless=true",
    "-Dfile.encoding=UTF-8",
    "-Dzookeeper.jmx.log4j.disable=true",
    "-Dzookeeper.preAllocSize=1024",  # KiB: 1 MiB transaction log files, not 64 MiB
)

LOG4J_PROPERTIES = """\
# Written by tests/integration/zookeeper.py: everything to one file, nothing to the terminal.
log4j.rootLogger=INFO, FILE
log4j.appender.FILE=org.apache.log4j.FileAppender
log4j.appender.FILE.File=${zookeeper.log.dir}/zookeeper.log
log4j.appender.FILE.Append=true
log4j.appender.FILE.layout=org.apache.log4j.PatternLayout
log4j.appender.FILE.layout.ConversionPattern=%d{ISO8601} - %-5p [%t:%C{1}@%L] - %m%n
"""


class ZooKeeperError(RuntimeError):
    """The server could not be started; the message has the tail of its logs."""


def classpath() -> str:
    """The server's classpath, or ZooKeeperError naming the package to install."""
    jars = [JAVA_DIR / name for name in CLASSPATH_JARS]
    missing = [str(jar) for jar in jars if not jar.is_file()]
    if missing:
        raise ZooKeeperError(
            f"missing {', '.join(missing)}: install Debian's zookeeper package (./dev test does)"
        )
    return os.pathsep.join(str(jar) for jar in jars)


def java_binary() -> str:
    java = shutil.which("java")
    if java is None:
        raise ZooKeeperError("no java on PATH: ZooKeeper needs a Java runtime")
    return java


class ZooKeeperServer:
    """One standalone ZooKeeper: start() -> (stop()|kill()) -> start() ...

    restart() keeps the port and the data, so clients reconnect to the same address and
    find their persistent znodes (and, within their session timeout, their sessions and
    ephemeral znodes).

    With `die_with_parent` (the default) the kernel kills the server when the thread that
    started it ends (setpriv --pdeathsig), so not even a test run killed outright leaves a
    JVM behind: start it from a thread that outlives it, such as the main thread."""

    def __init__(
        self, root: Path, *, port: int | None = None, die_with_parent: bool = True
    ) -> None:
        self.root = root
        self.port = port or free_port()
        self.die_with_parent = die_with_parent
        self.data_dir = root / "data"
        self.config_path = root / "zoo.cfg"
        self.log4j_path = root / "log4j.properties"
        self.log_path = root / "zookeeper.log"
        self.out_path = root / "zookeeper.out"
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def connect_string(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def is_running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> None:
        """Launch the server and wait until it answers `ruok` and `srvr` says it serves."""
        if self.is_running():
            raise ZooKeeperError(f"ZooKeeper on {self.connect_string} is already running")
        self._reap()
        self._write_config()
        command = [
            *(["setpriv", "--pdeathsig", "KILL"] if self.die_with_parent else []),
            java_binary(),
            *JVM_OPTIONS,
            f"-Dzookeeper.log.dir={self.root}",
            f"-Dlog4j.configuration=file:{self.log4j_path}",
            "-cp",
            classpath(),
            MAIN_CLASS,
            str(self.config_path),
        ]
        with open(self.out_path, "ab") as out:
            self._process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.root,
                start_new_session=True,  # its own process group, signalled as a whole
            )
        _RUNNING.add(self)
        try:
            self._wait_serving()
        except BaseException:
            self.kill()
            raise

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM, then SIGKILL if it has not exited after `timeout_s`; always reaped."""
        if self._process is None:
            return
        self._signal(signal.SIGTERM)
        try:
            self._process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self._signal(signal.SIGKILL)
        self._reap()

    def kill(self) -> None:
        """SIGKILL, as a crash would; always reaped."""
        if self._process is None:
            return
        self._signal(signal.SIGKILL)
        self._reap()

    def restart(self, *, hard: bool = False) -> None:
        """Kill (hard) or stop it if it runs, then start it on the same port and data."""
        if hard:
            self.kill()
        else:
            self.stop()
        self.start()

    def command(self, word: str, timeout_s: float = COMMAND_TIMEOUT_S) -> str:
        """Send a four-letter word (ruok, srvr, stat, mntr) and return the whole answer."""
        chunks = []
        with socket.create_connection(("127.0.0.1", self.port), timeout=timeout_s) as sock:
            sock.sendall(word.encode("ascii"))
            while chunk := sock.recv(4096):
                chunks.append(chunk)
        return b"".join(chunks).decode("utf-8", "replace")

    def log_tail(self, lines: int = LOG_LINES) -> str:
        parts = []
        for path in (self.out_path, self.log_path):
            with contextlib.suppress(OSError):
                tail = path.read_text(errors="replace").splitlines()[-lines:]
                if tail:
                    parts.append(f"--- {path.name} ---\n" + "\n".join(tail))
        return "\n".join(parts) or "(no log yet)"

    def __enter__(self) -> ZooKeeperServer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _write_config(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log4j_path.write_text(LOG4J_PROPERTIES)
        self.config_path.write_text(
            "# Written by tests/integration/zookeeper.py: a private standalone ZooKeeper.\n"
            f"tickTime={TICK_TIME_MS}\n"
            f"minSessionTimeout={MIN_SESSION_TIMEOUT_MS}\n"
            f"maxSessionTimeout={MAX_SESSION_TIMEOUT_MS}\n"
            f"dataDir={self.data_dir}\n"
            f"clientPort={self.port}\n"
            "clientPortAddress=127.0.0.1\n"
            # Every client comes from 127.0.0.1; the default allows 60 of them.
            "maxClientCnxns=0\n"
            "admin.enableServer=false\n"
            "4lw.commands.whitelist=ruok,srvr,stat,mntr\n"
            # Keep the newest 3 snapshots and their logs, checked hourly (the shortest),
            # for a server kept up for a long session.
            "autopurge.snapRetainCount=3\n"
            "autopurge.purgeInterval=1\n"
        )

    def _wait_serving(self) -> None:
        assert self._process is not None
        deadline = time.monotonic() + READY_TIMEOUT_S
        last = "no answer yet"
        while True:
            code = self._process.poll()
            if code is not None:
                raise ZooKeeperError(
                    f"ZooKeeper on {self.connect_string} exited with {code} while starting\n"
                    + self.log_tail()
                )
            try:
                last = self.command("ruok")
                if last == "imok":
                    last = self.command("srvr")
                    if "Mode: standalone" in last:
                        return
            except OSError as e:
                last = repr(e)
            if time.monotonic() >= deadline:
                raise ZooKeeperError(
                    f"ZooKeeper on {self.connect_string} was not serving after "
                    f"{READY_TIMEOUT_S:.0f} s (last answer: {last!r})\n" + self.log_tail()
                )
            time.sleep(POLL_INTERVAL_S)

    def _signal(self, signum: signal.Signals) -> None:
        assert self._process is not None
        # Only an unreaped child's group: its pid cannot have been reused yet.
        if self._process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._process.pid, signum)

    def _reap(self) -> None:
        if self._process is not None:
            if self._process.poll() is None:
                self._process.wait()
            self._process = None
        _RUNNING.discard(self)


_RUNNING: set[ZooKeeperServer] = set()


@atexit.register
def _kill_leftovers() -> None:
    """A server a test forgot to stop does not outlive the test run."""
    for server in list(_RUNNING):
        server.kill()


@contextlib.contextmanager
def metadata_store(
    store: str, root: Path, session_timeout_ms: int
) -> Iterator[tuple[str | None, list[str]]]:
    """For a cluster of one run keeping its metadata in `store` ("raft" or "zookeeper"):
    (zookeeper.connect or None, the nodes' extra settings). On ZooKeeper a private
    server runs under `root`/zookeeper until the block ends."""
    if store == "raft":
        yield None, []
        return
    with ZooKeeperServer(root / "zookeeper") as server:
        yield (
            f"{server.connect_string}/strom",
            [f"zookeeper.session.timeout.ms={session_timeout_ms}"],
        )


@contextlib.contextmanager
def kazoo_client(connect_string: str, *, session_timeout_s: float = 10.0) -> Iterator[KazooClient]:
    """A connected kazoo client for a `with` block, stopped and closed at its end (stopping
    it earlier, to close its session, is fine)."""
    client = KazooClient(
        hosts=connect_string,
        timeout=session_timeout_s,
        # Reconnect within a second of a restarted server answering (kazoo's default backs
        # off to an hour between attempts).
        connection_retry={"max_tries": -1, "delay": 0.1, "backoff": 2, "max_delay": 1.0},
    )
    try:
        client.start(timeout=max(15.0, session_timeout_s))
        yield client
    finally:
        client.stop()
        client.close()


def ensure_chroot(connect_string: str, chroot: str) -> None:
    """Create `chroot` (e.g. "/strom-test-1a2b3c4d") on a plain `host:port` connect string,
    so kazoo can then be given f"{connect_string}{chroot}"."""
    with kazoo_client(connect_string) as client:
        client.ensure_path(chroot)
