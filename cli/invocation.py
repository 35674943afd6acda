"""What one mcl2 invocation's options look like to the modules that act on them.

:class:`~.settings.Settings` holds the options and the :class:`~.session.Session` of an
invocation, and hands itself to :mod:`.resolve` (where the cluster is) and to the session
(opening the client).  Those two see it through :class:`Invocation`, the attributes they
read and the two they record, so neither imports the settings module that imports them.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from mooncake_cffi.config import StoreConfig

__all__ = ["Invocation"]


class Invocation(Protocol):
    """The options of one invocation that resolving and the session use."""

    fast_exit: bool
    master: str | None
    metadata_server: str | None
    protocol: str | None
    hostname: str | None
    config: str | None
    cluster_id: str | None
    integrity: str | None
    connect_timeout: float
    timeout: float
    verbose: int
    l1_size: int | None
    admin: str | None
    accept_broken_local: bool
    #: Recorded by :func:`.resolve.store_config`: the config came from the local cluster.
    uses_local_cluster: bool
    #: Recorded by :func:`.resolve.store_config`: where the config came from (for -v).
    where: str

    @property
    def resolved_state_dir(self) -> Path: ...

    def store_config(self) -> StoreConfig: ...

    def warn_once(self, message: str) -> None: ...

    def debug(self, message: str) -> None: ...
