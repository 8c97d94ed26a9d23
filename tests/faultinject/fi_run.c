/* fi_run_all: see fi_run.h. */
#include "fi_run.h"

#include <check.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int fi__one(const struct fi_path *p, unsigned calls, uint64_t nth, bool *fired_p,
                   uint64_t *count_p, char *msg, size_t len)
{
    if (p->setup)
        p->setup(p->ctx);
    fi_arm(calls, nth);
    int out = p->run(p->ctx, msg, len);
    *count_p = fi_disarm();
    *fired_p = fi_fired();
    return out;
}

void fi_run_all(const struct fi_path *p, unsigned calls, uint64_t max_n, struct fi_tally *t_p)
{
    struct fi_tally t = {0};
    char msg[1024] = "";
    struct fi_snapshot before;
    bool fired;

    /* The counting run must complete: it is the path without faults. It
     * also warms what the C library keeps for reuse (thread stacks), so
     * only its fds are compared. */
    fi_snapshot_take(&before);
    int out = fi__one(p, calls, 0, &fired, &t.calls, msg, sizeof msg);
    ck_assert_msg(out == FI_OK, "%s: the path fails without a fault: %s", p->name, msg);
    ck_assert_msg(!p->check || p->check(p->ctx, msg, sizeof msg) == 0, "%s: %s", p->name, msg);
    before.maps = INT32_MAX / 2;
    ck_assert_msg(fi_snapshot_cmp(&before, p->maps_slack, msg, sizeof msg) == 0,
                  "%s, no fault: %s", p->name, msg);
    ck_assert_msg(fi_leak_check() == 0, "%s, no fault: LeakSanitizer found leaks", p->name);
    uint64_t last = max_n && max_n < t.calls ? max_n : t.calls;
    for (uint64_t n = 1; n <= last; n++) {
        uint64_t count;
        msg[0] = '\0';
        fi_snapshot_take(&before);
        out = fi__one(p, calls, n, &fired, &count, msg, sizeof msg);
        ck_assert_msg(out == FI_OK || out == FI_REFUSED, "%s, %s call %llu failed: %s", p->name,
                      fi_call_name(calls), (unsigned long long)n, msg);
        t.runs++;
        if (getenv("FI_VERBOSE"))
            fprintf(stderr, "  %s, %s call %llu of %llu fails: %s%s\n", p->name,
                    fi_call_name(calls), (unsigned long long)n, (unsigned long long)t.calls,
                    out == FI_OK ? "the path completed" : "", msg);
        if (!fired)
            t.unreached++;
        else if (out == FI_REFUSED)
            t.refused++;
        else
            t.absorbed++;
        char why[1024];
        ck_assert_msg(!p->check || p->check(p->ctx, why, sizeof why) == 0,
                      "%s, %s call %llu failed (%s): %s", p->name, fi_call_name(calls),
                      (unsigned long long)n, msg, why);
        ck_assert_msg(fi_snapshot_cmp(&before, p->maps_slack, why, sizeof why) == 0,
                      "%s, %s call %llu failed (%s): %s", p->name, fi_call_name(calls),
                      (unsigned long long)n, msg, why);
        ck_assert_msg(fi_leak_check() == 0,
                      "%s, %s call %llu failed (%s): LeakSanitizer found leaks (above)", p->name,
                      fi_call_name(calls), (unsigned long long)n, msg);
    }
    fprintf(stderr,
            "fault injection: %s, %s: %llu calls on the path, %llu runs: %llu error returns, "
            "%llu absorbed, %llu not reached%s\n",
            p->name, fi_call_name(calls), (unsigned long long)t.calls,
            (unsigned long long)t.runs, (unsigned long long)t.refused,
            (unsigned long long)t.absorbed, (unsigned long long)t.unreached,
            fi_have_leak_check() ? "; LeakSanitizer clean after each" : "");
    if (t_p)
        *t_p = t;
}
