/* Work off the loop thread: the queue of finished jobs that executor and
 * registrar threads hand back to the loop (an eventfd wakes it), and the
 * registrar thread that turns segment offers into registrations. Below
 * dispatch.c and server.c: it calls into nothing of theirs. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "jobs.h"

/* ---- the completion queue --------------------------------------------- */

void ga_server__post(struct ga_server *srv, struct ga_server__job *job)
{
    job->next = NULL;
    pthread_mutex_lock(&srv->mu);
    if (srv->done_tail)
        srv->done_tail->next = job;
    else
        srv->done_head = job;
    srv->done_tail = job;
    pthread_mutex_unlock(&srv->mu);
    uint64_t one = 1;
    if (write(srv->wakefd, &one, sizeof one) < 0 && errno != EAGAIN)
        base_log(&srv->cfg.log, BASE_LOG_ERROR, GA_SERVER__SUBSYS, "eventfd write failed: %s",
                 strerror(errno));
}

struct ga_server__job *ga_server__jobs_take(struct ga_server *srv)
{
    pthread_mutex_lock(&srv->mu);
    struct ga_server__job *j = srv->done_head;
    srv->done_head = srv->done_tail = NULL;
    pthread_mutex_unlock(&srv->mu);
    return j;
}

/* ---- the registrar ------------------------------------------------------ */

/* The registrar thread's part of an offer: verify, map, register. */
static void ga_server__offer_run(struct ga_server *srv, struct ga_server__job *j)
{
    const struct lt_msg_segment_offer *m = &j->offer;
    j->rc = lease_segment_add(srv->svc, j->conn->client, j->fd, m->size, m->mem_class, &j->seg_id,
                              &j->why);
    if (j->rc < 0)
        close(j->fd); /* refused: still ours (lease.h) */
    j->fd = -1;       /* accepted: the lease service's */
}

void ga_server__offer_queue(struct ga_server *srv, struct ga_server__job *job)
{
    job->next = NULL;
    pthread_mutex_lock(&srv->mu);
    if (srv->reg_tail)
        srv->reg_tail->next = job;
    else
        srv->reg_head = job;
    srv->reg_tail = job;
    pthread_cond_signal(&srv->reg_cv);
    pthread_mutex_unlock(&srv->mu);
}

/* Registering a segment takes up to seconds (pinning pages); it runs here,
 * never on the loop thread. */
static void *ga_server__registrar_main(void *arg)
{
    struct ga_server *srv = arg;
    pthread_mutex_lock(&srv->mu);
    for (;;) {
        while (!srv->reg_head && !srv->reg_stop)
            pthread_cond_wait(&srv->reg_cv, &srv->mu);
        struct ga_server__job *j = srv->reg_head;
        if (!j)
            break;
        srv->reg_head = j->next;
        if (!srv->reg_head)
            srv->reg_tail = NULL;
        pthread_mutex_unlock(&srv->mu);
        ga_server__offer_run(srv, j);
        ga_server__post(srv, j);
        pthread_mutex_lock(&srv->mu);
    }
    pthread_mutex_unlock(&srv->mu);
    return NULL;
}

int ga_server__registrar_start(struct ga_server *srv)
{
    int rc = -pthread_create(&srv->reg_thread, NULL, ga_server__registrar_main, srv);
    if (rc == 0)
        srv->reg_started = true;
    return rc;
}

void ga_server__registrar_stop(struct ga_server *srv)
{
    pthread_mutex_lock(&srv->mu);
    struct ga_server__job *j = srv->reg_head;
    srv->reg_head = srv->reg_tail = NULL;
    srv->reg_stop = true;
    pthread_cond_signal(&srv->reg_cv);
    pthread_mutex_unlock(&srv->mu);
    while (j) {
        struct ga_server__job *n = j->next;
        close(j->fd);
        j->fd = -1;
        j->rc =
            lt_failure_set(&j->why, LT_E_SHUTTING_DOWN, -ESHUTDOWN, "the agent is shutting down");
        ga_server__post(srv, j);
        j = n;
    }
    if (srv->reg_started) {
        pthread_join(srv->reg_thread, NULL);
        srv->reg_started = false;
    }
}
