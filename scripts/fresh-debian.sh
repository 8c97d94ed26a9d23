#!/usr/bin/env bash
# fresh-debian.sh (make fresh-check): what a new user sees. Debootstraps a
# clean Debian 12 (minbase: less than a fresh install or the debian:12 image
# has), clones this checkout's HEAD into it and runs the README's quick start
# line by line -- twice, without and with the CUDA toolkit -- then prints one
# table: each command, pass or fail, its time and its log.
#
#   fresh-debian.sh [--keep] [--reuse DIR] [--only cpu|cuda] [--cuda DIR]
#                   [--mirror URL] [--quiet]
#
#   --keep        keep the work folder (the base system, both chroots, logs)
#   --reuse DIR   work in DIR and reuse the base system debootstrapped there
#                 before (made there if absent); DIR is kept. Each variant
#                 still starts from a fresh copy of the base.
#   --only V      run one variant: cpu (no toolkit) or cuda
#   --cuda DIR    the toolkit bind-mounted (read-only) at /usr/local/cuda in
#                 the cuda variant (default: /usr/local/cuda)
#   --mirror URL  the Debian mirror (default http://deb.debian.org/debian)
#   --quiet       do not echo the output of the make commands
#
# Needs root (debootstrap, chroot, mount). Only committed work is tested: the
# chroot gets a clone of HEAD. The README's <repository URL> stands for it.
# Logs are kept in <work>/logs either way.
set -euo pipefail

# All mounts happen in a private mount namespace: none reaches the host
# (a tmpfs on the chroot's /dev/shm must not cover the host's through a
# shared /dev), and all vanish with the namespace even if this is killed.
if [[ ${FRESH_DEBIAN_NS:-} != 1 && $(id -u) -eq 0 ]]; then
    FRESH_DEBIAN_NS=1 exec unshare --mount --propagation private -- "$0" "$@"
fi

here=$(cd "$(dirname "$0")" && pwd)
repo=$(git -C "$here/.." rev-parse --show-toplevel)
suite=bookworm
mirror=http://deb.debian.org/debian
cuda_src=/usr/local/cuda
keep=0 reuse= quiet=0
variants=(cpu cuda)

die() { echo "fresh-debian: $*" >&2; exit 2; }
while (($#)); do
    case $1 in
    --keep) keep=1 ;;
    --reuse) reuse=${2:?--reuse needs a folder}; shift ;;
    --only)
        [[ ${2:-} == cpu || ${2:-} == cuda ]] || die "--only takes cpu or cuda"
        variants=("$2"); shift ;;
    --cuda) cuda_src=${2:?--cuda needs a folder}; shift ;;
    --mirror) mirror=${2:?--mirror needs a URL}; shift ;;
    --quiet) quiet=1 ;;
    -h | --help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
    esac
    shift
done
[[ $(id -u) -eq 0 ]] || die "needs root: debootstrap, chroot and mount"

