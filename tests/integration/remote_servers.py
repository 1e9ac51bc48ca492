"""Test servers for remote stores, as context managers that always stop what they started:

    with http_server(root, tls=True) as srv:        # nginx (scripts/http-server.sh)
        srv.url, srv.ca                             # https://127.0.0.1:PORT, the test CA file
    with fault_proxy("127.0.0.1", port) as proxy:   # tests/integration/fault_proxy.py
        proxy.url; proxy.set("status", code=503, count=2); proxy.stats()
    with s3_server(tmp_dir) as env:                 # Ceph RGW (scripts/s3-server.sh)
        env["AWS_ENDPOINT_URL"], env["AWS_ACCESS_KEY_ID"], ...

missing_http_server() / missing_s3_server() say why a server cannot run here (None when it can),
for pytest.skip.
"""
import contextlib
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Optional

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
HTTP_SERVER = os.path.join(REPO, "scripts", "http-server.sh")
S3_SERVER = os.path.join(REPO, "scripts", "s3-server.sh")
FAULT_PROXY = os.path.join(HERE, "fault_proxy.py")

START_TIMEOUT = 60     # seconds for http-server.sh / the proxy to start
S3_START_TIMEOUT = 180  # s3-server.sh boots Ceph (its own limit is 120 s)
STOP_TIMEOUT = 60


def missing_http_server():
    for tool in ("/usr/sbin/nginx", "openssl", "curl"):
        if not shutil.which(tool):
            return f"{tool} is not installed (scripts/deps.sh test installs nginx-light, openssl, curl)"
    return None


def missing_s3_server():
    for tool in ("radosgw", "radosgw-admin", "ceph-mon", "ceph-osd", "ceph", "curl"):
        if not shutil.which(tool):
            return f"{tool} is not installed (scripts/deps.sh test installs radosgw ceph-mon ceph-osd ceph-common)"
    return None


def parse_exports(text):
    """{NAME: value} from `export NAME=value` lines (values as the scripts print them: no quoting
    beyond printf %q of plain paths)."""
    env = {}
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("export ") and "=" in line:
            name, _, value = line[len("export "):].partition("=")
            env[name] = value.strip("'\"")
    return env


def _script(args, timeout):
    p = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} -> exit {p.returncode}\n{p.stderr[-4000:]}")
    return p.stdout


_WATCH = """import os, select, subprocess, sys
fd = os.pidfd_open(int(sys.argv[1]))
select.select([fd], [], [])
subprocess.run(sys.argv[2:], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
"""


