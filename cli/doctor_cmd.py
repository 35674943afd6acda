"""``mcl2 doctor``: is this cluster usable?  Ordered checks, one line each.

Each check says ``ok``, ``warn`` (it works, but something needs attention: a process of the
local cluster is down), ``FAIL`` (and why) or ``skip`` (a check it needs failed).  When the
master's RPC port does not answer, every check that needs the network is skipped, so an
unreachable master costs one connect timeout, never more.

With HA masters (``--master etcd://...``) the master address is etcd's: the doctor checks
each etcd endpoint, the leader etcd names (its RPC port), and each master (the local
cluster's, all of them; elsewhere the leader, since standbys are recorded nowhere), then
goes on as for a single master, with the leader's admin API (see :mod:`.ha`).
"""

from __future__ import annotations

import os
import secrets
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import click

from mooncake_cffi.sizes import human_bytes

from .app import admin_command
from .errors import EXIT_ERROR
from .settings import Settings, pass_settings

OK, WARN, FAIL, SKIP = "ok", "warn", "FAIL", "skip"

#: Bytes of the temporary value the round trip stores.
ROUND_TRIP_BYTES = 4096

_HTTP = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class CheckFailed(Exception):
    """A check's reason to fail."""


class CheckWarned(Exception):
    """A check passed, with something that needs attention (the message)."""


