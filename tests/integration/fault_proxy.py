#!/usr/bin/env python3
"""A fault-injecting HTTP/1.1 reverse proxy for remote-store tests (stdlib only).

    fault_proxy.py --upstream HOST:PORT [--seed N] [--port P] [--listen ADDR]

Listens on 127.0.0.1 (or ADDR: an address of a network namespace the test made), on an
ephemeral port unless --port, and prints `PORT <n>` as its first line
of stdout. Every request is forwarded byte for byte to the upstream (plain HTTP), request line
and headers unchanged (Host, Range, Authorization and x-amz-* included, so SigV4 signatures made
for the proxy's host:port stay valid); bodies stream through in 64 KiB chunks. Keep-alive on both
sides: one upstream connection per client connection.

Control, answered by the proxy itself on the same port (never forwarded):

    POST /__fault__?mode=MODE[&param=value...]   set the fault; answers the new state as JSON
    GET  /__fault__/stats                        {"requests", "by_method", "bytes_out", "faults",
                                                  "by_mode", "mode", ...}
    POST /__fault__/reset-stats                  zero the counters
    GET  /__fault__/wait-fault?seconds=S         answers the stats once a fault has been
                                                  counted since the last reset (at most S s)

Modes (each applies to the requests it selects: every one, or a fraction `p` of them drawn from
the seeded generator, at most `count` of them (then none any more); `match`
restricts it to requests whose target contains that text, `method` to those of that method):
    none                          forward untouched
    status   code=503|500|...     answer that status without forwarding (S3-style XML body:
                                  SlowDown for 503, InternalError otherwise)
    reset    at=request|body      close with a TCP reset right after reading the request, or
             bytes=N              after forwarding the response headers and N body bytes, or
             at=response          after the upstream answered in full, none of it forwarded
                                  (the server did the work; the client never hears of it)
    truncate bytes=N              forward the headers (full Content-Length) and N body bytes, then
                                  close the connection cleanly
    stall    seconds=S bytes=N    forward the headers and N body bytes, pause S seconds, then
                                  send the rest
    trickle  rate=B               forward the headers, then the body B bytes a second (default
                                  2: above any "no bytes for a while" limit, yet never done)
    corrupt  bytes=N              forward the whole response with body byte N flipped (xor 0x20):
                                  a transfer damaged in flight, every length right
    delay    ms=M                 wait M ms before forwarding (emulated round-trip time)
bytes defaults to half the body. `latency_ms=M` (with any mode) delays every forwarded request
by M ms without counting as a fault: RTT emulation under faults (no tc netem on this kernel).
`bytes_out` counts the response body bytes forwarded to clients (what a client fetched; chunked
bodies with their chunk framing), `by_method` the forwarded requests by method.
"""
import argparse
import asyncio
import json
import random
import socket
import struct
import sys
import urllib.parse

CHUNK = 64 * 1024
MAX_HEAD = 64 * 1024
CONTROL = "/__fault__"


class Head:
    """A request or response head: the raw bytes (forwarded as they are) and parsed fields."""

    def __init__(self, raw):
        self.raw = raw
        lines = raw.decode("latin-1").split("\r\n")
        self.first = lines[0]
        self.headers = {}
        for line in lines[1:]:
            if not line:
                continue
            name, _, value = line.partition(":")
            key = name.strip().lower()
            value = value.strip()
            self.headers[key] = f"{self.headers[key]}, {value}" if key in self.headers else value

    def get(self, name, default=None):
        return self.headers.get(name, default)

    def chunked(self):
        return "chunked" in self.get("transfer-encoding", "").lower()

    def content_length(self):
        value = self.get("content-length")
        return int(value) if value is not None and value.isdigit() else None

    def wants_close(self):
        return "close" in self.get("connection", "").lower()


async def read_head(reader):
    """The next head, or None at a clean end of stream before any byte of it."""
    try:
        raw = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as e:
        if not e.partial:
            return None
        raise ConnectionError("connection closed inside a message head") from None
    except asyncio.LimitOverrunError:
        raise ConnectionError("message head too large") from None
    return Head(raw)


async def copy_exact(reader, writer, n):
    """Copies exactly n bytes, a chunk at a time."""
    left = n
    while left > 0:
        data = await reader.readexactly(min(CHUNK, left))
        writer.write(data)
        await writer.drain()
        left -= len(data)


