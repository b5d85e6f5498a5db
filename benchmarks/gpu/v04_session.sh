#!/usr/bin/env bash
# The device side of the v0.4 levers and long run (issue 37; benchmarks/pretraining/levers_v04.py), in two
# calls made back to back (the second while the machine is still warm):
#
#   bash benchmarks/gpu/v04_session.sh start   # unpack the carried .gpu/v04 (corpus cache, probes), run the
#                                             # levers in parallel (LEVER_DEADLINE s), choose by the rule below,
#                                             # start the long run in its own session, return the levers' files
#   bash benchmarks/gpu/v04_session.sh wait    # wait for the long run (LONG_DEADLINE s from its start), return
#                                             # its log, readouts and slim states (teacher + config)
#
# Choice rule (validation cells only, fixed before the run): each lever's few-shot F1 at its last checkpoint,
# the mean over the two tissues (sorted PBMCs, Darmanis brain) of the better of max_top5 / mean_wmean (one
# readout for both tissues); the highest mean wins.
#
# The long run first (issue 43): one call, the long run alone, sized to fit 15 minutes of device time with the
# machine's start-up (2-4 min), unpacking and the graph (about 1 min) and the returned files included:
#
#   bash benchmarks/gpu/v04_session.sh long    # run with timeout_s=600: LONG_DEADLINE (default 510 s) of training
#                                             # of the chosen recipe (data.batching=source), bf16 autocast only if
#                                             # a 5-step bf16 check on this GPU ends with finite losses, else fp32;
#                                             # returns log.csv, the readouts at every 500 steps, slim states
#   bash benchmarks/gpu/v04_session.sh suite   # only with >= 4 min of device time left: gpu_suite.py --quick
#
# At the H100's measured 1,017 cells/s (float32, 12 loader workers) 510 s hold about 500,000 presentations;
# a run stopped by the deadline keeps every state saved so far (--keep 40, every 500 steps).
set -u
cd "$(dirname "$0")/../.."
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
W=/tmp/v04
LEVERS=${LEVERS:-"shard source source-bal mixed source-t0.2 source-ctx128 source-bal-ctx128"}
LEVER_STEPS=${LEVER_STEPS:-400}
LEVER_DEADLINE=${LEVER_DEADLINE:-230}
LONG_STEPS=${LONG_STEPS:-8000}
LONG_DEADLINE=${LONG_DEADLINE:-720}
S=benchmarks/pretraining/levers_v04.py

