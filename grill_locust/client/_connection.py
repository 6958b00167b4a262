"""Where a backend is and how a connection to it opens: the one socket layer under the streaming
client and the plain calls (`backend_http`). Plain `socket` / `ssl`, gevent-cooperative once Locust
has monkey-patched them."""

from __future__ import annotations

import socket
import ssl
from dataclasses import dataclass
from urllib.parse import urlsplit

USER_AGENT = "grill-locust"


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a URL points: scheme, host, port and path prefix."""

    scheme: str
    host: str
    port: int
    prefix: str

    @classmethod
    def parse(cls, url: str) -> Origin:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return cls(parts.scheme, parts.hostname, port, parts.path.rstrip("/"))

    @property
    def host_header(self) -> str:
        default = 443 if self.scheme == "https" else 80
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == default else f"{host}:{self.port}"

    def same_server(self, other: Origin) -> bool:
        return (self.scheme, self.host, self.port) == (other.scheme, other.host, other.port)


def open_socket(origin: Origin, timeout_s: float) -> socket.socket:
    """A connected socket (TLS for https); raises OSError (socket.timeout included)."""
    sock = socket.create_connection((origin.host, origin.port), timeout=max(timeout_s, 0.001))
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if origin.scheme == "https":
            context = ssl.create_default_context()
            sock = context.wrap_socket(sock, server_hostname=origin.host)
    except BaseException:
        sock.close()
        raise
    return sock


def connect_error(error: OSError, timeout_s: float) -> str:
    """Why a connection could not be opened, in a few words."""
    if isinstance(error, socket.timeout):
        return f"connect timed out after {timeout_s:g} s"
    if isinstance(error, socket.gaierror):
        return f"cannot resolve host: {error.strerror or error}"
    if isinstance(error, ConnectionRefusedError):
        return "connection refused"
    return f"cannot connect: {error.strerror or type(error).__name__}"