async def copy_chunked(reader, writer):
    """Copies a chunked body (size lines, data, trailers) verbatim."""
    while True:
        line = await reader.readuntil(b"\r\n")
        writer.write(line)
        size = int(line.split(b";")[0].strip() or b"0", 16)
        if size == 0:
            while True:  # trailers up to the empty line
                trailer = await reader.readuntil(b"\r\n")
                writer.write(trailer)
                if trailer == b"\r\n":
                    await writer.drain()
                    return
        await copy_exact(reader, writer, size)
        writer.write(await reader.readexactly(2))


async def copy_until_close(reader, writer):
    while True:
        data = await reader.read(CHUNK)
        if not data:
            return
        writer.write(data)
        await writer.drain()


def reset_connection(writer):
    """Closes with a TCP RST (SO_LINGER 0), not a FIN."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    writer.transport.abort()


def s3_error(code):
    name, message = ("SlowDown", "Please reduce your request rate.") if code == 503 else \
        ("InternalError", "We encountered an internal error. Please try again.")
    body = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{name}</Code><Message>{message}</Message>'
            f"<RequestId>fault-proxy</RequestId></Error>").encode()
    reason = {500: "Internal Server Error", 503: "Slow Down"}.get(code, "Error")
    head = (f"HTTP/1.1 {code} {reason}\r\nContent-Type: application/xml\r\nContent-Length: {len(body)}\r\n"
            f"Connection: keep-alive\r\n\r\n").encode()
    return head + body


class Fault:
    MODES = ("none", "status", "reset", "truncate", "stall", "trickle", "delay", "corrupt")

    def __init__(self, mode="none", params=None):
        params = params or {}
        if mode not in self.MODES:
            raise ValueError(f"unknown mode {mode!r}")
        self.mode = mode
        self.params = params
        self.count = int(params["count"]) if "count" in params else None
        self.p = float(params.get("p", 1.0))
        self.match = params.get("match")
        self.method = params.get("method")
        self.latency_ms = float(params.get("latency_ms", 0))
        if not 0.0 <= self.p <= 1.0 or (self.count is not None and self.count < 0):
            raise ValueError("p must be in [0, 1] and count >= 0")
        # Validate the mode's own parameters now, not on the first request.
        self.code = int(params.get("code", 503))
        self.at = params.get("at", "request")
        if self.at not in ("request", "body", "response"):
            raise ValueError("at must be request, body or response")
        self.bytes = int(params["bytes"]) if "bytes" in params else None
        self.seconds = float(params.get("seconds", 1.0))
        self.ms = float(params.get("ms", 0))
        self.rate = int(params.get("rate", 2))
        if self.rate < 1:
            raise ValueError("rate must be at least 1 byte a second")

    def state(self):
        return {"mode": self.mode, "params": self.params, "count_left": self.count}


class Proxy:
    def __init__(self, upstream_host, upstream_port, seed):
        self.upstream = (upstream_host, upstream_port)
        self.rng = random.Random(seed)
        self.fault = Fault()
        self.stats = self.zero_stats()
        self.fault_seen = asyncio.Event()  # set on the first fault after a reset

    @staticmethod
    def zero_stats():
        return {"requests": 0, "by_method": {}, "bytes_out": 0, "faults": 0, "by_mode": {}, "connections": 0,
                "upstream_connections": 0, "client_disconnects": 0}

    def choose(self, method, target):
        """The fault to apply to this request, or None; counts it."""
        f = self.fault
        if f.mode == "none" or (f.match and f.match not in target) or (f.method and f.method != method) or \
                f.count == 0:
            return None
        if f.p < 1.0 and self.rng.random() >= f.p:
            return None
        if f.count is not None:
            f.count -= 1
        self.stats["faults"] += 1
        self.fault_seen.set()
        self.stats["by_mode"][f.mode] = self.stats["by_mode"].get(f.mode, 0) + 1
        return f

    # ---- control endpoint ---------------------------------------------------------------------

    async def control(self, head, reader, writer):
        method, target = head.first.split(" ")[:2]
        n = head.content_length() or 0
        if n:
            await reader.readexactly(n)
        url = urllib.parse.urlsplit(target)
        code, body = 200, None
        try:
            if url.path == CONTROL + "/stats" and method in ("GET", "HEAD"):
                body = dict(self.stats, mode=self.fault.state())
            elif url.path == CONTROL + "/reset-stats" and method == "POST":
                self.stats = self.zero_stats()
                self.fault_seen.clear()
                body = self.stats
            elif url.path == CONTROL + "/wait-fault" and method == "GET":
                seconds = float(dict(urllib.parse.parse_qsl(url.query)).get("seconds", "60"))
                try:
                    await asyncio.wait_for(self.fault_seen.wait(), seconds)
                except asyncio.TimeoutError:
                    pass
                body = dict(self.stats, mode=self.fault.state())
            elif url.path == CONTROL and method == "POST":
                params = dict(urllib.parse.parse_qsl(url.query, keep_blank_values=True))
                self.fault = Fault(params.pop("mode", "none"), params)
                body = self.fault.state()
            else:
                code, body = 404, {"error": f"no control {method} {url.path}"}
        except (ValueError, KeyError) as e:
            code, body = 400, {"error": str(e)}
        data = json.dumps(body).encode()
        writer.write((f"HTTP/1.1 {code} {'OK' if code == 200 else 'Error'}\r\nContent-Type: application/json\r\n"
                      f"Content-Length: {len(data)}\r\n\r\n").encode() + (data if method != "HEAD" else b""))
        await writer.drain()

    # ---- proxying -----------------------------------------------------------------------------

    async def handle(self, client_reader, client_writer):
        self.stats["connections"] += 1
        up = None  # (reader, writer) of this client's upstream connection
        try:
            while True:
                head = await read_head(client_reader)
                if head is None:
                    return
                target = head.first.split(" ")[1] if " " in head.first else ""
                if target.startswith(CONTROL):
                    await self.control(head, client_reader, client_writer)
                    continue
                self.stats["requests"] += 1
                method = head.first.split(" ")[0]
                self.stats["by_method"][method] = self.stats["by_method"].get(method, 0) + 1
                fault = self.choose(method, target)
                if fault and fault.mode == "status":
                    await self.discard_body(head, client_reader)
                    client_writer.write(s3_error(fault.code))
                    await client_writer.drain()
                    continue
                if fault and fault.mode == "reset" and fault.at == "request":
                    reset_connection(client_writer)
                    return
                delay = self.fault.latency_ms + (fault.ms if fault and fault.mode == "delay" else 0)
                if delay > 0:
                    await asyncio.sleep(delay / 1000)
                up, keep = await self.forward(head, client_reader, client_writer, up, fault)
                if not keep:
                    return
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError, ValueError):
            self.stats["client_disconnects"] += 1
        finally:
            for w in (client_writer, up[1] if up else None):
                if w is not None and not w.is_closing():
                    w.close()

    async def discard_body(self, head, reader):
        sink = _Sink()
        if head.chunked():
            await copy_chunked(reader, sink)
        else:
            await copy_exact(reader, sink, head.content_length() or 0)

    async def connect(self):
        self.stats["upstream_connections"] += 1
        return await asyncio.open_connection(*self.upstream, limit=MAX_HEAD)

    async def forward(self, head, creader, cwriter, up, fault):
        """Forwards one request and its response. Returns (upstream connection or None, whether
        the client connection stays open)."""
        has_body = head.chunked() or (head.content_length() or 0) > 0
        reused = up is not None
        if up is None:
            up = await self.connect()
        ureader, uwriter = up
        uwriter.write(head.raw)
        await uwriter.drain()
        expect = "100-continue" in head.get("expect", "").lower()
        if has_body and not expect:
            await self.send_body(head, creader, uwriter)
        try:
            resp = await read_head(ureader)
        except ConnectionError:
            resp = None
        if resp is None and reused and not has_body:
            # The upstream closed the idle keep-alive connection meanwhile: once more, fresh.
            uwriter.close()
            up = await self.connect()
            ureader, uwriter = up
            uwriter.write(head.raw)
            await uwriter.drain()
            resp = await read_head(ureader)
        if resp is None:
            raise ConnectionError("upstream closed without answering")
        while resp.first.split(" ")[1:2] and resp.first.split(" ")[1].startswith("1"):
            cwriter.write(resp.raw)  # interim (100 Continue): relay it, the body follows
            await cwriter.drain()
            if expect and has_body:
                await self.send_body(head, creader, uwriter)
                expect = False
            resp = await read_head(ureader)
            if resp is None:
                raise ConnectionError("upstream closed without answering")
        if expect and has_body:
            # A final answer before the body: the client may or may not send it; end here.
            cwriter.write(resp.raw)
            await self.relay_body(head, resp, ureader, _Counted(cwriter, self))
            return None, False
        return await self.respond(head, resp, ureader, uwriter, cwriter, fault, up)

    async def send_body(self, head, creader, uwriter):
        if head.chunked():
            await copy_chunked(creader, uwriter)
        else:
            await copy_exact(creader, uwriter, head.content_length() or 0)

    def body_length(self, req, resp):
        """Response body length: an int, 'chunked', or None (until the upstream closes)."""
        status = resp.first.split(" ")[1] if " " in resp.first else "200"
        if req.first.startswith("HEAD ") or status in ("204", "304"):
            return 0
        if resp.chunked():
            return "chunked"
        return resp.content_length()

    async def relay_body(self, req, resp, ureader, cwriter):
        n = self.body_length(req, resp)
        if n == "chunked":
            await copy_chunked(ureader, cwriter)
        elif n is None:
            await copy_until_close(ureader, cwriter)
        else:
            await copy_exact(ureader, cwriter, n)

    async def respond(self, req, resp, ureader, uwriter, cwriter, fault, up):
        n = self.body_length(req, resp)
        if fault and fault.mode == "reset" and fault.at == "response":
            return await self.drop_response(req, resp, ureader, uwriter, cwriter)
        cwriter.write(resp.raw)
        await cwriter.drain()
        body = _Counted(cwriter, self)  # the body goes through it: bytes_out
        mode = fault.mode if fault else "none"
        if mode == "trickle" and isinstance(n, int):
            for at in range(0, n, fault.rate):
                await copy_exact(ureader, body, min(fault.rate, n - at))
                await asyncio.sleep(1.0)
            return up, not (req.wants_close() or resp.wants_close())
        if mode == "corrupt" and isinstance(n, int) and n > 0:
            at = max(0, min(fault.bytes if fault.bytes is not None else n // 2, n - 1))
            await copy_exact(ureader, body, at)
            byte = await ureader.readexactly(1)
            body.write(bytes([byte[0] ^ 0x20]))
            await copy_exact(ureader, body, n - at - 1)
            return up, not (req.wants_close() or resp.wants_close())
        if mode in ("truncate", "stall", "reset") and isinstance(n, int):
            part = fault.bytes if fault.bytes is not None else n // 2
            part = max(0, min(part, n))
            await copy_exact(ureader, body, part)
            if mode == "stall":
                await asyncio.sleep(fault.seconds)
                await copy_exact(ureader, body, n - part)
                return up, not (req.wants_close() or resp.wants_close())
            # The upstream connection holds the unread rest: drop it with the client's.
            uwriter.close()
            if mode == "reset":
                reset_connection(cwriter)
            else:
                await cwriter.drain()
                cwriter.close()
            return None, False
        await self.relay_body(req, resp, ureader, body)
        keep = n is not None and not (req.wants_close() or resp.wants_close())
        if n is None or resp.wants_close():
            uwriter.close()
            up = None
        return up, keep

    async def drop_response(self, req, resp, ureader, uwriter, cwriter):
        """Reads the upstream's whole answer (its work done), then resets the client before any
        byte of it."""
        await self.relay_body(req, resp, ureader, _Sink())
        uwriter.close()
        reset_connection(cwriter)
        return None, False


class _Counted:
    """A writer that adds what it forwards to the proxy's current bytes_out (reset-stats may
    replace the counters mid-body: the bytes after it count in the new ones)."""

    def __init__(self, writer, proxy):
        self.writer = writer
        self.proxy = proxy

    def write(self, data):
        self.proxy.stats["bytes_out"] += len(data)
        self.writer.write(data)

    async def drain(self):
        await self.writer.drain()


class _Sink:
    """A writer that drops what it is given (request bodies of answered-locally requests)."""

    def write(self, data):
        pass

    async def drain(self):
        pass


async def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--upstream", required=True, help="HOST:PORT of the plain-HTTP upstream")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--listen", default="127.0.0.1", help="address to listen on (loopback unless a test's namespace)")
    args = ap.parse_args()
    host, _, port = args.upstream.rpartition(":")
    proxy = Proxy(host or "127.0.0.1", int(port), args.seed)
    server = await asyncio.start_server(proxy.handle, args.listen, args.port, limit=MAX_HEAD)
    print(f"PORT {server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(0)