@contextlib.contextmanager
def stopped_with_this_process(stop_argv):
    """The servers a script started are daemons, no children of ours: should this process die
    without stopping them (a SIGKILLed test run), a watcher in a session of its own runs
    `stop_argv` once it has gone. Ended with the block, after the block's own stop."""
    watcher = subprocess.Popen([sys.executable, "-c", _WATCH, str(os.getpid()), *stop_argv], start_new_session=True,
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield
    finally:
        watcher.kill()
        watcher.wait()


def _die_with_parent():
    """preexec_fn: the child gets SIGKILL when this process dies (prctl PR_SET_PDEATHSIG)."""
    import ctypes
    import signal
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG


@dataclass
class HttpServer:
    url: str
    ca: Optional[str]  # CA file that verifies the server (tls only)
    root: str
    dir: str

    @property
    def port(self):
        return urllib.parse.urlsplit(self.url).port

    @property
    def host(self):
        return urllib.parse.urlsplit(self.url).hostname

    def restart(self):
        """Stops nginx and starts it again on the same port: clients see resets, then refusals,
        then the same URL answering again."""
        _script([HTTP_SERVER, "restart", self.dir], START_TIMEOUT)


@contextlib.contextmanager
def exported(env):
    """env's variables set in os.environ (for the mounts and commands a test runs), put back as they
    were afterwards."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield env
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def aws(env, *args, check=True, timeout=300):
    """The aws command against env's endpoint (bounded in time); a failure raises AssertionError
    naming the call, unless check=False."""
    p = subprocess.run(["aws", "--endpoint-url", env["AWS_ENDPOINT_URL"], *args], capture_output=True, text=True,
                       env={**os.environ, **env}, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"aws {' '.join(args)} -> {p.returncode}: {p.stderr}")
    return p


@contextlib.contextmanager
def http_server(root, tls=False, netns=None, json_index=False):
    """nginx serving `root` read-only on 127.0.0.1 (https with a throwaway CA if tls); on the
    loopback of network namespace `netns` (a Namespace) when given; folders listed as JSON
    (nginx autoindex_format json) with json_index."""
    state = tempfile.mkdtemp(prefix="fid-http-")
    os.rmdir(state)  # the script creates it (and refuses a folder that is not its own)
    inside = netns.exec_prefix() if netns else []
    args = inside + [HTTP_SERVER, "start", state, "--root", os.path.abspath(root)] + (["--tls"] if tls else []) + \
        (["--json-index"] if json_index else [])
    stop = inside + [HTTP_SERVER, "stop", state]
    with stopped_with_this_process(stop):
        try:
            env = parse_exports(_script(args, START_TIMEOUT))
            yield HttpServer(env["FIDELITYFS_HTTP_URL"], env.get("FIDELITYFS_HTTP_CA"), env["FIDELITYFS_HTTP_ROOT"], state)
        finally:
            _script(stop, STOP_TIMEOUT)


def missing_netns():
    for tool in ("ip", "tc"):
        if not shutil.which(tool):
            return f"{tool} is not installed (iproute2)"
    if os.geteuid() != 0:
        return "network namespaces need root"
    return None


@dataclass
class Namespace:
    name: str
    server_addr: str  # the namespace's end of the link
    client_addr: str  # this namespace's end

    def exec_prefix(self):
        return ["ip", "netns", "exec", self.name]


@contextlib.contextmanager
def netns_link(rate_mbit):
    """A network namespace of the test's own, joined to this one by a veth pair (10.201.X.1 here,
    10.201.X.2 there), whose traffic toward us is limited to `rate_mbit` by tc tbf (this kernel has
    no netem: delay comes from the fault proxy's latency_ms). Deleted on exit, with the link."""
    tag = os.getpid() % 60000
    name, here, there = f"fidtest-{tag}", f"fidv{tag}a", f"fidv{tag}b"
    net = f"10.201.{tag % 250}"
    def ip(*args, ns=None):
        subprocess.run((["ip", "netns", "exec", ns] if ns else []) + list(args), check=True, capture_output=True,
                       timeout=30)
    subprocess.run(["ip", "netns", "del", name], capture_output=True)  # a leftover of a killed run
    ip("ip", "netns", "add", name)
    try:
        ip("ip", "link", "add", here, "type", "veth", "peer", "name", there)
        ip("ip", "link", "set", there, "netns", name)
        ip("ip", "addr", "add", f"{net}.1/30", "dev", here)
        ip("ip", "link", "set", here, "up")
        ip("ip", "addr", "add", f"{net}.2/30", "dev", there, ns=name)
        ip("ip", "link", "set", there, "up", ns=name)
        ip("ip", "link", "set", "lo", "up", ns=name)
        ip("tc", "qdisc", "add", "dev", there, "root", "tbf", "rate", f"{rate_mbit}mbit", "burst", "64kb",
           "latency", "100ms", ns=name)
        yield Namespace(name, f"{net}.2", f"{net}.1")
    finally:
        subprocess.run(["ip", "link", "del", here], capture_output=True)
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


class FaultProxy:
    def __init__(self, proc, port, upstream, listen="127.0.0.1"):
        self.proc = proc
        self.port = port
        self.upstream = upstream  # (host, port)
        self.url = f"http://{listen}:{port}"

    def _control(self, method, path, query=None, timeout=10):
        url = self.url + path + ("?" + urllib.parse.urlencode(query) if query else "")
        req = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read())

    def set(self, mode, **params):
        """Switch the fault: set("status", code=503, count=2), set("none"), ..."""
        return self._control("POST", "/__fault__", dict(mode=mode, **{k: str(v) for k, v in params.items()}))

    def stats(self):
        return self._control("GET", "/__fault__/stats")

    def reset_stats(self):
        return self._control("POST", "/__fault__/reset-stats")

    def wait_fault(self, seconds=60):
        """True once the proxy has injected a fault since its last reset (the proxy answers when
        it does), False after `seconds`."""
        return self._control("GET", "/__fault__/wait-fault", {"seconds": seconds}, timeout=seconds + 10)["faults"] > 0


@contextlib.contextmanager
def fault_proxy(upstream_host, upstream_port, seed=0, netns=None):
    """fault_proxy.py in front of upstream_host:upstream_port; killed (by pid) on exit. With
    `netns` (a Namespace) it runs there, listening on the namespace's end of the link."""
    err = tempfile.TemporaryFile(mode="w+")
    listen = netns.server_addr if netns else "127.0.0.1"
    # exec: the pid recorded is the proxy's own, not ip's.
    inside = netns.exec_prefix() if netns else []
    proc = subprocess.Popen(inside + [sys.executable, FAULT_PROXY, "--upstream", f"{upstream_host}:{upstream_port}",
                                      "--seed", str(seed), "--listen", listen],
                            stdout=subprocess.PIPE, stderr=err, text=True, preexec_fn=_die_with_parent)
    try:
        # Its first line, printed once it listens (or end of file if it died first).
        ready, _, _ = select.select([proc.stdout], [], [], START_TIMEOUT)
        first = proc.stdout.readline() if ready else ""
        if not first.startswith("PORT "):
            err.seek(0)
            raise RuntimeError(f"fault_proxy.py did not start: {first!r} {err.read()[-2000:]}")
        yield FaultProxy(proc, int(first.split()[1]), (upstream_host, upstream_port), listen)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=STOP_TIMEOUT)
        proc.stdout.close()
        err.close()


@contextlib.contextmanager
def s3_server(dir):
    """A throwaway Ceph RGW with its state in `dir` (must not exist yet, or be a leftover of the
    script); yields the AWS_* settings it printed. Stopped (and `dir` removed) on exit."""
    dir = os.path.abspath(dir)
    with stopped_with_this_process([S3_SERVER, "stop", dir]):
        try:
            yield parse_exports(_script([S3_SERVER, "start", dir], S3_START_TIMEOUT))
        finally:
            _script([S3_SERVER, "stop", dir], STOP_TIMEOUT)
