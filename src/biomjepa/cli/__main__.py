"""``python -m biomjepa.cli``: the same as ``biomjepa``."""
from biomjepa.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
