"""Errors of the configured cluster: each carries one clear, user-facing message (the embedded
node's own are in `ctxdb.node.errors`; both share `ctxdb.errors.ElasticsearchSetupError`)."""

from __future__ import annotations

from ctxdb.errors import ElasticsearchSetupError


class ClusterError(ElasticsearchSetupError):
    """The configured cluster cannot be used."""


class ClusterUnreachableError(ClusterError):
    """Nothing answers at ELASTICSEARCH_URL."""


class ClusterAuthError(ClusterError):
    """The cluster refused the configured credentials."""


class ClusterVersionError(ClusterError):
    """The server is not Elasticsearch, or its major version differs from the client's."""
