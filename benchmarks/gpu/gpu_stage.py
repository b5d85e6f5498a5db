"""Pack what ``gpu_suite.py`` needs on a bare GPU machine into ``.gpu/`` (git-ignored), one folder per device call.

    python benchmarks/gpu/gpu_stage.py [--resume-from RUN_DIR] [--part-mib 36]

The device machine gets the checkout and the carried folders only: no ``../shared/data``, no
registry. This script writes into ``.gpu/``:

* the Python packages the machine lacks, as wheels for its Python 3.12 (anndata, zarr and their
  needs; flash-linear-attention and fla-core for step d), fetched with ``pip download``;
* ``data.tar.xz``: the default recipe's corpus files and its probe file (the suite's other data
  come bundled with the package), each re-stored as an uncompressed HDF5 file holding exactly the
  same datasets and attributes (checked here), which xz then compresses far better than the
  files' own gzip chunks;
* with ``--resume-from RUN_DIR``: ``resume.tar``, the run's latest state, config and logs.

Files are cut into parts of at most ``--part-mib`` MiB and spread over ``.gpu/c1``, ``.gpu/c2``, …,
each small enough to travel with the checkout in one call (64 MiB in all). On the device,
``benchmarks/gpu/gpu_session.sh`` collects the parts (``stage``), puts the data where the recipe's
paths expect them (``../shared/data``), installs the wheels and runs the suite (``start``); see
the commands this script prints.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
STAGE = REPO / ".gpu"
WHEELS = ["anndata==0.12.19", "zarr==3.1.6", "numcodecs==0.16.6", "donfig==0.8.1.post1", "google-crc32c==1.9.0",
          "array-api-compat==1.16.0", "legacy-api-wrap==1.5", "natsort==8.4.0", "scverse-misc==0.1.7",
          "session-info2==0.4.1", "flash-linear-attention==0.6.0", "fla-core==0.6.0", "pandas==2.3.3"]
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64"]


def recipe_files(recipe: Path) -> list[str]:
    """The recipe's corpus and probe paths, as written in it (relative to the repository root)."""
    from biomjepa.train import TrainConfig

    cfg = TrainConfig.from_yaml(recipe).flat()  # a recipe by section (or flat, from before the sections)
    paths = [c["path"] if isinstance(c, dict) else c for c in cfg["corpus"]]
    return sorted(set(paths + ([cfg["probe"]] if cfg.get("probe") else [])))


def restore_uncompressed(src: Path, dst: Path) -> None:
    """Copy an HDF5 file dataset by dataset, attributes included, without compression; then check equality.

    Object references in attributes (old h5ad files point a categorical column at its categories this
    way) are re-made to the copied object of the same path.
    """
    import h5py

    def copy(a, b, refs: list) -> None:
        for k, v in a.attrs.items():
            if isinstance(v, h5py.Reference):
                refs.append((b.name, k, a.file[v].name))
            else:
                b.attrs[k] = v
        for name, obj in a.items():
            if isinstance(obj, h5py.Group):
                copy(obj, b.create_group(name), refs)
                continue
            if h5py.check_dtype(ref=obj.dtype) is not None:
                raise ValueError(f"{src}:{obj.name} holds object references, which this copy does not re-make")
            d = b.create_dataset(name, data=obj[()], dtype=obj.dtype)
            for k, v in obj.attrs.items():
                if isinstance(v, h5py.Reference):
                    refs.append((d.name, k, a.file[v].name))
                else:
                    d.attrs[k] = v

    with h5py.File(src, "r") as a, h5py.File(dst, "w") as b:
        refs: list = []
        copy(a, b, refs)
        for holder, key, target in refs:
            b[holder].attrs[key] = b[target].ref
    assert_same(src, dst)


def assert_same(src: Path, dst: Path) -> None:
    """The two HDF5 files hold the same datasets and attributes: paths, dtypes and values (NaN equal to NaN)."""
    import h5py
    import numpy as np

    with h5py.File(src, "r") as a, h5py.File(dst, "r") as b:
        mine, theirs = _contents(a), _contents(b)
    assert mine.keys() == theirs.keys(), f"{src}: other objects"
    for name, (dtype, value) in mine.items():
        other = theirs[name]
        assert dtype == other[0] and np.array_equal(value, other[1], equal_nan=dtype.kind == "f"), f"{src}:{name}"


def _contents(f) -> dict:
    """``{path: (dtype, value)}`` of every dataset and attribute of an HDF5 file (``path@attr``; a reference as the
    path it points at)."""
    import h5py
    import numpy as np

    out = {}

    def visit(name: str, obj) -> None:
        for k, v in obj.attrs.items():
            v = np.asarray(f[v].name if isinstance(v, h5py.Reference) else v)
            out[f"{name}@{k}"] = (v.dtype, v)
        if isinstance(obj, h5py.Dataset):
            out[name] = (obj.dtype, obj[()])

    visit("/", f)
    f.visititems(visit)
    return out


