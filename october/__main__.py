"""``python -m october`` == the ``current`` console script."""

import sys

from .installer.october_setup import current_main

if __name__ == "__main__":
    sys.exit(current_main())
