#!/usr/bin/env bash
# A build without MPI, started as a launcher starts rank 0 of 2 (OpenMPI's environment), stops
# with one line naming the missing MPI, exit code 2, and writes nothing. Usage: check_no_mpi.sh TOKENFLOW
set -uo pipefail
cli=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=0 "$cli" simulate --set init.n=10 --out "$work/out" 2>"$work/err"
status=$?
[ "$status" -eq 2 ] || { echo "FAIL: exit code $status, not 2" >&2; exit 1; }
grep -q "built without MPI" "$work/err" || { echo "FAIL: message: $(cat "$work/err")" >&2; exit 1; }
[ ! -e "$work/out" ] || { echo "FAIL: an output directory was written" >&2; exit 1; }
echo "no MPI: $(cat "$work/err")"
