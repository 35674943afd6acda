"""The generated parts of the documentation, made from the code so that they cannot drift.

``docs/hooks.py`` (an mkdocs hook) replaces every line ``<!-- generated: NAME -->`` of a page
with ``SECTIONS[NAME]()``; ``tests/test_docs.py`` calls the same functions.  What comes from
where:

* the configuration keys: the tables of ``mooncake_cffi/config.py`` (``MOONCAKE_KEYS``,
  ``LMCACHE_ONLY_KEYS``, ``CLIENT_KEYS``, ``KEY_ALIASES``), with the defaults and meanings
  written below; a key in a table without a description here (or a description of a key that
  is no longer in a table) stops the build, naming it;
* ``Client(...)``'s options: its signature (defaults) and its docstring's ``Args:`` (meanings);
* LMCache's ``adapter_params`` options: ``mooncake_cffi.lmcache.params``'s tables;
* ``mcl2``: click's own help text of every command;
* the Prometheus series: ``mooncake_cffi.metrics``'s field tables and its collector;
* the status codes: ``mooncake_cffi.status.CODES`` and the exception each code raises.

Everything is read from the installed package (``scripts/test.sh`` installs it first).
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterable, Iterator

import click

__all__ = ["SECTIONS", "DocsDriftError", "client_option_docs", "mcl2_command_paths"]


class DocsDriftError(RuntimeError):
    """A table of the code and the descriptions here disagree."""


# -- descriptions of the configuration keys --------------------------------------------------
# (default, meaning).  Mooncake's defaults are those its setup documents (wheel 0.3.13.post1:
# ``help(mooncake.store.MooncakeDistributedStore.setup)``).

_SIZE = 'bytes, or a size such as `"4 GB"` or `"512MB"` (K, M, G, T are powers of 1024)'

MOONCAKE_KEY_DOCS: dict[str, tuple[str, str]] = {
    "local_hostname": (
        "required",
        "The address this client registers with the cluster and that other nodes connect "
        "back to: an IP address or a name they resolve. No port: Mooncake picks one, and a "
        "`host:port` is refused (it makes Mooncake register the client twice).",
    ),
    "metadata_server": (
        "required",
        "The transfer engine's metadata service, where each client publishes its segments: "
        "`http://HOST:8080/metadata` (Mooncake's HTTP metadata server, or the master's "
        "built-in one), `etcd://HOST:2379`, or `P2PHANDSHAKE` (no server).",
    ),
    "master_server_addr": (
        "`127.0.0.1:50051`",
        "The master's RPC address, `HOST:PORT` (port 1-65535); HA masters: an entry of "
        "{ha_backends}, e.g. `etcd://HOST:PORT;HOST:PORT`, with `cluster_id`. Checked before "
        "setup (an empty one would crash Mooncake, one without a port hang for ~90 s) and "
        "probed, so an unreachable master fails within `connect_timeout`.",
    ),
    "protocol": (
        "`tcp`",
        "The transport, in lower case: one of {protocols} (the PyPI wheels build `tcp` and "
        "`rdma`). With `rdma`, `Client` needs an L1 region (`l1=`) and registers it.",
    ),
    "rdma_devices": (
        "empty",
        "The RDMA devices to use, comma-separated (e.g. `mlx5_0,mlx5_1`); read with `rdma`.",
    ),
    "global_segment_size": (
        "16 MB",
        f'Memory this client contributes to the cluster\'s pool: {_SIZE}. `"0"` contributes '
        "none (a client that only reads and writes), on every supported wheel.",
    ),
    "local_buffer_size": (
        "16 MB",
        f"The client's transfer buffer, which a `batch_get` reads values into in one round "
        f"trip (values that do not fit are sized and read separately): {_SIZE}.",
    ),
    "ipc_socket_path": ("empty", "Mooncake's IPC socket path, passed through untouched."),
    "tenant_id": (
        "`default`",
        "Mooncake's tenant: its own key space and memory quota, but only on a master run with "
        "`-enable_multi_tenants=true`; not authentication "
        "(see [tenant_id](../guide/python.md#mooncakes-tenant_id)).",
    ),
    "enable_client_http_server": (
        "`false`",
        "Mooncake's HTTP endpoints of the client (its metrics), on `client_http_port`.",
    ),
    "client_http_port": ("`9300`", "The port of those endpoints."),
    "enable_ssd_offload": ("`false`", "Mooncake's offload of values to SSD."),
    "ssd_offload_path": (
        "empty",
        "The directory of the SSD offload (overrides Mooncake's environment variable).",
    ),
}

ADAPTER_KEY_DOCS: dict[str, tuple[str, str]] = {
    "type": (
        "none",
        '`"mooncake_store"` when present; any other value is refused (`unknown adapter type`).',
    ),
    "num_workers": (
        "{num_workers}",
        "Threads of the shared pool, which serves the lanes that have no workers of their "
        "own; a positive integer. The pool starts only if some lane needs it.",
    ),
    "per_op_workers": (
        "none",
        'Threads of a lane\'s own: `{"lookup": 1, "retrieve": 1, "store": 2, '
        '"delete": 1}` (lookup: exists and size; retrieve: get; store: put and upsert; '
        "delete: remove). A lane left out uses the shared pool.",
    ),
    "eviction": ("none", "LMCache's: accepted and ignored here (never forwarded)."),
}

CLIENT_KEY_DOCS: dict[str, tuple[str, str]] = {
    "integrity": (
        "none",
        "`crc32c`: store every value with a 16-byte checksum trailer and verify it on every "
        "read (a value that does not verify raises `IntegrityError`); `none`: off. Read by "
        "the shim, never handed to Mooncake. See [verified values](../guide/integrity.md).",
    ),
    "cluster_id": (
        "none",
        "The `-cluster_id` of HA masters (with an `etcd://` master address). Mooncake reads "
        "it only from `MC_STORE_CLUSTER_ID`: the shim exports it there just before setup "
        "(process-wide).",
    ),
    "replica_num": (
        "{replica_num}",
        "Copies of each write, each on its own storage node (a positive integer). Mooncake "
        "stores fewer, without an error, when there are fewer storage nodes.",
    ),
    "with_soft_pin": (
        "none",
        "`true` / `false`: keep written objects in memory preferentially; becomes "
        "`soft_pin_action` `ENABLE` / `DISABLE`. Give this or `soft_pin_action`, not both.",
    ),
    "soft_pin_action": (
        "{soft_pin_action}",
        "What a write does to the key's soft pin: one of {soft_pin_actions} (`PRESERVE` "
        "keeps it as it is).",
    ),
    "soft_pin_ttl_ms": (
        "{soft_pin_ttl_ms}",
        "How long a soft pin holds, in milliseconds (positive); unset: the master's default.",
    ),
    "with_hard_pin": ("{with_hard_pin}", "`true` / `false`: pin written objects in memory."),
    "preferred_segment": (
        "{preferred_segment}",
        "The segment (`host:port`, as `mcl2 segments` lists them) to place the first replica on.",
    ),
}


def _cell(text: str) -> str:
    """Text for one table cell: reST roles as code, no bare pipes, one line."""
    text = re.sub(r":(?:py:)?[a-z]+:`~?\.?([^`]+)`", r"`\1`", text)
    text = re.sub(r"``([^`]+)``", r"`\1`", text)
    # A pipe splits the cell unless escaped; inside a code span the escape would show.
    parts = text.split("`")
    text = "`".join(p if i % 2 else p.replace("|", "\\|") for i, p in enumerate(parts))
    return " ".join(text.split())


def _key_table(keys: frozenset[str], docs: dict[str, tuple[str, str]], table: str) -> str:
    undocumented = sorted(keys - docs.keys())
    stale = sorted(docs.keys() - keys)
    if undocumented or stale:
        raise DocsDriftError(
            f"mooncake_cffi.config.{table} and docs/gen_reference.py disagree: "
            + "; ".join(
                part
                for part in (
                    undocumented and f"no description of {', '.join(undocumented)}",
                    stale and f"described but not in the table: {', '.join(stale)}",
                )
                if part
            )
        )
    rows = ["| key | default | meaning |", "|---|---|---|"]
    for key in sorted(keys):
        default, meaning = docs[key]
        rows.append(f"| `{key}` | {default} | {meaning} |")
    return "\n".join(rows) + "\n"


def _codes(names: Iterable[str]) -> str:
    return ", ".join(f"`{n}`" for n in names)


def _filled(docs: dict[str, tuple[str, str]], **values: str) -> dict[str, tuple[str, str]]:
    return {k: (d.format(**values), m.format(**values)) for k, (d, m) in docs.items()}


def mooncake_keys() -> str:
    from mooncake_cffi import config

    docs = _filled(
        MOONCAKE_KEY_DOCS,
        protocols=_codes(config.PROTOCOLS),
        ha_backends=_codes(f"{b}://..." for b in config.HA_BACKENDS),
    )
    return _key_table(config.MOONCAKE_KEYS, docs, "MOONCAKE_KEYS")


def adapter_keys() -> str:
    from mooncake_cffi import config

    docs = dict(ADAPTER_KEY_DOCS)
    default, meaning = docs["num_workers"]
    docs["num_workers"] = (default.format(num_workers=config.StoreConfig().num_workers), meaning)
    return _key_table(config.LMCACHE_ONLY_KEYS, docs, "LMCACHE_ONLY_KEYS")


def client_keys() -> str:
    from mooncake_cffi import ReplicateConfig, SoftPinAction, config

    rc = ReplicateConfig()  # the defaults of a write's replica options

    def shown(value: object) -> str:
        if value is None or value == "":
            return "none"
        if isinstance(value, bool):
            return f"`{str(value).lower()}`"
        return f"`{getattr(value, 'name', value)}`"

    docs = _filled(
        CLIENT_KEY_DOCS,
        replica_num=shown(rc.replica_num),
        soft_pin_action=shown(rc.soft_pin_action),
        soft_pin_actions=", ".join(f"`{m.name}`" for m in SoftPinAction),
        soft_pin_ttl_ms=shown(rc.soft_pin_ttl_ms),
        with_hard_pin=shown(rc.with_hard_pin),
        preferred_segment=shown(rc.preferred_segment),
    )
    return _key_table(config.CLIENT_KEYS, docs, "CLIENT_KEYS")


def key_aliases() -> str:
    from mooncake_cffi import config

    rows = ["| key given | Mooncake's setup reads | what happens |", "|---|---|---|"]
    for alias, key in sorted(config.KEY_ALIASES.items()):
        rows.append(
            f"| `{alias}` | `{key}` | forwarded, ignored by Mooncake: an "
            f"`UnknownConfigKeyWarning` says `did you mean '{key}'?` |"
        )
    return "\n".join(rows) + "\n"


# -- Client(...) options -------------------------------------------------------------------


def client_option_docs(cls: type | None = None) -> dict[str, str]:
    """The ``Args:`` section of ``Client``'s docstring: parameter name -> description."""
    if cls is None:
        from mooncake_cffi import Client as cls
    doc = inspect.getdoc(cls) or ""
    lines = doc.splitlines()
    try:
        start = lines.index("Args:") + 1
    except ValueError:
        raise DocsDriftError(f"{cls.__name__}'s docstring has no Args: section") from None
    out: dict[str, str] = {}
    names: list[str] = []
    for line in lines[start:]:
        if line and not line.startswith(" "):
            break
        entry = re.match(r"^    ([A-Za-z_][\w, ]*):\s*(.*)$", line)
        if entry:
            names = [n.strip() for n in entry.group(1).split(",")]
            for name in names:
                out[name] = entry.group(2)
        elif line.startswith("        ") and names:
            for name in names:
                out[name] += " " + line.strip()
    return out


