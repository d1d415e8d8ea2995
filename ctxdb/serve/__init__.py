"""The faces of the search service: HTTP API, bearer-token/JWT authentication, the ref resolver.
In: authenticated requests; out: JSON responses and file bytes, never outside the caller's identity.
"""
