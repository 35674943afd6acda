"""Helpers of the engine tier (tests/test_engine_*.py, bench/engine.py): a model made on the
spot, a vLLM engine in a process of its own (tests/engine_driver.py), LMCache's server, the
keys of a cluster.

Nothing here imports torch, vLLM or LMCache at import time: the model is made by a
subprocess of the engine's interpreter, and the rest drives processes.  Every process is
started here, kept by its PID and stopped by it; every wait has a bound.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mooncake_cffi.cluster import LocalCluster

HERE = Path(__file__).resolve().parent
DRIVER = HERE / "engine_driver.py"

#: vLLM's start (import ~6 s, LLM() ~14 s here, more beside other work): its bound.
ENGINE_START_S = 240.0
#: One request of the tier's small model, when nothing is wrong (it takes well under 1 s).
REQUEST_S = 120.0
#: LMCache's server start (about 6 s here).
LMCACHE_START_S = 120.0

#: The environment vLLM runs with here (docs: engine facts): its address on loopback, a
#: 1 GiB CPU KV cache, no thread pinning on a shared 2-core machine, no telemetry, no hub.
ENGINE_ENV = {
    "VLLM_HOST_IP": "127.0.0.1",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    "OMP_NUM_THREADS": "2",
    "VLLM_NO_USAGE_STATS": "1",
    "VLLM_DO_NOT_TRACK": "1",
    "DO_NOT_TRACK": "1",
    "LMCACHE_TRACK_USAGE": "false",
    "LMCACHE_DISABLE_BANNER": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}

#: The tier's model: small enough that a request takes milliseconds of compute.
SMALL_MODEL = {"layers": 2, "hidden": 256, "heads": 4, "head_dim": 64, "vocab": 2048}

_MAKE_MODEL = r"""
import json, sys
from pathlib import Path
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

