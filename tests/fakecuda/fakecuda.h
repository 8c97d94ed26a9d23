/* fakecuda: a CPU stand-in for libcuda.so.1, for tests on machines without a
 * GPU. It implements the Driver API entry points the project calls, with
 * cuda.h's own prototypes (so the versioned names, cuMemAlloc_v2 and the
 * like, are what it exports), one device, one primary context, streams run
 * in order by one thread each, and the project's kernels emulated in C.
 * README.md beside this file says what is emulated and what is not.
 *
 * This header is internal to the library. Everything in it is guarded by
 * fk.mu unless a comment says otherwise. Handle objects (streams, events,
 * modules, functions) are never freed, so a stale handle is always
 * recognised instead of aliasing a new object. */
#ifndef FAKECUDA_H
#define FAKECUDA_H

#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* The API the library exports: default visibility for cuda.h's prototypes
 * only; everything else stays hidden (-fvisibility=hidden). */
#pragma GCC visibility push(default)
#include <cuda.h>
#pragma GCC visibility pop

#define FK_PAGE 4096u

/* ---- configuration, read once at cuInit ---- */

struct fk_config {
    unsigned int arch;      /* FAKECUDA_ARCH, digits: 90 = sm_90 */
    int driver_version;     /* FAKECUDA_DRIVER_VERSION */
    int devices;            /* FAKECUDA_DEVICES: 0 or 1 */
    int sms;                /* FAKECUDA_SMS */
    uint64_t total_mem;     /* FAKECUDA_TOTAL_MEM: device memory the fake hands out */
    uint64_t register_limit; /* FAKECUDA_REGISTER_LIMIT: 0 = none */
    uint64_t devptr_refuse_len; /* FAKECUDA_DEVPTR_REFUSE_LEN: 0 = none */
    int trace;              /* FAKECUDA_TRACE: one stderr line per call */
    int eager;              /* CUDA_MODULE_LOADING=EAGER */
    int ptx_jit_disabled;   /* CUDA_DISABLE_PTX_JIT=1 */
    char fault_kernel[64];  /* FAKECUDA_FAULT_KERNEL=name[:n] */
    unsigned int fault_nth;
    uint64_t hostfn_lag_us; /* FAKECUDA_HOSTFN_LAG_US: 0 = none */
};

/* ---- memory ---- */

enum fk_range_kind {
    FK_R_DEVICE = 1, /* cuMemAlloc / cuMemAllocAsync: our own mapping */
    FK_R_HOST_ALLOC, /* cuMemHostAlloc: our own mapping, host-visible */
    FK_R_REGISTERED, /* cuMemHostRegister: the caller's memory */
};

struct fk_range {
    uint64_t base, size; /* the device address equals the host address */
    enum fk_range_kind kind;
    unsigned int flags; /* as given to cuMemHostAlloc / cuMemHostRegister */
    unsigned int holds; /* operations using it right now */
    int dead;           /* out of the table; unmapped when holds reaches 0 */
    int ready;          /* an async allocation: its stream passed the allocation */
    int free_queued;    /* cuMemFreeAsync queued its release */
    unsigned long long id; /* CU_POINTER_ATTRIBUTE_BUFFER_ID */
    void *map;          /* what to munmap (our own mappings) */
    size_t map_len;
};

#define FK_HOLD_MAX 6
/* The ranges one operation uses; released together. */
struct fk_hold {
    struct fk_range *r[FK_HOLD_MAX];
    unsigned int n;
};

/* ---- streams, events, modules ---- */

struct fk_mark; /* one record of an event: done or not, and when */
struct fk_op;

struct CUstream_st {
    struct CUstream_st *next_all; /* every stream ever made */
    unsigned long long ctx_id;    /* the context it belongs to */
    unsigned int flags;           /* CU_STREAM_NON_BLOCKING or 0 */
    int legacy;                   /* the NULL stream */
    int alive;                    /* not destroyed */
    int thread;                   /* a worker runs for it */
    int in_hostfn;                /* its head is a host function, running now */
    struct fk_op *head, *tail;    /* queued, head first; head is running */
    uint64_t enqueued;            /* operation sequence numbers */
    uint64_t completed;           /* written with __atomic by its thread (stream.c) */
    pthread_cond_t cv;            /* work queued, or the context stops */
};

struct CUevent_st {
    struct CUevent_st *next_all;
    unsigned long long ctx_id;
    unsigned int flags;
    int alive;
    struct fk_mark *last; /* the latest record, NULL before the first */
};

