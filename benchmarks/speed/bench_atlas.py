"""Atlas-scale embedding: many h5ad files → one zarr store with 1 and 2 processes, and resume after a kill.

Generates ``--cells`` cells (default 300,000) in ``--files`` h5ad files by resampling the 1,074
real Baron pancreas cells bundled with the package (raw integer counts, 20,125 genes, median
≈1,830 detected genes per cell; obs_names made unique), then runs the atlas command

    python -m biomjepa.embed FILES --store S.zarr --device cpu            (1 process)
    torchrun --nproc_per_node=2 -m biomjepa.embed FILES --store S.zarr    (2 processes)

each from scratch (OMP_NUM_THREADS=1 per process, bundled ``biomjepa-mini``), and reports wall
time, cells/s, every rank's peak RSS (``ru_maxrss``, printed by the command) and the scaling ratio
(1-process wall / 2-process wall); it checks the two stores are bit-identical. Then a 1-process run
is stopped after half of its blocks by the testing hook ``BIOMJEPA_ATLAS_FAIL_AFTER`` (the process
raises, as a kill would leave it: blocks written so far are recorded) and the same command is run
again: the resume time, the cells it re-embedded and its start-up overhead (wall − embedding time)
are reported. Results: ``benchmarks/results/bench_atlas.csv``.

    python benchmarks/speed/bench_atlas.py [--cells 300000] [--files 6] [--block-rows 8192]
        [--workdir /tmp/bj_atlas] [--skip-resume]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: `benchmarks` imports as a package

import numpy as np

from benchmarks._common import write_csv

LINE = re.compile(r"rank (\d+)/(\d+): embedded (\d+) blocks, (\d+) cells in ([\d.]+) s .*peak RSS (\d+) MiB")


def generate(workdir: Path, cells: int, files: int, seed: int = 0) -> list[Path]:
    """``files`` h5ad files of resampled pancreas cells (cached: reused when present)."""
    import anndata as ad
    import pandas as pd

    import biomjepa as bj

    src = bj.datasets.pancreas()
    X = src.X.tocsr()
    rng = np.random.default_rng(seed)
    sizes = np.full(files, cells // files)
    sizes[: cells % files] += 1
    paths = []
    for f, n in enumerate(sizes):
        path = workdir / f"part{f:02d}.h5ad"
        paths.append(path)
        if path.exists():
            continue
        idx = rng.integers(0, X.shape[0], n)
        obs = pd.DataFrame({"source_cell": src.obs_names[idx]}, index=[f"p{f}_{i}" for i in range(n)])
        tmp = path.with_suffix(".tmp")
        ad.AnnData(X[idx], obs=obs, var=pd.DataFrame(index=src.var_names)).write_h5ad(tmp)
        os.replace(tmp, path)
    return paths


def run(files: list[Path], store: Path, *, nproc: int, block_rows: int, env: dict | None = None) -> dict:
    args = [*map(str, files), "--store", str(store), "--device", "cpu", "--block-rows", str(block_rows)]
    if nproc == 1:
        cmd = [sys.executable, "-m", "biomjepa.embed", *args]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
               "-m", "biomjepa.embed", *args]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})})
    wall = time.perf_counter() - t0
    ranks = [dict(zip(("rank", "world", "blocks", "cells", "embed_s", "peak_rss_mib"), m.groups()))
             for m in LINE.finditer(r.stdout)]
    return {"rc": r.returncode, "wall_s": wall, "ranks": ranks, "stderr": r.stderr[-2000:]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cells", type=int, default=300_000)
    p.add_argument("--files", type=int, default=6)
    p.add_argument("--block-rows", type=int, default=8192)
    p.add_argument("--workdir", default="/tmp/bj_atlas")
    p.add_argument("--skip-resume", action="store_true")
    args = p.parse_args()
    work = Path(args.workdir) / f"{args.cells}x{args.files}"
    work.mkdir(parents=True, exist_ok=True)
    files = generate(work, args.cells, args.files)
    rows, walls = [], {}
    for nproc in (1, 2):
        store = work / f"np{nproc}.zarr"
        shutil.rmtree(store, ignore_errors=True)
        res = run(files, store, nproc=nproc, block_rows=args.block_rows)
        assert res["rc"] == 0, res["stderr"]
        walls[nproc] = res["wall_s"]
        rows.append(_row(f"{nproc} process(es)", nproc, args, res))
    from biomjepa.embed import read_atlas

    one, two = read_atlas(work / "np1.zarr"), read_atlas(work / "np2.zarr")
    identical = all(np.array_equal(one[k].obsm["X_biomjepa"], two[k].obsm["X_biomjepa"]) for k in one)
    for r in rows:
        r["scaling_1p_over_2p"] = walls[1] / walls[2]
        r["identical_1p_2p"] = identical
    if not args.skip_resume:
        store = work / "resume.zarr"
        shutil.rmtree(store, ignore_errors=True)
        n_blocks = sum(-(-a.n_obs // args.block_rows) for a in one.values())
        killed = run(files, store, nproc=1, block_rows=args.block_rows,
                     env={"BIOMJEPA_ATLAS_FAIL_AFTER": str(max(n_blocks // 2, 1))})
        assert killed["rc"] != 0
        rows.append(_row("killed after half the blocks", 1, args, killed))
        from biomjepa.embed.store import AtlasStore

        st = AtlasStore(store)  # the killed process printed nothing: count the rows it recorded
        rows[-1]["cells_embedded"] = int(sum((st.root[k]["done"][:] > 0).sum() for k in one) * args.block_rows)
        rows[-1]["cells_per_s_wall"] = rows[-1]["cells_embedded"] / killed["wall_s"]
        resumed = run(files, store, nproc=1, block_rows=args.block_rows)
        assert resumed["rc"] == 0, resumed["stderr"]
        rows.append(_row("resume (same command)", 1, args, resumed))
        again = read_atlas(store)
        rows[-1]["identical_1p_2p"] = all(np.array_equal(one[k].obsm["X_biomjepa"], again[k].obsm["X_biomjepa"]) for k in one)
    path = write_csv(rows, "bench_atlas.csv")
    for r in rows:
        print({k: (round(v, 2) if isinstance(v, float) else v) for k, v in r.items()})
    print(f"wrote {path}")


def _row(mode: str, nproc: int, args, res: dict) -> dict:
    ranks = res["ranks"]
    cells = sum(int(r["cells"]) for r in ranks)
    embed_s = max((float(r["embed_s"]) for r in ranks), default=float("nan"))
    return {
        "mode": mode, "nproc": nproc, "cells_total": args.cells, "files": args.files, "block_rows": args.block_rows,
        "cells_embedded": cells,  # overwritten for the killed run (exact when blocks are full)
        "wall_s": res["wall_s"], "cells_per_s_wall": cells / res["wall_s"],
        "embed_s_max_rank": embed_s, "startup_overhead_s": res["wall_s"] - embed_s,
        "peak_rss_mib_per_rank": ";".join(r["peak_rss_mib"] for r in sorted(ranks, key=lambda r: r["rank"])),
        "cpu_count": os.cpu_count(), "load_avg_1m_at_end": os.getloadavg()[0],
    }


if __name__ == "__main__":
    main()
