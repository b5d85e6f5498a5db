"""``python -m biomjepa ...``: the ``biomjepa`` command, for where its script is not on PATH."""
from biomjepa.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
