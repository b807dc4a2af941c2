"""The gateway's HTTP/1.1 client of the backends: keep-alive connections on asyncio streams.

The gateway's backend calls are all alike: a JSON ``POST`` whose answer is read as it
arrives, framed by ``Content-Length``, chunked, or ended by the connection's close. This
client does only that, with one socket write per request and the chunked framing decoded
a network read at a time (so a burst of events stays one piece); a general client's
layers (request and URL objects, auth and redirect flows, its connection state machine
and lock-guarded pool) cost about 1 ms of CPU time per call, five times this client's.

A :class:`Pool` keeps up to ``max_idle`` idle connections per origin for ``keepalive_s``
seconds (an idle connection the server closed, or that has something to read, is
dropped rather than reused) and at most ``max_connections`` in use at once (a call waits
for one to come free). An answer is reused only when it was read to its end. Errors:
:class:`ConnectError` (no connection: refused, name not found, TLS handshake failed),
:class:`ProtocolError` (the connection broke, or what came back is not HTTP/1.1); a
read that waits longer than its ``read_timeout`` raises :class:`asyncio.TimeoutError`.
TLS (``https``) verifies the server against certifi's certificates where certifi is
installed (as httpx does), else the system's.
"""

from __future__ import annotations

import asyncio
import select
import ssl
import sys
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from typing import TypeVar
from urllib.parse import urlsplit

from torchroute.errors import ConnectError as ConnectError
from torchroute.errors import HTTPError as HTTPError
from torchroute.errors import ProtocolError as ProtocolError

T = TypeVar("T")

#: bytes asked of the socket per read
READ_SIZE = 1 << 16
#: the longest status line, header section, chunk-size or trailer line accepted
MAX_LINE = 1 << 16
USER_AGENT = "torchroute-gateway"


if sys.version_info >= (3, 11):

    async def within(awaitable: Awaitable[T], timeout: float | None) -> T:
        """``await awaitable``, or :class:`asyncio.TimeoutError` after ``timeout`` seconds
        (``None``: no bound)."""
        if timeout is None:
            return await awaitable
        async with asyncio.timeout(timeout):  # no task per call, unlike wait_for
            return await awaitable

else:  # pragma: no cover - Python 3.10

    async def within(awaitable: Awaitable[T], timeout: float | None) -> T:
        """``await awaitable``, or :class:`asyncio.TimeoutError` after ``timeout`` seconds
        (``None``: no bound)."""
        return await asyncio.wait_for(awaitable, timeout)


@dataclass(frozen=True)
class Target:
    """Where a URL's requests go: ``origin`` ``(scheme, host, port)``, the ``Host`` header
    and the request target (path and query)."""

    origin: tuple[str, str, int]
    host_header: str
    path: str


def target(url: str) -> Target:
    """The :class:`Target` of an ``http(s)`` URL; ``ValueError`` for another scheme."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{url!r} is not an http(s) URL")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    host = parts.netloc.rpartition("@")[2]
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Target((parts.scheme, parts.hostname, port), host, path)


def _ssl_context() -> ssl.SSLContext:
    try:
        import certifi

        context = ssl.create_default_context(cafile=certifi.where())
    except ImportError:  # pragma: no cover - certifi is a dependency
        context = ssl.create_default_context()
    context.set_alpn_protocols(["http/1.1"])
    return context


class _Connection:
    """One open connection to an origin (its stream reader and writer)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.idle_since = 0.0

    def usable(self, now: float, keepalive_s: float) -> bool:
        """Whether an idle connection can take a request: not idle too long, not closed,
        nothing waiting to be read (a server's close or garbage)."""
        if now - self.idle_since > keepalive_s or self.writer.is_closing():
            return False
        if self.reader.at_eof():
            return False
        sock = self.writer.get_extra_info("socket")
        if sock is None:  # pragma: no cover - every stream transport has one
            return False
        try:
            readable, _, _ = select.select([sock], [], [], 0)
        except (OSError, ValueError):
            return False
        return not readable

    def close(self) -> None:
        self.writer.close()


