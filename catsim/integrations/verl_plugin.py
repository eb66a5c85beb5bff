"""verl's `verl.plugins` entry point for catsim: imports `catsim.integrations.verl`, loudly.

verl >= 0.9 loads every `verl.plugins` entry point at `import verl` (`verl/__init__.py`) and logs a
failure only at DEBUG, so a broken install would silently leave `algorithm.adv_estimator=fgrpo`
unknown. This module catches the failure and logs it at WARNING instead; verl's own error for the
unknown estimator then follows.
"""

from __future__ import annotations

import logging

try:
    from catsim.integrations import verl as _verl  # noqa: F401 - registers the estimators
except Exception as e:  # noqa: BLE001 - any failure must reach the user's log, not verl's DEBUG
    logging.getLogger(__name__).warning(
        "catsim: the verl plug-in did not load, so its advantage estimators (fgrpo, maxrl, pkpo, ...) "
        "are not registered: %s: %s", type(e).__name__, e)
