#!/bin/sh
# Rebuilds the hand-made seeds of linkcheck's fuzz corpus (seed-*): small
# real ELF files that reach each part of the reader (an object, shared
# libraries with GNU and SysV hash tables, DT_RUNPATH and DT_RPATH with
# tokens, a static and a PIE program, one without section headers) and each
# rule (a forbidden DT_NEEDED, a cuInit symbol, library names in data).
# Usage: make-seeds.sh [corpus dir]; needs gcc and dd.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/corpus}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"
cd "$work"

cat > stub.c <<'SRC'
int lc_stub(void);
int lc_stub(void) { return 1; }
SRC
cat > seed.c <<'SRC'
const char lc_seed_name[] = "libcuda.so.1";
char lc_seed_path[] = "/opt/x/libnvidia-ml.so.580";
int cuInit(unsigned int f);
int cuInit(unsigned int f) { return (int)f; }
int lc_seed(int x);
int lc_seed(int x) { return x * 3; }
SRC
echo 'void _start(void) { for (;;); }' > start.c

# Small files: no build id, no unwind tables, code and data in one segment,
# segments aligned to 256 bytes instead of a page (nothing runs them).
small="-Os -fno-asynchronous-unwind-tables -fno-stack-protector -nostdlib
       -Wl,--build-id=none -Wl,-z,noseparate-code -Wl,-z,max-page-size=0x100
       -Wl,-z,common-page-size=0x100"
gcc $small -fPIC -shared -Wl,-soname,libcuda.so.1 -o libcuda.so.1 stub.c
gcc -Os -fno-asynchronous-unwind-tables -c seed.c -o "$out/seed-object.rel"
gcc $small -fPIC -shared -Wl,-soname,libseed.so -Wl,--enable-new-dtags \
    -Wl,-rpath,'$ORIGIN/../lib:$LIB' -Wl,--hash-style=gnu -L. -Wl,--no-as-needed -l:libcuda.so.1 \
    -o "$out/seed-gnuhash-runpath.so" seed.c
gcc $small -fPIC -shared -Wl,-soname,libseed2.so -Wl,--disable-new-dtags \
    -Wl,-rpath,'/opt/${ORIGIN}/x' -Wl,--hash-style=sysv -L. -Wl,--no-as-needed -l:libcuda.so.1 \
    -o "$out/seed-sysvhash-rpath.so" seed.c
gcc $small -static -o "$out/seed-static-exe" start.c
gcc $small -fPIE -pie -Wl,--dynamic-linker=/lib64/ld-linux-x86-64.so.2 \
    -Wl,--hash-style=both -L. -Wl,--no-as-needed -l:libcuda.so.1 -o "$out/seed-pie-interp" start.c

# The same library with e_shoff, e_shnum and e_shstrndx zeroed: only the
# loader's view (DT_SYMTAB, PT_LOAD) is left to check.
cp "$out/seed-gnuhash-runpath.so" "$out/seed-no-sections.so"
dd if=/dev/zero of="$out/seed-no-sections.so" bs=1 seek=40 count=8 conv=notrunc 2>/dev/null
dd if=/dev/zero of="$out/seed-no-sections.so" bs=1 seek=60 count=4 conv=notrunc 2>/dev/null
ls -l "$out"/seed-*