out, shape = Path(sys.argv[1]), json.loads(sys.argv[2])
torch.manual_seed(shape.get("seed", 0))
config = LlamaConfig(
    vocab_size=shape["vocab"], hidden_size=shape["hidden"],
    intermediate_size=shape.get("intermediate", 4 * shape["hidden"]),
    num_hidden_layers=shape["layers"], num_attention_heads=shape["heads"],
    num_key_value_heads=shape["heads"], head_dim=shape["head_dim"],
    max_position_embeddings=shape.get("max_positions", 2048), torch_dtype="bfloat16",
    bos_token_id=1, eos_token_id=2, pad_token_id=0, tie_word_embeddings=False,
)
model = LlamaForCausalLM(config).to(torch.bfloat16)
model.save_pretrained(out, safe_serialization=True)
vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3}
vocab.update({f"t{i}": i for i in range(4, shape["vocab"])})
tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
tok.pre_tokenizer = pre_tokenizers.Whitespace()
PreTrainedTokenizerFast(
    tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
    pad_token="<pad>",
).save_pretrained(out)
"""


def make_model(directory: Path, python: str = sys.executable, **shape: Any) -> Path:
    """A Llama of random weights (bf16) and a word-level tokenizer, saved in ``directory``
    with ``save_pretrained`` (made by ``python``, the engine's interpreter)."""
    directory.mkdir(parents=True, exist_ok=True)
    spec = {**SMALL_MODEL, **shape}
    if not (directory / "config.json").exists():
        subprocess.run(
            [python, "-c", _MAKE_MODEL, str(directory), json.dumps(spec)],
            check=True,
            env={**os.environ, **ENGINE_ENV},
            timeout=600,
        )
    return directory


#: The prompts' length: nine 32-token blocks for vLLM's connector (288 tokens), four 64-token
#: chunks for LMCache's (256), and a tail that is always recomputed.
PROMPT_LEN = 300
#: How many distinct prompts the tier uses (the cold reference runs them all, once).
PROMPTS = 48


def prompt(seed: int, length: int = PROMPT_LEN, vocab: int = SMALL_MODEL["vocab"]) -> list[int]:
    """A prompt of ``length`` token ids, the same for the same seed (no special tokens)."""
    x = (seed * 2654435761 + 12345) & 0xFFFFFFFF
    ids = []
    for _ in range(length):
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF
        ids.append(4 + x % (vocab - 4))
    return ids


def mooncake_config(path: Path, local: LocalCluster, **extra: Any) -> Path:
    """The JSON file vLLM's MooncakeStoreConnector reads (MOONCAKE_CONFIG_PATH): the engine
    contributes no memory (``standalone-store``), the cluster's storage node holds the KV."""
    path.write_text(
        json.dumps(
            {
                "metadata_server": local.metadata_server,
                "master_server_address": local.master_addr,
                "protocol": "tcp",
                "device_name": "",
                "mode": "standalone-store",
                "global_segment_size": 0,
                "local_buffer_size": "256MB",
                **extra,
            }
        )
    )
    return path


def _stop(proc: subprocess.Popen[Any], timeout: float = 30.0) -> None:
    """SIGTERM the process group ``proc`` leads (vLLM's engine core is its child), then
    SIGKILL it if it is still there after ``timeout`` seconds."""
    if proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _group_gone(pgid: int, timeout: float) -> None:
    """Waits (bounded) until no process of group ``pgid`` is left (vLLM's engine core)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


class EngineError(RuntimeError):
    """The engine process failed, answered an error or did not answer in time."""


class RequestFailed(EngineError):
    """The engine answered a request with an error (vLLM failed it) and goes on."""


class Engine:
    """One vLLM process (tests/engine_driver.py), in a process group of its own.

    ``connector``: ``none``, ``mooncake`` (vLLM's MooncakeStoreConnector; ``env`` names its
    config file) or ``lmcache`` (LMCacheMPConnector to the server on ``lmcache_port``).
    ``env`` is added to the engine environment (``ENGINE_ENV``); ``log`` receives vLLM's
    output.  ``on_host`` is an argv prefix that runs it elsewhere (``Topology.prefix``: a
    namespace host; ``ip netns exec`` execs, so the PID is the engine's).  :meth:`generate`
    sends one request and waits for its answer.
    """

    def __init__(
        self,
        model: Path,
        log: Path,
        connector: str = "none",
        env: dict[str, str] | None = None,
        lmcache_port: int = 0,
        python: str = sys.executable,
        start_timeout: float = ENGINE_START_S,
        max_model_len: int = 1024,
        prefix_cache: bool = False,
        on_host: Sequence[str] = (),
    ) -> None:
        self.log = log
        read_fd, write_fd = os.pipe()
        argv = [*on_host, python, str(DRIVER), "--model", str(model), "--connector", connector]
        argv += ["--max-model-len", str(max_model_len)] + ["--prefix-cache"] * prefix_cache
        argv += ["--lmcache-port", str(lmcache_port), "--result-fd", str(write_fd)]
        full_env = {**os.environ, **ENGINE_ENV, **(env or {})}
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=full_env,
                pass_fds=(write_fd,),
                start_new_session=True,
            )
        os.close(write_fd)
        self._results = os.fdopen(read_fd, "r")
        self.ready_s: float | None = None
        try:
            self.ready_s = float(self._read(start_timeout, "start")["ready"])
        except BaseException:
            self.close()
            raise

    def _tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def _stacks(self) -> str:
        """The driver's thread stacks (SIGUSR1: engine_driver's faulthandler), from its log."""
        before = len(self.log.read_text(errors="replace")) if self.log.exists() else 0
        try:
            os.kill(self.proc.pid, signal.SIGUSR1)
        except ProcessLookupError:
            return ""
        deadline, last = time.monotonic() + 10.0, ""
        while time.monotonic() < deadline:  # the dump has begun and stopped growing
            text = self.log.read_text(errors="replace")[before:]
            if "most recent call first" in text and text == last:
                break
            last = text
            time.sleep(0.2)
        return last[-6000:]

    def _read(self, timeout: float, what: str) -> dict[str, Any]:
        ready, _, _ = select.select([self._results], [], [], timeout)
        if not ready:
            raise EngineError(
                f"engine: no answer to {what} within {timeout:.0f} s\n{self._tail()}\n"
                f"driver stacks:\n{self._stacks()}"
            )
        line = self._results.readline()
        if not line:
            raise EngineError(f"engine exited during {what} ({self.proc.poll()})\n{self._tail()}")
        doc: dict[str, Any] = json.loads(line)
        if "error" in doc:
            raise RequestFailed(f"engine: {doc['error']}\n{doc.get('trace', '')}")
        return doc

    def generate(
        self, prompt: Sequence[int], max_tokens: int = 8, timeout: float = REQUEST_S
    ) -> dict[str, Any]:
        """One request: ``{"tokens", "cached", "ttft", "e2e"}`` (see engine_driver)."""
        assert self.proc.stdin is not None
        request = {"op": "generate", "prompt": list(prompt), "max_tokens": max_tokens}
        self.proc.stdin.write((json.dumps(request) + "\n").encode())
        self.proc.stdin.flush()
        return self._read(timeout, "a request")

    def kill(self) -> None:
        """SIGKILL to the engine's process group (its engine core too): a crash, mid-run.
        :meth:`close` still cleans up after it."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=30)

    def close(self, timeout: float = 60.0) -> None:
        """Asks the driver to exit, then stops its process group by PID if it lingers."""
        if self.proc.poll() is None and self.proc.stdin is not None:
            try:
                self.proc.stdin.write(b'{"op": "exit"}\n')
                self.proc.stdin.close()
            except (BrokenPipeError, ValueError):
                pass
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                pass
        _stop(self.proc)
        _group_gone(self.proc.pid, 10.0)
        self._results.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LMCacheServer:
    """``lmcache server`` on 127.0.0.1 with a Mooncake L2 adapter (``adapter``: the JSON),
    started on free ports in a process group of its own; :meth:`restart` starts it again on
    the same ports.  ``on_host`` runs it on a namespace host (as :class:`Engine`'s), where
    its engine reaches it on that host's 127.0.0.1 and this process on ``http_host``."""

    def __init__(
        self,
        adapter: str,
        log: Path,
        bindir: Path | None = None,
        on_host: Sequence[str] = (),
        http_host: str = "127.0.0.1",
    ) -> None:
        self.adapter = adapter
        self.log = log
        self.bindir = bindir or Path(sys.executable).parent
        self.on_host, self.http_host = list(on_host), http_host
        self.port, self.http_port, self.metrics_port = free_ports(3)
        self.proc: subprocess.Popen[Any] | None = None
        self.start()

    @property
    def url(self) -> str:
        return f"http://{self.http_host}:{self.http_port}"

    def start(self, timeout: float = LMCACHE_START_S) -> None:
        argv = [*self.on_host, str(self.bindir / "lmcache"), "server", "--host", "127.0.0.1"]
        argv += ["--port", str(self.port), "--http-host", self.http_host]
        argv += ["--http-port", str(self.http_port), "--prometheus-port", str(self.metrics_port)]
        argv += ["--chunk-size", "64", "--l1-size-gb", "1", "--eviction-policy", "LRU"]
        argv += ["--supported-transfer-mode", "engine_driven", "--l2-adapter", self.adapter]
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, **ENGINE_ENV},
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"lmcache server exited ({self.proc.returncode}): {self.log}")
            try:
                with urllib.request.urlopen(self.url + "/healthcheck", timeout=2) as r:
                    if r.status < 500:
                        return
            except OSError:
                pass
            time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"lmcache server not ready within {timeout:.0f} s: {self.log}")

    def clear(self) -> None:
        """``lmcache kvcache clear``: empties the server's L1 (not the L2 store)."""
        subprocess.run(
            [str(self.bindir / "lmcache"), "kvcache", "clear", "--url", self.url],
            check=True,
            capture_output=True,
            env={**os.environ, **ENGINE_ENV},
            timeout=60,
        )

    def stop(self) -> None:
        if self.proc is not None:
            _stop(self.proc)
            _group_gone(self.proc.pid, 10.0)
            self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()


