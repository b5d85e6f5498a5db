"""``python -m biomjepa.train CONFIG.yaml [--set key=value ...]`` (or ``torchrun ... -m biomjepa.train``)."""
from biomjepa.cli.train import train_main as main

if __name__ == "__main__":
    raise SystemExit(main())
