"""A model host: the process that holds the models of one device (SMFANet and the document encoders the settings
enable) and serves every worker process of the node over a unix socket (`toolserver.hostlink.wire`).

Each call a worker sends (the requests of one `call_many`) runs, in a thread of its own, through the very
`LocalTransport` an in-process server uses: the same `Batcher` under the same `BatchRule` from the same settings,
now gathering the calls of every worker, and the same `batch` functions, so a reply is the one the worker would
have computed itself.

Started by `ModelHosts` as `python -m toolserver.core.modelhost SPEC.json`: a fresh interpreter (the spawn start
method's guarantee: CUDA is initialised here, never in a forked copy of a parent that touched it). It depends on
no worker: workers come and go as connections. It runs in a session of its own (a terminal's ^C reaches the
supervisor, which stops the hosts once its workers have drained) and ends on SIGTERM or SIGINT, or when the process
that started it is gone.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

from toolserver.batching import LocalTransport, Transport
from toolserver.config import Settings
from toolserver.core.modelset import batch_rule, build_models
from toolserver.hostlink import wire

log = logging.getLogger("toolserver.modelhost")
HANDSHAKE_S = 5.0


class HostServer:
    """The accept loop and the connections of one model host."""

    def __init__(self, address: str, key: bytes, transports: dict[str, Transport], hello: dict[str, Any]):
        self.address = address
        self.key = key
        self.transports = transports
        self.hello = hello
        self.stopping = threading.Event()
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)

    def listen(self) -> None:
        Path(self.address).unlink(missing_ok=True)  # the socket of this host's previous life
        self._listener.bind(self.address)
        os.chmod(self.address, 0o600)
        self._listener.listen(256)

    def serve(self) -> None:
        """Accept connections until `stop`."""
        while not self.stopping.is_set():
            try:
                sock, _ = self._listener.accept()
            except OSError:
                break
            threading.Thread(target=self._connection, args=(sock,), name="toolserver-modelhost-conn",
                             daemon=True).start()

    def stop(self) -> None:
        self.stopping.set()
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()

    def _connection(self, sock: socket.socket) -> None:
        send_lock = threading.Lock()
        try:
            sock.settimeout(HANDSHAKE_S)
            wire.serve_handshake(sock, self.key, self.hello)
            sock.settimeout(None)
            while True:
                cid, op, model, payload, timeout_s = wire.recv(sock)
                threading.Thread(target=self._answer, args=(sock, send_lock, cid, op, model, payload, timeout_s),
                                 name="toolserver-modelhost-call", daemon=True).start()
        except (OSError, EOFError, wire.ModelHostError):
            pass  # a worker that went away, or one without the key
        finally:
            sock.close()

    def _answer(self, sock: socket.socket, send_lock: threading.Lock, cid: int, op: str, model: str,
                payload: Any, timeout_s: float | None) -> None:
        try:
            reply: tuple[int, str, Any] = (cid, "ok", self.run_op(op, model, payload, timeout_s))
        except TimeoutError as exc:
            reply = (cid, "timeout", str(exc) or "the model did not take the call in time")
        except Exception as exc:  # the worker learns why; the host goes on
            reply = (cid, "error", f"{type(exc).__name__}: {exc}")
        try:
            with send_lock:
                wire.send(sock, reply)
        except OSError:
            pass  # the caller went away; nothing waits for this reply

    def run_op(self, op: str, model: str, payload: Any = None, timeout_s: float | None = None) -> Any:
        transport = self.transports.get(model)
        if transport is None:
            raise ValueError(f"this model host serves {sorted(self.transports)}, not {model!r}")
        if op == "call":
            return transport.call_many(payload, timeout_s)
        if op == "describe":
            info = transport.describe()
            return {**info, "status": {**info["status"], "host": f"{self.hello['index']}/{self.hello['device']}",
                                       "pid": os.getpid()}}
        if op == "warm":
            transport.warm()
            return None
        raise ValueError(f"unknown model host operation {op!r}")


def host_settings(spec: dict[str, Any]) -> Settings:
    """The settings the supervisor had, with this host's device for every model."""
    settings = Settings(**spec["settings"])
    device = str(spec["device"])
    return settings.model_copy(update={"sr_device": device, "doc_device": device, "perception_device": device,
                                       "model_hosts": ""})


def watch_parent(parent_pid: int, stop: threading.Event) -> None:
    """Stop when the supervisor that started this host is gone (killed without stopping its hosts)."""
    while not stop.wait(0.5):
        if os.getppid() != parent_pid:
            log.warning("model host: its supervisor is gone; stopping")
            os.kill(os.getpid(), signal.SIGTERM)
            return


def main(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    settings = host_settings(spec)
    from toolserver.logs import configure_logging

    configure_logging(settings.log_format, settings.log_level)
    transports: dict[str, Transport] = {name: LocalTransport(model, batch_rule(settings, name))
                                        for name, model in build_models(settings).items()}
    hello = {"index": spec["index"], "device": spec["device"], "pid": os.getpid()}
    server = HostServer(spec["address"], wire.read_key(spec["address"]), transports, hello)
    described = {name: server.run_op("describe", name) for name in transports}
    wire.write_described(spec["address"], described)  # what a worker reads while the hosts are parked
    server.listen()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: server.stop())
    threading.Thread(target=watch_parent, args=(int(spec["parent_pid"]), server.stopping), daemon=True).start()
    log.info("model host listening", extra={"device": spec["device"], "address": spec["address"]})
    started = time.monotonic()
    server.serve()
    for transport in transports.values():
        transport.close()
    log.info("model host stopped", extra={"device": spec["device"], "up_s": round(time.monotonic() - started, 1)})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
