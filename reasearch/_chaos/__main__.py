"""``python -m reasearch._chaos --seed N ...``: one soak, its schedule, progress, figures and violations (exit 1
on a violation, 2 on bad options)."""

from __future__ import annotations

import sys

from reasearch._chaos.soak import main

if __name__ == "__main__":
    sys.exit(main())
