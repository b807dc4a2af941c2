"""The socket ``serve`` and ``gateway`` listen on sends without delay on every connection.

An HTTP server writes a response's head and its body as two writes; where the connection
delays small writes (Nagle's algorithm), the body waits for the client's delayed
acknowledgement, about 40 ms per call on a kept-alive connection. The event loop turns the
delay off on the connections it accepts only when the listening socket names the TCP
protocol; here the option is read off the connection the loop accepted.
"""

from __future__ import annotations

import asyncio
import socket

from torchroute.serve.startup import bind


def _accepted_nodelay(sock: socket.socket) -> int:
    """``TCP_NODELAY`` of the server side of one connection accepted on ``sock`` by an
    asyncio server (what uvicorn runs on the socket it is handed)."""
    seen: list[int] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        server_side = writer.get_extra_info("socket")
        seen.append(server_side.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
        writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handler, sock=sock)
        async with server:
            reader, writer = await asyncio.open_connection(*sock.getsockname()[:2])
            await asyncio.wait_for(reader.read(), 10)  # the handler has run and closed
            writer.close()

    asyncio.run(main())
    assert len(seen) == 1
    return seen[0]


def test_the_connections_of_the_bound_socket_send_without_delay():
    sock = bind("127.0.0.1", 0)
    try:
        assert sock.proto == socket.IPPROTO_TCP
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
        assert _accepted_nodelay(sock) != 0
    finally:
        sock.close()


def test_a_socket_opened_without_naming_tcp_delays_its_writes():
    """The reference: the same server on a socket made the common way keeps the delay, so
    the check above can tell the two apart."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        assert _accepted_nodelay(sock) == 0
    finally:
        sock.close()