struct fk_kparam {
    uint16_t ordinal, offset, size;
};

#define FK_KPARAMS_MAX 32

struct CUfunc_st {
    struct CUfunc_st *next_all;
    struct CUmod_st *mod;
    char name[128];
    int nparams; /* from the cubin's EIATTR_KPARAM_INFO; -1 when absent */
    struct fk_kparam params[FK_KPARAMS_MAX];
    unsigned int param_bytes;   /* EIATTR_CBANK_PARAM_SIZE */
    unsigned int max_threads;   /* launch bound (EIATTR_MAX_THREADS) or 1024 */
    unsigned int regs;          /* EIATTR_REGCOUNT */
    unsigned int static_smem;   /* .nv.shared.<name> less the reserved 1 KiB */
    const struct fk_kernel *emu; /* NULL: a kernel the fake cannot run */
    unsigned int launches;
};

struct CUmod_st {
    struct CUmod_st *next_all;
    unsigned long long ctx_id;
    int alive;
    unsigned int arch;
    size_t nfuncs;
    struct CUfunc_st **funcs;
};

struct CUmemPoolHandle_st {
    uint64_t release_threshold;
};

/* ---- the context and the process ---- */

struct CUctx_st {
    int active;
    unsigned int refs;
    unsigned long long id; /* new for every activation */
    struct CUstream_st *legacy;
    unsigned int workers; /* stream threads alive */
    int stopping;         /* the context is being destroyed */
    struct fk_range **ranges; /* sorted by base, disjoint */
    size_t nranges, cap;
    uint64_t device_bytes, registered_bytes;
    struct CUmemPoolHandle_st pool;
};

struct fk_global {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* any operation completed, or a fault */
    int initialized;
    int forked; /* this process is a fork child of an initialised one */
    struct fk_config cfg;
    CUresult sticky; /* the first fault; the process never recovers, as on a GPU */
    struct CUctx_st ctx;
    unsigned long long next_ctx_id;
    struct CUstream_st *streams; /* lists of every handle ever made */
    struct CUevent_st *events;
    struct CUmod_st *modules;
    /* cuMemFree, cuMemFreeHost and cuMemHostUnregister calls waiting for
     * the device's queued work: while one does, every other call that
     * queues or waits blocks (api.c, fk__enter; measured on the H200). */
    unsigned int freeing;
};

extern struct fk_global fk;
extern __thread struct CUctx_st *fk__current;
extern __thread int fk__in_hostfn;

/* ---- entry and exit of every API call (api.c) ---- */

enum {
    FK_CTX = 1u << 0,    /* needs a current, active context */
    FK_LIVE = 1u << 1,   /* fails with the sticky error after a fault */
    FK_ENQUEUE = 1u << 2, /* not allowed inside a stream host function */
};

/* Checks what @need asks for and locks fk.mu; on failure returns the error
 * unlocked. */
CUresult fk__enter(const char *fn, unsigned int need);
/* Unlocks fk.mu and returns @rc, traced when FAKECUDA_TRACE is set. */
CUresult fk__leave(const char *fn, CUresult rc);
/* A line on stderr, "fakecuda: " first. */
__attribute__((format(printf, 1, 2))) void fk__log(const char *fmt, ...);
/* Logs why and returns @rc (typically NOT_SUPPORTED: the fake's limit). */
__attribute__((format(printf, 3, 4))) CUresult fk__refuse(const char *fn, CUresult rc,
                                                          const char *fmt, ...);
/* Records the first fault: every later context call returns it. Locked. */
void fk__fault(CUresult rc);
/* Threads and shared memory bytes per multiprocessor of the fake's arch. */
int fk__sm_threads(void);
int fk__sm_smem(void);
/* Validates a handle of @kind (one of the lists in fk); locked. */
int fk__is_stream(const struct CUstream_st *s);
int fk__is_event(const struct CUevent_st *e);
int fk__is_module(const struct CUmod_st *m);
int fk__is_function(const struct CUfunc_st *f);
/* Destroys the context's streams, events, modules and memory (locked). */
void fk__ctx_teardown(struct CUctx_st *ctx);

/* ---- memory (memory.c) ---- */

/* The range holding [addr, addr + len), or NULL. Locked. */
struct fk_range *fk__range_find(const struct CUctx_st *ctx, uint64_t addr, uint64_t len);
/* Holds the ranges covering [addr, addr + len) (one, or several that
 * adjoin) for an operation's run (unlocked callers); @write says whether it
 * is written. Returns 0 and the host address, or a fault code after a line
 * naming @who and the range. */