class Response:
    """The status and headers of an answer; its body from :meth:`iter_bytes`.

    ``headers``: ``{lower-case name: value}`` (repeated names joined with ``", "``).
    Close it (:meth:`aclose`) once done: its connection then goes back to the pool if the
    body was read to its end, else it is closed.
    """

    def __init__(
        self,
        pool: Pool,
        origin: tuple[str, str, int],
        conn: _Connection,
        status: int,
        headers: dict[str, str],
        keep_alive: bool,
    ) -> None:
        self.status, self.headers = status, headers
        self._pool, self._origin, self._conn = pool, origin, conn
        self._keep_alive = keep_alive
        self._done = False
        self._closed = False
        encoding = headers.get("transfer-encoding", "").lower()
        if encoding:
            if encoding.rsplit(",", 1)[-1].strip() != "chunked":
                self._framing, self._keep_alive = "close", False
            else:
                self._framing = "chunked"
        elif "content-length" in headers:
            length = headers["content-length"].split(",")[0].strip()
            if not length.isdigit() or len(set(headers["content-length"].split(","))) > 1:
                raise ProtocolError(f"bad Content-Length {headers['content-length']!r}")
            self._framing, self._left = "length", int(length)
        else:
            self._framing, self._keep_alive = "close", False
        if status in (204, 304) or 100 <= status < 200:
            self._framing, self._left = "length", 0
        # chunked decoding state: "size", "data", "crlf", "trailer", "done"
        self._state, self._chunk_left, self._pending = "size", 0, b""

    async def iter_bytes(self, read_timeout: float | None = None) -> AsyncIterator[bytes]:
        """The body as it arrives: the decoded bytes of each network read (none empty);
        each read waits at most ``read_timeout`` seconds."""
        reader = self._conn.reader
        if self._framing == "length":
            while self._left > 0:
                data = await self._read(reader, min(self._left, READ_SIZE), read_timeout)
                if not data:
                    raise ProtocolError("the backend closed the connection mid-answer")
                self._left -= len(data)
                yield data
            self._done = True
        elif self._framing == "chunked":
            while self._state != "done":
                data = await self._read(reader, READ_SIZE, read_timeout)
                if not data:
                    raise ProtocolError("the backend closed the connection mid-answer")
                body = self._dechunk(data)
                if body:
                    yield body
            self._done = True
        else:
            while True:
                data = await self._read(reader, READ_SIZE, read_timeout)
                if not data:
                    break
                yield data
            self._done = True

    async def read(self, max_bytes: int, read_timeout: float | None = None) -> bytes:
        """The body, at most ``max_bytes`` of it (the rest is not read)."""
        out = bytearray()
        async for data in self.iter_bytes(read_timeout):
            out += data
            if len(out) > max_bytes:
                break
        return bytes(out[:max_bytes])

    @staticmethod
    async def _read(reader: asyncio.StreamReader, size: int, timeout: float | None) -> bytes:
        try:
            return await within(reader.read(size), timeout)
        except asyncio.TimeoutError:  # an OSError too, from Python 3.11
            raise
        except OSError as exc:
            raise ProtocolError(f"the connection failed ({type(exc).__name__})") from exc

    def _dechunk(self, data: bytes) -> bytes:
        """The body bytes of ``data`` (after what came before), chunk framing removed."""
        buf, i, out = self._pending + data if self._pending else data, 0, []
        while self._state != "done":
            if self._state == "data":
                take = min(self._chunk_left, len(buf) - i)
                if take == 0:
                    break
                out.append(buf[i : i + take])
                i += take
                self._chunk_left -= take
                if self._chunk_left == 0:
                    self._state = "crlf"
            elif self._state == "crlf":
                if len(buf) - i < 2:
                    break
                if buf[i : i + 2] != b"\r\n":
                    raise ProtocolError("a chunk does not end with CRLF")
                i += 2
                self._state = "size"
            else:  # "size" or "trailer": one line
                end = buf.find(b"\r\n", i)
                if end < 0:
                    if len(buf) - i > MAX_LINE:
                        raise ProtocolError("a chunk-size or trailer line is too long")
                    break
                line, i = buf[i:end], end + 2
                if self._state == "trailer":
                    if not line:
                        self._state = "done"
                    continue
                size = line.split(b";", 1)[0].strip()
                try:
                    self._chunk_left = int(size, 16)
                except ValueError:
                    raise ProtocolError(f"bad chunk size {size[:20]!r}") from None
                if self._chunk_left < 0 or not size.isalnum():
                    raise ProtocolError(f"bad chunk size {size[:20]!r}")
                self._state = "data" if self._chunk_left else "trailer"
        self._pending = buf[i:]
        if self._state == "done" and self._pending:
            self._keep_alive = False  # bytes after the answer: do not reuse
        return b"".join(out)

    async def aclose(self) -> None:
        """Give the connection back to the pool (body read to its end) or close it."""
        if self._closed:
            return
        self._closed = True
        self._pool._release(self._origin, self._conn, self._done and self._keep_alive)