start() {
  mkdir -p $W && tar -xJf .gpu/v04/cache.tar.xz -C $W || exit 1
  nvidia-smi -L; nproc; python3 -c "import torch, numpy, sys; print(sys.version.split()[0], torch.__version__, numpy.__version__, torch.cuda.is_available())"
  python3 - <<'EOF'
import time
from biomjepa.data.shards import Corpus
from biomjepa.train import load_config
from biomjepa.train.distributed import init_distributed
from biomjepa.train.setup import open_graph
t = time.time()
cfg = load_config("models/biomjepa-mini-v0.4.yaml", ["data.corpus=/tmp/v04/cache", "probe.path=null", "loop.device=cpu"])
open_graph(cfg, Corpus("/tmp/v04/cache"), init_distributed("cpu"))  # once, before the levers share it
print(f"graph built in {time.time() - t:.0f} s", flush=True)
EOF
  python3 $S run --levers $LEVERS --parallel 9 --steps $LEVER_STEPS --probe-every $((LEVER_STEPS / 2)) \
    --corpus $W/cache --probes .gpu/v04/probes.npz --work $W/levers --device cuda --workers 1 \
    --deadline "$LEVER_DEADLINE" 2>&1 | tail -n 3
  python3 - "$W/levers" > $W/choice.txt <<'EOF'
import json, sys
from pathlib import Path
best, runs = None, {}
for run in sorted(Path(sys.argv[1]).glob("lever-*-s42")):
    rows = [json.loads(l) for l in open(run / "probe2.jsonl")] if (run / "probe2.jsonl").exists() else []
    if rows:
        runs[run] = rows
last = min(max(r["step"] for r in rows) for rows in runs.values())  # the step every lever reached
for run, rows in runs.items():
    f1 = {(r["set"], r["pooling"]): r["macro_f1_k5"] for r in rows if r["step"] == last}
    for k in ("max_top5", "mean_wmean"):
        m = (f1[("pbmc", k)] + f1[("brain", k)]) / 2
        print(f"# {run.name} step {last} {k}: pbmc {f1[('pbmc', k)]:.3f} brain {f1[('brain', k)]:.3f} mean {m:.3f}")
        if best is None or m > best[0]:
            best = (m, run.name[len("lever-"):-len("-s42")], k)
print(best[1])
EOF
  cat $W/choice.txt
  WIN=$(tail -n 1 $W/choice.txt)
  STEPS=$(python3 - "$W/levers" "$LONG_DEADLINE" "$LONG_STEPS" <<'EOF'
import csv, statistics, sys
from pathlib import Path
rate = 0.0  # steps/s of all levers together: what the machine did with the runs side by side
for log in Path(sys.argv[1]).glob("lever-*-s42/log.csv"):
    v = [float(r["cells_per_s"]) / 64 for r in csv.DictReader(open(log)) if r.get("cells_per_s")]
    rate += statistics.median(v[10:] or v) if v else 0.0
steps = min(int(sys.argv[3]), max(2000, int(0.9 * rate * (float(sys.argv[2]) - 60)) // 100 * 100))
print(f"# levers together {rate:.1f} steps/s -> long run {steps} steps", file=sys.stderr)
print(steps)
EOF
)
  echo "long run: $WIN, $STEPS steps"
  setsid nohup timeout -s TERM "$LONG_DEADLINE" python3 $S run --levers "$WIN" --steps "$STEPS" --warmup 200 \
    --probe-every 1000 --keep 40 --no-f1 --corpus $W/cache --probes .gpu/v04/probes.npz --work $W/long \
    --prefix long- --device cuda --workers 12 > $W/long.out 2>&1 < /dev/null &
  if [ "${LEVER_FINAL_ONLY:-0}" = 1 ]; then  # one call for both: the final readouts (step 0 of one lever)
    (cd $W/levers && tar -cf - lever-*/readouts_step*"$LEVER_STEPS".npz lever-shard-s42/readouts_step000000.npz \
      lever-*/probe2.jsonl lever-*/log.csv lever-*.out | split -b 15M - "$OUT/levers.tar.part")
  else
    (cd $W/levers && tar -cf - lever-*/readouts_*.npz lever-*/probe2.jsonl lever-*/log.csv lever-*.out \
      | split -b 15M - "$OUT/levers.tar.part")
  fi
  cp $W/choice.txt "$OUT/"
  sleep 20; tail -n 5 $W/long.out
}

long_first() {
  mkdir -p $W && tar -xJf .gpu/v04/cache.tar.xz -C $W || exit 1
  nvidia-smi -L; python3 -c "import torch, sys; print(sys.version.split()[0], torch.__version__, torch.cuda.is_available())"
  PREC=fp32
  if timeout 120 python3 $S run --levers source --steps 5 --warmup 1 --probe-every 5 --keep 1 --no-f1 \
      --corpus $W/cache --probes .gpu/v04/probes.npz --work $W/check --prefix check- --device cuda --workers 4 \
      --set loop.precision=bf16 > $W/check.out 2>&1 && python3 - $W/check <<'EOF'
import csv, math, sys
from pathlib import Path
rows = [r for log in Path(sys.argv[1]).glob("check-*/log.csv") for r in csv.DictReader(open(log))]
sys.exit(0 if len(rows) == 5 and all(math.isfinite(float(r["loss"])) and r["bf16"] == "1.0" for r in rows) else 1)
EOF
  then PREC=bf16; fi
  echo "long run: source, ${LONG_STEPS} steps, loop.precision=$PREC, deadline ${LONG_DEADLINE} s"; tail -n 3 $W/check.out
  timeout -s KILL $((LONG_DEADLINE + 45)) python3 $S run --levers source --steps "$LONG_STEPS" --warmup 200 \
    --probe-every 500 --keep 40 --no-f1 --corpus $W/cache --probes .gpu/v04/probes.npz --work $W/long \
    --prefix long- --device cuda --workers 12 --set loop.precision=$PREC --deadline "$LONG_DEADLINE" \
    > $W/long.out 2>&1 < /dev/null  # at the deadline the run gets SIGTERM and saves its state
  collect
}

wait_long() {
  T0=$SECONDS
  while pgrep -f "prefix long-" > /dev/null; do
    if [ $((SECONDS - T0)) -gt "${WAIT_MAX:-400}" ]; then pkill -TERM -f "prefix long-"; sleep 30; break; fi
    sleep 5
  done
  collect
}

collect() {
  tail -n 20 $W/long.out
  R=$(ls -d $W/long/long-* | head -n 1)
  cp $R/log.csv "$OUT/"
  (cd $R && tar -cf - readouts_*.npz probe2.jsonl | split -b 15M - "$OUT/long_readouts.tar.part")
  python3 - "$R" "$OUT" ${SLIM_ONE:+one} <<'EOF'
import sys, torch
from pathlib import Path
run, out = Path(sys.argv[1]), Path(sys.argv[2])
SECOND = len(sys.argv) < 4
states = sorted((run / "checkpoints").glob("step_*.pt"))
keep = [states[-1]] + ([s for s in states if s != states[-1] and int(s.stem[5:]) == 6000][:1] if SECOND else [])
for p in keep:
    st = torch.load(p, map_location="cpu", weights_only=True)
    slim = {k: v for k, v in st.items() if k not in ("model", "optimizer")}
    torch.save(slim, out / f"slim_{p.stem}.pt")
    print("slim", p.name, sorted(slim))
EOF
  ls -la "$OUT"
}

cands() {  # CANDS side by side at CAND_STEPS (a full schedule each), stopped at CAND_DEADLINE s; readouts + bf16 teachers
  mkdir -p $W && tar -xJf .gpu/v04/cache.tar.xz -C $W || exit 1
  nvidia-smi -L; nproc; python3 -c "import torch, numpy, sys; print(sys.version.split()[0], torch.__version__, numpy.__version__, torch.cuda.is_available())"
  python3 -c "
import time
from biomjepa.data.shards import Corpus
from biomjepa.train import load_config
from biomjepa.train.distributed import init_distributed
from biomjepa.train.setup import open_graph
t = time.time()
cfg = load_config('models/biomjepa-mini-v0.4.yaml', ['data.corpus=/tmp/v04/cache', 'probe.path=null', 'loop.device=cpu'])
open_graph(cfg, Corpus('/tmp/v04/cache'), init_distributed('cpu'))
print(f'graph built in {time.time() - t:.0f} s', flush=True)"
  local N=${CAND_STEPS:-2400}
  python3 $S run --levers ${CANDS:-shard source source-bal mixed} --parallel 9 --steps "$N" --warmup 200 \
    --probe-every $((N / 2)) --keep 1 --no-f1 --corpus $W/cache --probes .gpu/v04/probes.npz --work $W/cands \
    --prefix cand- --device cuda --workers "${CAND_WORKERS:-3}" --deadline "${CAND_DEADLINE:-300}" 2>&1 | tail -n 3
  for f in $W/cands/cand-*.out; do echo "== $f"; grep "step" "$f" | tail -n 3; done
  (cd $W/cands && tar -cf - cand-*/readouts_step000000.npz cand-*/readouts_step*$((N / 2)).npz \
    cand-*/readouts_step*"$N".npz cand-*/probe2.jsonl cand-*/log.csv | split -b 15M - "$OUT/cands.tar.part")
  python3 - $W/cands "$OUT" <<'EOF'
import sys, torch
from pathlib import Path
for run in sorted(Path(sys.argv[1]).glob("cand-*-s42")):
    states = sorted((run / "checkpoints").glob("step_*.pt"))
    if not states:
        continue
    st = torch.load(states[-1], map_location="cpu", weights_only=True)
    slim = {k: v for k, v in st.items() if k not in ("model", "optimizer")}
    slim["teacher"] = {k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in slim["teacher"].items()}
    torch.save(slim, Path(sys.argv[2]) / f"slim_{run.name}_{states[-1].stem}.pt")
    print("slim", run.name, states[-1].name)
EOF
  ls -la "$OUT"
}

case "${1:-}" in
  long) LONG_DEADLINE=${LONG_DEADLINE_FIRST:-510}; SLIM_ONE=1; long_first ;;
  suite) python3 benchmarks/gpu/gpu_suite.py --out "$OUT/suite" --device cuda --quick ;;
  cands) cands ;;
  start) start ;;
  all) LEVER_FINAL_ONLY=1 SLIM_ONE=1; start; wait_long ;;
  wait) wait_long ;;
  *) echo "usage: $0 long|suite|start|wait|all|cands"; exit 2 ;;
esac
