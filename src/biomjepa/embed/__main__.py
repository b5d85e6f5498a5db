"""``python -m biomjepa.embed`` / ``torchrun --nproc_per_node=N -m biomjepa.embed INPUT... --store OUT.zarr``."""
from biomjepa.cli.atlas import main

if __name__ == "__main__":
    raise SystemExit(main(prog="python -m biomjepa.embed"))
