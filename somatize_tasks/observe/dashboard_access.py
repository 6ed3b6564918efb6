"""Who may use the dashboard: its password kept out of ``ps``, and Host checked.

The password
    ``user:password`` comes from ``SOMATIZE_DASHBOARD_AUTH`` or from a file
    (``--basic-auth-file``, its first line), never from the command line: every
    user of the machine reads a process's arguments (``ps``, ``/proc/<pid>/cmdline``).
    Given as ``--basic-auth USER:PASSWORD``, the command refuses to start and says
    where to put it instead (:func:`read_credentials`).
The ``Host`` header
    A page on ``evil.example`` can make ``evil.example`` resolve to this machine
    (DNS rebinding) and read the dashboard from the victim's browser, as the same
    origin. The browser then sends ``Host: evil.example``, so a request is served
    only for a host this dashboard is reached by: an IP address (a literal cannot
    be rebound), ``localhost``, this machine's names, and the names given with
    ``--host`` (a DNS name in front of it); anything else gets 400
    (:class:`HostCheck`).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from pathlib import Path

from tornado.httputil import split_host_and_port

#: The variable that holds ``user:password``.
AUTH_VARIABLE = "SOMATIZE_DASHBOARD_AUTH"


def read_credentials(
    from_command_line: str | None, from_environment: str | None, path: Path | None
) -> str | None:
    """``user:password`` from the environment or a file; a ``ValueError`` saying what
    to do when it was given on the command line (or in two places)."""
    if from_command_line is not None:
        raise ValueError(
            "--basic-auth on the command line shows the password to every user of this "
            f"machine (ps); put USER:PASSWORD in {AUTH_VARIABLE} or in a file given "
            "with --basic-auth-file"
        )
    if path is None:
        return from_environment
    if from_environment is not None:
        raise ValueError(f"give the credentials once: {AUTH_VARIABLE} or --basic-auth-file")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read --basic-auth-file '{path}': {exc}") from None
    if not lines or not lines[0].strip():
        raise ValueError(f"--basic-auth-file '{path}' is empty: write USER:PASSWORD in it")
    return lines[0].strip()


class HostCheck:
    """Which ``Host`` headers the dashboard answers (see the module docstring)."""

    def __init__(self, names: Iterable[str] = ()) -> None:
        own = {"localhost", socket.gethostname(), socket.getfqdn()}
        self.names = frozenset(n.lower().rstrip(".") for n in (*own, *names) if n)

    def allows(self, host_header: str) -> bool:
        """Whether a request with this ``Host`` header is for this dashboard."""
        host, _ = split_host_and_port(host_header.strip().lower())
        host = host.removeprefix("[").removesuffix("]").rstrip(".")
        if not host:
            return False
        try:
            ipaddress.ip_address(host)
        except ValueError:
            return host in self.names
        return True
