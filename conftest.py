"""The checkout's test set-up, shared by tests/ and drivers/*/tests (never installed).

The one place where the checkout's layout is known: ``make tools`` installs Azurite into
``.tools/``, which the emulator launchers find through ``TIERED_AZURITE`` (installed code
looks only at that variable and PATH). ``make test`` sets it too; this default covers a
plain ``pytest`` run in the checkout.
"""

from __future__ import annotations

import os
from pathlib import Path

_AZURITE = Path(__file__).resolve().parent / ".tools" / "node_modules" / ".bin" / "azurite-blob"
if _AZURITE.exists():
    os.environ.setdefault("TIERED_AZURITE", str(_AZURITE))