def free_ports(n: int) -> list[int]:
    """``n`` distinct ports free on 127.0.0.1 now (bound to port 0, then released)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _mcl2_ls(local: LocalCluster, *args: str) -> Any:
    argv = [str(Path(sys.executable).parent / "mcl2"), "--json", "--master", local.master_addr]
    argv += ["--metadata-server", local.metadata_server, "--admin", local.metrics_url]
    argv += ["ls", *args]
    out = subprocess.run(argv, check=True, capture_output=True, text=True, timeout=60)
    return json.loads(out.stdout)


def cluster_keys(local: LocalCluster) -> list[str]:
    """The keys stored in the cluster (``mcl2 --json ls``, mcl2 as a user runs it)."""
    keys: list[str] = _mcl2_ls(local)
    return keys


def cluster_sizes(local: LocalCluster) -> dict[str, int]:
    """Every key of the cluster with its size in bytes (``mcl2 --json ls -l``)."""
    return {entry["key"]: int(entry["size"]) for entry in _mcl2_ls(local, "-l")}


def wait_for(predicate: Any, timeout: float, what: str, interval: float = 0.2) -> Any:
    """Calls ``predicate`` until it returns something true, at most ``timeout`` seconds;
    returns that, or fails naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"not within {timeout:.0f} s: {what} (last: {value!r})")
        time.sleep(interval)


