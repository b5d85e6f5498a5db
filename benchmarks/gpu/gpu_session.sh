#!/usr/bin/env bash
# The device side of benchmarks/gpu/gpu_stage.py (see its docstring and the commands it prints).
#
#   bash benchmarks/gpu/gpu_session.sh stage        # collect the carried .gpu/c* folder(s) into /tmp/gpu_stage
#   bash benchmarks/gpu/gpu_session.sh stage start [SUITE ARGS...]
#                                                   # ... then set the machine up and start the suite in the
#                                                   # background (its own session: it outlives this call)
#   bash benchmarks/gpu/gpu_session.sh wait         # wait for it (at most GPU_SESSION_WAIT s, default 540)
#
# Every call that starts or waits ends by copying the suite's result files (at most 8) into $OUT, so each call
# returns what the suite has written so far; the last one says "suite finished". The suite runs as
#   python3 benchmarks/gpu/gpu_suite.py --out /tmp/gpu_suite_out --device cuda --minutes ${MINUTES:-12} [--resume-from RUN]
set -u
cd "$(dirname "$0")/../.."
ST=/tmp/gpu_stage
RES=/tmp/gpu_suite_out
PIDF=/tmp/gpu_suite.pid
WAIT=${GPU_SESSION_WAIT:-540}
T0=$SECONDS
mkdir -p "$ST"

stage() {
  for d in .gpu/c*; do
    [ -d "$d" ] && cp "$d"/* "$ST"/ && echo "staged $d: $(ls "$d" | tr '\n' ' ')"
  done
}

assemble() {  # NAME.part00, NAME.part01 ... -> NAME, for every file of the manifest
  python3 - "$ST" <<'EOF'
import json, sys
from pathlib import Path
st = Path(sys.argv[1])
man = json.loads((st / "manifest.json").read_text())
for name in man["files"]:
    parts = sorted(st.glob(f"{name}.part*"))
    if not parts:
        sys.exit(f"missing every part of {name}: carry each .gpu/c* folder in its own call first")
    with open(st / name, "wb") as out:
        for p in parts:
            out.write(p.read_bytes())
    print(f"assembled {name} from {len(parts)} part(s)")
print(man.get("resume") or "")
EOF
}

start() {
  local resume
  resume=$(assemble | tee /dev/stderr | tail -n 1) || exit 1
  mkdir -p "$ST/whl" && tar -xf "$ST/wheels.tar" -C "$ST/whl"
  local whl=("$ST"/whl/*.whl)
  if python3 -c "import pandas, sys; sys.exit(int(pandas.__version__.split('.')[0]) < 3)" 2>/dev/null; then
    echo "pandas >= 3 here: installing the carried pandas 2 (anndata 0.12 needs pandas < 3)"
  else
    whl=($(ls "$ST"/whl/*.whl | grep -v '/pandas-'))
  fi
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "${whl[@]}" || exit 1
  mkdir -p ../shared/data/scrna && tar -xJf "$ST/data.tar.xz" -C ../shared/data/scrna --skip-old-files || exit 1
  export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
  BIOMJEPA_COMMIT=$(python3 -c "import json; print(json.load(open('$ST/manifest.json')).get('commit', ''))")
  export BIOMJEPA_COMMIT
  python3 -c "import anndata, zarr, torch, biomjepa; print('anndata', anndata.__version__, 'zarr', zarr.__version__, 'torch', torch.__version__, 'cuda', torch.cuda.is_available())" || exit 1
  local extra=()
  if [ -n "$resume" ]; then
    mkdir -p "$ST/resume" && tar -xf "$ST/resume.tar" -C "$ST/resume" && extra=(--resume-from "$ST/resume/$resume")
  fi
  rm -rf "$RES" "${RES}_work"
  setsid nohup python3 benchmarks/gpu/gpu_suite.py --out "$RES" --device cuda --minutes "${MINUTES:-12}" "${extra[@]}" "$@" \
    > /tmp/gpu_suite.stdout 2>&1 < /dev/null &
  echo $! > "$PIDF"
  echo "suite started (pid $(cat "$PIDF")): ls ../shared/data/scrna: $(ls ../shared/data/scrna | wc -l) files"
}

wait_and_return() {
  local pid
  pid=$(cat "$PIDF" 2>/dev/null || echo 0)
  while kill -0 "$pid" 2>/dev/null && (( SECONDS - T0 < WAIT )); do sleep 5; done
  if [ -n "${OUT:-}" ] && [ -d "$RES" ]; then cp "$RES"/* "$OUT"/ 2>/dev/null; fi
  tail -n 25 "$RES/suite.log" 2>/dev/null || tail -n 40 /tmp/gpu_suite.stdout
  if kill -0 "$pid" 2>/dev/null; then
    echo "suite still running after $((SECONDS - T0)) s: call 'bash benchmarks/gpu/gpu_session.sh wait' again (within 30 s)"
  else
    echo "suite finished"
  fi
}

case "${1:-}" in
  stage)
    stage
    shift
    if [ "${1:-}" = start ]; then shift; start "$@"; wait_and_return; fi ;;
  wait) wait_and_return ;;
  *) echo "usage: bash benchmarks/gpu/gpu_session.sh stage [start [SUITE ARGS...]] | wait" >&2; exit 2 ;;
esac
