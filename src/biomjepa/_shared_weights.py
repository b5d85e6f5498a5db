"""A bundled checkpoint that shares another's weights file, put together in the cache directory.

v0.2.1 is v0.2's weights behind a fixed readout map: the package ships its ``config.json`` and ``SHA256SUMS`` but
not a second copy of the weights (the wheel holds them once). :func:`put_together` makes a real checkpoint
directory of the three files in the cache, once, so everything downstream (the registry pin, the manifest check on
load, ``bj.tl.embed``'s record) treats it as any bundled checkpoint.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path


def put_together(path: Path, weights_dir: Path, cachedir: Path, pin: str) -> Path:
    """``cachedir/bundled/<name>-<pin[:16]>``: ``path``'s ``config.json`` and ``SHA256SUMS`` copied, the weights of
    ``weights_dir`` hard-linked (or copied where links are not possible), renamed into place whole. An existing
    complete directory is returned as it is: the registry pin and the manifest check on load verify every file."""
    from .model import CONFIG, MANIFEST, WEIGHTS

    target = cachedir / "bundled" / f"{path.name}-{pin[:16]}"
    files = (CONFIG, MANIFEST, WEIGHTS)
    if all((target / f).is_file() for f in files):
        return target
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    except OSError as err:
        raise PermissionError(
            f"Cannot create the cache directory {target.parent} ({err}), where the bundled {path.name} is put together "
            "from the weights it shares. Set a writable one with `bj.settings.cachedir = '/path'` or the "
            "BIOMJEPA_CACHE environment variable."
        ) from err
    try:
        for name in (CONFIG, MANIFEST):
            shutil.copyfile(path / name, tmp / name)
        try:
            os.link(weights_dir / WEIGHTS, tmp / WEIGHTS)
        except OSError:  # another file system, or links not allowed
            shutil.copyfile(weights_dir / WEIGHTS, tmp / WEIGHTS)
        try:
            tmp.rename(target)
        except OSError:  # a concurrent call put it together first, or an incomplete one is in the way
            if not all((target / f).is_file() for f in files):
                shutil.rmtree(target, ignore_errors=True)
                tmp.rename(target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target
