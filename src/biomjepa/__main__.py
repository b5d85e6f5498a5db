"""``python -m biomjepa``: the ``biomjepa`` command (:func:`biomjepa.cli.main`), for where its script is not on PATH."""

from .cli import main

if __name__ == "__main__":
    raise SystemExit(main())
