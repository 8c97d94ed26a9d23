#!/bin/sh
# cmake --install into a temporary prefix: the programs, the lease-types
# headers and lease-types.pc, liblease-client (its own component), the man
# pages, the systemd units; then a C
# program outside the tree built against the installed headers through
# pkg-config, every installed page rendered by man -l, and the units
# checked by systemd-analyze verify (and its offline security report).
# usage: test_install.sh BUILD_DIR CC
build=$1 cc=$2
set -u
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
failed=0
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; failed=1; }
prefix=$tmp/prefix

if ! cmake --install "$build" --prefix "$prefix" > "$tmp/install.log" 2>&1; then
    fail "cmake --install:"; tail -20 "$tmp/install.log"; exit 1
fi
pass "cmake --install --prefix $prefix"
echo "installed:"
(cd "$prefix" && find . -type f -o -type l | sort | sed 's/^/    /')
for f in bin/stagingd bin/leasectl bin/lease-agent-host include/lease_types/proto.h \
         include/lease_types/validate.h share/pkgconfig/lease-types.pc \
         share/man/man8/lease-agent.8 share/man/man8/lease-agent-host.8 \
         share/man/man8/stagingd.8 share/man/man8/leasectl.8 \
         lib/systemd/system/lease-agent@.service lib/systemd/system/stagingd.service \
         lib/sysusers.d/lease-pinning.conf etc/lease-pinning/stagingd.conf \
         etc/lease-pinning/lease-agent.env etc/lease-pinning/lease-agent.conf include/lease/client.h lib/liblease-client.a \
         lib/liblease-client.so.0 lib/pkgconfig/lease-client.pc \
         lib/cmake/lease-client/lease-client-config.cmake; do
    if [ -e "$prefix/$f" ]; then pass "installed $f"; else fail "missing $f"; fi
done
# lease-agent is built with the CUDA toolkit (gpu/cuda/) and needs no driver
# for --version; lease-agent-host is gpu/server's.
for p in lease-agent lease-agent-host; do
    [ -e "$prefix/bin/$p" ] || continue
    if "$prefix/bin/$p" --version > "$tmp/v.txt" 2>&1; then
        pass "installed $p runs: $(cat "$tmp/v.txt")"
    else
        fail "installed $p --version: $(cat "$tmp/v.txt")"
    fi
done
# liblease-client's rules (stagingd/lib) are their own component: alone,
# they install the library and none of the programs.
if cmake --install "$build" --prefix "$tmp/lib-only" --component lease-client \
       > "$tmp/install-lib.log" 2>&1 &&
   [ -e "$tmp/lib-only/include/lease/client.h" ] && [ ! -e "$tmp/lib-only/bin" ]; then
    pass "cmake --install --component lease-client: the library alone"
else
    fail "cmake --install --component lease-client:"; tail -20 "$tmp/install-lib.log"
    (cd "$tmp/lib-only" 2> /dev/null && find . -type f | sort)
fi
if grep -q "ExecStart=$prefix/bin/stagingd run --config $prefix/etc/lease-pinning/stagingd.conf" \
       "$prefix/lib/systemd/system/stagingd.service"; then
    pass "the units name the installed paths"
else
    fail "stagingd.service's ExecStart:"; grep ExecStart "$prefix/lib/systemd/system/stagingd.service"
fi
"$prefix/bin/leasectl" --version > "$tmp/v.txt" 2>&1 && pass "installed leasectl runs: $(cat "$tmp/v.txt")" ||
    fail "installed leasectl --version: $(cat "$tmp/v.txt")"

# ---- an outside program, through pkg-config ----
export PKG_CONFIG_PATH="$prefix/share/pkgconfig"
cflags=$(pkg-config --cflags lease-types) || fail "pkg-config --cflags lease-types"
ver=$(pkg-config --modversion lease-types)
[ -n "$ver" ] && pass "pkg-config finds lease-types $ver (cflags: $cflags)"
cat > "$tmp/outside.c" <<'C'
/* Builds a HELLO the way a client outside the tree would, and checks it. */
#include <lease_types/proto.h>
#include <lease_types/validate.h>
#include <stdio.h>