@dataclass
class Doctor:
    """The checks' shared state: what the earlier ones found."""

    settings: Settings
    results: list[dict[str, str]] = field(default_factory=list)
    failed: set[str] = field(default_factory=set)
    setup: dict[str, str] = field(default_factory=dict)
    admin: Any = None
    segments: list[Any] = field(default_factory=list)
    client: Any = None
    #: Why the client configuration could not be built (reported by the first check).
    config_error: str | None = None
    #: The local cluster, when the configuration came from it.
    local: Any = None
    #: The leading master's RPC address (HA: from etcd).
    leader_addr: str = ""

    @property
    def ha(self) -> bool:
        from .ha import is_etcd

        return is_etcd(str(self.setup.get("master_server_addr", "")))

    def configure(self) -> None:
        """Build the client configuration once; the first check reports a failure."""
        try:
            self.setup = dict(self.settings.store_config().setup_config)
        except click.ClickException as exc:
            self.config_error = exc.format_message()
            return
        if self.settings.uses_local_cluster:
            from .app import load_local

            self.local = load_local(self.settings)

    def run(self, name: str, check: Callable[[], str], needs: tuple[str, ...] = ()) -> None:
        missing = [n for n in needs if n in self.failed]
        if missing:
            self.failed.add(name)
            self._report(name, SKIP, f"needs: {', '.join(missing)}")
            return
        try:
            detail = check()
            status = OK
        except CheckWarned as exc:
            status, detail = WARN, str(exc)
        except CheckFailed as exc:
            status, detail = FAIL, str(exc)
        except click.ClickException as exc:
            status, detail = FAIL, exc.format_message()
        except Exception as exc:  # a check must never end the doctor with a traceback
            status, detail = FAIL, f"{type(exc).__name__}: {exc}"
        if status not in (OK, WARN):
            self.failed.add(name)
        self._report(name, status, detail)

    def _report(self, name: str, status: str, detail: str) -> None:
        self.results.append({"check": name, "status": status, "detail": detail})
        if not self.settings.json and not self.settings.quiet:
            click.echo(f"{status:<4}  {name}: {detail}")

    # -- the checks ------------------------------------------------------------------------

    def _configured(self) -> None:
        if self.config_error is not None:
            raise CheckFailed(self.config_error)

    def master_rpc(self) -> str:
        self._configured()
        addr = self.setup.get("master_server_addr", "127.0.0.1:50051")
        _connect(addr, self.settings.connect_timeout, "the master's RPC port")
        self.leader_addr = addr
        return f"{addr} accepts connections"

    # -- HA masters on etcd ---------------------------------------------------------------

    def etcd(self) -> str:
        from .ha import HaError, endpoints, etcd_health

        self._configured()
        master = str(self.setup["master_server_addr"])
        found = endpoints(master)
        if not found:
            raise CheckFailed(f"{master!r} names no etcd endpoint (etcd://HOST:PORT[;...])")
        healthy, problems = [], []
        for endpoint in found:
            try:
                etcd_health(endpoint, self.settings.connect_timeout)
                healthy.append(endpoint)
            except HaError as exc:
                problems.append(str(exc))
        if not healthy:
            raise CheckFailed("; ".join(problems))
        said = f"{len(healthy)} of {len(found)} endpoint{'s' if len(found) != 1 else ''} healthy"
        if problems:
            raise CheckWarned(f"{said} ({', '.join(healthy)}); {'; '.join(problems)}")
        return f"{said} ({', '.join(healthy)})"

    def leader(self) -> str:
        from .ha import HaError, cluster_id_of, leader_address

        cluster_id = cluster_id_of(self.setup)
        master = str(self.setup["master_server_addr"])
        try:
            addr = leader_address(master, cluster_id, self.settings.connect_timeout)
        except HaError as exc:
            raise CheckFailed(str(exc)) from None
        _connect(addr, self.settings.connect_timeout, "the leader's RPC port")
        self.leader_addr = addr
        return f"cluster id {cluster_id}: {addr} leads and accepts connections"

    def masters(self) -> str:
        """Each master of the local cluster (role from its /health); elsewhere the leader."""
        if self.local is None:
            return f"the leader {self.leader_addr or '?'} (standby masters are recorded nowhere)"
        from mooncake_cffi.admin import AdminClient, AdminError

        roles, down = [], []
        for index, role in enumerate(self.local.master_roles):
            if not self.local.alive(role):
                down.append(role)
                roles.append(f"{role} DOWN")
                continue
            url = self.local.master_metrics_url(index)
            try:
                health = AdminClient(url, timeout=self.settings.connect_timeout).health()
                roles.append(f"{role} {health.get('role') or '?'}")
            except AdminError:
                roles.append(f"{role} not answering")
        leaders = [r for r in roles if r.endswith(" leader")]
        if not leaders:
            raise CheckFailed(f"no master leads: {', '.join(roles)}")
        if down:
            from .resolve import restart_hint

            raise CheckWarned(f"{', '.join(roles)}; {restart_hint(down)}")
        return ", ".join(roles)

    # -- the local cluster -----------------------------------------------------------------

    def processes(self) -> str:
        """Every process of the local cluster runs; warn when one is down but it serves."""
        from .resolve import restart_hint

        local = self.local
        gone = local.down()
        if not gone:
            return f"{len(local.pids)} processes running ({', '.join(local.pids)})"
        problem = local.serving_problem()
        said = f"{', '.join(gone)} down; {restart_hint(gone)}"
        if problem is not None:
            raise CheckFailed(f"it cannot serve: {problem}; {said}")
        raise CheckWarned(f"it serves, with {said}")

    def admin_api(self) -> str:
        from mooncake_cffi.admin import AdminError

        self.admin = self.settings.admin_client()
        try:
            health = self.admin.health()
        except AdminError as exc:
            guessed = self.settings.admin is None and self.local is None
            hint = " (a guess: give --admin http://HOST:PORT, the master's -metrics_port)"
            raise CheckFailed(f"{exc}{hint if guessed else ''}") from None
        status = health.get("status")
        if health.get("http_status") != 200 or status != "ok":
            raise CheckFailed(f"{self.admin.url}/health says {status!r}")
        if health.get("service_ready") is False:
            raise CheckFailed(f"{self.admin.url}: the master is not ready (service_ready false)")
        return f"{self.admin.url} healthy ({health.get('role') or '?'})"

    def metadata_server(self) -> str:
        meta = self.setup.get("metadata_server", "")
        if not meta.startswith("http://"):
            return f"{meta or '?'}: not an http:// metadata server, not checked"
        probe = f"{meta}{'&' if '?' in meta else '?'}key=mcl2-doctor-probe"
        try:
            with _HTTP.open(probe, timeout=self.settings.connect_timeout) as response:
                response.read()
        except urllib.error.HTTPError as exc:
            exc.close()  # an HTTP answer (404 for the probe key): the server is there
        except OSError as exc:
            reason = getattr(exc, "reason", None) or exc
            raise CheckFailed(f"{meta}: {reason}") from None
        if self.admin is None:
            return f"{meta} answers"
        try:
            self.segments = self.admin.segments()
        except Exception:
            return f"{meta} answers"
        prefix = _metadata_prefix()
        unknown = [
            s.name for s in self.segments if not _metadata_has(meta, f"{prefix}ram/{s.name}", self)
        ]
        if unknown:
            raise CheckFailed(
                f"{meta} answers but has no entry for segment {', '.join(unknown)}: is it the "
                "metadata server the master and storage nodes use?"
            )
        return f"{meta} answers and knows every segment"

    def segments_mounted(self) -> str:
        if not self.segments:
            self.segments = self.admin.segments()
        if not self.segments:
            raise CheckFailed("no storage segment is mounted: start a storage node")
        bad = [f"{s.name} ({s.status})" for s in self.segments if s.status not in (None, "OK")]
        if bad:
            raise CheckFailed(f"segments not OK: {', '.join(bad)}")
        capacity = sum(s.capacity_bytes or 0 for s in self.segments)
        used = sum(s.used_bytes or 0 for s in self.segments)
        n = len(self.segments)
        return (
            f"{n} segment{'s' if n != 1 else ''}, {human_bytes(used)} used of "
            f"{human_bytes(capacity)}"
        )

    def client_setup(self) -> str:
        start = time.monotonic()
        try:
            self.client = self.settings.client()
        except click.ClickException as exc:
            raise CheckFailed(exc.format_message()) from None
        took = (time.monotonic() - start) * 1000
        return f"registered as {self.client.hostname} in {took:.0f} ms"

    def round_trip(self) -> str:
        client = self.client
        key = f"mcl2-doctor/{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(4)}"
        value = secrets.token_bytes(ROUND_TRIP_BYTES)
        start = time.monotonic()
        try:
            client.put(key, value)
        except Exception as exc:
            raise CheckFailed(f"put of {key} failed: {_store_error(exc)}") from None
        try:
            got = client.get(key)
            if got != value:
                raise CheckFailed(f"get of {key} returned {_describe(got)}, not what was put")
            if not client.exists(key):
                raise CheckFailed(f"exists of {key} said false right after the put")
        finally:
            removed = _remove_quietly(client, key)
        if not removed:
            raise CheckFailed(f"could not remove the temporary key {key}")
        if client.exists(key):
            raise CheckFailed(f"{key} still exists after its removal")
        took = (time.monotonic() - start) * 1000
        return f"put / get / exists / rm of {ROUND_TRIP_BYTES} bytes in {took:.0f} ms"

    def read_failover(self) -> str:
        from mooncake_cffi import wheel
        from mooncake_cffi.failover import read_failover_stats

        stats = read_failover_stats()
        found = wheel.detect()
        version = f"{found.distribution} {found.version}" if found.distribution else "this wheel"
        if not stats["active"]:
            raise CheckWarned(
                f"off: {version}'s replica layout is not one the shim knows "
                f"(0.3.13.post1): a read of a dead or frozen node's keys fails until the "
                "masters' client TTL drops the node, as with Mooncake's own client"
            )
        if not stats["seen"]:
            raise CheckWarned(
                "off in this process: Mooncake's binding was loaded before the shim, so its "
                "replica choice is its own (a program: import mooncake_cffi before "
                "mooncake.store, or set MOONCAKE_CFFI_DROP_IN=1)"
            )
        return f"on ({version}): a read whose node fails goes on to another replica"

    def versions(self) -> str:
        import mooncake_cffi

        shim, abi = mooncake_cffi.shim_version(), mooncake_cffi.shim_abi_version()
        if shim != mooncake_cffi.__version__ or abi != mooncake_cffi.ABI_VERSION:
            raise CheckFailed(
                f"the shim is {shim} (ABI {abi}), the package "
                f"{mooncake_cffi.__version__} (ABI {mooncake_cffi.ABI_VERSION}): "
                "reinstall mooncake-cffi"
            )
        from mooncake_cffi import wheel

        try:
            found = wheel.check_supported()
        except ImportError as exc:  # not installed, or outside the supported range
            raise CheckFailed(str(exc)) from None
        return (
            f"mooncake-cffi {mooncake_cffi.__version__}, shim {shim}, "
            f"{found.distribution} {found.version}"
        )


