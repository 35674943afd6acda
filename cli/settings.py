"""mcl2's context object: the options of one invocation, and how it speaks to the user.

:class:`Settings` is ``ctx.obj``.  The shared options (:mod:`.options`) write into it through
callbacks, so an option given after the command (``mcl2 get KEY --master H:P``) overrides the
same option given before it, and environment variables (``MCL2_*``) only apply at the top
level.  Its output methods decide what reaches the user: results on standard output (JSON
through the pipe-aware writer of :mod:`.output`), messages on standard error (``-q`` and
``--json`` silence the chatty ones).

Finding the cluster is :mod:`.resolve`'s job (options, ``--config``, the local cluster, the
admin URL), holding the Mooncake client is :mod:`.session`'s; the methods below hand over to
them, so a command only ever talks to its settings.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from .output import write_json
from .session import Session

if TYPE_CHECKING:
    from mooncake_cffi import Client
    from mooncake_cffi.admin import AdminClient
    from mooncake_cffi.config import StoreConfig

    from .transfer import Transfer

DEFAULT_CONNECT_TIMEOUT = 2.0
#: Default deadline of each store operation (--timeout): a few seconds, so a cut link or a
#: stopped storage node makes a command fail instead of hanging for Mooncake's 30-120 s.
DEFAULT_TIMEOUT = 5.0


@dataclass
class Settings:
    """Options of one mcl2 invocation, and the session holding its client."""

    #: The console script: leave through ``os._exit`` after closing the client the fast way.
    fast_exit: bool = False
    master: str | None = None
    metadata_server: str | None = None
    protocol: str | None = None
    hostname: str | None = None
    config: str | None = None
    #: --cluster-id / MCL2_CLUSTER_ID: the HA cluster's id (the ``cluster_id`` config key).
    cluster_id: str | None = None
    #: --integrity / MCL2_INTEGRITY: crc32c or none (the ``integrity`` config key).
    integrity: str | None = None
    state_dir: Path | None = None
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    #: --timeout / MCL2_TIMEOUT: the deadline of every store operation, in seconds.
    timeout: float = DEFAULT_TIMEOUT
    verbose: int = 0
    quiet: bool = False
    json: bool = False
    #: Bytes of L1 staging memory to register (--l1-size); None: only with rdma, default size.
    l1_size: int | None = None
    #: --admin / MCL2_ADMIN: base URL of the master's admin HTTP API.
    admin: str | None = None
    #: Use the local cluster's addresses even when it cannot serve (the doctor diagnoses it).
    accept_broken_local: bool = False
    #: The client outlives the command (``mcl2 shell`` closes it when the shell ends).
    keep_client: bool = False
    #: True once the client config came from the local cluster's state directory.
    uses_local_cluster: bool = False
    #: Where the client config came from, for -v ("options", "--config", the local cluster).
    where: str = ""
    #: The Mooncake client of this invocation; ``mcl2 shell`` shares one across its lines.
    session: Session = field(default_factory=Session, repr=False)
    #: Warnings already given (each is given once per invocation).
    warned: set[str] = field(default_factory=set, repr=False)

    # -- output -----------------------------------------------------------------------------

    def info(self, message: str) -> None:
        """A progress or summary line on stderr (silenced by -q and --json)."""
        if not self.quiet and not self.json:
            click.echo(message, err=True)

    def warn(self, message: str) -> None:
        """A warning on stderr (silenced by -q only)."""
        if not self.quiet:
            click.echo(f"mcl2: warning: {message}", err=True)

    def warn_once(self, message: str) -> None:
        """:meth:`warn`, unless this invocation said it already."""
        if message not in self.warned:
            self.warned.add(message)
            self.warn(message)

    def debug(self, message: str) -> None:
        """A line on stderr with -v."""
        if self.verbose:
            click.echo(f"mcl2: {message}", err=True)

    def emit_json(self, data: Any) -> None:
        """The command's one JSON document on stdout (a closed pipe exits 141)."""
        write_json(data)

    # -- where the cluster is (see .resolve) -------------------------------------------------

    @property
    def resolved_state_dir(self) -> Path:
        from .resolve import default_state_dir

        return self.state_dir if self.state_dir is not None else default_state_dir()

    def store_config(self) -> StoreConfig:
        """The StoreConfig for this invocation's client (options, env, --config, local cluster)."""
        from .resolve import store_config

        return store_config(self)

    def admin_url(self) -> str:
        """The master's admin API: --admin, the local cluster's, or the master's host:9003."""
        from .resolve import admin_url

        return admin_url(self)

    def admin_client(self) -> AdminClient:
        """An :class:`~mooncake_cffi.admin.AdminClient` for :meth:`admin_url`."""
        from .resolve import admin_client

        return admin_client(self)

    # -- the client (see .session) ------------------------------------------------------------

    def client(self, l1_min: int = 0) -> Client:
        """The Mooncake client, created on first use and closed with the command (unless
        ``keep_client``).  With ``--protocol rdma`` or ``--l1-size``, an L1 staging area of at
        least ``l1_min`` bytes is registered with it (see :mod:`.transfer`)."""
        if self.session.client is not None:
            return self.session.client
        client = self.session.open(self, l1_min)
        if not self.keep_client:
            click.get_current_context().find_root().call_on_close(self.close)
        return client

    def transfer(self, l1_min: int = 0) -> Transfer:
        """A :class:`~.transfer.Transfer` over this invocation's client (see :meth:`client`)."""
        from .transfer import Transfer

        client = self.client(l1_min)
        return Transfer(client, self.session.l1)

    def close(self) -> None:
        """Close the client (the fast way in the console script); a no-op without one."""
        self.session.close(fast=self.fast_exit)


pass_settings = click.make_pass_decorator(Settings, ensure=True)
