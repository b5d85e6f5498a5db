"""``python -m biomjepa.embed`` / ``torchrun --nproc_per_node=N -m biomjepa.embed INPUT... --store OUT.zarr``."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main(prog="python -m biomjepa.embed"))
