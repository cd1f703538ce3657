"""The HTTPS server of a fleet's BMCs: one process, one listening socket per BMC address.

Bounded: a fixed pool of worker threads serves the connections (at most MAX_PENDING wait for one;
beyond that a connection is closed at once), a TLS handshake and every read have a timeout, request
lines and headers are limited by http.server (64 KiB a line, 100 headers), bodies by Content-Length
(no chunked uploads; 1 MiB of JSON, 64 MiB of firmware image, at most UPLOADS images in memory at
once), and a connection serves at most
MAX_REQUESTS requests. It only listens on the addresses it is given (the fleet's BMC loopback
addresses). A BMC that does not answer (bmc_unresponsive fault, or resetting) has its connections
parked unanswered, as a hung BMC would, and closed after PARK_S seconds; no worker waits on them.
A ticker thread moves firmware update tasks on.
"""

from __future__ import annotations

import contextlib
import http.server
import queue
import selectors
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from .redfish import IMAGE_LIMIT, JSON_LIMIT, BmcService, Response, error

WORKERS = 16
MAX_PENDING = 128
MAX_PARKED = 64  # per BMC
PARK_S = 60.0
HANDSHAKE_S = 10.0
IO_TIMEOUT_S = 30.0
MAX_REQUESTS = 100
TICK_S = 0.1
UPLOADS = 2  # firmware images read into memory at once (each up to IMAGE_LIMIT)
UPLOAD_SLOTS = threading.BoundedSemaphore(UPLOADS)