class Pool:
    """Keep-alive connections to the backends' origins.

    Args:
        max_connections: the most connections in use at once (a call waits for one).
        max_idle: the most idle connections kept per origin.
        keepalive_s: seconds an idle connection is kept.
    """

    def __init__(
        self, max_connections: int = 256, max_idle: int = 64, keepalive_s: float = 5.0
    ) -> None:
        self.max_idle, self.keepalive_s = int(max_idle), float(keepalive_s)
        self._slots = asyncio.Semaphore(int(max_connections))
        self._idle: dict[tuple[str, str, int], deque[_Connection]] = {}
        self._ssl: ssl.SSLContext | None = None

    async def post(
        self, where: Target, request: bytes, read_timeout: float | None = None
    ) -> Response:
        """Send ``request`` (head and body: :func:`with_length`) in one write; the
        answer's status and headers.

        Raises:
            ConnectError: no connection could be opened.
            ProtocolError: the connection broke or the answer is not HTTP/1.1.
            asyncio.TimeoutError: a read waited longer than ``read_timeout``.
        """
        await self._slots.acquire()
        conn = None
        try:
            conn = self._idle_connection(where.origin) or await self._connect(where.origin)
            conn.writer.write(request)
            await conn.writer.drain()
            status, headers, keep_alive = await within(self._head(conn.reader), read_timeout)
            return Response(self, where.origin, conn, status, headers, keep_alive)
        except BaseException as exc:
            if conn is not None:
                conn.close()
            self._slots.release()
            if isinstance(exc, (OSError, asyncio.IncompleteReadError)) and not isinstance(
                exc, asyncio.TimeoutError
            ):
                raise ProtocolError(f"the connection failed ({type(exc).__name__})") from exc
            raise

    def _idle_connection(self, origin: tuple[str, str, int]) -> _Connection | None:
        idle = self._idle.get(origin)
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            if conn.usable(now, self.keepalive_s):
                return conn
            conn.close()
        return None

    async def _connect(self, origin: tuple[str, str, int]) -> _Connection:
        scheme, host, port = origin
        context = None
        if scheme == "https":
            context = self._ssl = self._ssl or _ssl_context()
        try:
            reader, writer = await asyncio.open_connection(
                host, port, ssl=context, server_hostname=host if context else None
            )
        except asyncio.TimeoutError:
            raise
        except OSError as exc:  # refused, name not found, TLS handshake (ssl.SSLError)
            raise ConnectError(str(exc) or type(exc).__name__) from exc
        return _Connection(reader, writer)

    @staticmethod
    async def _head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bool]:
        """``(status, headers, keep-alive)`` of the next answer (1xx ones skipped)."""
        while True:
            try:
                raw = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError as exc:
                raise ProtocolError("the backend closed the connection without answering") from (
                    exc
                )
            except asyncio.LimitOverrunError as exc:
                raise ProtocolError("the answer's header section is too long") from exc
            lines = raw[:-4].decode("latin-1").split("\r\n")
            version, _, rest = lines[0].partition(" ")
            code = rest[:3]
            if version not in ("HTTP/1.1", "HTTP/1.0") or not code.isdigit():
                raise ProtocolError(f"not an HTTP/1.1 status line: {lines[0][:40]!r}")
            status = int(code)
            if 100 <= status < 200 and status != 101:
                continue  # an interim answer (100 Continue): the real one follows
            headers: dict[str, str] = {}
            for line in lines[1:]:
                name, colon, value = line.partition(":")
                name = name.strip().lower()
                if not colon or not name or line[0] in " \t":
                    raise ProtocolError(f"a malformed header line: {line[:40]!r}")
                value = value.strip()
                headers[name] = f"{headers[name]}, {value}" if name in headers else value
            tokens = headers.get("connection", "").lower()
            keep_alive = version == "HTTP/1.1" and "close" not in tokens
            return status, headers, keep_alive

    def _release(self, origin: tuple[str, str, int], conn: _Connection, reuse: bool) -> None:
        self._slots.release()
        idle = self._idle.setdefault(origin, deque())
        if reuse and len(idle) < self.max_idle and not conn.writer.is_closing():
            conn.idle_since = time.monotonic()
            idle.append(conn)
        else:
            conn.close()

    async def aclose(self) -> None:
        """Close the idle connections."""
        for idle in self._idle.values():
            while idle:
                idle.pop().close()


def request_head(where: Target, headers: list[tuple[str, str]]) -> bytes:
    """The request line and headers of a ``POST`` to ``where`` (``Host`` and
    ``User-Agent`` added) up to ``Content-Length``, which :func:`with_length` appends; a
    ``ProtocolError`` for a header that cannot be sent (a line break, not Latin-1)."""
    lines = [
        f"POST {where.path} HTTP/1.1",
        f"Host: {where.host_header}",
        f"User-Agent: {USER_AGENT}",
    ]
    for name, value in headers:
        if any(c in name or c in value for c in "\r\n\0") or not name.strip():
            raise ProtocolError(f"the header {name!r} cannot be sent (a line break)")
        lines.append(f"{name}: {value}")
    try:
        return ("\r\n".join(lines) + "\r\n").encode("latin-1")
    except UnicodeEncodeError:
        raise ProtocolError("a header cannot be sent (not Latin-1)") from None


def with_length(head: bytes, body: bytes) -> bytes:
    """``head`` (of :func:`request_head`) with the ``Content-Length`` of ``body``, the
    blank line and ``body``: the bytes of one request."""
    return b"%sContent-Length: %d\r\n\r\n%s" % (head, len(body), body)
