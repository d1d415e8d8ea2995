"""The event contract, the identity a call runs as, and the `conv:` ref grammar.
In: raw JSON event lines and ref strings; out: validated events, Principals and parsed refs.
"""
