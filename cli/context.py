"""Where the cluster is, and the one Mooncake client a command uses.

:class:`Settings` is mcl2's context object (``ctx.obj``).  The shared options write into it
through callbacks, so an option given after the command (``mcl2 get KEY --master H:P``)
overrides the same option given before it, and environment variables (``MCL2_*``) only apply
at the top level.  The client is created lazily on first use and closed when the command's
context closes: normally (``Client.close``) when mcl2 runs inside another program such as
click's ``CliRunner``, or quickly (``Client.close_for_exit``, then ``os._exit`` in
:func:`mooncake_cffi.cli.main.main`) when it runs as the ``mcl2`` console script.  The
options themselves are declared in :mod:`.options`.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import urllib.parse
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from .errors import CliError, NoClusterError, StoreError
from .interrupts import threads_without_signals

#: Port of mooncake_master's HTTP metadata server unless told otherwise.
DEFAULT_METADATA_PORT = 8080
#: Port of mooncake_master's RPC service unless told otherwise.
DEFAULT_MASTER_PORT = 50051
DEFAULT_HOSTNAME = "127.0.0.1"
DEFAULT_CONNECT_TIMEOUT = 2.0
#: Default deadline of each store operation (--timeout): a few seconds, so a cut link or a
#: stopped storage node makes a command fail instead of hanging for Mooncake's 30-120 s.
DEFAULT_TIMEOUT = 5.0
#: Where Mooncake reads an HA cluster's id from (the shim sets it from ``cluster_id``).
CLUSTER_ID_ENV = "MC_STORE_CLUSTER_ID"
#: Seconds added to the connect timeout before a stuck setup is abandoned (console only).
SETUP_GRACE = 1.5


def default_state_dir() -> Path:
    """``$XDG_STATE_HOME/mcl2``, or ``~/.local/state/mcl2``."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state"
    )
    return Path(base) / "mcl2"


