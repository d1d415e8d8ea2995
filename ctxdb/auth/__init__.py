"""Who is calling: hashed bearer tokens (a local file, or an Elasticsearch index shared by
replicas) and JWTs, each resolved to a `Principal`.
In: a bearer credential; out: the caller's identity, never taken from a request parameter.
"""
