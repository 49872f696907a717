"""Port checks that turn "address already in use" into an actionable message."""

from __future__ import annotations

import socket
import time


class PortInUseError(RuntimeError):
    pass


def port_open(host: str, port: int, timeout: float = 0.3) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def ensure_port_free(host: str, port: int, what: str, setting: str) -> None:
    if port_open(host, port):
        raise PortInUseError(
            f"Port {port} on {host} is already taken, so the {what} cannot start there. "
            f"Stop whatever listens on it, or choose another port with {setting}."
        )


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def wait_for_port(host: str, port: int, timeout: float, proc_alive=lambda: True) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if port_open(host, port):
            return True
        if not proc_alive():
            return False
        time.sleep(0.1)
    return False
