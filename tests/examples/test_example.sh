#!/bin/sh
# The client library as an outside program sees it (docs/client-api.md):
#   1. cmake --install the lease-client component to a private prefix;
#   2. the archive exports only leasec_ names (its symbol table);
#   3. examples/build-outside.sh builds examples/lease_copy.c with cc and
#      pkg-config alone, shared and static, and alloc_mix.c the same way,
#      plus alloc_mix linked with the program's own jemalloc;
#   4. linkcheck --strict proves each outside binary CUDA-free;
#   5. alloc_mix runs (no agent), examples/run-against.sh runs lease_copy
#      against lease-agent-host on a private socket.
#
#   test_example.sh BUILD_DIR SOURCE_DIR CMAKE AGENT LINKCHECK [--build-only]
#
# Everything lands in BUILD_DIR/examples/outside; with --build-only steps 1-4
# run and the binaries stay there for examples/run-against.sh against
# another agent (the CUDA one on a GPU machine).
set -eu
build=$1
src=$2
cmake=$3
agent=$4
linkcheck=$5
only=${6:-}

out="$build/examples/outside"
rm -rf "$out"
mkdir -p "$out/alloc"

echo "== install (component lease-client) to $out/prefix"
"$cmake" --install "$build" --prefix "$out/prefix" --component lease-client >"$out/install.log"
find "$out/prefix" -type f -o -type l | sed "s|^$out/prefix/||" | sort

echo "== the archive's global symbols"
archive=$(find "$out/prefix" -name liblease-client.a | head -n 1)
bad=$(nm -g --defined-only "$archive" | awk 'NF == 3 && $3 !~ /^leasec_/ {print $3}')
if [ -n "$bad" ]; then
    echo "FAIL: liblease-client.a defines globals besides leasec_: $bad"
    exit 1
fi
echo "$(nm -g --defined-only "$archive" | awk 'NF == 3' | wc -l) global names, all leasec_"

echo "== build outside the project"
sh "$src/examples/build-outside.sh" "$out/prefix" "$out"
CFLAGS="-std=gnu11 -Wall -Wextra -Werror -O1 -g" \
    sh "$src/examples/build-outside.sh" "$out/prefix" "$out/alloc" "$src/tests/examples/alloc_mix.c"
# The program brings its own jemalloc (the shared one: Debian's libjemalloc2).
pcdir=$(dirname "$(find "$out/prefix" -name lease-client.pc | head -n 1)")
with_jemalloc=""
if [ -e /usr/lib/x86_64-linux-gnu/libjemalloc.so.2 ] || ldconfig -p 2>/dev/null | grep -q libjemalloc.so.2; then
    # shellcheck disable=SC2046
    cc -std=gnu11 -Wall -Wextra -Werror -O1 -g -o "$out/alloc/alloc_mix-jemalloc" \
        "$src/tests/examples/alloc_mix.c" \
        $(PKG_CONFIG_PATH="$pcdir" pkg-config --cflags --libs lease-client) \
        -l:libjemalloc.so.2
    with_jemalloc="$out/alloc/alloc_mix-jemalloc"
fi

echo "== linkcheck the outside binaries"
for b in "$out"/lease_copy-shared "$out"/lease_copy-static "$out"/alloc/alloc_mix-*; do
    LD_LIBRARY_PATH="$out/$(cat "$out/libdir")" "$linkcheck" --strict --ld-library-path "$b"
done

[ "$only" = "--build-only" ] && exit 0

echo "== dlopen after start-up, with room for jemalloc's initial-exec TLS"
cat >"$out/alloc/late.c" <<'LATE'
#include <dlfcn.h>
#include <stdio.h>
int main(int argc, char **argv)
{
    void *h = argc > 1 ? dlopen(argv[1], RTLD_NOW | RTLD_LOCAL) : NULL;
    const char *(*version)(void) = h ? (const char *(*)(void))dlsym(h, "leasec_version") : NULL;
    if (!version) {
        printf("FAIL: dlopen: %s\n", dlerror());
        return 1;
    }
    printf("PASS: dlopen'ed liblease-client %s\n", version());
    return 0;
}
LATE
# shellcheck disable=SC2046
cc -std=gnu11 -Wall -Werror -o "$out/alloc/late" "$out/alloc/late.c" \
    $(PKG_CONFIG_PATH="$pcdir" pkg-config --cflags lease-client) -ldl
GLIBC_TUNABLES=glibc.rtld.optional_static_tls=16384 \
    "$out/alloc/late" "$out/$(cat "$out/libdir")/liblease-client.so.0"

echo "== alloc_mix: the program's allocator stays its own"
for b in "$out"/alloc/alloc_mix-shared "$out"/alloc/alloc_mix-static $with_jemalloc; do
    LD_LIBRARY_PATH="$out/$(cat "$out/libdir")" "$b"
done

echo "== lease_copy against lease-agent-host"
# The host agent's pin budget is bounded by RLIMIT_MEMLOCK (8 MiB here).
sh "$src/examples/run-against.sh" "$out" "$agent" --pinned-budget 4M --mapped-budget 2M \
    --workers 2
