#!/usr/bin/env bash
# Strong and weak scaling of the MPI driver (docs/scaling.md): softmax velocity evaluations at
# n = 2048 .. 16384, d = 4 and 12, on P ranks x 1 OpenMP thread and on 1 rank x P threads, and the
# all-gather's latency and bandwidth. Usage: bench/run_scaling.sh [BENCH] [MAX_RANKS] [REPS]
# (BENCH defaults to build/bench/tokenflow_bench_mpi). Prints the load average before and after.
set -euo pipefail
bench=${1:-build/bench/tokenflow_bench_mpi}
max_ranks=${2:-2}
reps=${3:-7}
export OMP_WAIT_POLICY=passive
mpirun=(mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS -x OMP_WAIT_POLICY)
echo "load before: $(cat /proc/loadavg); cores: $(nproc)"
for d in 4 12; do
  for n in 2048 4096 8192 16384; do
    for ((p = 1; p <= max_ranks; p *= 2)); do
      OMP_NUM_THREADS=1 "${mpirun[@]}" -np "$p" "$bench" velocity "$n" "$d" "$reps"
      if [ "$p" -gt 1 ]; then OMP_NUM_THREADS=$p "${mpirun[@]}" -np 1 "$bench" velocity "$n" "$d" "$reps"; fi
    done
  done
done
for ((p = 2; p <= max_ranks; p *= 2)); do OMP_NUM_THREADS=1 "${mpirun[@]}" -np "$p" "$bench" allgather 21; done
echo "load after: $(cat /proc/loadavg)"