@dataclass
class Settings:
    """Options of one mcl2 invocation, and the client created from them."""

    fast_exit: bool = False
    master: str | None = None
    metadata_server: str | None = None
    protocol: str | None = None
    hostname: str | None = None
    config: str | None = None
    #: --cluster-id / MCL2_CLUSTER_ID: the HA cluster's id (the ``cluster_id`` config key).
    cluster_id: str | None = None
    state_dir: Path | None = None
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    #: --timeout / MCL2_TIMEOUT: the deadline of every store operation, in seconds.
    timeout: float = DEFAULT_TIMEOUT
    verbose: int = 0
    quiet: bool = False
    json: bool = False
    _client: Any = field(default=None, repr=False)
    _where: str = field(default="", repr=False)
    _exiting_client: Any = field(default=None, repr=False)
    #: True once the client config came from the local cluster's state directory.
    uses_local_cluster: bool = False
    #: Bytes of L1 staging memory to register (--l1-size); None: only with rdma, default size.
    l1_size: int | None = None
    _l1: Any = field(default=None, repr=False)
    #: --admin / MCL2_ADMIN: base URL of the master's admin HTTP API.
    admin: str | None = None
    #: Use the local cluster's addresses even when some of its processes are down (doctor).
    accept_broken_local: bool = False
    #: The client outlives the command (``mcl2 shell`` closes it when the shell ends).
    keep_client: bool = False

    # -- output -----------------------------------------------------------------------------

    def info(self, message: str) -> None:
        """A progress or summary line on stderr (silenced by -q and --json)."""
        if not self.quiet and not self.json:
            click.echo(message, err=True)

    def warn(self, message: str) -> None:
        """A warning on stderr (silenced by -q only)."""
        if not self.quiet:
            click.echo(f"mcl2: warning: {message}", err=True)

    def debug(self, message: str) -> None:
        """A line on stderr with -v."""
        if self.verbose:
            click.echo(f"mcl2: {message}", err=True)

    def emit_json(self, data: Any) -> None:
        click.echo(json.dumps(data, indent=2, sort_keys=False))

    # -- where the cluster is -----------------------------------------------------------------

    @property
    def resolved_state_dir(self) -> Path:
        return self.state_dir if self.state_dir is not None else default_state_dir()

    def store_config(self) -> Any:
        """The StoreConfig for this invocation's client (options, env, --config, local cluster)."""
        from mooncake_cffi.config import StoreConfig

        explicit = any(v is not None for v in (self.config, self.master, self.metadata_server))
        if explicit:
            base = _load_config_option(self.config) if self.config is not None else {}
            self._where = "--config" if self.config is not None else "options"
        else:
            base = self._local_cluster_config()
        d = dict(base)
        if self.master is not None:
            d["master_server_addr"] = self.master
        if self.metadata_server is not None:
            d["metadata_server"] = self.metadata_server
        if self.protocol is not None:
            d["protocol"] = self.protocol
        if self.hostname is not None:
            d["local_hostname"] = self.hostname
        if self.cluster_id is not None:
            d["cluster_id"] = self.cluster_id
        d.setdefault("local_hostname", DEFAULT_HOSTNAME)
        _fill_in_addresses(d)
        given_segment = d.get("global_segment_size")
        if given_segment not in (None, "0", 0):
            self.debug(
                f"ignoring global_segment_size={given_segment!r}: mcl2 never contributes memory "
                "(a short-lived process's segment would lose what is stored in it)"
            )
        d["global_segment_size"] = "0"
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                config = StoreConfig.from_dict(d)
                config.check_connectable()
            except ValueError as exc:
                raise click.UsageError(f"invalid client configuration: {exc}") from None
        for w in caught:
            self.warn(str(w.message))
        return config

    def _local_cluster_config(self) -> dict[str, Any]:
        from mooncake_cffi.cluster import ClusterError, LocalCluster

        state_dir = self.resolved_state_dir
        try:
            local = LocalCluster.load(state_dir)
        except ClusterError as exc:
            raise NoClusterError(str(exc)) from None
        if local is None or not (local.is_running() or self.accept_broken_local):
            raise NoClusterError(
                f"no local cluster (state directory {state_dir}): run `mcl2 cluster up`, "
                "or give --master/--metadata-server/--config"
            )
        self._where = f"the local cluster in {state_dir}"
        self.uses_local_cluster = True
        return local.client_config()

    # -- the master's admin API ----------------------------------------------------------------

    def admin_url(self) -> str:
        """--admin; else the local cluster's admin URL (with no connection options), else
        the master's host on port 9003 (Mooncake's default ``-metrics_port``)."""
        from mooncake_cffi.admin import admin_url_for_master

        if self.admin:
            return self.admin
        explicit = any(v is not None for v in (self.config, self.master, self.metadata_server))
        if not explicit:
            from mooncake_cffi.cluster import ClusterError, LocalCluster

            state_dir = self.resolved_state_dir
            try:
                local = LocalCluster.load(state_dir)
            except ClusterError as exc:
                raise NoClusterError(str(exc)) from None
            if local is None or not (local.is_running() or self.accept_broken_local):
                raise NoClusterError(
                    f"no local cluster (state directory {state_dir}): run `mcl2 cluster up`, "
                    "or give --admin URL or --master HOST:PORT"
                )
            return local.metrics_url
        master = self.store_config().setup_config.get(
            "master_server_addr", f"127.0.0.1:{DEFAULT_MASTER_PORT}"
        )
        return admin_url_for_master(master)

    def admin_client(self) -> Any:
        """An :class:`~mooncake_cffi.admin.AdminClient` for :meth:`admin_url`."""
        from mooncake_cffi.admin import AdminClient

        url = self.admin_url()
        try:
            client = AdminClient(url, timeout=self.connect_timeout)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="'--admin'") from None
        self.debug(f"admin API {client.url}")
        return client

    # -- the client ---------------------------------------------------------------------------

    def transfer(self, l1_min: int = 0) -> Any:
        """A :class:`~.transfer.Transfer` over this invocation's client (see :meth:`client`)."""
        from .transfer import Transfer

        client = self.client(l1_min)
        return Transfer(client, self._l1)

    def client(self, l1_min: int = 0) -> Any:
        """The Mooncake client, created on first use and closed with the command.

        With ``--protocol rdma`` or ``--l1-size``, an L1 staging area of at least ``l1_min``
        bytes is registered with it (see :mod:`.transfer`).
        """
        if self._client is not None:
            return self._client
        config = self.store_config()
        setup = config.setup_config
        master = setup.get("master_server_addr", f"127.0.0.1:{DEFAULT_MASTER_PORT}")
        meta = setup.get("metadata_server", "?")
        self.debug(
            f"connecting to master {master}, metadata server {meta} "
            f"as {setup.get('local_hostname')} over {setup.get('protocol', 'tcp')} "
            f"(from {self._where})"
        )
        import mooncake_cffi

        if self.verbose:
            mooncake_cffi.set_log_level(2 if self.verbose == 1 else 0)
        l1 = None
        if config.protocol == "rdma" or self.l1_size is not None:
            from .transfer import DEFAULT_L1_BYTES, allocate_l1

            size = max(self.l1_size or DEFAULT_L1_BYTES, l1_min)
            try:
                l1 = allocate_l1(size)
            except (OSError, ValueError) as exc:
                raise CliError(
                    f"cannot allocate {size} bytes of L1 staging memory: {exc}"
                ) from None
            self.debug(f"staging transfers through {size} bytes of registered L1 memory")
        with threads_without_signals():  # Mooncake's threads never take SIGINT / SIGTERM
            return self._set_up(config, master, meta, l1)

    def _set_up(self, config: Any, master: str, meta: str, l1: Any) -> Any:
        """Create the client (with the watchdog on the console), and close it with the
        command unless ``keep_client``."""
        from mooncake_cffi import Client, MooncakeError

        watchdog = None
        try:
            with _quiet_stderr(enabled=not self.verbose) as quiet:
                if self.fast_exit:
                    watchdog = self._start_watchdog(master, meta, quiet)
                client = Client(
                    config,
                    l1=l1,
                    register_l1=l1 is not None,
                    connect_timeout=self.connect_timeout,
                    op_timeout=self.timeout,
                )
        except MooncakeError as exc:
            raise StoreError.wrap(
                exc, f"cannot connect to master {master}{_cluster_id_hint(config, exc.code)}"
            ) from None
        except ValueError as exc:  # e.g. rdma without L1
            raise CliError(f"cannot set up a client for master {master}: {exc}") from None
        finally:
            if watchdog is not None:
                watchdog.cancel()
        self._client = client
        self._l1 = l1
        if not self.keep_client:
            ctx = click.get_current_context()
            ctx.find_root().call_on_close(self.close)
        if self.verbose:
            try:
                self.debug(f"registered as {client.hostname}")
            except Exception:
                pass
        return client

    def _start_watchdog(self, master: str, meta: str, quiet: _quiet_stderr) -> threading.Timer:
        """Abandon a Mooncake setup that hangs past the connect timeout (console script only).

        Mooncake's own setup retries an unresponsive master for ~90 s; the shim's TCP probe
        catches a refused or silent port, this catches a port that accepts but never answers.
        """
        limit = self.connect_timeout + SETUP_GRACE

        def fire() -> None:
            message = (
                f"Error: cannot connect to master {master} (metadata server {meta}): "
                f"no answer within {limit:.1f} s\n"
            )
            try:
                os.write(quiet.saved if quiet.saved is not None else 2, message.encode())
            finally:
                os._exit(1)

        timer = threading.Timer(limit, fire)
        timer.daemon = True
        timer.start()
        return timer

    def close(self) -> None:
        client, self._client = self._client, None
        if client is None:
            return
        if self.fast_exit:
            client.close_for_exit()
            # Keep the object alive until os._exit: Client.__del__ frees the handle, and
            # freeing runs the full Mooncake teardown that close_for_exit skipped.
            self._exiting_client = client
        else:
            client.close()