int main(void)
{
    struct lt_msg_hello h;
    if (lt_msg_init(&h, sizeof h, LT_MSG_HELLO, 7) != LT_OK)
        return 1;
    h.version_min = 1;
    h.version_max = LT_PROTO_VERSION;
    lt_name_set(h.name, sizeof h.name, "outside");
    uint16_t type = 0;
    enum lt_error e = lt_validate_from_client(&h, sizeof h, &type);
    printf("%s %s: %s\n", lt_msg_type_name(type), h.name, lt_error_name(e));
    return e == LT_OK ? 0 : 1;
}
C
# shellcheck disable=SC2086
if (cd "$tmp" && "$cc" -std=c11 -Wall -Wextra -Werror -pedantic $cflags outside.c -o outside) \
       > "$tmp/cc.log" 2>&1; then
    out=$("$tmp/outside")
    [ "$out" = "HELLO outside: LT_OK" ] && pass "an outside C program built with pkg-config: $out" ||
        fail "the outside program printed '$out'"
else
    fail "the outside program did not build:"; cat "$tmp/cc.log"
fi

# ---- the man pages, as installed ----
if command -v man > /dev/null; then
    for p in lease-agent stagingd leasectl lease-agent-host; do
        if (cd "$prefix/share/man" && LC_ALL=C man -l -P cat "man8/$p.8" > "$tmp/$p.txt" 2> "$tmp/$p.err") &&
           [ ! -s "$tmp/$p.err" ] && [ -s "$tmp/$p.txt" ]; then
            pass "man -l renders $p.8 ($(wc -l < "$tmp/$p.txt") lines)"
        else
            fail "man -l $p.8:"; cat "$tmp/$p.err"
        fi
    done
    if MANPATH="$prefix/share/man" man -w leasectl > /dev/null 2>&1; then
        pass "man leasectl finds the installed page through MANPATH"
    else
        fail "man -w leasectl with MANPATH=$prefix/share/man"
    fi
else
    echo "SKIP: man-db is not installed (scripts/install-deps.sh installs it)"
fi

# ---- the units ----
if command -v systemd-analyze > /dev/null; then
    units=$prefix/lib/systemd/system
    # Documentation=man:... is checked too: MANPATH finds the installed pages.
    if MANPATH="$prefix/share/man" systemd-analyze verify "$units/stagingd.service" \
           "$units/lease-agent@.service" > "$tmp/verify.txt" 2>&1 && [ ! -s "$tmp/verify.txt" ]; then
        pass "systemd-analyze verify stagingd.service lease-agent@.service"
    else
        fail "systemd-analyze verify:"; cat "$tmp/verify.txt"
    fi
    mkdir -p "$tmp/units"
    cp "$units/lease-agent@.service" "$tmp/units/"
    ln -s lease-agent@.service "$tmp/units/lease-agent@1.service"
    if MANPATH="$prefix/share/man" systemd-analyze verify "$tmp/units/lease-agent@1.service" \
           > "$tmp/verify1.txt" 2>&1 && [ ! -s "$tmp/verify1.txt" ]; then
        pass "systemd-analyze verify lease-agent@1.service (an instance)"
    else
        fail "systemd-analyze verify lease-agent@1.service:"; cat "$tmp/verify1.txt"
    fi
    for u in stagingd.service lease-agent@.service; do
        lvl=$(systemd-analyze security --offline=yes "$units/$u" 2>/dev/null | sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p')
        if [ -n "$lvl" ] && [ "$(echo "$lvl" | cut -d. -f1)" -lt 5 ]; then
            pass "systemd-analyze security: $u exposure $lvl (below 5, 'OK')"
        else
            fail "systemd-analyze security: $u exposure '$lvl'"
        fi
    done
else
    echo "SKIP: systemd-analyze is not installed (scripts/install-deps.sh installs systemd)"
fi
[ "$failed" -eq 0 ] && echo "all checks passed"
exit "$failed"
