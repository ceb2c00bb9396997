"""The harness's TCP proxy forwards, cuts and stalls (against a local echo server: no services needed)."""

import socket
import threading
from collections.abc import Iterator

import pytest

from testkit.proxy import TcpProxy


@pytest.fixture
def echo_server() -> Iterator[tuple[str, int]]:
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=echo, args=(conn,), daemon=True).start()

    def echo(conn: socket.socket) -> None:
        with conn:
            try:
                while data := conn.recv(1024):
                    conn.sendall(data)
            except OSError:
                pass

    threading.Thread(target=serve, daemon=True).start()
    yield server.getsockname()
    server.close()


def test_forwards_then_cut_closes_the_client_connection(echo_server: tuple[str, int]) -> None:
    with TcpProxy(echo_server) as proxy:
        client = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
        client.sendall(b"ping")
        assert client.recv(4) == b"ping"
        proxy.cut()
        assert client.recv(4) == b""  # closed by the proxy
        client.close()
        again = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
        again.sendall(b"pong")
        assert again.recv(4) == b"pong"
        again.close()


def test_stall_holds_bytes_until_resume(echo_server: tuple[str, int]) -> None:
    with TcpProxy(echo_server) as proxy:
        client = socket.create_connection(("127.0.0.1", proxy.port), timeout=0.3)
        proxy.stall()
        client.sendall(b"held")
        with pytest.raises(TimeoutError):
            client.recv(4)
        proxy.resume()
        client.settimeout(5)
        assert client.recv(4) == b"held"
        client.close()