def client_options() -> str:
    from mooncake_cffi import Client

    docs = client_option_docs(Client)
    params = [p for p in inspect.signature(Client.__init__).parameters.values() if p.name != "self"]
    names = [p.name for p in params]
    undocumented = [n for n in names if n not in docs]
    stale = [n for n in docs if n not in names]
    if undocumented or stale:
        raise DocsDriftError(
            f"Client's signature and its docstring's Args disagree: undocumented {undocumented}, "
            f"documented but not parameters {stale}"
        )
    rows = ["| option | default | meaning |", "|---|---|---|"]
    for p in params:
        if p.default is inspect.Parameter.empty:
            default = "required"
        else:
            default = f"`{p.default!r}`"
        kind = "" if p.kind is inspect.Parameter.KEYWORD_ONLY else " (positional too)"
        rows.append(f"| `{p.name}`{kind} | {default} | {_cell(docs[p.name])} |")
    return "\n".join(rows) + "\n"


def lmcache_options() -> str:
    from mooncake_cffi.lmcache import params

    rows = ["| key of `adapter_params` | what it is |", "|---|---|"]
    for name in sorted(params.CLIENT_OPTIONS):
        note = ""
        if name == "queue_timeout":
            default = params.DEFAULT_QUEUE_TIMEOUT
            note = f" Default here: `{default!r}` (LMCache submits under its own lock)."
        if name == "op_timeout":
            note = (
                " For the connector's batches it bounds Mooncake's own waits (a master RPC, a"
                " transfer to a silent peer), so a batch against a dead process fails within"
                " about that long."
            )
        rows.append(f"| `{name}` | the `Client` option of that name.{note} |")
    connector = {
        "key_prefix": "prepended to every key: a namespace per deployment or test.",
        "retry": (
            "`true`, or an object of `RetryPolicy` fields (`attempts`, `backoff`, `multiplier`,"
            " `max_backoff`, `jitter`, `budget`): keys of a batch that fail with a retryable"
            " error are submitted again after the backoff; the batch completes once, with each"
            " key's last outcome."
        ),
        "fail_open": (
            "`true` (the default) or `false`. Without an `op_timeout`, every batch has a deadline"
            " of 2 s, and a batch that fails slowly or finds the master gone opens a breaker:"
            " every batch then completes at once as failed (lookups and loads find nothing, so"
            " LMCache recomputes) until a probe finds the master answering again. Loads (without"
            " a registered L1) read into the connector's memory and are copied into LMCache's"
            " buffers, so one that outlives the deadline fails then, with LMCache's untouched."
        ),
    }
    for name in sorted(params.CONNECTOR_OPTIONS):
        if name not in connector:
            raise ValueError(f"adapter_params option {name!r} has no description here")
        rows.append(f"| `{name}` | {connector[name]} |")
    return "\n".join(rows) + "\n"


