"""The ports the test emulators take: never one the kernel or another worker may take meanwhile.

A fault test kills an emulator and restarts it on the same port. Had that port come from
the kernel's ephemeral range (or another xdist worker's choice), a client socket or another
worker's emulator could take it while the emulator is down, and the restart would find a
different server answering (seen once: fake-gcs-server "restarted" without its bucket).
"""

from __future__ import annotations

import socket

from tiered_conformance import emulator


def ephemeral_low() -> int:
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        return int(f.read().split()[0])


def test_each_worker_takes_ports_from_its_own_slice_below_the_ephemeral_range(monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "3")
    slices = []
    for n in range(3):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", f"gw{n}")
        low, high = emulator._private_ports()
        slices.append((low, high))
        for _ in range(20):
            port = emulator.free_port()
            assert low <= port < high < ephemeral_low() + 1
    for (_, high), (low, _) in zip(slices, slices[1:]):
        assert high <= low  # disjoint


def test_a_port_in_use_is_not_handed_out(monkeypatch):
    port = next(p for p in iter(emulator.free_port, None) if emulator._port_free(p + 1))
    monkeypatch.setattr(emulator, "_private_ports", lambda: (port, port + 2))
    with socket.socket() as held:
        held.bind(("127.0.0.1", port))
        held.listen()
        assert {emulator.free_port() for _ in range(30)} == {port + 1}
