#!/bin/sh
# liblease-client.so exports exactly the functions lease/client.h declares
# with LEASEC_API, all in version node LEASE_CLIENT_0, and the version script
# lists the same names.
#   test_exports.sh LIBRARY HEADER MAP
set -eu
lib=$1
header=$2
map=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Declarations may span lines: join the header, then take each name
# that follows LEASEC_API and precedes "(".
tr '\n' ' ' <"$header" | grep -o 'LEASEC_API [^;(]*(' | grep -o 'leasec_[a-z0-9_]*[ ]*($' |
    tr -d ' (' | sort -u >"$tmp/header"
nm -D --defined-only "$lib" | awk '{print $3}' | grep -v '^LEASE_CLIENT_0$' |
    sed 's/@@LEASE_CLIENT_0$//' | sort -u >"$tmp/exported"
grep -o '^[ \t]*leasec_[a-z0-9_]*;' "$map" | tr -d ' \t;' | sort -u >"$tmp/map"
nm -D --defined-only "$lib" | awk '{print $3}' | grep -v '^LEASE_CLIENT_0$' |
    grep -v '@@LEASE_CLIENT_0$' >"$tmp/unversioned" || true
status=0
if ! diff -u "$tmp/header" "$tmp/exported"; then
    echo "FAIL: the header's functions (-) and the library's exports (+) differ"
    status=1
fi
if ! diff -u "$tmp/header" "$tmp/map"; then
    echo "FAIL: the header's functions (-) and lease-client.map (+) differ"
    status=1
fi
if [ -s "$tmp/unversioned" ]; then
    echo "FAIL: exported outside LEASE_CLIENT_0:"
    cat "$tmp/unversioned"
    status=1
fi
n=$(wc -l <"$tmp/exported")
[ $status -eq 0 ] && echo "PASS: $n functions exported, all declared in lease/client.h, all LEASE_CLIENT_0"
exit $status
