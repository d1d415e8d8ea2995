"""Errors of the embedded node: each carries one clear, user-facing message."""

from __future__ import annotations

from ctxdb.errors import ElasticsearchSetupError


class EmbeddedNodeError(ElasticsearchSetupError):
    """The embedded node could not be installed, started or stopped."""


class JavaNotFoundError(EmbeddedNodeError):
    """No JDK new enough for the node was found."""


class MavenError(EmbeddedNodeError):
    """`mvn` is missing or failed to fetch the distribution."""


class ChecksumError(EmbeddedNodeError):
    """The distribution zip does not match (or has no) pinned checksum."""


class SystemUserError(EmbeddedNodeError):
    """The unprivileged system user for the node could not be created."""


class PortInUseError(EmbeddedNodeError):
    """Another process listens on the node's HTTP or transport port."""


class NodeStartError(EmbeddedNodeError):
    """The node died or did not become healthy during start-up (message ends with its log)."""
