"""The HTTP endpoint of a worker (and, opt-in, of `streamdet run`): Prometheus /metrics.

Issue 4 fills the registry with streamdet's own series; this module owns the endpoint.
"""

from __future__ import annotations

from prometheus_client import start_http_server


def serve(port: int, host: str = "127.0.0.1") -> int:
    """Serve /metrics on host:port (0: any free port) in a daemon thread; the real port."""
    server, _thread = start_http_server(port, addr=host)
    return server.server_port
