"""``python -m installer.october_setup`` == the ``october_setup`` console script."""

from installer.cli import setup_main

if __name__ == "__main__":
    setup_main()
