"""Moved to `catsim.provenance` (the trainer records it too, and `llm` must not import `experiments`);
this name keeps working."""

from catsim.provenance import *  # noqa: F401,F403
from catsim.provenance import _short  # noqa: F401
