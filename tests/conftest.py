"""Shared pytest configuration: Hypothesis profiles.

Select a profile with the HYPOTHESIS_PROFILE environment variable:

- ``dev`` (default): 50 examples per property, for quick local runs;
- ``ci``: 200 examples per property.

Both disable Hypothesis' per-example deadline: the compiled core is fast, but
a loaded CI machine can stall any single example.
"""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("dev", max_examples=50, deadline=None)
settings.register_profile("ci", max_examples=200, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))

# A client of a stopped server gives up after 1 s instead of the default 10
# (tests that measure the window pass reconnect_window themselves).
os.environ.setdefault("FASTREPLAY_RECONNECT_WINDOW", "1")
