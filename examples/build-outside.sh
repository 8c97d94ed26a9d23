#!/bin/sh
# Builds the examples against an installed liblease-client the way an outside
# project would: the compiler and pkg-config, nothing of this project's build.
#
#   examples/build-outside.sh PREFIX OUTDIR [SOURCE...]
#
# PREFIX is where `cmake --install BUILD --component lease-client --prefix
# PREFIX` put the library. For each SOURCE (default examples/lease_copy.c)
# it writes OUTDIR/NAME-shared, linked with
#     cc SOURCE $(pkg-config --cflags --libs lease-client)
# and OUTDIR/NAME-static, linked with `pkg-config --static` against a copy
# of PREFIX that holds the archive only (where both are installed the
# linker takes the .so; see docs/client-api.md, "Linking"). CC and CFLAGS
# are honoured. Exits non-zero, saying why, when a step fails.
set -eu

if [ $# -lt 2 ]; then
    echo "usage: $0 PREFIX OUTDIR [SOURCE...]" >&2
    exit 2
fi
prefix=$(cd "$1" && pwd)
mkdir -p "$2"
out=$(cd "$2" && pwd)
shift 2
here=$(cd "$(dirname "$0")" && pwd)
[ $# -gt 0 ] || set -- "$here/lease_copy.c"
cc=${CC:-cc}
cflags=${CFLAGS:--std=c11 -Wall -Wextra -Wpedantic -Werror -O2 -g}

pc=$(find "$prefix" -name lease-client.pc -path '*pkgconfig*' | head -n 1)
if [ -z "$pc" ]; then
    echo "FAIL: no lease-client.pc under $prefix (install the lease-client component there)" >&2
    exit 1
fi
pcdir=$(dirname "$pc")
libdir_rel=${pcdir#"$prefix"/}
libdir_rel=${libdir_rel%/pkgconfig}

# The archive alone, as on a system with only the static library installed.
static="$out/prefix-static"
rm -rf "$static"
cp -a "$prefix" "$static"
rm -f "$static/$libdir_rel"/liblease-client.so*

for src in "$@"; do
    name=$(basename "$src" .c)
    # shellcheck disable=SC2046 # pkg-config's output is meant to be split
    PKG_CONFIG_PATH="$pcdir" $cc $cflags -o "$out/$name-shared" "$src" \
        $(PKG_CONFIG_PATH="$pcdir" pkg-config --cflags --libs lease-client)
    # shellcheck disable=SC2046
    $cc $cflags -o "$out/$name-static" "$src" \
        $(PKG_CONFIG_PATH="$static/$libdir_rel/pkgconfig" \
          pkg-config --define-variable=prefix="$static" --static --cflags --libs lease-client)
    if readelf -d "$out/$name-static" | grep -q 'NEEDED.*liblease-client'; then
        echo "FAIL: $name-static needs liblease-client.so" >&2
        exit 1
    fi
    if ! readelf -d "$out/$name-shared" | grep -q 'NEEDED.*liblease-client\.so\.0'; then
        echo "FAIL: $name-shared does not need liblease-client.so.0" >&2
        exit 1
    fi
    echo "built $out/$name-shared and $out/$name-static"
done
# Where the shared ones find the library (run-against.sh reads it):
# relative to OUTDIR when PREFIX is inside it, so OUTDIR can be carried.
case "$prefix/" in
"$out"/*) echo "${prefix#"$out"/}/$libdir_rel" > "$out/libdir" ;;
*) echo "$prefix/$libdir_rel" > "$out/libdir" ;;
esac