@dataclass
class Endpoint:
    name: str
    node_dir: Path
    address: str
    port: int


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "gpusim-bmc/1.0"
    sys_version = ""
    timeout = IO_TIMEOUT_S

    def __init__(self, sock, address, service: BmcService, log):
        self.service = service
        self.log_line = log
        self.served = 0
        super().__init__(sock, address, None)

    def log_message(self, format, *args):
        pass  # requests are logged by _respond, without credentials

    def handle_one_request(self):
        self.served += 1
        super().handle_one_request()

    def parse_request(self):
        # After http.server's own parsing, which sets close_connection from the request's Connection header (an HTTP/1.1
        # request without one keeps it open): the MAX_REQUESTS-th request is answered with 'Connection: close'.
        ok = super().parse_request()
        if self.served >= MAX_REQUESTS:
            self.close_connection = True
        return ok

    def _body(self) -> bytes | Response:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return error(411, "Base.1.16.0.GeneralError", "Chunked request bodies are not supported; send Content-Length.")
        length = self.headers.get("Content-Length")
        if length is None:
            return b""
        if not length.isdigit():
            return error(400, "Base.1.16.0.GeneralError", "Content-Length is not a number.")
        if int(length) > IMAGE_LIMIT:
            self.close_connection = True
            return error(413, "Base.1.16.0.PayloadTooLarge", f"The request body is larger than {IMAGE_LIMIT} bytes.")
        return self.rfile.read(int(length))

    def _serve(self) -> None:
        length = self.headers.get("Content-Length", "0")
        large = length.isdigit() and JSON_LIMIT < int(length) <= IMAGE_LIMIT
        # A firmware image is held in memory while it is read and checked: at most UPLOADS at a time.
        if large and not UPLOAD_SLOTS.acquire(timeout=IO_TIMEOUT_S):
            self.close_connection = True
            response = error(503, "Base.1.16.0.ServiceTemporarilyUnavailable",
                             f"{UPLOADS} firmware uploads are in progress; retry later.", {"Retry-After": "10"})
        else:
            try:
                body = self._body()
                headers = {k.lower(): v for k, v in self.headers.items()}
                response = (body if isinstance(body, Response)
                            else self.service.handle(self.command, self.path, headers, body))
            finally:
                if large:
                    UPLOAD_SLOTS.release()
        self.send_response(response.status)
        self.send_header("OData-Version", "4.0")
        if response.body:
            self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(response.body)))
        for key, value in response.headers.items():
            self.send_header(key, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        # Head and body in one write: two small writes wait out the client's delayed ACK (40 ms a request).
        self._headers_buffer.append(b"\r\n" + (response.body if self.command != "HEAD" else b""))
        self.flush_headers()
        self.log_line(f"{self.service.name} {self.command} {self.path.split('?')[0][:200]} {response.status}")

    do_GET = do_POST = do_PATCH = do_DELETE = do_PUT = do_HEAD = _serve


class Server:
    """Serve every endpoint's BMC until stop() is called."""

    def __init__(self, endpoints: list[Endpoint], user: str, password: str, certfile: Path, keyfile: Path,
                 log=None, workers: int = WORKERS):
        self.log = log or (lambda _m: None)
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        self.ctx.load_cert_chain(str(certfile), str(keyfile))
        self.services: dict[socket.socket, BmcService] = {}
        self.listeners: list[socket.socket] = []
        self.bound: dict[str, tuple[str, int]] = {}
        for ep in endpoints:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((ep.address, ep.port))
            except OSError:
                sock.close()
                self.close()
                raise
            sock.listen(64)
            sock.setblocking(False)
            self.listeners.append(sock)
            self.services[sock] = BmcService(ep.name, ep.node_dir, user, password, log=self.log)
            self.bound[ep.name] = sock.getsockname()[:2]
        self.pending: queue.Queue = queue.Queue(MAX_PENDING)
        self.parked: list[tuple[float, socket.socket, BmcService]] = []
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self._worker, name=f"bmc-worker-{i}", daemon=True) for i in range(workers)]
        self.threads.append(threading.Thread(target=self._ticker, name="bmc-ticker", daemon=True))

    def service(self, name: str) -> BmcService:
        return next(s for s in self.services.values() if s.name == name)

    def serve_forever(self) -> None:
        for t in self.threads:
            t.start()
        sel = selectors.DefaultSelector()
        for sock in self.listeners:
            sel.register(sock, selectors.EVENT_READ)
        try:
            while not self.stopping.is_set():
                for key, _ev in sel.select(timeout=0.5):
                    self._accept(key.fileobj)
                self._unpark()
        finally:
            sel.close()
            self.close()

    def _accept(self, listener: socket.socket) -> None:
        try:
            conn, peer = listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            return
        service = self.services[listener]
        if not service.answering():
            mine = sum(1 for _t, _c, s in self.parked if s is service)
            if mine >= MAX_PARKED:
                conn.close()
            else:
                self.parked.append((time.monotonic() + PARK_S, conn, service))
            return
        try:
            self.pending.put_nowait((conn, peer, service))
        except queue.Full:
            self.log(f"{service.name}: {MAX_PENDING} connections wait already; closing one from {peer[0]}")
            conn.close()

    def _unpark(self) -> None:
        if not self.parked:
            return
        now = time.monotonic()
        keep = []
        for deadline, conn, service in self.parked:
            if now >= deadline or (service.answering() and not service.down_until > time.monotonic()):
                conn.close()  # a hung BMC drops it; one that came back closes the stale connection
            else:
                keep.append((deadline, conn, service))
        self.parked = keep

    def _worker(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, peer, service = self.pending.get(timeout=0.5)
            except queue.Empty:
                continue
            try:
                conn.setblocking(True)
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                conn.settimeout(HANDSHAKE_S)
                tls = self.ctx.wrap_socket(conn, server_side=True)
                tls.settimeout(IO_TIMEOUT_S)
                _Handler(tls, peer, service, self.log)
            except (OSError, ssl.SSLError, ValueError):
                pass  # the client went away or spoke no TLS: nothing to answer
            except Exception as exc:  # one bad request must not kill a worker
                self.log(f"{service.name}: internal error {exc!r}")
            finally:
                with contextlib.suppress(OSError):
                    conn.close()

    def _ticker(self) -> None:
        while not self.stopping.wait(TICK_S):
            for service in list(self.services.values()):
                try:
                    service.advance_tasks()
                except (OSError, ValueError) as exc:
                    self.log(f"{service.name}: task update failed: {exc}")

    def stop(self) -> None:
        self.stopping.set()

    def close(self) -> None:
        for sock in self.listeners:
            with contextlib.suppress(OSError):
                sock.close()
        for _d, conn, _s in self.parked:
            with contextlib.suppress(OSError):
                conn.close()
        self.parked = []
