"""The one Mooncake client an mcl2 invocation uses: its setup, its watchdog, its close.

:class:`Session` sets the client up on first use, from the settings' store config (see
:mod:`.resolve`), with Mooncake's log lines sent to /dev/null unless ``-v``, and its threads
started with SIGINT / SIGTERM blocked.  In the console script a watchdog abandons a setup that
hangs past the connect timeout (a port that accepts connections but never answers).  The
client is closed normally (``Client.close``) when mcl2 runs inside another program such as
click's ``CliRunner``, or quickly (``Client.close_for_exit``, then ``os._exit`` in
:func:`mooncake_cffi.cli.main.main`) when it runs as the ``mcl2`` console script.  ``mcl2
shell`` keeps one session for all its lines.
"""

from __future__ import annotations

import mmap
import os
import sys
import threading
from typing import TYPE_CHECKING

from .errors import CliError, StoreError
from .interrupts import threads_without_signals
from .invocation import Invocation
from .resolve import DEFAULT_MASTER_PORT

if TYPE_CHECKING:
    from mooncake_cffi import Client
    from mooncake_cffi.config import StoreConfig


#: Seconds added to the connect timeout before a stuck setup is abandoned (console only).
SETUP_GRACE = 1.5


class Session:
    """The Mooncake client of an invocation (or of one ``mcl2 shell``), and its L1 memory."""

    def __init__(self) -> None:
        self.client: Client | None = None
        self.l1: mmap.mmap | None = None
        # After close_for_exit: kept alive until os._exit (Client.__del__ would run the full
        # Mooncake teardown that close_for_exit skipped).
        self._exiting: Client | None = None

    def open(self, settings: Invocation, l1_min: int = 0) -> Client:
        """Set up the client for ``settings`` (once; later calls return the same one)."""
        if self.client is not None:
            return self.client
        config = settings.store_config()
        setup = config.setup_config
        master = str(setup.get("master_server_addr", f"127.0.0.1:{DEFAULT_MASTER_PORT}"))
        meta = str(setup.get("metadata_server", "?"))
        settings.debug(
            f"connecting to master {master}, metadata server {meta} "
            f"as {setup.get('local_hostname')} over {setup.get('protocol', 'tcp')} "
            f"(from {settings.where})"
        )
        import mooncake_cffi

        if settings.verbose:
            mooncake_cffi.set_log_level(2 if settings.verbose == 1 else 0)
        l1 = None
        if config.protocol == "rdma" or settings.l1_size is not None:
            from .transfer import DEFAULT_L1_BYTES, allocate_l1

            size = max(settings.l1_size or DEFAULT_L1_BYTES, l1_min)
            try:
                l1 = allocate_l1(size)
            except (OSError, ValueError) as exc:
                raise CliError(
                    f"cannot allocate {size} bytes of L1 staging memory: {exc}"
                ) from None
            settings.debug(f"staging transfers through {size} bytes of registered L1 memory")
        with threads_without_signals():  # Mooncake's threads never take SIGINT / SIGTERM
            client = self._set_up(settings, config, master, meta, l1)
        self.client, self.l1 = client, l1
        if settings.verbose:
            try:
                settings.debug(f"registered as {client.hostname}")
            except Exception:
                pass
        return client

    def _set_up(
        self,
        settings: Invocation,
        config: StoreConfig,
        master: str,
        meta: str,
        l1: mmap.mmap | None,
    ) -> Client:
        """Create the client, with the watchdog when this is the console script."""
        from mooncake_cffi import Client, MooncakeError

        watchdog = None
        try:
            with QuietStderr(enabled=not settings.verbose) as quiet:
                if settings.fast_exit:
                    watchdog = start_watchdog(settings.connect_timeout, master, meta, quiet)
                return Client(
                    config,
                    l1=l1,
                    register_l1=l1 is not None,
                    connect_timeout=settings.connect_timeout,
                    op_timeout=settings.timeout,
                )
        except MooncakeError as exc:
            raise StoreError.wrap(
                exc, f"cannot connect to master {master}{cluster_id_hint(config, exc.code)}"
            ) from None
        except ValueError as exc:  # e.g. rdma without L1
            raise CliError(f"cannot set up a client for master {master}: {exc}") from None
        finally:
            if watchdog is not None:
                watchdog.cancel()

    def close(self, fast: bool) -> None:
        """Close the client: ``close_for_exit`` when ``fast`` (the process is about to
        ``os._exit``), else ``close``.  A no-op without a client."""
        client, self.client = self.client, None
        if client is None:
            return
        if fast:
            client.close_for_exit()
            self._exiting = client
        else:
            client.close()


def start_watchdog(
    connect_timeout: float, master: str, meta: str, quiet: QuietStderr
) -> threading.Timer:
    """Abandon a Mooncake setup that hangs past the connect timeout (console script only).

    Mooncake's own setup retries an unresponsive master for ~90 s; the shim's TCP probe
    catches a refused or silent port, this catches a port that accepts but never answers.
    """
    limit = connect_timeout + SETUP_GRACE

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


class QuietStderr:
    """Send fd 2 to /dev/null for a moment, so that native libraries cannot print there."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.saved: int | None = None

    def __enter__(self) -> QuietStderr:
        if not self.enabled:
            return self
        try:
            if sys.stderr is not None:
                sys.stderr.flush()
            self.saved = os.dup(2)
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 2)
            os.close(devnull)
        except (OSError, ValueError):
            self.saved = None
        return self

    def __exit__(self, *exc: object) -> None:
        if self.saved is not None:
            os.dup2(self.saved, 2)
            os.close(self.saved)
            self.saved = None


def cluster_id_hint(config: StoreConfig, code: int) -> str:
    """Words on the cluster id, for a setup against an HA (``etcd://``) master that failed
    with INTERNAL_ERROR: Mooncake's answer to a missing or wrong id (etcd itself answered,
    or the probe would have said it did not)."""
    from mooncake_cffi.status import INTERNAL_ERROR

    from .ha import cluster_id_of, is_etcd

    setup = config.setup_config
    if not is_etcd(str(setup.get("master_server_addr", ""))) or code != INTERNAL_ERROR:
        return ""
    given = cluster_id_of(setup)
    if given:
        return f" (cluster id {given!r}: is it the -cluster_id its masters run with?)"
    return (
        " (an HA master on etcd needs the cluster id its masters run with: "
        "--cluster-id ID or MCL2_CLUSTER_ID)"
    )