@contextmanager
def frozen(pid: int) -> Iterator[None]:
    """The process ``pid`` stopped (SIGSTOP, every thread of it) for the block's duration."""
    from process_helpers import freeze

    freeze(pid)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def group_maps(pgid: int, library: str) -> list[int]:
    """PIDs of the processes of group ``pgid`` that have ``library`` mapped (e.g. the
    shim, ``libmcs``: the drop-in is in use there)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.getpgid(int(entry)) != pgid:
                continue
            with open(f"/proc/{entry}/maps") as f:
                if library in f.read():
                    found.append(int(entry))
        except OSError:
            continue  # gone meanwhile, or not ours to read
    return found


class Reference:
    """The answers of an engine without a connector (vLLM's prefix cache off too): each
    prompt of the tier, once, one request at a time, with its time (``e2e``) and first-token
    latency (``ttft``).  Made by one engine that is closed before the tests' own start."""

    def __init__(self, model: Path, log: Path, max_tokens: int = 8) -> None:
        self.max_tokens = max_tokens
        self.runs: dict[int, dict[str, Any]] = {}
        with Engine(model, log) as engine:
            self.ready_s = engine.ready_s
            engine.generate(prompt(PROMPTS), max_tokens)  # warm-up, not kept
            for seed in range(PROMPTS):
                self.runs[seed] = engine.generate(prompt(seed), max_tokens)

    def tokens(self, seed: int) -> list[int]:
        tokens: list[int] = self.runs[seed]["tokens"]
        return tokens

    def e2e(self, seed: int) -> float:
        return float(self.runs[seed]["e2e"])


def record(what: str, **figures: Any) -> None:
    """Appends one JSON line of measured figures to ``$MOONCAKE_CFFI_ENGINE_RECORD`` (when
    set) and prints it (``pytest -s`` shows it): what the tier measured, for a report."""
    if figures.get("route") == "b":  # which LMCache served it (the tier runs two)
        from importlib.metadata import version

        figures["lmcache"] = version("lmcache")
    line = json.dumps({"what": what, **figures})
    print(line)
    path = os.environ.get("MOONCAKE_CFFI_ENGINE_RECORD")
    if path:
        with open(path, "a") as f:
            f.write(line + "\n")
