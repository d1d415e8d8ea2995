"""The embedded Elasticsearch node: download, verify, unpack, find a JDK, start and stop it.
In: settings (port, cache dir); out: a running local node (never used against a user's cluster).
"""