# -- mcl2 ----------------------------------------------------------------------------------

_WIDTH = 100


def _mcl2_contexts() -> Iterator[tuple[list[str], click.Command, click.Context]]:
    from mooncake_cffi.cli.main import cli

    def walk(
        cmd: click.Command, path: list[str], parent: click.Context | None
    ) -> Iterator[tuple[list[str], click.Command, click.Context]]:
        settings = dict(cmd.context_settings)
        settings.update(terminal_width=_WIDTH, max_content_width=_WIDTH)
        ctx = click.Context(cmd, info_name=path[-1], parent=parent, **settings)
        yield path, cmd, ctx
        if isinstance(cmd, click.Group):
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                if sub is not None and not sub.hidden:
                    yield from walk(sub, [*path, name], ctx)

    yield from walk(cli, ["mcl2"], None)


def mcl2_command_paths() -> list[str]:
    """Every mcl2 command, e.g. ``"mcl2 cluster up"`` (the group itself first)."""
    return [" ".join(path) for path, _, _ in _mcl2_contexts()]


def _anchor(path: list[str]) -> str:
    return "-".join(path)


def mcl2_commands() -> str:
    rows = ["| command | what it does |", "|---|---|"]
    for path, cmd, _ in _mcl2_contexts():
        if len(path) == 1:
            continue
        rows.append(
            f"| [`{' '.join(path)}`](#{_anchor(path)}) | {_cell(cmd.get_short_help_str(200))} |"
        )
    return "\n".join(rows) + "\n"


