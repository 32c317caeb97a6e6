"""NF logs as evidence: an RFC 5424 syslog receiver that keeps a bounded, masked window of
lines per entity.

Network functions (Open5GS, a vendor AMF, a GPU server's kernel) forward their logs with
syslog; rsyslog and syslog-ng speak RFC 5424 over UDP, TCP (octet-counted or newline-framed
frames, RFC 6587) and TLS (RFC 5425). :class:`SyslogReceiver` listens on all three (TLS when
given an ``ssl.SSLContext``), parses each message (:func:`parse`; RFC 3164 lines as rsyslog
sends them by default are read too), masks subscriber identifiers **before anything is kept**
and files the line under its entity (the HOSTNAME field, or the APP-NAME when the host is
unnamed) in a :class:`LogWindow`: at most ``max_lines`` per entity and ``max_age_s`` old, so a
chatty NF cannot grow memory. Nothing of a line is trusted: it becomes evidence text only
through the triage stage, wrapped as data.

>>> m = parse(b'<134>1 2026-11-29T10:05:00.5Z smf-1 open5gs-smfd 42 - - '
...           b'PFCP association released by upf-3')
>>> m.entity, m.severity, m.app, m.text, m.ts
('smf-1', 6, 'open5gs-smfd', 'PFCP association released by upf-3', 1795946700.5)
>>> parse(b"<13>Nov 29 10:05:00 upf-3 upfd[7]: GTP-U error indication").entity
'upf-3'
"""

from __future__ import annotations

import re
import socket
import socketserver
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from guardrails.masking import Masker
from noc_assistant.ingest.replay import parse_ts

__all__ = ["LogLine", "LogWindow", "SyslogReceiver", "parse"]

#: the longest message kept (RFC 5424 receivers must take 480 octets and should take 2048)
MAX_MESSAGE = 8192

_RFC5424 = re.compile(
    rb"^<(?P<pri>\d{1,3})>1 (?P<ts>\S+) (?P<host>\S+) (?P<app>\S+) (?P<proc>\S+) (?P<msgid>\S+) "
    rb"(?P<sd>-|(?:\[(?:[^\]\\]|\\.)*\])+)(?: (?P<msg>.*))?$",
    re.S,
)
_RFC3164 = re.compile(
    rb"^<(?P<pri>\d{1,3})>(?P<ts>[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d) (?P<host>\S+) "
    rb"(?P<tag>[^:\[ ]+)(?:\[[^\]]*\])?: ?(?P<msg>.*)$",
    re.S,
)


@dataclass(frozen=True)
class LogLine:
    """One received line: when, from which entity and program, how severe, and its text
    (masked once it is in a :class:`LogWindow`)."""

    ts: float
    entity: str
    app: str
    severity: int
    """0 emergency … 7 debug (RFC 5424 §6.2.1)."""
    text: str


def parse(raw: bytes, now: float | None = None) -> LogLine | None:
    """One syslog message (RFC 5424, or RFC 3164 as rsyslog forwards it by default), or
    None for bytes that are neither (counted by the receiver, never guessed at)."""
    raw = raw.rstrip(b"\r\n\x00")[:MAX_MESSAGE]
    if (m := _RFC5424.match(raw)) is not None:
        msg = m["msg"] or b""
        if msg.startswith(b"\xef\xbb\xbf"):  # the BOM RFC 5424 allows before UTF-8 text
            msg = msg[3:]
        ts = _time(m["ts"].decode("ascii", "replace"), now)
        host, app = (_field(m[k]) for k in ("host", "app"))
    elif (m := _RFC3164.match(raw)) is not None:
        msg = m["msg"]
        ts = _bsd_time(m["ts"].decode("ascii"), now)
        host, app = _field(m["host"]), _field(m["tag"])
    else:
        return None
    pri = int(m["pri"])
    if pri > 191:
        return None
    text = msg.decode("utf-8", "replace").replace("\x00", "").strip()
    return LogLine(ts, host or app or "-", app or "-", pri % 8, text)


def _field(value: bytes) -> str:
    text = value.decode("utf-8", "replace")
    return "" if text == "-" else text


def _time(text: str, now: float | None) -> float:
    if text == "-":
        return time.time() if now is None else now
    try:
        return parse_ts(text)
    except ValueError:
        return time.time() if now is None else now


def _bsd_time(text: str, now: float | None) -> float:
    """An RFC 3164 time (no year, no zone): read as UTC in the year that puts it nearest
    ``now``."""
    wall = time.time() if now is None else now
    year = datetime.fromtimestamp(wall, UTC).year
    best = wall
    for y in (year - 1, year, year + 1):
        try:
            ts = datetime.strptime(f"{y} {text}", "%Y %b %d %H:%M:%S").replace(tzinfo=UTC)
        except ValueError:
            continue
        if abs(ts.timestamp() - wall) < abs(best - wall) or best == wall:
            best = ts.timestamp()
    return best