def _connect(addr: str, timeout: float, what: str) -> None:
    host, _, port = addr.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            pass
    except ValueError:
        raise CheckFailed(f"{what}: {addr!r} is not HOST:PORT") from None
    except TimeoutError:
        raise CheckFailed(f"{what} {addr}: no answer within {timeout:g} s") from None
    except OSError as exc:
        raise CheckFailed(f"{what} {addr}: {exc.strerror or exc}") from None


def _metadata_prefix() -> str:
    from mooncake_cffi.metadata import key_prefix

    return key_prefix()


def _metadata_has(meta: str, key: str, doctor: Doctor) -> bool:
    url = f"{meta}{'&' if '?' in meta else '?'}key={urllib.parse.quote(key, safe='')}"
    try:
        with _HTTP.open(url, timeout=doctor.settings.connect_timeout) as response:
            response.read()
            return bool(response.status == 200)
    except OSError:
        return False


def _store_error(exc: BaseException) -> str:
    name = getattr(exc, "name", None)
    text = f"{name}: {getattr(exc, 'message', None) or exc}" if name else str(exc)
    if name in ("TRANSFER_FAIL", "RPC_FAIL", "RPC_TIMEOUT"):
        text += " (a storage node may be down: the master keeps its segment ~10 s after)"
    elif name == "NO_AVAILABLE_HANDLE":
        text += " (the segments are full)"
    return text