# The quick start, as the README has it: the first sh block after its title.
mapfile -t commands < <(awk '/^## Quick start/ { q = 1; next }
    q && /^```sh/ { b = 1; next }
    b && /^```/ { exit }
    b && NF { print }' "$repo/README.md")
((${#commands[@]})) || die "no sh block under '## Quick start' in $repo/README.md"

if [[ -n $reuse ]]; then
    mkdir -p "$reuse"
    work=$(cd "$reuse" && pwd)
    keep=1
else
    work=$(mktemp -d /var/tmp/fresh-debian-XXXXXX)
fi
logs=$work/logs
mkdir -p "$logs"

# Every mount this script makes, so that every exit path undoes them.
mounts=()
mount_at() { # mount_at TARGET MOUNT-ARGS...
    local target=$1
    shift
    mkdir -p "$target"
    mount "$@" "$target"
    mounts+=("$target")
}
# Processes left inside a chroot (an agent the demo failed to stop) would
# keep its mounts busy; they are ours, found by their root directory.
kill_inside() {
    local root=$1 p
    for p in /proc/[0-9]*; do
        [[ $(readlink "$p/root" 2> /dev/null) == "$root" ]] && kill -KILL "${p#/proc/}" 2> /dev/null
    done
    return 0
}
unmount_all() {
    local i
    for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do
        umount "${mounts[i]}" 2> /dev/null || umount -l "${mounts[i]}" ||
            echo "fresh-debian: WARNING: cannot unmount ${mounts[i]}" >&2
    done
    mounts=()
}
# A folder is removed only with nothing mounted below it: a bind-mounted
# /dev or /usr/local/cuda must never be deleted through the chroot.
remove_tree() {
    local dir=$1
    [[ -e $dir ]] || return 0
    if awk -v d="$dir/" 'index($2 "/", d) == 1 { found = 1 } END { exit !found }' /proc/self/mounts; then
        echo "fresh-debian: NOT removing $dir: something is still mounted below it" >&2
        return 1
    fi
    rm -rf --one-file-system "$dir"
}
cleanup() {
    local v
    for v in "${variants[@]}"; do kill_inside "$work/$v"; done
    unmount_all
    if ((keep)); then
        echo "fresh-debian: kept $work (run again with --reuse $work)"
    else
        for v in base "${variants[@]}"; do remove_tree "$work/$v" || true; done
        rm -rf "$work/src.git" "$work/base.ok"
        echo "fresh-debian: removed the chroots; the logs are in $logs"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

if ! command -v debootstrap > /dev/null; then
    "$here/step.sh" "host: apt-get update" "$logs/host-apt-update.log" -- apt-get update
    "$here/step.sh" "host: apt-get install debootstrap" "$logs/host-debootstrap.log" -- \
        env DEBIAN_FRONTEND=noninteractive apt-get install -y debootstrap
fi

if [[ -f $work/base.ok ]]; then
    echo "fresh-debian: reusing the Debian $suite base system in $work/base"
else
    remove_tree "$work/base"
    "$here/step.sh" "debootstrap $suite (minbase) into $work/base" "$logs/debootstrap.log" -- \
        debootstrap --variant=minbase "$suite" "$work/base" "$mirror"
    touch "$work/base.ok"
fi

# The clone the user makes: HEAD alone, as branch main.
[[ -z $(git -C "$repo" status --porcelain --untracked-files=no) ]] ||
    echo "fresh-debian: NOTE: $repo has uncommitted changes; only HEAD is tested"
rm -rf "$work/src.git"
git init -q --bare "$work/src.git"
git -C "$repo" push -q "$work/src.git" HEAD:refs/heads/main
git -C "$work/src.git" symbolic-ref HEAD refs/heads/main
head=$(git -C "$repo" log -1 --format='%h (%<(50,trunc)%s' HEAD | sed 's/ *$/)/')

rows=()
failed=0
# row VARIANT RESULT SECONDS COMMAND LOG: one line of the final table, with
# how many lines the command printed (what the user reads).
row() {
    local t=$3 n=-
    [[ $t == - ]] || t="$((t / 60))m$((t % 60))s"
    [[ -f $5 ]] && n=$(wc -l < "$5")
    rows+=("$1"$'\t'"$2"$'\t'"$t"$'\t'"$n"$'\t'"$4"$'\t'"$5")
}
# run_variant NAME: a fresh copy of the base, mounted, the quick start run in it.
run_variant() {
    local v=$1 root=$work/$1
    echo
    echo "== fresh-debian: variant $v ($([[ $v == cuda ]] && echo "toolkit $cuda_src" || echo "no CUDA toolkit")), HEAD $head"
    remove_tree "$root"
    cp -a "$work/base" "$root"
    cp -L /etc/resolv.conf "$root/etc/resolv.conf"
    # What a Debian 12 install has; debootstrap writes only the first line.
    cat > "$root/etc/apt/sources.list" << EOF
deb $mirror $suite main
deb $mirror $suite-updates main
deb http://deb.debian.org/debian-security $suite-security main
EOF
    mkdir -p "$root/srv"
    cp -a "$work/src.git" "$root/srv/lease-pinning.git"

    mount_at "$root/proc" -t proc proc
    mount_at "$root/sys" -t sysfs sysfs
    mount_at "$root/dev" --bind /dev
    mount_at "$root/dev/pts" --bind /dev/pts
    mount_at "$root/dev/shm" -t tmpfs -o mode=1777,nosuid,nodev shm
    if [[ $v == cuda ]]; then
        mount_at "$root/usr/local/cuda" --bind "$(readlink -f "$cuda_src")"
        mount -o remount,bind,ro "$root/usr/local/cuda"
    fi

    local cwd=/root i cmd shown log st t0 t
    for i in "${!commands[@]}"; do
        cmd=${commands[i]//<repository URL>//srv/lease-pinning.git}
        shown=$(sed 's/[[:space:]]*#.*$//' <<< "${commands[i]}")
        log=$logs/$v-$((i + 1)).log
        echo "-- $v: $shown"
        t0=$SECONDS
        st=0
        # A login-like environment: root's PATH, no CUDA on it, no tty.
        chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb \
            PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
            /bin/bash -c "cd '$cwd' && $cmd"'; st=$?; pwd > /tmp/.fresh-cwd; exit $st' \
            < /dev/null > >(if ((quiet)) || [[ $shown != make* ]]; then cat > "$log"
                            else tee "$log" | sed 's/^/   | /'; fi) 2>&1 || st=$?
        wait $! 2> /dev/null || true
        t=$((SECONDS - t0))
        [[ -f $root/tmp/.fresh-cwd ]] && cwd=$(< "$root/tmp/.fresh-cwd")
        if ((st == 0)); then
            row "$v" PASS "$t" "$shown" "$log"
        else
            failed=1
            row "$v" "FAIL ($st)" "$t" "$shown" "$log"
            echo "-- $v: FAILED (exit $st); the end of $log:"
            tail -n 25 "$log" | sed 's/^/   | /'
        fi
    done
    kill_inside "$root"
    unmount_all
}

for v in "${variants[@]}"; do
    if [[ $v == cuda && ! -x $cuda_src/bin/nvcc ]]; then
        row cuda SKIP - "(no toolkit at $cuda_src)" -
        continue
    fi
    run_variant "$v"
done

echo
echo "== fresh-debian: Debian $suite (debootstrap minbase), HEAD $head, $((SECONDS / 60))m$((SECONDS % 60))s in all"
{
    printf 'variant\tresult\ttime\tlines\tcommand\tlog\n'
    printf '%s\n' "${rows[@]}"
} | awk -F '\t' '{ for (i = 1; i <= NF; i++) { c[NR, i] = $i; if (length($i) > w[i]) w[i] = length($i) } }
    END { for (r = 1; r <= NR; r++) { for (i = 1; i < 6; i++) printf "%-*s  ", w[i], c[r, i]; print c[r, 6] } }'
exit "$failed"
