/* The completion thread. The driver calls a stream's host functions on its
 * own thread, where CUDA calls are forbidden, and while one runs the stream
 * waits. So the host function only queues a node prepared beforehand; this
 * thread runs the node's function (which may call CUDA, e.g. lease_work_done
 * unregistering a dropped client's segments). Driver-free. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/completer.h"

#define GA_COMPLETER_SUBSYS "exec"

struct ga_cnode {
    struct ga_cnode *next;
    struct ga_completer *c;
    void (*fn)(void *arg);
    void *arg;
};

struct ga_completer {
    pthread_mutex_t lock;
    pthread_cond_t cv;      /* a node was fired, or stopping */
    pthread_cond_t idle_cv; /* pending reached 0 */
    struct ga_cnode *head, *tail;
    uint64_t pending; /* prepared, not yet run */
    uint64_t run;
    int stop;
    pthread_t thread;
    const struct base_log_sink *log;
};

static void *ga_completer_main(void *p)
{
    struct ga_completer *c = p;
    pthread_mutex_lock(&c->lock);
    for (;;) {
        while (!c->head && !c->stop)
            pthread_cond_wait(&c->cv, &c->lock);
        struct ga_cnode *n = c->head;
        if (!n)
            break;
        c->head = n->next;
        if (!c->head)
            c->tail = NULL;
        pthread_mutex_unlock(&c->lock);
        n->fn(n->arg);
        free(n);
        pthread_mutex_lock(&c->lock);
        c->run++;
        if (--c->pending == 0)
            pthread_cond_broadcast(&c->idle_cv);
    }
    pthread_mutex_unlock(&c->lock);
    return NULL;
}

int ga_completer_create(const struct base_log_sink *log, struct ga_completer **c_p)
{
    struct ga_completer *c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    c->log = log;
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->cv, NULL);
    pthread_cond_init(&c->idle_cv, NULL);
    int err = pthread_create(&c->thread, NULL, ga_completer_main, c);
    if (err) {
        base_log(log, BASE_LOG_ERROR, GA_COMPLETER_SUBSYS,
                 "starting the completion thread failed: %s", strerror(err));
        pthread_cond_destroy(&c->idle_cv);
        pthread_cond_destroy(&c->cv);
        pthread_mutex_destroy(&c->lock);
        free(c);
        return -err;
    }
    *c_p = c;
    return 0;
}

int ga_completer_prepare(struct ga_completer *c, void (*fn)(void *arg), void *arg,
                         struct ga_cnode **node_p)
{
    struct ga_cnode *n = calloc(1, sizeof(*n));
    if (!n)
        return -ENOMEM;
    n->c = c;
    n->fn = fn;
    n->arg = arg;
    pthread_mutex_lock(&c->lock);
    c->pending++;
    pthread_mutex_unlock(&c->lock);
    *node_p = n;
    return 0;
}

void ga_completer_cancel(struct ga_completer *c, struct ga_cnode *node)
{
    pthread_mutex_lock(&c->lock);
    if (--c->pending == 0)
        pthread_cond_broadcast(&c->idle_cv);
    pthread_mutex_unlock(&c->lock);
    free(node);
}

void ga_completer_fire(void *node)
{
    struct ga_cnode *n = node;
    struct ga_completer *c = n->c;
    pthread_mutex_lock(&c->lock);
    n->next = NULL;
    if (c->tail)
        c->tail->next = n;
    else
        c->head = n;
    c->tail = n;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->lock);
}

void ga_completer_counts(struct ga_completer *c, uint64_t *pending_p, uint64_t *run_p)
{
    pthread_mutex_lock(&c->lock);
    *pending_p = c->pending;
    *run_p = c->run;
    pthread_mutex_unlock(&c->lock);
}

uint64_t ga_completer_destroy(struct ga_completer *c, int abandon)
{
    if (!c)
        return 0;
    pthread_mutex_lock(&c->lock);
    while (!abandon && c->pending)
        pthread_cond_wait(&c->idle_cv, &c->lock);
    c->stop = 1;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->lock);
    pthread_join(c->thread, NULL); /* runs what was already fired first */
    uint64_t left = c->pending;
    if (left) {
        base_log(c->log, BASE_LOG_ERROR, GA_COMPLETER_SUBSYS,
                 "completion thread stopped with %llu completion%s that the driver never ran "
                 "(device fault); their state stays allocated",
                 (unsigned long long)left, left == 1 ? "" : "s");
        return left;
    }
    pthread_cond_destroy(&c->idle_cv);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->lock);
    free(c);
    return 0;
}
