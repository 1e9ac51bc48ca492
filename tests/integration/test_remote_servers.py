"""The test servers for remote stores themselves, with real servers: nginx serves byte ranges
exactly over http and https (scripts/http-server.sh), the fault proxy passes bytes through
unchanged and each fault does what it says (tests/integration/fault_proxy.py), and the Ceph RGW
of scripts/s3-server.sh round-trips objects with awscli, directly and through the proxy. Servers
die with a test that is killed."""
import http.client
import os
import random
import select
import shutil
import socket
import subprocess
import sys
import time

import pytest

from remote_servers import fault_proxy, http_server, missing_http_server, missing_s3_server, s3_server

SIZE = 3 * 1024 * 1024 + 12345


@pytest.fixture
def www(tmp_path):
    root = tmp_path / "www"
    (root / "records").mkdir(parents=True)
    data = random.Random(13).randbytes(SIZE)
    (root / "records" / "000000.rec").write_bytes(data)
    return root, data


def need_http():
    why = missing_http_server()
    if why:
        pytest.skip(why)


def curl(*args, check=True):
    """curl with a time bound; returns (exit code, body bytes, the -w text on stderr)."""
    p = subprocess.run(["curl", "-sS", "--max-time", "30", *args], capture_output=True, timeout=60)
    if check and p.returncode != 0:
        raise AssertionError(f"curl {' '.join(args)} -> {p.returncode}: {p.stderr.decode(errors='replace')}")
    return p.returncode, p.stdout, p.stderr.decode(errors="replace")


