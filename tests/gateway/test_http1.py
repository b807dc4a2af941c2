"""The gateway's HTTP/1.1 client against hand-written servers: framing, reuse, failures."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable

import pytest

from torchroute.gateway.http1 import (
    ConnectError,
    Pool,
    ProtocolError,
    request_head,
    target,
    with_length,
)

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[None]]


async def _request(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """The head and body of one request (``Content-Length`` framed)."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    return head, await reader.readexactly(length)


def _run(handler: Handler, client: Callable[[str, Pool], Awaitable[object]]) -> object:
    """Serve ``handler`` (called with each connection and its number) on a free port and
    run ``client(url, pool)`` against it; the connections opened are counted."""

    async def main() -> object:
        count = 0

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal count
            count += 1
            try:
                await handler(reader, writer, count)
            except (asyncio.IncompleteReadError, ConnectionError):
                pass
            finally:
                writer.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        pool = Pool(max_connections=4, max_idle=2)
        try:
            result = await client(f"http://127.0.0.1:{port}/v1/chat/completions", pool)
        finally:
            await pool.aclose()
            server.close()
        return result, count

    return asyncio.run(main())


async def _post(url: str, pool: Pool, body: bytes = b'{"a": 1}', timeout=None) -> tuple:
    where = target(url)
    request = with_length(request_head(where, [("Content-Type", "application/json")]), body)
    response = await pool.post(where, request)
    try:
        chunks = [c async for c in response.iter_bytes(timeout)]
    finally:
        await response.aclose()
    return response.status, response.headers, chunks


def test_content_length_answers_reuse_one_connection():
    seen = []

    async def handler(reader, writer, n):
        while True:
            head, body = await _request(reader)
            seen.append((head, body))
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: 1\r\nx-a: 2\r\n\r\nhello")
            await writer.drain()

    async def client(url, pool):
        return [await _post(url, pool) for _ in range(3)]

    answers, connections = _run(handler, client)
    assert connections == 1
    assert [(s, b"".join(c)) for s, _, c in answers] == [(200, b"hello")] * 3
    assert answers[0][1]["x-a"] == "1, 2"
    head, body = seen[0]
    assert head.startswith(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:")
    assert b"\r\nContent-Length: 8\r\n" in head and body == b'{"a": 1}'


def test_chunked_answer_in_pieces_is_decoded_and_the_connection_reused():
    wire = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5;ext=1\r\nhello\r\n1\r\n \r\n5\r\nworld\r\n0\r\nTrailer: x\r\n\r\n"
    )

    async def handler(reader, writer, n):
        while True:
            await _request(reader)
            for i in range(0, len(wire), 3):  # every framing boundary split somewhere
                writer.write(wire[i : i + 3])
                await writer.drain()
                await asyncio.sleep(0)

    async def client(url, pool):
        return [await _post(url, pool) for _ in range(2)]

    answers, connections = _run(handler, client)
    assert [b"".join(c) for _, _, c in answers] == [b"hello world"] * 2
    assert connections == 1


def test_a_burst_of_chunks_comes_out_as_one_piece():
    async def handler(reader, writer, n):
        await _request(reader)
        writer.write(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"3\r\nabc\r\n3\r\ndef\r\n0\r\n\r\n"
        )
        await writer.drain()

    (_, _, chunks), _ = _run(handler, _post)
    assert chunks == [b"abcdef"]


def test_an_answer_ended_by_close_or_connection_close_is_not_reused():
    async def handler(reader, writer, n):
        await _request(reader)
        if n == 1:  # no length: the body ends with the connection
            writer.write(b"HTTP/1.1 200 OK\r\n\r\nuntil the end")
        else:
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
        await writer.drain()

    async def client(url, pool):
        return [await _post(url, pool) for _ in range(3)]

    answers, connections = _run(handler, client)
    assert [b"".join(c) for _, _, c in answers] == [b"until the end", b"ok", b"ok"]
    assert connections == 3


def test_an_idle_connection_the_server_closed_is_not_reused():
    async def handler(reader, writer, n):
        await _request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()  # then the connection closes, the client not told before

    async def client(url, pool):
        first = await _post(url, pool)
        await asyncio.sleep(0.05)
        return first, await _post(url, pool)

    (first, second), connections = _run(handler, client)
    assert b"".join(first[2]) == b"".join(second[2]) == b"ok"
    assert connections == 2


def test_interim_answers_are_skipped():
    async def handler(reader, writer, n):
        await _request(reader)
        writer.write(
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n"
        )
        await writer.drain()

    (status, _, chunks), _ = _run(handler, _post)
    assert (status, chunks) == (201, [])


@pytest.mark.parametrize(
    "wire",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",  # closed mid-body
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",  # bad chunk size
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabX",  # no CRLF
        b"HTTP/1.1 200 OK\r\nContent-Length: 1, 2\r\n\r\nx",  # two lengths
        b"SSH-2.0 not http\r\n\r\n",  # not a status line
        b"",  # closed without answering
    ],
)
def test_a_broken_answer_is_a_protocol_error(wire):
    async def handler(reader, writer, n):
        await _request(reader)
        writer.write(wire)
        await writer.drain()

    with pytest.raises(ProtocolError):
        _run(handler, _post)


def test_a_read_waits_at_most_its_timeout():
    async def handler(reader, writer, n):
        await _request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n")
        await writer.drain()
        await asyncio.sleep(5)

    with pytest.raises(asyncio.TimeoutError):
        _run(handler, lambda url, pool: _post(url, pool, timeout=0.2))


def test_no_server_is_a_connect_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there

    async def main():
        await _post(f"http://127.0.0.1:{port}/v1", Pool())

    with pytest.raises(ConnectError):
        asyncio.run(main())


def test_targets_and_heads():
    where = target("https://api.example.com/v1/chat/completions")
    assert (where.origin, where.host_header, where.path) == (
        ("https", "api.example.com", 443),
        "api.example.com",
        "/v1/chat/completions",
    )
    assert target("http://[::1]:8001/v1?x=1").path == "/v1?x=1"
    assert target("http://[::1]:8001/v1").origin == ("http", "::1", 8001)
    with pytest.raises(ValueError):
        target("ftp://example.com/")
    with pytest.raises(ProtocolError):
        request_head(where, [("Authorization", "Bearer a\r\nX-Injected: 1")])
    request = with_length(request_head(where, [("Accept", "text/event-stream")]), b"{}")
    assert request.endswith(b"\r\nAccept: text/event-stream\r\nContent-Length: 2\r\n\r\n{}")
