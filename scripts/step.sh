#!/usr/bin/env bash
# step.sh LABEL LOG [--summary KIND] -- COMMAND...
#
# Runs one long step of `make test` / `make demo` with its whole output in
# LOG and one line on the terminal: progress while it runs (a line rewritten
# in place on a terminal, a line every 30 s otherwise), then "ok" with the
# time, or the exit status, the last lines of LOG and LOG's path. Progress is
# read from make's "[ 42%]", ctest's "12/43 Test" and apt's status lines.
#
# KIND picks what of LOG is worth showing on success: configure (the
# project's configuration summary and every CMake warning), ctest (the
# totals and the tests that were skipped), none (the default).
# V=1 in the environment shows the full output as well (still logged).
set -uo pipefail

usage() { echo "usage: step.sh LABEL LOG [--summary KIND] -- COMMAND..." >&2; exit 2; }
(($# >= 4)) || usage
label=$1 log=$2
shift 2
kind=none
if [[ $1 == --summary ]]; then
    kind=${2:-}
    shift 2
fi
[[ ${1:-} == -- ]] || usage
shift
(($#)) || usage

mkdir -p "$(dirname "$log")"
: > "$log"
tty=0 cols=80
if [[ -t 1 && ${V:-0} != 1 ]]; then
    tty=1
    cols=$(tput cols 2> /dev/null || echo 80)
fi
shopt -s extglob
start=$SECONDS
last_beat=$SECONDS
progress=

# show: the progress line, rewritten in place on a terminal, every 30 s
# otherwise (a log read later needs no more).
show() {
    local t=$((SECONDS - start))
    if ((tty)); then
        local text="$label: $progress"
        ((${#text} > cols - 8)) && text=${text:0:cols-8}
        printf '\r\033[K%s (%ds)' "$text" "$t"
    elif ((SECONDS - last_beat >= 30)); then
        printf '%s: %s (%ds)\n' "$label" "$progress" "$t"
        last_beat=$SECONDS
    fi
}

# failed_output LOG: for each test ctest reports failed, timed out or
# crashed in LOG, the lines --output-on-failure put after its result line up
# to the next test's (or the totals), at most 60 per test.
failed_output() {
    awk -v logf="$1" '
        function stop() {
            if (cut > 0)
                printf "  |     ... %d more lines in %s\n", cut, logf
            on = 0; cut = 0
        }
        /^ *[0-9]+\/[0-9]+ Test +#[0-9]+: / || /^ *Start +[0-9]+: / ||
        /^[0-9]+% tests passed/ || /^The following tests FAILED/ {
            if (on) stop()
        }
        /^ *[0-9]+\/[0-9]+ Test +#[0-9]+: .*(\*\*\*(Failed|Timeout|Not Run)|Exception)/ {
            sub(/^ */, "")
            printf "  | -- %s\n", $0
            on = 1; n = 0; cut = 0
            next
        }
        on { if (n++ < 60) print "  |     " $0; else cut++ }
        END { if (on) stop() }' "$1"
}

# The command's status comes back at the end of the last line, after its
# output (which may not end in a newline).
while IFS= read -r line; do
    if [[ $line =~ ^(.*)__step_rc=([0-9]+)$ ]]; then
        rc=${BASH_REMATCH[2]}
        line=${BASH_REMATCH[1]}
        [[ -n $line ]] || continue
    fi
    # CMake colours its progress when the terminal can show it; not here.
    line=${line//$'\033'\[*([0-9;])m/}
    printf '%s\n' "$line" >> "$log"
    [[ ${V:-0} == 1 ]] && printf '%s\n' "$line"
    if [[ $line =~ ^\[\ *([0-9]+)%\]\ (.*)$ ]]; then
        progress="${BASH_REMATCH[1]}% ${BASH_REMATCH[2]}"
    elif [[ $line =~ ^\ *([0-9]+/[0-9]+)\ Test\ +#[0-9]+:\ ([^ ]+) ]]; then
        progress="test ${BASH_REMATCH[1]} ${BASH_REMATCH[2]}"
    elif [[ $line =~ ^(pm|dl)status:[^:]*:([0-9]+)[.0-9]*:(.*)$ ]]; then
        progress="${BASH_REMATCH[2]}% ${BASH_REMATCH[3]}"
    else
        continue
    fi
    show
done < <("$@" < /dev/null 2>&1; echo "__step_rc=$?")
rc=${rc:-1}
((tty)) && printf '\r\033[K'
t=$((SECONDS - start))

if ((rc != 0)); then
    # Progress and passing lines say nothing about the failure: leave them
    # out of the excerpt (the log keeps them).
    printf '%s: FAILED (exit %d after %ds). The end of %s, progress lines left out:\n' \
        "$label" "$rc" "$t" "$log"
    grep -v -E '^\[ *[0-9]+%\] (Building|Linking|Built target|Generating)|^Consolidate compiler|^Scanning dependencies|(Entering|Leaving) directory|^ *Start +[0-9]+: |Test +#[0-9]+: .*(Passed|\*\*\*Skipped)|^(pm|dl)status:|^ptxas info|^ +[0-9]+ bytes stack frame' \
        "$log" | tail -n 40 | sed 's/^/  | /'
    # ctest's end names the failed tests only; what each printed (its
    # assertion) follows its result line, up to the next test's line.
    if grep -q -E '^ *[0-9]+/[0-9]+ Test +#[0-9]+: .*(\*\*\*(Failed|Timeout|Not Run)|Exception)' "$log"; then
        printf '%s: what each failed test printed:\n' "$label"
        failed_output "$log"
    fi
    printf '%s: FAILED; the whole output is in %s\n' "$label" "$log"
    exit "$rc"
fi

printf '%s: ok (%ds, log %s)\n' "$label" "$t" "$log"
case $kind in
configure)
    # The summary block and each warning (its text is indented; the first
    # line that is not ends it); everything else is in the log.
    awk '/^CMake Warning/ { w = 1; print "  " $0; next }
         w && /^(  |$)/ { if ($0 != "" || prev != "") print "  " $0; prev = $0; next }
         { w = 0 }
         /^-- CUDA toolkit/ { print "  " substr($0, 4) }
         /^-- ==== / { s = 1 }
         s { print "  " substr($0, 4) }
         /^-- =====*$/ { s = 0 }' "$log"
    ;;
ctest)
    grep -E '^[0-9]+% tests passed|^Total Test time' "$log" | sed 's/^/  /'
    skipped=$(sed -n 's/^[[:space:]]*[0-9]* - \(.*\) (Skipped)$/\1/p' "$log")
    if [[ -n $skipped ]]; then
        printf '  skipped (exit 77: no GPU, or a feature this machine lacks): %s\n' \
            "$(printf '%s' "$skipped" | tr '\n' ' ')" | fold -s -w 100 | sed '2,$s/^/    /'
    fi
    ;;
esac
exit 0
