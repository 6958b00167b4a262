"""Machines for the across-machines tests: Linux network namespaces joined by links we can slow or cut.

`Network(["master", "worker1", ...])` makes one namespace per machine (named `grill-<pid>-<machine>`),
`link(a, b)` a point-to-point veth pair, `lan(name, machines)` a bridge in a namespace of its own that
the machines join. This kernel has no `netem` (nor `fq`) qdisc, so a delay is added in user space: a
machine joins a LAN through a *delay line*, a pair of TAP devices with this file's `__main__` copying
frames between them, each direction held back by its own delay. Cutting a link is `ip link set down` on
both of its ends. `close()` kills every process started here and deletes every namespace; a new
`Network` first sweeps the namespaces left by runs whose process is gone (a test killed by its timeout).
Every `ip` command is bounded in time.

Run as `python netns.py NS_A TAP_A NS_B TAP_B`, this file is the delay line: it creates the two TAPs,
prints "ready", then copies frames until its standard input closes; a line `DELAY_A_TO_B_MS DELAY_B_TO_A_MS`
sets the delays (answered "ok").
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import re
import select
import signal
import struct
import subprocess
import sys
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO

from grill_locust.sim.process import die_with_parent

IP_TIMEOUT_S = 10.0  # any one `ip` command
READY_TIMEOUT_S = 10.0  # a delay line's TAPs, a process's "ready" line
STOP_TIMEOUT_S = 5.0  # SIGTERM, then SIGKILL
PREFIX = "grill-"
SUBNET = "10.77"  # every link and LAN is a /24 of 10.77.0.0/16: namespaces keep it off the host's network
NETNS_DIR = Path("/var/run/netns")
SET_HOSTNAME = 'hostname "$0" && exec "$@"'  # sh -c SET_HOSTNAME MACHINE ARGV...


def require_namespaces() -> None:
    """Skip (fail under GRILL_REQUIRE_REAL=1) where this process cannot make network namespaces."""
    from tests.real_binaries import require_binary, unavailable  # here: the delay line runs this file alone

    if not sys.platform.startswith("linux"):
        unavailable("network namespaces need Linux")
    require_binary("ip", install="apt-get install iproute2")
    require_binary("unshare", install="apt-get install util-linux")
    if os.geteuid() != 0:
        unavailable("making network namespaces needs root")
    if not os.path.exists("/dev/net/tun"):
        unavailable("/dev/net/tun is missing (the delay line needs TAP devices)")


def ip(*args: str, namespace: str | None = None, check: bool = True) -> str:
    command = ["ip", *(["-n", namespace] if namespace else []), *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=IP_TIMEOUT_S)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)}: {done.stderr.strip()}")
    return done.stdout


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _delete_namespace(name: str) -> None:
    """Kill what still runs inside (our own children, started there), then delete the namespace."""
    for pid in ip("netns", "pids", name, check=False).split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass
    ip("netns", "del", name, check=False)


def sweep_stale_namespaces() -> list[str]:
    """Delete the namespaces of earlier runs whose process is gone; returns their names."""
    stale = []
    for line in ip("netns", "list", check=False).splitlines():
        name = line.split()[0] if line.strip() else ""
        match = re.fullmatch(rf"{PREFIX}(\d+)-.+", name)
        if match and not _alive(int(match.group(1))):
            _delete_namespace(name)
            stale.append(name)
    return stale


@dataclass
class Link:
    """Two interfaces, `a_if` in namespace `a` and `b_if` in `b`; addresses without their /24."""

    a: str
    a_if: str
    b: str
    b_if: str
    a_address: str | None
    b_address: str | None
    delay_line: subprocess.Popen[str] | None = None


@dataclass
class Network:
    machines: Sequence[str]
    tag: str = field(default_factory=lambda: f"{PREFIX}{os.getpid()}")
    links: dict[tuple[str, str], Link] = field(default_factory=dict)
    processes: list[subprocess.Popen[str]] = field(default_factory=list)
    _subnets: int = 0
    _made: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        require_namespaces()
        sweep_stale_namespaces()
        try:
            for machine in self.machines:
                self._add_namespace(machine)
        except BaseException:
            self.close()
            raise

    def namespace(self, machine: str) -> str:
        return f"{self.tag}-{machine}"

    def _add_namespace(self, machine: str) -> None:
        name = self.namespace(machine)
        ip("netns", "add", name)
        self._made.append(name)
        ip("link", "set", "dev", "lo", "up", namespace=name)

    def _next_subnet(self) -> str:
        self._subnets += 1
        return f"{SUBNET}.{self._subnets}"

    # -- topology ---------------------------------------------------------------------------------
    def link(self, a: str, b: str) -> Link:
        """A point-to-point veth pair; each end is named after the machine at the other end."""
        subnet = self._next_subnet()
        link = self._veth(a, b, b, a, f"{subnet}.1", f"{subnet}.2")
        self.links[(a, b)] = link
        return link

    def lan(self, name: str, members: Sequence[str], delayed: Sequence[str] = ()) -> dict[str, str]:
        """A bridge in namespace `<tag>-<name>` with each member on it (interface `name` in the member);
        members in `delayed` join through a delay line. Returns each member's address."""
        switch = f"{self.tag}-{name}"
        ip("netns", "add", switch)
        self._made.append(switch)
        ip("link", "add", "name", "bridge", "type", "bridge", namespace=switch)
        ip("link", "set", "dev", "bridge", "up", namespace=switch)
        subnet = self._next_subnet()
        addresses = {}
        for host, member in enumerate(members, start=1):
            address = f"{subnet}.{host}"
            if member in delayed:
                link = self._delay_line(member, name, switch, member, address)
            else:
                link = self._veth(member, name, switch, member, address, None, b_namespace=switch)
            ip("link", "set", "dev", member, "master", "bridge", namespace=switch)
            self.links[(member, name)] = link
            addresses[member] = address
        return addresses

    def _veth(
        self,
        a: str,
        a_if: str,
        b: str,
        b_if: str,
        a_address: str | None,
        b_address: str | None,
        b_namespace: str | None = None,
    ) -> Link:
        ns_a, ns_b = self.namespace(a), b_namespace or self.namespace(b)
        ip("link", "add", "name", a_if, "netns", ns_a, "type", "veth", "peer", "name", b_if, "netns", ns_b)
        link = Link(ns_a, a_if, ns_b, b_if, a_address, b_address)
        self._configure(link)
        return link

    def _delay_line(self, a: str, a_if: str, switch: str, b_if: str, a_address: str) -> Link:
        ns_a = self.namespace(a)
        line = subprocess.Popen(
            [sys.executable, __file__, ns_a, a_if, switch, b_if],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            preexec_fn=die_with_parent,
        )
        self.processes.append(line)
        _answer(line, "ready")
        link = Link(ns_a, a_if, switch, b_if, a_address, None, delay_line=line)
        self._configure(link)
        return link

    def _configure(self, link: Link) -> None:
        for namespace, interface, address in (
            (link.a, link.a_if, link.a_address),
            (link.b, link.b_if, link.b_address),
        ):
            if address is not None:
                ip("addr", "add", f"{address}/24", "dev", interface, namespace=namespace)
            ip("link", "set", "dev", interface, "up", namespace=namespace)

    def address(self, machine: str, on: str) -> str:
        """`machine`'s address on its link to `on` (a machine or a LAN)."""
        if (machine, on) in self.links:
            address = self.links[(machine, on)].a_address
        else:
            address = self.links[(on, machine)].b_address
        assert address is not None
        return address

    # -- faults -----------------------------------------------------------------------------------
    def set_delay(self, machine: str, lan: str, sent_ms: float, received_ms: float = 0.0) -> None:
        """Hold back the frames `machine` sends on `lan` by `sent_ms`, those it receives by `received_ms`."""
        line = self.links[(machine, lan)].delay_line
        assert line is not None, f"{machine} joins {lan} by a plain veth: give it to lan(delayed=...)"
        assert line.stdin is not None
        line.stdin.write(f"{sent_ms} {received_ms}\n")
        line.stdin.flush()
        _answer(line, "ok")

    def set_link(self, a: str, b: str, up: bool) -> None:
        """Take the link between `a` and `b` (a machine or a LAN) down at both ends, or up again."""
        link = self.links.get((a, b)) or self.links[(b, a)]
        for namespace, interface in ((link.a, link.a_if), (link.b, link.b_if)):
            ip("link", "set", "dev", interface, "up" if up else "down", namespace=namespace)

    # -- processes --------------------------------------------------------------------------------
    def popen(
        self, machine: str, argv: Sequence[str], log: Path, env: dict[str, str] | None = None
    ) -> subprocess.Popen[str]:
        """Start `argv` on `machine` (its network namespace, its hostname), output to `log`; killed by
        close() at the latest."""
        with open(log, "w") as out:
            process = subprocess.Popen(
                # its own hostname too (a UTS namespace): a worker's id starts with its machine's name
                ["ip", "netns", "exec", self.namespace(machine), "unshare", "--uts", "sh", "-c", SET_HOSTNAME]
                + [machine, *argv],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                text=True,
                env=env,
                preexec_fn=die_with_parent,
            )
        self.processes.append(process)
        return process

    def close(self) -> None:
        for process in self.processes:
            stop(process)
        self.processes.clear()
        for name in reversed(self._made):
            _delete_namespace(name)
        self._made.clear()

    def __enter__(self) -> Network:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def stop(process: subprocess.Popen[str], timeout_s: float = STOP_TIMEOUT_S) -> int:
    """SIGTERM, then SIGKILL after `timeout_s`; returns the exit status."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=timeout_s)
    for stream in (process.stdin, process.stdout):
        if stream is not None:
            stream.close()
    return process.returncode


def _answer(process: subprocess.Popen[str], expected: str) -> None:
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], READY_TIMEOUT_S)
    line = process.stdout.readline().strip() if ready else "(no answer)"
    if line != expected:
        raise RuntimeError(f"delay line: expected {expected!r}, got {line!r}")


# -- the delay line ------------------------------------------------------------------------------
TUNSETIFF = 0x400454CA
IFF_TAP = 0x0002
IFF_NO_PI = 0x1000
CLONE_NEWNET = 0x40000000
FRAME_BYTES = 65536


def _open_tap(namespace: str, interface: str) -> int:
    """A TAP device in `namespace` (this process enters it first: a TAP lives where it was opened)."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    namespace_fd = os.open(NETNS_DIR / namespace, os.O_RDONLY)
    try:
        if libc.setns(namespace_fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns {namespace}")
    finally:
        os.close(namespace_fd)
    tap = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(tap, TUNSETIFF, struct.pack("16sH", interface.encode(), IFF_TAP | IFF_NO_PI))
    return tap


def delay_line(ns_a: str, tap_a: str, ns_b: str, tap_b: str, control: IO[str], answer: IO[str]) -> None:
    """Copy frames between two TAPs, each direction through a FIFO that holds a frame for its delay."""
    a, b = _open_tap(ns_a, tap_a), _open_tap(ns_b, tap_b)
    delay_s = {a: 0.0, b: 0.0}  # by the TAP a frame came from
    queues: dict[int, deque[tuple[float, bytes]]] = {a: deque(), b: deque()}
    other = {a: b, b: a}
    print("ready", file=answer, flush=True)
    while True:
        now = time.monotonic()
        for source, queue in queues.items():
            while queue and queue[0][0] <= now:
                try:
                    os.write(other[source], queue.popleft()[1])
                except OSError:
                    pass  # the far end is down: the frame is lost, as on a cable
        due = [queue[0][0] for queue in queues.values() if queue]
        wait_s = max(0.0, min(due) - now) if due else None
        readable, _, _ = select.select([a, b, control], [], [], wait_s)
        for source in readable:
            if source is control:
                line = control.readline()
                if not line:
                    return
                delay_s[a], delay_s[b] = (float(v) / 1000.0 for v in line.split())
                print("ok", file=answer, flush=True)
                continue
            try:
                frame = os.read(source, FRAME_BYTES)
            except (BlockingIOError, OSError):
                continue
            queue = queues[source]
            leaves = time.monotonic() + delay_s[source]
            # never overtake a frame sent earlier (when a delay shrinks)
            queue.append((max(leaves, queue[-1][0]) if queue else leaves, frame))


if __name__ == "__main__":
    delay_line(*sys.argv[1:5], control=sys.stdin, answer=sys.stdout)
