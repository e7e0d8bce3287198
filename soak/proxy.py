"""A TCP proxy in front of the soak's Firestore emulator: the one place an outage is made.

Function processes talk to the emulator only through this proxy, so the soak can cut every
connection at once (`cut`: requests in flight lose their responses, new connections wait
unanswered, as behind a dead network path) and later point it at a restarted emulator
(`resume`). Connections opened during a cut are held in the listen backlog and served after
`resume`, as a client on a flaky network would see.
"""

from __future__ import annotations

import contextlib
import socket
import threading


class Proxy:
    """Forwards 127.0.0.1:`port` to an upstream host:port; thread-safe."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        """Listen on a free local port (`port`) and forward to `upstream`."""
        self._upstream = upstream
        self._open = threading.Event()
        self._open.set()
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=512)
        self.port: int = self._listener.getsockname()[1]
        """The port clients connect to."""
        self._closed = False
        threading.Thread(target=self._accept_loop, name="proxy-accept", daemon=True).start()

    @property
    def address(self) -> str:
        """`127.0.0.1:<port>`, for FIRESTORE_EMULATOR_HOST."""
        return f"127.0.0.1:{self.port}"

    def cut(self) -> None:
        """Drop every open connection and hold new ones until `resume`."""
        self._open.clear()
        with self._lock:
            sockets, self._sockets = self._sockets, set()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def resume(self, upstream: tuple[str, int]) -> None:
        """Forward to `upstream` from now on and serve the connections held meanwhile."""
        self._upstream = upstream
        self._open.set()

    def close(self) -> None:
        """Stop listening and drop every connection."""
        self._closed = True
        self.cut()
        self._listener.close()
        self._open.set()

    def _accept_loop(self) -> None:
        while not self._closed:
            self._open.wait()
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self._open.wait()
            try:
                upstream = socket.create_connection(self._upstream, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            for sock in (client, upstream):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._sockets.update((client, upstream))
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            with self._lock:
                self._sockets.discard(src)
                self._sockets.discard(dst)