def mcl2_reference() -> str:
    parts = []
    for path, cmd, ctx in _mcl2_contexts():
        level = "##" if len(path) <= 2 else "###"
        parts.append(f"{level} `{' '.join(path)}` {{ #{_anchor(path)} }}\n")
        parts.append("```text\n" + cmd.get_help(ctx).rstrip() + "\n```\n")
    return "\n".join(parts)


# -- metrics -------------------------------------------------------------------------------


def metrics_series() -> str:
    from mooncake_cffi import metrics

    lane_extra = {
        metrics.LATENCY: ("lane, quantile", "`p50_us`, `p90_us`, `p99_us`; `_sum` from `mean_us`"),
        metrics.FAILURES: ("lane, error", "`failures` (failed keys by error name)"),
        metrics.LATENCY_HISTOGRAM: ("lane", "`latency_buckets`"),
        metrics.OP_FAILURES: ("lane, op, error", "`failures` of `op_stats()`"),
        metrics.OP_DURATION: ("lane, op", "`buckets` and `sum_us` of `op_stats()`"),
    }
    source: dict[str, tuple[str, str]] = {}
    for f in metrics.FIELDS:
        source[f.name] = ("lane", f"`{f.stat}` of `stats()`")
    for f in metrics.OP_FIELDS:
        source[f.name] = ("lane, op", f"`{f.stat}` of `op_stats()`")
    source.update(lane_extra)
    rows = ["| series | type | labels | from | meaning |", "|---|---|---|---|---|"]
    for fam in metrics.ClientCollector().describe():
        if fam.name not in source:
            raise DocsDriftError(f"metric {fam.name} has no row in docs/gen_reference.py")
        labels, where = source[fam.name]
        name = fam.name + ("_total" if fam.type == "counter" else "")
        rows.append(f"| `{name}` | {fam.type} | {labels} | {where} | {_cell(fam.documentation)} |")
    return "\n".join(rows) + "\n"


# -- status codes --------------------------------------------------------------------------


def status_codes() -> str:
    from mooncake_cffi import errors, status

    rows = ["| code | name | meaning | retryable | raised as |", "|---|---|---|---|---|"]
    for code, name, text in status.CODES:
        if code == 0:
            continue
        exc = type(errors.error_for(code)).__name__
        retry = "yes" if status.is_retryable(code) else "no"
        rows.append(f"| {code} | `{name}` | {_cell(text)} | {retry} | `{exc}` |")
    return "\n".join(rows) + "\n"


SECTIONS: dict[str, Callable[[], str]] = {
    "mooncake-keys": mooncake_keys,
    "adapter-keys": adapter_keys,
    "client-keys": client_keys,
    "key-aliases": key_aliases,
    "client-options": client_options,
    "lmcache-options": lmcache_options,
    "mcl2-commands": mcl2_commands,
    "mcl2-reference": mcl2_reference,
    "metrics-series": metrics_series,
    "status-codes": status_codes,
}