class _quiet_stderr:
    """Send fd 2 to /dev/null for a moment, so that native libraries cannot print there."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.saved: int | None = None

    def __enter__(self) -> _quiet_stderr:
        if not self.enabled:
            return self
        try:
            sys.stderr.flush()
            self.saved = os.dup(2)
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 2)
            os.close(devnull)
        except OSError:
            self.saved = None
        return self

    def __exit__(self, *exc: object) -> None:
        if self.saved is not None:
            os.dup2(self.saved, 2)
            os.close(self.saved)
            self.saved = None


def _cluster_id_hint(config: Any, code: int) -> str:
    """Words on the cluster id, for a setup against an HA (``etcd://``) master that failed
    with INTERNAL_ERROR: Mooncake's answer to a missing or wrong id (etcd itself answered,
    or the probe would have said it did not)."""
    from mooncake_cffi.status import INTERNAL_ERROR

    setup = config.setup_config
    master = str(setup.get("master_server_addr", ""))
    if not master.startswith("etcd://") or code != INTERNAL_ERROR:
        return ""
    given = setup.get("cluster_id") or os.environ.get(CLUSTER_ID_ENV)
    if given:
        return f" (cluster id {given!r}: is it the -cluster_id its masters run with?)"
    return (
        " (an HA master on etcd needs the cluster id its masters run with: "
        "--cluster-id ID or MCL2_CLUSTER_ID)"
    )


def _fill_in_addresses(d: dict[str, Any]) -> None:
    """Derive a missing master or metadata address from the other one (Mooncake's ports)."""
    master = d.get("master_server_addr")
    meta = d.get("metadata_server")
    if master and not meta:
        host = _host_of(str(master))
        d["metadata_server"] = f"http://{host}:{DEFAULT_METADATA_PORT}/metadata"
    elif meta and not master:
        parsed = urllib.parse.urlparse(str(meta))
        if parsed.scheme == "http" and parsed.hostname:
            host = f"[{parsed.hostname}]" if ":" in parsed.hostname else parsed.hostname
            d["master_server_addr"] = f"{host}:{DEFAULT_MASTER_PORT}"


def _host_of(addr: str) -> str:
    if addr.startswith("["):
        return addr[: addr.find("]") + 1]
    return addr.rsplit(":", 1)[0] if addr.count(":") == 1 else addr


def _load_config_option(value: str) -> dict[str, Any]:
    """The adapter JSON of --config: inline JSON, or a file holding it; object or list."""
    from mooncake_cffi.config import ADAPTER_TYPE, StoreConfig

    text = value
    source = "--config"
    stripped = value.lstrip()
    if not stripped.startswith(("{", "[")):
        path = Path(value).expanduser()
        if not path.is_file():
            raise click.BadParameter(
                f"{value!r} is neither JSON nor an existing file", param_hint="'--config'"
            )
        try:
            text = path.read_text()
        except OSError as exc:
            raise click.BadParameter(
                f"cannot read {path}: {exc}", param_hint="'--config'"
            ) from None
        source = str(path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(
            f"invalid JSON in {source}: {exc.msg} (line {exc.lineno}, column {exc.colno})",
            param_hint="'--config'",
        ) from None
    if isinstance(data, list):
        # A list of --l2-adapter specs: take the first mooncake_store one.
        for item in data:
            if isinstance(item, dict) and item.get("type") == ADAPTER_TYPE:
                data = item
                break
        else:
            raise click.BadParameter(
                f"no adapter of type {ADAPTER_TYPE!r} in the list in {source}",
                param_hint="'--config'",
            )
    if not isinstance(data, dict):
        raise click.BadParameter(
            f"{source} must hold a JSON object (or a list of them), not {type(data).__name__}",
            param_hint="'--config'",
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # warned once, when the final config is built
        try:
            config = StoreConfig.from_dict(data)
        except ValueError as exc:
            raise click.BadParameter(f"{source}: {exc}", param_hint="'--config'") from None
    out = config.to_dict()
    return out


pass_settings = click.make_pass_decorator(Settings, ensure=True)