RANGES = [(0, 0), (0, 4095), (1, 1), (8 * 1024 * 1024 // 3, 8 * 1024 * 1024 // 3 + 65535), (SIZE - 10, SIZE - 1)]


@pytest.mark.parametrize("tls", [False, True], ids=["http", "https"])
def test_nginx_serves_ranges_byte_exact(www, tls):
    need_http()
    root, data = www
    with http_server(root, tls=tls) as srv:
        assert srv.url.startswith("https://127.0.0.1:" if tls else "http://127.0.0.1:")
        ca = ["--cacert", srv.ca] if tls else []
        if tls:
            assert os.path.isfile(srv.ca)
            rc, _, _ = curl(f"{srv.url}/records/000000.rec", "-o", "/dev/null", check=False)
            assert rc == 60  # not trusted without the test CA: the certificate is really checked
            curl(*ca, f"https://localhost:{srv.port}/records/000000.rec", "-o", "/dev/null")  # name in the SAN
        url = f"{srv.url}/records/000000.rec"
        _, body, _ = curl(*ca, url)
        assert body == data
        for a, b in RANGES:
            p = subprocess.run(["curl", "-sS", "--max-time", "30", *ca, "-r", f"{a}-{b}", "-o", "/dev/null",
                                "-w", "%{http_code}|%header{content-range}|%header{etag}", url],
                               capture_output=True, text=True, timeout=60)
            code, content_range, etag = p.stdout.split("|")
            assert code == "206" and content_range == f"bytes {a}-{b}/{SIZE}" and etag.startswith('"')
            _, body, _ = curl(*ca, "-r", f"{a}-{b}", url)
            assert body == data[a:b + 1], (a, b)
        # keep-alive: the second request on one command line reuses the connection
        p = subprocess.run(["curl", "-sS", "--max-time", "30", *ca, "-o", "/dev/null", "-o", "/dev/null",
                            "-w", "%{num_connects}\n", url, url], capture_output=True, text=True, timeout=60)
        assert p.stdout.split() == ["1", "0"]
        # read-only, and nothing outside the root
        rc, _, _ = curl(*ca, "-f", "-X", "PUT", "--data-binary", "x", url, check=False)
        assert rc == 22
        rc, _, _ = curl(*ca, "-f", "--path-as-is", f"{srv.url}/../www/records/000000.rec", check=False)
        assert rc == 22
        state = srv.dir
        assert os.path.exists(os.path.join(state, "run", "nginx.pid"))
    assert not os.path.exists(state)  # stop removed its folder
    assert (root / "records" / "000000.rec").read_bytes() == data  # the root is untouched


@pytest.fixture
def proxied(www):
    need_http()
    root, data = www
    with http_server(root) as srv, fault_proxy("127.0.0.1", srv.port, seed=42) as proxy:
        yield proxy, data


def get(port, path, headers=None):
    """One request on a fresh connection: (status, headers, body)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        c.request("GET", path, headers=headers or {})
        r = c.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        c.close()


def test_proxy_passes_bytes_through_exactly(proxied):
    proxy, data = proxied
    c = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=30)
    for a, b in RANGES + [(0, SIZE - 1)]:
        c.request("GET", "/records/000000.rec", headers={"Range": f"bytes={a}-{b}"})
        r = c.getresponse()
        assert r.status == 206 and r.getheader("Content-Range") == f"bytes {a}-{b}/{SIZE}"
        assert r.read() == data[a:b + 1]
    c.request("GET", "/records/000000.rec")
    r = c.getresponse()
    assert r.status == 200 and r.read() == data
    c.request("HEAD", "/records/000000.rec")
    r = c.getresponse()
    assert r.status == 200 and int(r.getheader("Content-Length")) == SIZE and r.read() == b""
    c.request("GET", "/missing")
    r = c.getresponse()
    assert r.status == 404
    missing = r.read()
    c.close()
    s = proxy.stats()
    # one client connection, one upstream connection: keep-alive on both sides
    assert s["requests"] == len(RANGES) + 4 and s["faults"] == 0
    assert s["by_method"] == {"GET": len(RANGES) + 3, "HEAD": 1}
    assert s["upstream_connections"] == 1
    # bytes_out: the bodies forwarded (the 404's body too; a HEAD has none)
    assert s["bytes_out"] == sum(b - a + 1 for a, b in RANGES + [(0, SIZE - 1)]) + SIZE + len(missing)


def fraction_faults(proxy, code=500, p=0.5, n=40):
    proxy.set("status", code=code, p=p)
    return [get(proxy.port, "/records/000000.rec", {"Range": "bytes=0-9"})[0] for _ in range(n)]


def test_status_faults_count_and_fraction_are_deterministic(proxied):
    proxy, data = proxied
    proxy.set("status", code=503, count=2)
    answers = [get(proxy.port, "/records/000000.rec", {"Range": "bytes=0-99"}) for _ in range(3)]
    assert [a[0] for a in answers] == [503, 503, 206]
    assert b"<Code>SlowDown</Code>" in answers[0][2] and answers[0][1]["Content-Type"] == "application/xml"
    assert answers[2][2] == data[:100]
    s = proxy.stats()
    assert s["faults"] == 2 and s["by_mode"] == {"status": 2} and s["requests"] == 3
    # a fraction p of requests, drawn from the seed: the same seed gives the same faults
    proxy.reset_stats()
    host, port = proxy.upstream
    with fault_proxy(host, port, seed=42) as a, fault_proxy(host, port, seed=42) as b, \
            fault_proxy(host, port, seed=43) as c:
        first = fraction_faults(a)
        assert set(first) == {500, 206} and 8 <= first.count(500) <= 32
        assert a.stats()["faults"] == first.count(500)
        assert fraction_faults(b) == first
        assert fraction_faults(c) != first


def test_corrupt_flips_one_body_byte_and_keeps_every_length(proxied):
    proxy, data = proxied
    proxy.set("corrupt", bytes=5, count=1)
    status, headers, body = get(proxy.port, "/records/000000.rec", {"Range": "bytes=100-199"})
    assert status == 206 and len(body) == 100 and int(headers["Content-Length"]) == 100
    assert body[5] == data[105] ^ 0x20 and body[:5] + body[6:] == data[100:105] + data[106:200]
    assert get(proxy.port, "/records/000000.rec", {"Range": "bytes=100-199"})[2] == data[100:200]  # count=1: once
    assert proxy.stats()["by_mode"] == {"corrupt": 1}


def test_truncate_sends_fewer_bytes_than_content_length(proxied):
    proxy, data = proxied
    proxy.set("truncate", bytes=100000)
    s = socket.create_connection(("127.0.0.1", proxy.port), timeout=30)
    s.sendall(b"GET /records/000000.rec HTTP/1.1\r\nHost: x\r\n\r\n")
    got = b""
    while chunk := s.recv(1 << 16):  # the proxy closes (cleanly) after the part
        got += chunk
    s.close()
    head, _, body = got.partition(b"\r\n\r\n")
    assert b"content-length: %d" % SIZE in head.lower()
    assert body == data[:100000]
    rc, _, _ = curl(f"{proxy.url}/records/000000.rec", "-o", "/dev/null", check=False)
    assert rc == 18  # curl: partial file
    assert proxy.stats()["by_mode"] == {"truncate": 2}


def test_reset_closes_abruptly(proxied):
    proxy, data = proxied
    proxy.set("reset")  # right after the request
    rc, body, err = curl(f"{proxy.url}/records/000000.rec", check=False)
    assert rc in (52, 56) and body == b"", err  # empty reply / connection reset
    proxy.set("reset", at="body", bytes=1000, count=1)
    rc, body, err = curl(f"{proxy.url}/records/000000.rec", check=False)
    assert rc in (18, 56) and len(body) <= 1000 and body == data[:len(body)], err
    # count=1: the next request goes through
    assert get(proxy.port, "/records/000000.rec", {"Range": "bytes=5-9"})[2] == data[5:10]
    assert proxy.stats()["by_mode"] == {"reset": 2}


def test_stall_pauses_then_completes(proxied):
    proxy, data = proxied
    proxy.set("stall", seconds=1.5, bytes=200000)
    c = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=30)
    c.request("GET", "/records/000000.rec")
    r = c.getresponse()
    assert r.status == 200 and int(r.getheader("Content-Length")) == SIZE
    t0 = time.monotonic()
    part = r.read(200000)
    t_part = time.monotonic() - t0
    rest = r.read()
    t_rest = time.monotonic() - t0 - t_part
    c.close()
    assert part + rest == data
    assert t_part < 1.0 and t_rest >= 1.4


def test_delay_adds_latency_per_request(proxied):
    proxy, data = proxied
    proxy.set("delay", ms=300)
    c = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=30)
    for _ in range(2):
        t0 = time.monotonic()
        c.request("GET", "/records/000000.rec", headers={"Range": "bytes=0-9"})
        r = c.getresponse()
        assert r.read() == data[:10]
        assert time.monotonic() - t0 >= 0.3
    c.close()
    proxy.set("none", latency_ms=200)  # latency without faults
    t0 = time.monotonic()
    assert get(proxy.port, "/records/000000.rec", {"Range": "bytes=0-9"})[2] == data[:10]
    assert time.monotonic() - t0 >= 0.2
    s = proxy.stats()
    assert s["by_mode"] == {"delay": 2} and s["faults"] == 2


def test_proxy_survives_clients_that_disconnect(proxied):
    proxy, data = proxied
    for cut in ("in-head", "after-request", "mid-body"):
        s = socket.create_connection(("127.0.0.1", proxy.port), timeout=30)
        if cut == "in-head":
            s.sendall(b"GET /records/000000.rec HTTP/1.1\r\nHo")
        else:
            s.sendall(b"GET /records/000000.rec HTTP/1.1\r\nHost: x\r\n\r\n")
            if cut == "mid-body":
                s.recv(1000)
        s.close()
    proxy.set("stall", seconds=0.5, bytes=10)
    s = socket.create_connection(("127.0.0.1", proxy.port), timeout=30)
    s.sendall(b"GET /records/000000.rec HTTP/1.1\r\nHost: x\r\n\r\n")
    s.recv(100)
    s.close()  # gone while the proxy stalls
    proxy.set("none")
    status, _, body = get(proxy.port, "/records/000000.rec")
    assert status == 200 and body == data
    assert proxy.proc.poll() is None


def aws_cli():
    return "/usr/bin/aws" if os.access("/usr/bin/aws", os.X_OK) else shutil.which("aws")


def test_s3_server_round_trip_with_awscli(tmp_path, www):
    why = missing_s3_server() or (None if aws_cli() else "awscli is not installed (scripts/deps.sh test)")
    if why:
        pytest.skip(why)
    _, data = www
    src = tmp_path / "000000.rec"
    src.write_bytes(data)
    with s3_server(tmp_path / "s3") as env:
        assert env["AWS_ENDPOINT_URL"].startswith("http://127.0.0.1:")
        run_env = dict(os.environ, **env, AWS_CONFIG_FILE=str(tmp_path / "none"),
                       AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"), AWS_MAX_ATTEMPTS="3")

        def aws(endpoint, *args):
            p = subprocess.run([aws_cli(), "--endpoint-url", endpoint, *map(str, args)], env=run_env,
                               capture_output=True, text=True, timeout=120)
            assert p.returncode == 0, f"aws {' '.join(map(str, args))}: {p.stdout}{p.stderr}"
            return p.stdout

        endpoint = env["AWS_ENDPOINT_URL"]
        aws(endpoint, "s3", "mb", "s3://fid-test")
        aws(endpoint, "s3", "cp", src, "s3://fid-test/store/records/000000.rec")
        aws(endpoint, "s3", "cp", "s3://fid-test/store/records/000000.rec", tmp_path / "back")
        assert (tmp_path / "back").read_bytes() == data
        assert "000000.rec" in aws(endpoint, "s3", "ls", "s3://fid-test/store/records/")
        # Through the proxy: requests signed for the proxy's host:port reach RGW unchanged (a
        # changed Host or Authorization header would fail the signature check).
        port = int(endpoint.rsplit(":", 1)[1])
        with fault_proxy("127.0.0.1", port, seed=1) as proxy:
            aws(proxy.url, "s3", "cp", "s3://fid-test/store/records/000000.rec", tmp_path / "proxied")
            assert (tmp_path / "proxied").read_bytes() == data
            aws(proxy.url, "s3", "cp", src, "s3://fid-test/store/records/000001.rec")  # a signed upload
            proxy.set("status", code=503, count=1)  # SlowDown: the client retries and gets it
            aws(proxy.url, "s3", "cp", "s3://fid-test/store/records/000001.rec", tmp_path / "retried")
            assert (tmp_path / "retried").read_bytes() == data
            s = proxy.stats()
            assert s["by_mode"] == {"status": 1} and s["requests"] >= 4


def test_servers_die_with_a_killed_test(www, tmp_path):
    """A test process SIGKILLed while its servers run (nothing of its own cleans up): its nginx
    (a daemon started by scripts/http-server.sh, stopped by the watcher remote_servers leaves) and
    its fault proxy (a child, PR_SET_PDEATHSIG) are gone within seconds."""
    need_http()
    root, _ = www
    holder = subprocess.Popen([sys.executable, "-c", """
import os, sys, time
sys.path.insert(0, sys.argv[1])
from remote_servers import fault_proxy, http_server
with http_server(sys.argv[2]) as srv, fault_proxy(srv.host, srv.port) as proxy:
    print(srv.dir, proxy.proc.pid, flush=True)
    time.sleep(300)
""", os.path.dirname(os.path.abspath(__file__)), str(root)], stdout=subprocess.PIPE, text=True)
    try:
        state, proxy_pid = holder.stdout.readline().split()
        with open(os.path.join(state, "pid")) as f:
            nginx_pid = int(f.read().split()[0])
        pids = [nginx_pid, int(proxy_pid)]
        fds = [os.pidfd_open(p) for p in pids]
        holder.kill()
        holder.wait()
        deadline = time.monotonic() + 30
        for pid, fd in zip(pids, fds):
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            assert ready, f"pid {pid} still runs 30 s after its test was killed"
    finally:
        if holder.poll() is None:
            holder.kill()
