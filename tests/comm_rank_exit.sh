#!/bin/sh
# A rank that exits alone must end the whole job, not leave the others waiting:
# runs test_comm's rank-exit and abort modes under mpirun -np 3 (rank 1 leaves,
# ranks 0 and 2 wait in a barrier) and wants a non-zero exit within LIMIT seconds.
# usage: comm_rank_exit.sh <test_comm executable>   (env: MPIRUN)
set -u
exe=$1
mpirun=${MPIRUN:-mpirun}
LIMIT=20
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
for mode in rank-exit abort; do
  t0=$(date +%s.%N)
  timeout 40 "$mpirun" --oversubscribe -np 3 "$exe" "$mode" >"$log" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
  verdict=ok
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    verdict="HUNG (killed by timeout)"
  elif [ "$rc" -eq 0 ]; then
    verdict="exited 0 although rank 1 failed"
  elif awk -v s="$secs" -v l="$LIMIT" 'BEGIN { exit !(s > l) }'; then
    verdict="too slow (> ${LIMIT} s)"
  fi
  echo "comm_rank_exit: mode $mode: mpirun exit $rc after $secs s: $verdict"
  if [ "$verdict" != ok ]; then
    status=1
    cat "$log"
  fi
done
exit $status