@dataclass
class LogWindow:
    """The last lines of each entity, masked, bounded by count and age."""

    masker: Masker
    max_lines: int = 2000
    max_age_s: float = 6 * 3600.0
    _lines: dict[str, deque[LogLine]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    received: int = 0
    unparsed: int = 0

    def add(self, line: LogLine) -> LogLine:
        """Keep ``line`` (its text masked first); what is returned is what is kept."""
        kept = LogLine(
            line.ts, line.entity, line.app, line.severity, self.masker.mask(line.text).text
        )
        with self._lock:
            self.received += 1
            q = self._lines.setdefault(line.entity, deque(maxlen=self.max_lines))
            q.append(kept)
            while q and q[0].ts < kept.ts - self.max_age_s:
                q.popleft()
        return kept

    def lines(self, entity: str, since: float, until: float) -> list[LogLine]:
        """The kept lines of ``entity`` stamped in ``[since, until]``, oldest first."""
        with self._lock:
            found = [x for x in self._lines.get(entity, ()) if since <= x.ts <= until]
        return sorted(found, key=lambda x: x.ts)

    def entities(self) -> list[str]:
        with self._lock:
            return sorted(self._lines)


class _Udp(socketserver.BaseRequestHandler):
    server: _UdpServer

    def handle(self) -> None:
        data, _ = self.request
        self.server.take(data)


class _Tcp(socketserver.StreamRequestHandler):
    server: _TcpServer

    def handle(self) -> None:
        for frame in _FrameIter(self.rfile.read1, MAX_MESSAGE):
            self.server.take(frame)


class _FrameIter:
    """RFC 6587 framing: octet counting (``LEN SP MSG``) or a newline after each message."""

    def __init__(self, read: Callable[[int], bytes], limit: int) -> None:
        self._read, self._limit, self._buf = read, limit, b""

    def __iter__(self) -> _FrameIter:
        return self

    def __next__(self) -> bytes:
        while True:
            frame = self._split()
            if frame is not None:
                return frame
            chunk = self._read(65536)
            if not chunk:
                if self._buf.strip():
                    frame, self._buf = self._buf, b""
                    return frame
                raise StopIteration
            self._buf += chunk

    def _split(self) -> bytes | None:
        buf = self._buf
        head, sp, _ = buf.partition(b" ")
        if sp and head.isdigit() and len(head) <= 5:
            n = int(head)
            if len(buf) >= len(head) + 1 + n:
                frame = buf[len(head) + 1 : len(head) + 1 + n]
                self._buf = buf[len(head) + 1 + n :]
                return frame
            return None
        line, nl, rest = buf.partition(b"\n")
        if nl:
            self._buf = rest
            return line
        if len(buf) > self._limit:  # a frame without an end: cut, never grow without bound
            self._buf = b""
            return buf[: self._limit]
        return None


class _Sink:
    window: LogWindow

    def take(self, data: bytes) -> None:
        line = parse(data)
        if line is None:
            with self.window._lock:
                self.window.unparsed += 1
            return
        self.window.add(line)


class _UdpServer(_Sink, socketserver.ThreadingUDPServer):
    daemon_threads = True


class _TcpServer(_Sink, socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[socketserver.BaseRequestHandler],
        tls: ssl.SSLContext | None,
    ) -> None:
        super().__init__(address, handler)
        self.tls = tls

    def get_request(self) -> tuple[socket.socket, object]:
        sock, addr = super().get_request()
        if self.tls is not None:
            sock = self.tls.wrap_socket(sock, server_side=True)
        return sock, addr


class SyslogReceiver:
    """Syslog over UDP and TCP (TLS when ``tls`` is given) on ``host``, into ``window``.

    ``port`` 0 picks free ports; :attr:`udp_port` and :attr:`tcp_port` say which."""

    def __init__(
        self,
        window: LogWindow,
        host: str = "127.0.0.1",
        port: int = 0,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.window = window
        self._tcp = _TcpServer((host, port), _Tcp, tls)
        self._udp = _UdpServer((host, port or self._tcp.server_address[1]), _Udp)
        for server in (self._tcp, self._udp):
            server.window = window
        self._threads = [
            threading.Thread(target=s.serve_forever, name=f"syslog-{n}", daemon=True)
            for n, s in (("tcp", self._tcp), ("udp", self._udp))
        ]

    @property
    def tcp_port(self) -> int:
        return int(self._tcp.server_address[1])

    @property
    def udp_port(self) -> int:
        return int(self._udp.server_address[1])

    def start(self) -> SyslogReceiver:
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        for server in (self._tcp, self._udp):
            server.shutdown()
            server.server_close()
