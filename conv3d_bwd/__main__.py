"""``python -m conv3d_bwd ...``: the ``conv3d-bwd`` command."""
from __future__ import annotations

import sys

from conv3d_bwd.verify.cli import main

if __name__ == "__main__":
    sys.exit(main())
