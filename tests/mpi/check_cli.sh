#!/usr/bin/env bash
# The CLI on 2 MPI ranks against 1 process: usage check_cli.sh TOKENFLOW MPIEXEC.
#  1. simulate (several kinds, integrators, f32/f64): the same positions, frames, times and
#     diagnostics files, byte for byte; train: the same model.bin;
#  2. an MPI run killed (SIGKILL) after a checkpoint resumes, on 1 process and on 2 ranks, to the
#     uninterrupted run's positions, byte for byte;
#  3. bad input on 2 ranks: exit code 2 and the one-line message.
set -euo pipefail
cli=$1
mpiexec=$2
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
mpirun=("$mpiexec" --allow-run-as-root --oversubscribe -np 2 -x OMP_NUM_THREADS -x OMP_WAIT_POLICY)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

for spec in "softmax rk4 f64" "sinkhorn dopri5 f64" "l2 euler f32" "sigmoid rk4 f32"; do
  read -r kind integrator dtype <<<"$spec"
  args=(--set init.n=150 --set "attention.kind=\"$kind\"" --set "run.integrator=\"$integrator\""
        --set "dtype=\"$dtype\"" --set run.T=0.1 --set run.dt=0.02 --set run.save_every=2)
  "$cli" simulate "${args[@]}" --out "$work/one-$kind" 2>/dev/null
  "${mpirun[@]}" "$cli" simulate "${args[@]}" --out "$work/two-$kind" 2>/dev/null
  for f in positions.npy trajectory.npy times.npy diagnostics.csv; do
    cmp -s "$work/one-$kind/$f" "$work/two-$kind/$f" || fail "simulate $spec: $f differs between 1 process and 2 ranks"
  done
  echo "simulate $spec: 2 ranks = 1 process (positions, trajectory, times, diagnostics)"
done

train_args=(--set task.n=6 --set model.width=8 --set model.layers=1 --set model.heads=2 --set model.k=4
            --set model.sinkhorn_iters=8 --set train.batch=10 --set train.steps=4 --set train.test_pairs=8)
"$cli" train "${train_args[@]}" --out "$work/train-one" 2>/dev/null
"${mpirun[@]}" "$cli" train "${train_args[@]}" --out "$work/train-two" 2>/dev/null
cmp -s "$work/train-one/model.bin" "$work/train-two/model.bin" || fail "train: model.bin differs between 1 process and 2 ranks"
echo "train: 2 ranks = 1 process (model.bin)"

# Killed after a checkpoint: rank 0 writes checkpoint.bin every 5 steps; kill every rank and mpirun.
# The 95 steps left after the first checkpoint take about 1.5 s on 2 ranks at n = 1000 (AMD EPYC
# Zen 3, one thread a rank), far above the 20 ms polling.
run_args=(--set init.n=1000 --set run.T=1.0 --set run.dt=0.01 --set run.checkpoint_every=5)
"$cli" simulate "${run_args[@]}" --out "$work/straight" 2>/dev/null
"${mpirun[@]}" "$cli" simulate "${run_args[@]}" --out "$work/killed" 2>/dev/null &
launcher=$!
for _ in $(seq 1 1500); do
  [ -f "$work/killed/checkpoint.bin" ] && break
  sleep 0.02
done
ranks=$(pgrep -P "$launcher" || true)
kill -9 $ranks "$launcher" 2>/dev/null || true
wait "$launcher" 2>/dev/null || true
[ -f "$work/killed/checkpoint.bin" ] || fail "the MPI run wrote no checkpoint"
[ ! -f "$work/killed/positions.npy" ] || fail "the MPI run finished before it was killed (make it longer)"
cp -r "$work/killed" "$work/killed2"
"$cli" resume --out "$work/killed" 2>/dev/null
cmp -s "$work/straight/positions.npy" "$work/killed/positions.npy" || fail "resume on 1 process of a killed MPI run differs"
"${mpirun[@]}" "$cli" resume --out "$work/killed2" 2>/dev/null
cmp -s "$work/straight/positions.npy" "$work/killed2/positions.npy" || fail "resume on 2 ranks of a killed MPI run differs"
echo "killed MPI run: resumed on 1 process and on 2 ranks = uninterrupted"

status=0
"${mpirun[@]}" "$cli" simulate --set run.dt=-1 --out "$work/bad" 2>"$work/bad.err" >/dev/null || status=$?
[ "$status" -eq 2 ] || { cat "$work/bad.err" >&2; fail "bad input on 2 ranks: exit code $status, not 2"; }
grep -q "run.dt" "$work/bad.err" || { cat "$work/bad.err" >&2; fail "bad input on 2 ranks: no message naming run.dt"; }
[ ! -e "$work/bad" ] || fail "bad input on 2 ranks left an output directory"
echo "bad input on 2 ranks: exit code 2, message names run.dt"
status=0
"${mpirun[@]}" "$cli" ot --help >/dev/null 2>"$work/ot.err" || status=$?
[ "$status" -eq 2 ] && grep -q "only simulate, train and resume" "$work/ot.err" || fail "another command on 2 ranks: exit $status"
echo "another command on 2 ranks: refused with exit code 2"
