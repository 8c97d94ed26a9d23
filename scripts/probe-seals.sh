#!/usr/bin/env bash
# probe-seals.sh [BUILD_DIR] [--reserve N]
#
# Runs BUILD_DIR/tests/hostile/probe-seals (default build/): what
# F_SEAL_FUTURE_WRITE stops on this kernel for shmem and hugetlb memfds
# (docs/lease-service.md, "What a peer can and cannot do to shared memory").
# With --reserve N (root), when fewer than N 2 MiB huge pages are free it
# raises nr_hugepages by what is missing for the run and puts the old value
# back afterwards, so the hugetlb half runs too. Exit status: the probe's
# (0 as assumed, 1 not, 77 no F_SEAL_FUTURE_WRITE).
set -uo pipefail
build=build reserve=0
while (($#)); do
    case $1 in
    --reserve) reserve=${2:?--reserve needs a count}; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) build=$1; shift ;;
    esac
done
probe=$build/tests/hostile/probe-seals
[[ -x $probe ]] || { echo "probe-seals.sh: $probe not built (cmake --build $build --target probe-seals)" >&2; exit 2; }
sys=/sys/kernel/mm/hugepages/hugepages-2048kB
old=
if ((reserve > 0)) && [[ -w $sys/nr_hugepages ]]; then
    free=$(( $(cat $sys/free_hugepages) - $(cat $sys/resv_hugepages) ))
    if ((free < reserve)); then
        old=$(cat $sys/nr_hugepages)
        echo $((old + reserve - free)) > $sys/nr_hugepages
        echo "probe-seals.sh: nr_hugepages $old -> $(cat $sys/nr_hugepages) for the run"
    fi
fi
"$probe"
rc=$?
if [[ -n $old ]]; then
    echo "$old" > $sys/nr_hugepages
    echo "probe-seals.sh: nr_hugepages back to $(cat $sys/nr_hugepages)"
fi
exit $rc
