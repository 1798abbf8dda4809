"""What a process tree listens on and runs with, read from /proc (Linux; no psutil needed).

Only the processes a test started: a root PID and its descendants, never a search by name, so
other Rays on a shared machine are left out.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from pathlib import Path
from typing import NamedTuple

LISTEN = "0A"  # TCP state in /proc/net/tcp{,6}


class Listener(NamedTuple):
    pid: int
    name: str  # /proc/PID/comm: the first 15 characters, e.g. "raylet", "ray::ImplicitFu"
    host: str
    port: int


def process_tree(root: int) -> list[int]:
    """``root`` and every live descendant."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:  # gone meanwhile
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])  # the name may hold spaces and ')'
            children.setdefault(ppid, []).append(int(entry.name))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo += children.get(pid, [])
    return tree


def listeners(pid: int, tables: dict[str, list[str]] | None = None) -> list[Listener]:
    """The TCP sockets ``pid`` listens on (IPv4 and IPv6).

    ``tables``: a cache of the socket tables by network namespace, shared by the calls of one
    sample of a process tree. Every process of a namespace sees the same table, and the kernel
    writes it anew on each read (~5 ms with a Ray's sockets): read once a sample, not twice a
    process (that was most of a test's sampling, a third of a core, beside a run it watches)."""
    proc = Path(f"/proc/{pid}")
    tables = {} if tables is None else tables
    try:
        inodes = set()
        for fd in (proc / "fd").iterdir():
            try:
                target = os.readlink(fd)
            except OSError:  # this fd closed meanwhile (the process reads files): skip it,
                continue  # not the whole process (that made the dashboard test flaky)
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
        name = (proc / "comm").read_text().strip()
        if not inodes:
            return []
        netns = os.readlink(proc / "ns" / "net")
        if netns not in tables:
            tables[netns] = [(proc / "net" / t).read_text() for t in ("tcp", "tcp6")]
    except OSError:  # the process ended meanwhile
        return []
    found = []
    for table in tables[netns]:
        for line in table.splitlines()[1:]:
            fields = line.split()
            if fields[3] == LISTEN and fields[9] in inodes:
                host, port = fields[1].split(":")
                found.append(Listener(pid, name, _ip(host), int(port, 16)))
    return found


def tree_listeners(root: int) -> list[Listener]:
    """The TCP sockets ``root`` and its descendants listen on, in one sample."""
    tables: dict[str, list[str]] = {}
    return [s for pid in process_tree(root) for s in listeners(pid, tables)]


def _ip(hex_ip: str) -> str:
    raw = bytes.fromhex(hex_ip)  # 32-bit words in host (little-endian) order
    if len(raw) == 4:
        return socket.inet_ntop(socket.AF_INET, raw[::-1])
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
    return socket.inet_ntop(socket.AF_INET6, words)


def is_loopback(host: str) -> bool:
    """127.0.0.0/8 or ::1, also as an IPv4-mapped IPv6 address (::ffff:127.0.0.1)."""
    ip = ipaddress.ip_address(host)
    mapped = getattr(ip, "ipv4_mapped", None)
    return (mapped or ip).is_loopback


def environ(pid: int) -> dict[str, str]:
    """The environment ``pid`` was started with ({} when it is gone)."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}


def cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [arg.decode(errors="replace") for arg in raw.split(b"\0") if arg]
