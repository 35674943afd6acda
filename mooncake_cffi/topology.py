"""Separate "hosts" for tests: network namespaces on a private veth network whose links can be
cut, made lossy or slowed.

Each host is a network namespace with one interface (``eth0``) plugged into a private Linux
bridge in the test's own namespace, so the test process is a host too (``Topology.local``),
and a cluster placed on the hosts is still reachable from it::

    with Topology(hosts=["m0", "s0", "s1", "c0"]) as t:
        t.run_in("c0", ["ping", "-c1", t.ip("m0")])   # a Popen, stopped on exit
        t.cut("c0", "m0")          # nftables: drop everything between c0 and m0
        t.heal()                   # remove every cut, loss and rate limit
        t.loss("s0", 5)            # drop 5 % of s0's packets, both directions
        t.rate("s0", 50)           # shape s0's link to 50 Mbit/s each way (tbf)
        cluster = LocalCluster(dir, placement=t.placement({"master": "m0", "storage": "s0"}),
                               client_host=t.local_ip)

Root only (namespaces, veths, nftables, tc): without root, or without the ``ip``/``nft``/``tc``
tools, creating a Topology raises :class:`TopologyUnavailable`, whose message says why (tests
skip with it).  Everything made is removed on exit (the namespaces, which takes their veths
and rules with them, then the bridge), also after a failure; processes started with
:meth:`run_in` are killed first.  The kernel here has no netem, so there is no delay emulation.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import random
import shutil
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any

__all__ = ["Topology", "TopologyUnavailable"]

_LOCAL = "local"
_CMD_TIMEOUT = 10.0


class TopologyUnavailable(RuntimeError):
    """Network namespaces cannot be made here (not root, or tools missing); says why."""


def _run(argv: Sequence[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        list(argv), capture_output=True, text=True, timeout=_CMD_TIMEOUT, check=False
    )
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {result.stderr.strip() or result.stdout}")
    return result


def unavailable_reason() -> str | None:
    """Why a Topology cannot be made on this machine, or None if it can."""
    if os.geteuid() != 0:
        return "network namespaces need root (run the topology tests as root)"
    missing = [tool for tool in ("ip", "nft", "tc") if shutil.which(tool) is None]
    if missing:
        return f"missing {', '.join(missing)} (apt-get install iproute2 nftables)"
    return None


class Topology:
    """Hosts named in ``hosts``, each a network namespace on one private /24 network.

    ``subnet`` (default: a random free 10.x.y.0/24) holds the bridge (``.1``, the test
    process's address, :attr:`local_ip`) and the hosts (``.2`` onwards, in order).
    """

    def __init__(self, hosts: Iterable[str], subnet: str | None = None) -> None:
        names = list(hosts)
        if not names or len(set(names)) != len(names) or _LOCAL in names:
            raise ValueError(f"hosts must be distinct names other than {_LOCAL!r}: {names}")
        if len(names) > 200:
            raise ValueError("at most 200 hosts")
        self.hosts = names
        self._tag = f"{os.getpid() % 10000:04d}{random.randrange(100):02d}"
        self._subnet = ipaddress.ip_network(subnet) if subnet else None
        self._ips: dict[str, str] = {}
        self._made_bridge = False
        self._made_ns: list[str] = []
        self._procs: list[subprocess.Popen[Any]] = []
        self._limited: set[str] = set()

    # -- names ---------------------------------------------------------------------------

    @property
    def bridge(self) -> str:
        return f"mcsbr{self._tag}"

    def netns(self, host: str) -> str:
        """The network namespace of ``host`` (for ``ip netns exec``)."""
        self._check(host, local=False)
        return f"mcs{self._tag}-{host}"

    def _veth(self, index: int) -> tuple[str, str]:
        return f"mh{self._tag}{index}", f"mb{self._tag}{index}"

    def ip(self, host: str) -> str:
        """The address of ``host`` (``"local"`` is the test process)."""
        self._check(host)
        return self._ips[host]

    @property
    def local_ip(self) -> str:
        return self.ip(_LOCAL)

    def _check(self, host: str, local: bool = True) -> None:
        if host not in self.hosts and not (local and host == _LOCAL):
            raise KeyError(f"unknown host {host!r} (hosts: {', '.join(self.hosts)})")

    # -- setup and teardown ----------------------------------------------------------------

    def __enter__(self) -> Topology:
        reason = unavailable_reason()
        if reason:
            raise TopologyUnavailable(reason)
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _pick_subnet(self) -> ipaddress.IPv4Network:
        used = _run(["ip", "-o", "-4", "addr", "show"]).stdout + _run(["ip", "route"]).stdout
        for _ in range(100):
            net = ipaddress.ip_network(
                f"10.{random.randrange(100, 250)}.{random.randrange(256)}.0/24"
            )
            if str(net.network_address)[:-1] not in used:
                return net  # type: ignore[return-value]
        raise TopologyUnavailable("no free 10.x.y.0/24 subnet found")

    def _build(self) -> None:
        net = self._subnet or self._pick_subnet()
        hosts_ips = list(net.hosts())
        self._ips[_LOCAL] = str(hosts_ips[0])
        _run(["ip", "link", "add", self.bridge, "type", "bridge"])
        self._made_bridge = True
        _run(["ip", "addr", "add", f"{hosts_ips[0]}/{net.prefixlen}", "dev", self.bridge])
        _run(["ip", "link", "set", self.bridge, "up"])
        for index, host in enumerate(self.hosts):
            ns = self.netns(host)
            inner, outer = self._veth(index)
            _run(["ip", "netns", "add", ns])
            self._made_ns.append(ns)
            _run(["ip", "link", "add", inner, "type", "veth", "peer", "name", outer])
            _run(["ip", "link", "set", inner, "netns", ns])
            _run(["ip", "link", "set", outer, "master", self.bridge])
            _run(["ip", "link", "set", outer, "up"])
            ip = str(hosts_ips[index + 1])
            self._ips[host] = ip
            in_ns = ["ip", "netns", "exec", ns]
            _run([*in_ns, "ip", "link", "set", inner, "name", "eth0"])
            _run([*in_ns, "ip", "addr", "add", f"{ip}/{net.prefixlen}", "dev", "eth0"])
            _run([*in_ns, "ip", "link", "set", "eth0", "up"])
            _run([*in_ns, "ip", "link", "set", "lo", "up"])
            _run([*in_ns, "nft", "add", "table", "inet", "mcs"])
            for chain, hook in (("in", "input"), ("out", "output")):
                _run(
                    [*in_ns, "nft", "add", "chain", "inet", "mcs", chain]
                    + ["{", "type", "filter", "hook", hook, "priority", "0", ";", "}"]
                )

    def close(self) -> None:
        """Kill processes started with :meth:`run_in`, remove namespaces and the bridge."""
        for proc in self._procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
            with contextlib.suppress(Exception):
                proc.wait(timeout=5)
        self._procs.clear()
        for ns in reversed(self._made_ns):
            _run(["ip", "netns", "del", ns], check=False)  # takes its veth pair along
        self._made_ns.clear()
        if self._made_bridge:
            _run(["ip", "link", "del", self.bridge], check=False)
            self._made_bridge = False

    # -- running things --------------------------------------------------------------------

    def prefix(self, host: str) -> list[str]:
        """argv prefix that runs a command on ``host`` (same PID: ``ip netns exec`` execs)."""
        if host == _LOCAL:
            return []
        return ["ip", "netns", "exec", self.netns(host)]

    def run_in(self, host: str, argv: Sequence[str], **popen: Any) -> subprocess.Popen[Any]:
        """Start ``argv`` on ``host`` (a Popen; killed when the topology closes)."""
        proc = subprocess.Popen([*self.prefix(host), *argv], **popen)
        self._procs.append(proc)
        return proc

    def placement(self, roles: Mapping[str, str], default: str | None = None) -> Any:
        """A ``LocalCluster`` placement: ``roles`` maps a role (``master``, ``storage1``,
        ``etcd``...) to a host; roles not named go to ``default`` (or the test's own host)."""
        for host in roles.values():
            self._check(host)

        def place(role: str) -> tuple[str, list[str]]:
            host = roles.get(role, default or _LOCAL)
            return self.ip(host), self.prefix(host)

        return place

    # -- faults ----------------------------------------------------------------------------

    def _nft(self, host: str, *rule: str) -> None:
        _run([*self.prefix(host), "nft", *rule])

    def cut(self, a: str, b: str) -> None:
        """Drop every packet between hosts ``a`` and ``b`` (both ways) until :meth:`heal`."""
        for here, there in ((a, b), (b, a)):
            if here == _LOCAL:
                here, there = there, here  # rules live in the namespaces only
            peer = self.ip(there)
            self._nft(here, "add", "rule", "inet", "mcs", "in", "ip", "saddr", peer, "drop")
            self._nft(here, "add", "rule", "inet", "mcs", "out", "ip", "daddr", peer, "drop")

    def loss(self, host: str, percent: float) -> None:
        """Drop ``percent`` % of ``host``'s packets at random, in and out (0 < percent <= 100)."""
        if not 0 < percent <= 100:
            raise ValueError(f"percent must be in (0, 100], got {percent}")
        self._check(host, local=False)
        per_mille = int(round(percent * 10))
        match = ["numgen", "random", "mod", "1000", "<", str(per_mille)] if per_mille < 1000 else []
        for chain in ("in", "out"):
            self._nft(host, "add", "rule", "inet", "mcs", chain, *match, "drop")

    def rate(self, host: str, mbit: float) -> None:
        """Limit ``host``'s link to ``mbit`` Mbit/s in each direction (tbf, 50 ms of queue)."""
        if mbit <= 0:
            raise ValueError(f"mbit must be positive, got {mbit}")
        index = self.hosts.index(host)
        rate = f"{int(mbit * 1000)}kbit"
        burst = str(max(16 * 1024, int(mbit * 1e6 / 8 / 100)))  # ~10 ms at rate
        tbf = ["root", "tbf", "rate", rate, "burst", burst, "latency", "50ms"]
        _run([*self.prefix(host), "tc", "qdisc", "replace", "dev", "eth0", *tbf])
        _run(["tc", "qdisc", "replace", "dev", self._veth(index)[1], *tbf])
        self._limited.add(host)

    def heal(self) -> None:
        """Remove every cut, loss rule and rate limit."""
        for host in self.hosts:
            for chain in ("in", "out"):
                self._nft(host, "flush", "chain", "inet", "mcs", chain)
        for host in self._limited:
            index = self.hosts.index(host)
            _run([*self.prefix(host), "tc", "qdisc", "del", "dev", "eth0", "root"], check=False)
            _run(["tc", "qdisc", "del", "dev", self._veth(index)[1], "root"], check=False)
        self._limited.clear()
