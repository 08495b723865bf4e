"""``python -m installer`` == the ``current`` console script."""

from installer.cli import current_app

if __name__ == "__main__":
    current_app(prog_name="current")