def pack_data(files: list[str], out: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp, tarfile.open(out, "w:xz", preset=6) as tar:
        for rel in files:
            src = (REPO / rel).resolve()
            dst = Path(tmp) / src.name
            restore_uncompressed(src, dst)
            tar.add(dst, arcname=src.name)
            dst.unlink()
            print(f"  data: {rel}", flush=True)


def pack_resume(run: Path, out: Path) -> None:
    """The run's latest state (only), ``config.yaml``, ``log.csv`` and ``probe.csv``, under the run's name."""
    from biomjepa.train.checkpoint import LATEST, latest_state

    state = latest_state(run)
    if state is None:
        raise SystemExit(f"{run} holds no training state to resume")
    with tempfile.TemporaryDirectory() as tmp, tarfile.open(out, "w") as tar:
        ptr = Path(tmp) / LATEST
        ptr.write_text(state.name)
        tar.add(state, arcname=f"{run.name}/checkpoints/{state.name}")
        tar.add(ptr, arcname=f"{run.name}/checkpoints/{LATEST}")
        for f in ("config.yaml", "log.csv", "probe.csv"):
            if (run / f).is_file():
                tar.add(run / f, arcname=f"{run.name}/{f}")
    print(f"  resume: {state} ({state.stat().st_size / 2**20:.1f} MiB)")


def wheels(into: Path) -> None:
    into.mkdir(parents=True, exist_ok=True)
    if len(list(into.glob("*.whl"))) == len(WHEELS):  # fetched before
        return
    plat = [a for p in PLATFORMS for a in ("--platform", p)]
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                    "--python-version", "3.12", "--implementation", "cp", *plat, "-d", str(into), *WHEELS], check=True)


def split_into_parts(files: list[Path], part: int, stage: Path) -> list[Path]:
    """Cut ``files`` into pieces ≤ ``part`` bytes (``NAME.partNN``) and fill ``stage/c1``, ``c2`` … first-fit."""
    folders: list[Path] = []
    used: list[int] = []
    for f in files:
        with open(f, "rb") as fh:
            n = 0
            while chunk := fh.read(part):
                i = next((j for j, u in enumerate(used) if u + len(chunk) <= part), len(folders))
                if i == len(folders):
                    folders.append(stage / f"c{i + 1}")
                    folders[-1].mkdir(parents=True)
                    used.append(0)
                (folders[i] / f"{f.name}.part{n:02d}").write_bytes(chunk)
                used[i] += len(chunk)
                n += 1
    return folders


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--resume-from", default=None, metavar="RUN_DIR", help="also pack this run to continue it there")
    p.add_argument("--recipe", default=str(REPO / "models" / "biomjepa-mini-v0.3.yaml"))
    p.add_argument("--part-mib", type=float, default=36.0, help="largest folder per call (the checkout is ~22 MiB)")
    args = p.parse_args()
    build = STAGE / "build"
    for old in STAGE.glob("c*"):
        shutil.rmtree(old)
    build.mkdir(parents=True, exist_ok=True)
    print("wheels for the device's Python 3.12 ...", flush=True)
    wheels(build / "whl")
    whl = build / "wheels.tar"
    with tarfile.open(whl, "w") as tar:
        for f in sorted((build / "whl").glob("*.whl")):
            tar.add(f, arcname=f.name)
    data = build / "data.tar.xz"
    if not data.is_file():
        print("data (re-stored uncompressed, then xz) ...", flush=True)
        pack_data(recipe_files(Path(args.recipe)), data)
    files = [whl, data]
    if args.resume_from:
        files.append(build / "resume.tar")
        pack_resume(Path(args.resume_from), files[-1])
    folders = split_into_parts(files, int(args.part_mib * 2**20), STAGE)
    commit = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=REPO, capture_output=True, text=True)
    (STAGE / "manifest.json").write_text(json.dumps({"files": [f.name for f in files], "commit": commit.stdout.strip(),
                                                     "resume": Path(args.resume_from).name if args.resume_from else None}))
    for d in folders:
        shutil.copy(STAGE / "manifest.json", d / "manifest.json")
    print(f"\n{len(folders)} folder(s) to carry, one per device call, in this order:")
    for i, d in enumerate(folders, 1):
        size = sum(x.stat().st_size for x in d.iterdir()) / 2**20
        last = i == len(folders)
        print(f"  call {i}: carry ['.gpu/{d.name}'] ({size:.1f} MiB), command: "
              f"bash benchmarks/gpu/gpu_session.sh stage{' start' if last else ''}")
    print("  then, until it says 'suite finished': command: bash benchmarks/gpu/gpu_session.sh wait")


if __name__ == "__main__":
    main()