def _describe(value: bytes | None) -> str:
    return "nothing (missing)" if value is None else f"{len(value)} other bytes"


def _remove_quietly(client: Any, key: str) -> bool:
    try:
        client.remove(key, force=True)
        return True
    except Exception:
        return False


@admin_command(json_help="Print {ok, checks: [{check, status, detail}]} as JSON.")
@pass_settings
def doctor(settings: Settings) -> None:
    """Check, in order, that the cluster works; one line per check (ok, warn
    when it works but needs attention, FAIL and why, or skip when a check it
    needs failed):

    \b
      master RPC        the master's RPC port accepts connections
    or, with HA masters (--master etcd://...):
      etcd              each etcd endpoint says it is healthy
      leader            etcd names a leader for the cluster id; its RPC port
                        accepts connections
      masters           each master's role (the local cluster's; else the
                        leader: standbys are recorded nowhere)
    then:
      local cluster     every process of the local cluster runs (warn: one
                        is down but it serves; `mcl2 cluster restart`)
      admin API         /health on the (leader's) admin port says ok
      metadata server   it answers, and knows every mounted segment
      segments          at least one storage segment is mounted, all OK
      client setup      a Mooncake client can be set up
      round trip        put / get / exists / rm of a temporary key (removed)
      read failover     reads go on to another replica when a node fails
                        (warn: off with this wheel, and why)
      versions          shim and Mooncake wheel match what the package expects

    The local cluster check runs only for the local cluster. Exits with
    status 0 when every check passes (ok or warn), 1 otherwise. An unreachable
    master fails within --connect-timeout. A storage node that died shows as
    a failed round trip (TRANSFER_FAIL) until the master drops its segment,
    about 10 s later; then `segments` fails.
    """
    settings.accept_broken_local = True  # a half-dead local cluster is what to diagnose
    d = Doctor(settings)
    d.configure()
    if d.ha:
        d.run("etcd", d.etcd)
        d.run("leader", d.leader, needs=("etcd",))
        d.run("masters", d.masters, needs=("etcd",) if d.local is not None else ("leader",))
        rpc = "leader"
    else:
        d.run("master RPC", d.master_rpc)
        rpc = "master RPC"
    if d.local is not None:
        d.run("local cluster", d.processes)
    d.run("admin API", d.admin_api, needs=(rpc,))
    d.run("metadata server", d.metadata_server, needs=(rpc,))
    d.run("segments", d.segments_mounted, needs=("admin API",))
    d.run("client setup", d.client_setup, needs=(rpc, "metadata server"))
    d.run("round trip", d.round_trip, needs=("client setup",))
    d.run("read failover", d.read_failover, needs=("round trip",))
    d.run("versions", d.versions)
    ok = not d.failed
    if settings.json:
        settings.emit_json({"ok": ok, "checks": d.results})
    elif not settings.quiet:
        failed = len(d.failed)
        click.echo(
            "all checks passed" if ok else f"{failed} check{'s' if failed != 1 else ''} not passed"
        )
    if not ok:
        click.get_current_context().exit(EXIT_ERROR)