CUresult fk__mem_hold(struct fk_hold *h, uint64_t addr, uint64_t len, int write, const char *who,
                      unsigned char **host_p);
void fk__mem_release(struct fk_hold *h);
/* Marks @r dead and unmaps it once unused. Locked. */
void fk__range_kill(struct CUctx_st *ctx, struct fk_range *r);
void fk__ranges_teardown(struct CUctx_st *ctx);

/* ---- streams (stream.c) ---- */

enum fk_op_kind {
    FK_OP_COPY = 1,
    FK_OP_MEMSET,
    FK_OP_KERNEL,
    FK_OP_HOSTFN,
    FK_OP_RECORD,
    FK_OP_WAIT_MARK,
    FK_OP_WAIT_STREAMS,
    FK_OP_WAIT_VALUE,
    FK_OP_WRITE_VALUE,
    FK_OP_FREE,
    FK_OP_ALLOC_READY,
};

struct fk_launch {
    struct CUfunc_st *fn;
    unsigned int grid[3], block[3];
    unsigned int smem;
    unsigned char params[4096];
    unsigned int param_bytes;
};

#define FK_DEPS_MAX 64
struct fk_op {
    struct fk_op *next;
    enum fk_op_kind kind;
    uint64_t seq;
    union {
        struct {
            uint64_t dst, src, len;
            /* 1: in the range table, checked when the copy runs; 0: the
             * caller's pageable memory, used as is (the caller waits) */
            int dst_table, src_table;
        } copy;
        struct {
            uint64_t dst, pitch, width, height; /* width in elements */
            uint32_t value;
            unsigned int elem; /* 1, 2 or 4 bytes */
        } set;
        struct fk_launch *launch;
        struct {
            CUhostFn fn;
            void *data;
        } host;
        struct fk_mark *mark;
        struct {
            unsigned int n;
            struct CUstream_st *s[FK_DEPS_MAX];
            uint64_t seq[FK_DEPS_MAX];
        } *deps;
        struct {
            uint64_t addr, value;
            unsigned int flags;
        } word;
        struct fk_range *range;
    } u;
};

/* The stream a handle names: NULL and CU_STREAM_LEGACY are the context's
 * NULL stream (they need a current context). Locked. */
CUresult fk__stream_resolve(const char *fn, CUstream h, struct CUstream_st **s_p);
/* A zeroed operation of @kind, or NULL. */
struct fk_op *fk__op_new(enum fk_op_kind kind);
/* Queues @op on @s (taking it over, also on failure). Locked. */
CUresult fk__enqueue(struct CUstream_st *s, struct fk_op *op);
/* Waits until @s has run everything queued so far (locked, may unlock). */
CUresult fk__stream_wait(struct CUstream_st *s);
/* Waits until every stream of the context has run what was queued so far. */
CUresult fk__ctx_wait(struct CUctx_st *ctx);
/* Stops every stream thread, dropping queued work, and retires the
 * context's streams and events (teardown). Locked. */
void fk__streams_stop(struct CUctx_st *ctx);

/* ---- copies and memsets run by the streams (memory.c) ---- */
CUresult fk__copy_run(const struct fk_op *op);
CUresult fk__memset_run(const struct fk_op *op);

/* ---- modules and launches (module.c) ---- */
void fk__modules_teardown(struct CUctx_st *ctx);
/* Runs a queued launch (unlocked): FAKECUDA_FAULT_KERNEL, then the emulation. */
CUresult fk__launch_run(const struct fk_launch *l);

/* ---- kernels (kernels.c) ---- */

/* One emulated kernel: the parameter layout of its .cu source, the launch
 * shape its contract allows, and the emulation. run returns CUDA_SUCCESS
 * or the fault it would raise on a GPU (after a line saying why). */
struct fk_kernel {
    const char *name;
    unsigned int nparams;
    struct fk_kparam params[8];
    /* Checked at launch: 0 = fine, else a line on stderr and refused. */
    CUresult (*check)(const struct fk_launch *l);
    CUresult (*run)(const struct fk_launch *l);
};

/* The emulation of kernel @name, or NULL. */
const struct fk_kernel *fk__kernel_find(const char *name);

/* ---- errors (errors.c) ---- */
const char *fk__error_name(CUresult rc);

#endif /* FAKECUDA_H */
