"""``python -m october.installer.october_setup`` == the ``october_setup`` console script."""

import sys

from .entry import setup_main

if __name__ == "__main__":
    sys.exit(setup_main())
