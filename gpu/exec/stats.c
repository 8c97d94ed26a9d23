/* The front's counters as numbers (gpu/executor.h, ga_exec_stats), read
 * at a /metrics scrape: one lock hold, the same fields
 * ga_exec_stats_format logs. */
#include <errno.h>

#include "front.h"

int ga_exec_stats(struct ga_executor *ex, struct ga_exec_stats *stats_p)
{
    if (!ex || !stats_p)
        return -EINVAL;
    struct ga_exec_stats st = {0};
    pthread_mutex_lock(&ex->mu);
    struct base_u64map_iter it;
    base_u64map_iter_init(&ex->owners, &it);
    for (struct base_u64map_entry *e; (e = base_u64map_iter_next(&ex->owners, &it));) {
        const struct ga_exec_owner *o = e->ptr;
        st.clients += !o->dropped;
        st.queued += o->queued;
    }
    st.streams = base_idtab_live(&ex->streams);
    st.events = base_idtab_live(&ex->events);
    st.in_flight = ex->inflight;
    st.submitted = ex->submitted;
    st.completed = ex->completed;
    st.cancelled = ex->cancelled;
    st.failed = ex->failed;
    st.commands = ex->commands;
    st.faulted = ex->faulted;
    pthread_mutex_unlock(&ex->mu);
    *stats_p = st;
    return 0;
}
