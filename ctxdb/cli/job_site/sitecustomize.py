"""Loaded at start-up by every Python process of `ctxdb jobs run` (its folder leads PYTHONPATH):
hides Dagster's beta, preview and supersession notices, which a user cannot act on. Matched by
message, because these warning classes cannot be imported this early."""

import warnings

warnings.filterwarnings("ignore", message=r".* is currently in (beta|preview)")
warnings.filterwarnings("ignore", message=r".* is superseded")
