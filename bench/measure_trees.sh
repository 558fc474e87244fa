#!/usr/bin/env bash
# measure_trees.sh TREE OUTDIR [SET...]
#   Ingest each corpus with TREE's own kbtool (python -m kbtool, PYTHONPATH=TREE, cwd TREE) into a
#   fresh store OUTDIR/store-<set>, then `kbtool eval <questions> --store ... --json` -> OUTDIR/<set>.json.
#   SET: sample, fastapi, cranfield (default: these three, cranfield last); fastapi-src (see below).
#   Timings and the commit go to OUTDIR/timings.log; stderr of each step to OUTDIR/<set>.*.err.
# Environment: PY (default the checkout's .venv/bin/python), FASTAPI_DOCS (default
#   bench/out/fastapi-docs, written by bench/docs_set.py), FASTAPI_SRC (default bench/out/fastapi-src/fastapi-0.110.0: the sdist of `pip download --no-deps --no-binary :all: fastapi==0.110.0` extracted, `git init` in it so --include-root may point above the docs folder), CRANFIELD
#   (default /work/shared/datasets/cranfield), MODES (default bm25,dense,hybrid,contract).
set -u -o pipefail
BENCH=$(cd "$(dirname "$0")" && pwd)
TREE=$(cd "$1" && pwd)
OUT=$(mkdir -p "$2" && cd "$2" && pwd)
shift 2
SETS=("$@")
[ ${#SETS[@]} -eq 0 ] && SETS=(sample fastapi cranfield)
PY=${PY:-$BENCH/../.venv/bin/python}
FASTAPI_DOCS=${FASTAPI_DOCS:-$BENCH/out/fastapi-docs}
CRANFIELD=${CRANFIELD:-/work/shared/datasets/cranfield}
# fastapi-src (optional set): the same 136 pages at docs/en/docs inside the sdist's tree, with its docs_src/
# (a git work tree, so --include-root may point above the ingested folder); only kbtool >= a84e510 takes it.
FASTAPI_SRC=${FASTAPI_SRC:-$BENCH/out/fastapi-src/fastapi-0.110.0}
MODES=${MODES:-bm25,dense,hybrid,contract}
LOG="$OUT/timings.log"
unset KBTOOL_CONTRACT   # built-in default contract (no ./kbtool.yaml in the worktrees either)
export PYTHONPATH="$TREE"
cd "$TREE" || exit 1

got=$(nice -n 10 "$PY" -c "import kbtool, os; print(os.path.dirname(os.path.dirname(os.path.abspath(kbtool.__file__))))")
if [ "$got" != "$TREE" ]; then echo "kbtool imported from $got, not $TREE" >&2; exit 1; fi
{
  echo "== $(date -u +%FT%TZ) tree=$TREE commit=$(git -C "$TREE" rev-parse --short HEAD) python=$PY host=$(nproc) cores load=$(cut -d' ' -f1-3 /proc/loadavg)"
} >> "$LOG"

kb() { nice -n 10 "$PY" -m kbtool "$@"; }

timed() {  # timed LABEL CMD...: run, log wall seconds and exit code
  local label=$1; shift
  local t0=$(date +%s.%N)
  "$@"; local rc=$?
  local t1=$(date +%s.%N)
  printf '%s %-22s rc=%s wall_s=%.1f load=%s\n' "$(date -u +%T)" "$label" "$rc" "$(echo "$t1 - $t0" | bc)" \
    "$(cut -d' ' -f1-3 /proc/loadavg)" >> "$LOG"
  return $rc
}

run_set() {  # run_set NAME CORPUS QUESTIONS [ingest flags...]
  local name=$1 corpus=$2 questions=$3; shift 3
  local store="$OUT/store-$name"
  if [ ! -e "$corpus" ]; then echo "$(date -u +%T) $name: corpus $corpus missing, skipped" >> "$LOG"; return 1; fi
  rm -rf "$store"
  timed "$name ingest" kb ingest "$corpus" --store "$store" --allow-failures 10 --json "$@" \
    > "$OUT/$name.ingest.json" 2> "$OUT/$name.ingest.err" || return 1
  kb status --store "$store" --json > "$OUT/$name.status.json" 2>/dev/null
  timed "$name eval" kb eval "$questions" --store "$store" --modes "$MODES" --json --quiet \
    > "$OUT/$name.json" 2> "$OUT/$name.eval.err"
}

for s in "${SETS[@]}"; do
  case $s in
    sample)    run_set sample "$TREE/sample_corpus" "$TREE/eval_sets/sample.jsonl" ;;
    fastapi)   run_set fastapi "$FASTAPI_DOCS" "$TREE/eval_sets/fastapi-docs.jsonl" ;;
    fastapi-src) run_set fastapi-src "$FASTAPI_SRC/docs/en/docs" "$TREE/eval_sets/fastapi-docs.jsonl" \
                   --include-root "$FASTAPI_SRC" ;;
    cranfield) run_set cranfield "$CRANFIELD" "$CRANFIELD" --format beir ;;
    *) echo "unknown set $s" >&2 ;;
  esac
done
echo "$(date -u +%T) done" >> "$LOG"
