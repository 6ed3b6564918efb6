"""What goes wrong building a host cluster, said plainly."""

from __future__ import annotations


class HostsUnavailableError(RuntimeError):
    """This machine cannot build network namespaces (not root, no ``ip``, no privilege).

    Tests skip on it with its message as the reason."""


class HostCommandError(RuntimeError):
    """A command that builds or changes the cluster failed: its argv and stderr are shown."""
