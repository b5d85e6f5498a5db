"""``python -m biomjepa.train CONFIG.yaml [--set key=value ...]`` (or ``torchrun ... -m biomjepa.train``)."""

from __future__ import annotations

import argparse
import logging
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m biomjepa.train", description="Pretrain BioM-JEPA.")
    parser.add_argument("config", help="YAML config file or preset name (tiny, mini, base).")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="Override a config key (repeatable); values are parsed as YAML.")
    parser.add_argument("--export", metavar="DIR", help="After training, export the teacher encoder to DIR.")
    parser.add_argument("--export-overwrite", action="store_true",
                        help="Replace DIR when it already holds a checkpoint (refused otherwise, before training).")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    from . import export, pretrain
    from .checkpoint import check_export_dir

    if args.export:
        try:  # before hours of training, not after
            check_export_dir(args.export, overwrite=args.export_overwrite)
        except FileExistsError as err:
            parser.error(str(err))

    run_dir = pretrain(args.config, args.overrides)
    if args.export:
        import os

        if int(os.environ.get("RANK", "0")) == 0:
            export(run_dir, args.export, overwrite=args.export_overwrite)
    print(run_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
