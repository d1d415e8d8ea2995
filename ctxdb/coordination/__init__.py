"""Coordination between writers: the writer lease (an Elasticsearch document with a TTL) and the
fencing check every Delta writer runs before each commit.
In: the settings' lease store; out: held leases and fences, or one-line refusals.
"""
