/* LAUNCH on the CUDA backend (docs/launch.md): the table of launchable
 * kernels, built at start-up from the descriptors of the loaded images;
 * the checks of one launch against its kernel's descriptor and the device
 * (on the caller's thread, no driver call); what a launch queues on its
 * stream; its result.
 *
 * On the stream, in order: the result area (device memory, zeroed), for
 * each PINNED range a device copy of its bytes (MAPPED ranges are read and
 * written in place through their device address), the kernel with the
 * parameter list built here from the descriptor, the copy back of every
 * PINNED range the kernel writes, the result area into the command's pinned
 * result slot, and the device memory's release; then the completion, as for
 * every submit (record_allocation: the server's lease pins are undone only
 * after it). Nothing here waits for the GPU. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_cuda.h"
#include "cu_call.h"
#include "device_internal.h"
#include "kernels/images.h"
#include "kernels/kdesc.h"

_Static_assert(KN_KDESC_MAX_PARAMS == LT_LAUNCH_PARAMS_MAX, "descriptor and wire agree");
_Static_assert(KN_KDESC_MAX_LEASES == LT_LAUNCH_MAX_LEASES, "descriptor and wire agree");
_Static_assert(KN_KDESC_RESULT_MAX == LT_LAUNCH_RESULT_MAX, "descriptor and wire agree");
_Static_assert(KN_KDESC_ARGS_MAX == LT_LAUNCH_ARGS_MAX, "descriptor and wire agree");
_Static_assert(KN_KDESC_KERNEL_LEN == LT_LAUNCH_KERNEL_LEN, "descriptor and wire agree");
_Static_assert(LT_LAUNCH_RESULT_MAX <= CX_RESULT_SLOT_BYTES, "a result area fits a slot");

/* One launchable kernel. */
struct cx_lk {
    const char *image;               /* the image's name (the device's table) */
    const struct kn_kdesc_kernel *k; /* its descriptor */
    CUfunction fn;
    int max_threads; /* CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK */
    int max_shared;  /* CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES */
};

struct cx_launch_table {
    struct kn_kdesc *descs; /* one per image, zeroed where it has none */
    size_t ndescs;
    struct cx_lk *lks;
    size_t count;
    int max_block[3], max_grid[3]; /* the device's */
};

/* ---- the table (at start-up, context current) --------------------------- */

static int cx__lk_add(struct cx *x, struct cx_launch_table *t, const struct kn_image *img,
                      const struct kn_kdesc_kernel *k)
{
    struct cx_lk *lk = &t->lks[t->count];
    *lk = (struct cx_lk){.image = img->name, .k = k};
    if (ga_device_kernel(x->dev, img->name, k->name, &lk->fn) < 0) {
        ga__err("LAUNCH: the descriptor of image '%s' declares kernel %s, which is not among "
                "the image's loaded kernels",
                img->name, k->name);
        return -ENOEXEC;
    }
    int rc = GA_CU(
        cuFuncGetAttribute(&lk->max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, lk->fn));
    if (rc == 0)
        rc = GA_CU(cuFuncGetAttribute(&lk->max_shared,
                                      CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, lk->fn));
    if (rc < 0)
        return rc;
    if ((int64_t)k->block_max > lk->max_threads || (int64_t)k->shared_max > lk->max_shared) {
        ga__err("LAUNCH: image '%s' kernel %s: its descriptor allows block_max=%u and "
                "shared_max=%u, the device allows it %d threads a block and %d bytes of "
                "dynamic shared memory",
                img->name, k->name, k->block_max, k->shared_max, lk->max_threads, lk->max_shared);
        return -ENOEXEC;
    }
    ga__info("LAUNCH: image '%s' kernel %s launchable: %u parameters, %u lease range%s, %u "
             "argument bytes, up to %u threads a block, %u bytes of shared memory, a %u-byte "
             "result",
             img->name, k->name, k->nparams, k->leases, k->leases == 1 ? "" : "s", k->arg_bytes,
             k->block_max, k->shared_max, k->result_max);
    t->count++;
    return 0;
}

void cx__launch_table_free(struct cx *x)
{
    struct cx_launch_table *t = x->launch;
    if (!t)
        return;
    for (size_t i = 0; i < t->ndescs; i++)
        kn_kdesc_free(&t->descs[i]);
    free(t->descs);
    free(t->lks);
    free(t);
    x->launch = NULL;
}

int cx__launch_table_build(struct cx *x)
{
    const struct ga_device *dev = x->dev;
    struct cx_launch_table *t = calloc(1, sizeof(*t));
    if (!t)
        return -ENOMEM;
    x->launch = t;
    t->descs = calloc(dev->module_count ? dev->module_count : 1, sizeof(*t->descs));
    if (!t->descs)
        return -ENOMEM;
    t->ndescs = dev->module_count;
    size_t total = 0;
    char why[512];
    for (size_t i = 0; i < dev->module_count; i++) {
        const struct kn_image *img = dev->modules[i].image;
        if (!img || !img->kdesc)
            continue;
        /* Parsed and checked against the cubin again here: the embedded
         * descriptors were checked at build time, --cubin-dir's when read,
         * and what the device loaded is what is checked now. */
        int rc = kn_kdesc_parse(img->kdesc, img->kdesc_len, &t->descs[i], why, sizeof why);
        if (rc == 0 &&
            (rc = kn_kdesc_check_cubin(&t->descs[i], img->data, img->size, why, sizeof why)) < 0)
            kn_kdesc_free(&t->descs[i]);
        if (rc < 0) {
            ga__err("LAUNCH: the descriptor of image '%s' is refused: %s", img->name, why);
            return -ENOEXEC;
        }
        total += t->descs[i].count;
    }
    t->lks = calloc(total ? total : 1, sizeof(*t->lks));
    if (!t->lks)
        return -ENOMEM;
    for (size_t i = 0; i < dev->module_count; i++)
        for (size_t k = 0; k < t->descs[i].count; k++) {
            int rc = cx__lk_add(x, t, dev->modules[i].image, &t->descs[i].kernels[k]);
            if (rc < 0)
                return rc;
        }
    static const CUdevice_attribute attrs[6] = {
        CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y,
        CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X,
        CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y,  CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z,
    };
    for (int a = 0; a < 6; a++) {
        int *v = a < 3 ? &t->max_block[a] : &t->max_grid[a - 3];
        int rc = GA_CU(cuDeviceGetAttribute(v, attrs[a], dev->cu_device));
        if (rc < 0)
            return rc;
    }
    return 0;
}

size_t cx__launch_count(const struct cx *x)
{
    return x->launch ? x->launch->count : 0;
}

/* ---- one launch's checks (the caller's thread, no driver call) ------------- */

static const struct cx_lk *cx__lk_find(const struct cx *x, const char *image, const char *kernel)
{
    const struct cx_launch_table *t = x->launch;
    for (size_t i = 0; t && i < t->count; i++)
        if (strcmp(t->lks[i].image, image) == 0 && strcmp(t->lks[i].k->name, kernel) == 0)
            return &t->lks[i];
    return NULL;
}

/* A refusal about parameter @index (LT_INDEX_NONE: none). */
__attribute__((format(printf, 5, 6))) static int cx__lrefuse(struct ga_exec_launch *l,
                                                             struct lt_failure *why, uint32_t code,
                                                             uint32_t index, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = lt_failure_vset(why, code, 0, fmt, ap);
    va_end(ap);
    l->arg_index = index;
    return rc;
}

/* The ranges against the descriptor's lease parameters. */
static int cx__launch_ranges_check(const struct cx_lk *lk, struct ga_exec_launch *l,
                                   struct lt_failure *why)
{
    const struct kn_kdesc_kernel *k = lk->k;
    if (l->nranges > k->leases)
        return cx__lrefuse(l, why, LT_E_BAD_VALUE, LT_INDEX_NONE,
                           "%s runs on %u lease range%s, the launch gives %u", k->name, k->leases,
                           k->leases == 1 ? "" : "s", l->nranges);
    for (uint32_t i = 0; i < k->nparams; i++) {
        const struct kn_kdesc_param *p = &k->params[i];
        if (p->type != KN_KDESC_LEASE_PTR && p->type != KN_KDESC_LEASE_LEN)
            continue;
        if (p->lease >= l->nranges)
            return cx__lrefuse(l, why, LT_E_BAD_VALUE, i,
                               "argument %u (%s) is lease range %u of %s, the launch gives %u", i,
                               p->name, p->lease, k->name, l->nranges);
        const struct ga_exec_launch_range *r = &l->ranges[p->lease];
        if (p->type != KN_KDESC_LEASE_PTR)
            continue;
        if (r->mem_class != LT_CLASS_PINNED && r->mem_class != LT_CLASS_MAPPED)
            return cx__lrefuse(l, why, LT_E_UNSUPPORTED, i,
                               "argument %u (%s): lease range %u is served %s; LAUNCH needs "
                               "PINNED or MAPPED",
                               i, p->name, p->lease, lt_class_name(r->mem_class));
        if (r->mem_class == LT_CLASS_MAPPED && r->dev == 0)
            return cx__lrefuse(l, why, LT_E_SYSTEM, i,
                               "argument %u (%s): a MAPPED range without a device address", i,
                               p->name);
        if (p->write && !r->write)
            return cx__lrefuse(l, why, LT_E_BAD_VALUE, i,
                               "argument %u (%s) writes lease range %u: the launch must mark it "
                               "LT_LAUNCH_LEASE_F_WRITE",
                               i, p->name, p->lease);
        /* A device copy is 256-aligned; a MAPPED range is where it is. */
        if (r->mem_class == LT_CLASS_MAPPED && r->dev % p->align != 0)
            return cx__lrefuse(l, why, LT_E_MISALIGNED, i,
                               "argument %u (%s): expected a %u-byte aligned address, the "
                               "range starts at device address %#" PRIx64,
                               i, p->name, p->align, r->dev);
    }
    return 0;
}

/* The shape against the descriptor and the device. */
static int cx__launch_shape_check(const struct cx_launch_table *t, const struct cx_lk *lk,
                                  struct ga_exec_launch *l, struct lt_failure *why)
{
    const struct kn_kdesc_kernel *k = lk->k;
    uint64_t threads = (uint64_t)l->block[0] * l->block[1] * l->block[2];
    for (int d = 0; d < 3; d++)
        if ((int64_t)l->block[d] > t->max_block[d] || (int64_t)l->grid[d] > t->max_grid[d])
            return cx__lrefuse(l, why, LT_E_BAD_VALUE, LT_INDEX_NONE,
                               "%s: grid (%u,%u,%u) block (%u,%u,%u): the device allows grids "
                               "up to (%d,%d,%d) and blocks up to (%d,%d,%d)",
                               k->name, l->grid[0], l->grid[1], l->grid[2], l->block[0],
                               l->block[1], l->block[2], t->max_grid[0], t->max_grid[1],
                               t->max_grid[2], t->max_block[0], t->max_block[1], t->max_block[2]);
    if (threads > k->block_max)
        return cx__lrefuse(l, why, LT_E_BAD_VALUE, LT_INDEX_NONE,
                           "%s: %" PRIu64 " threads a block, its descriptor allows %u", k->name,
                           threads, k->block_max);
    if (l->shared_bytes > k->shared_max)
        return cx__lrefuse(l, why, LT_E_BAD_VALUE, LT_INDEX_NONE,
                           "%s: %u bytes of dynamic shared memory, its descriptor allows %u",
                           k->name, l->shared_bytes, k->shared_max);
    if (l->result_bytes > k->result_max) {
        uint32_t at = LT_INDEX_NONE;
        for (uint32_t i = 0; i < k->nparams && at == LT_INDEX_NONE; i++)
            if (k->params[i].type == KN_KDESC_RESULT_PTR)
                at = i;
        return cx__lrefuse(l, why, LT_E_BAD_VALUE, at,
                           "%s: a %u-byte result area, its descriptor fills at most %u", k->name,
                           l->result_bytes, k->result_max);
    }
    return 0;
}

int cx__launch_check(const struct cx *x, const struct ga_exec_work *w, struct lt_failure *why)
{
    struct ga_exec_launch *l = w->launch;
    const struct cx_lk *lk = cx__lk_find(x, l->image, l->kernel);
    if (!lk)
        return cx__lrefuse(l, why, LT_E_NOT_FOUND, LT_INDEX_NONE,
                           "no launchable kernel %s in image '%s' (%zu launchable in all; a "
                           "kernel needs a descriptor)",
                           l->kernel, l->image, cx__launch_count(x));
    int rc = cx__launch_ranges_check(lk, l, why);
    if (rc == 0)
        rc = cx__launch_shape_check(x->launch, lk, l, why);
    if (rc < 0)
        return rc;
    char words[LT_FAILURE_MSG_LEN];
    uint32_t index = LT_INDEX_NONE;
    if (kn_kdesc_args_check(lk->k, l->args, l->arg_bytes, &index, words, sizeof words) < 0)
        return cx__lrefuse(l, why, LT_E_BAD_VALUE, index, "%s: %s", lk->k->name, words);
    return 0;
}

int cx__launch_plan(const struct cx *x, struct cx_cmd *cmd, uint32_t *code_p, char *msg, size_t len)
{
    struct ga_exec_launch *l = cmd->w.launch;
    cmd->lk = cx__lk_find(x, l->image, l->kernel);
    if (!cmd->lk) { /* work_check found it: the table does not change */
        *code_p = LT_E_NOT_FOUND;
        snprintf(msg, len, "no launchable kernel %s in image '%s'", l->kernel, l->image);
        return -ENOENT;
    }
    cmd->path = l->ranges[0].mem_class == LT_CLASS_MAPPED ? CX_PATH_MAPPED : CX_PATH_PINNED;
    cmd->nchunks = 1;
    cmd->chunk = 0;
    return 0;
}

/* The ranges a LEASE_PTR parameter of @k points at, one bit each: only
 * those are copied to the device (a range named only by its length is not
 * read by the kernel). */
static uint32_t cx__launch_pointed(const struct kn_kdesc_kernel *k)
{
    uint32_t m = 0;
    for (uint32_t i = 0; i < k->nparams; i++)
        if (k->params[i].type == KN_KDESC_LEASE_PTR)
            m |= 1u << k->params[i].lease;
    return m;
}

uint64_t cx__launch_devmem(const struct cx_cmd *cmd)
{
    const struct ga_exec_launch *l = cmd->w.launch;
    const uint32_t pointed = cx__launch_pointed(cmd->lk->k);
    uint64_t n = LT_LAUNCH_RESULT_MAX;
    for (uint32_t i = 0; i < l->nranges; i++)
        if ((pointed & (1u << i)) && l->ranges[i].mem_class != LT_CLASS_MAPPED)
            n += l->ranges[i].length;
    return n;
}

/* ---- on the stream (a worker, context current) ------------------------------ */

/* Stores the first failed call's CUresult in the command; returns the errno. */
static int cx__lcu(struct cx_cmd *cmd, CUresult r, const char *call)
{
    if (r != CUDA_SUCCESS && cmd->cu_rc == CUDA_SUCCESS)
        cmd->cu_rc = r;
    return ga_cu_check(r, call, __FILE__, __LINE__);
}

int cx__launch_queue(struct cx *x, struct cx_cmd *cmd, CUstream st)
{
    struct ga_exec_launch *l = cmd->w.launch;
    const struct kn_kdesc_kernel *k = cmd->lk->k;
    CUdeviceptr result = 0, copy[LT_LAUNCH_MAX_LEASES] = {0}, at[LT_LAUNCH_MAX_LEASES] = {0};
    int rc = cx__lcu(cmd, cuMemAllocAsync(&result, LT_LAUNCH_RESULT_MAX, st), "cuMemAllocAsync");
    if (rc == 0)
        rc = cx__lcu(cmd, cuMemsetD32Async(result, 0, LT_LAUNCH_RESULT_MAX / 4, st),
                     "cuMemsetD32Async");
    const uint32_t pointed = cx__launch_pointed(k);
    for (uint32_t i = 0; rc == 0 && i < l->nranges; i++) {
        const struct ga_exec_launch_range *r = &l->ranges[i];
        if (r->mem_class == LT_CLASS_MAPPED) {
            at[i] = (CUdeviceptr)r->dev;
            continue;
        }
        if (!(pointed & (1u << i)))
            continue; /* only its length is passed: nothing to copy */
        rc = cx__lcu(cmd, cuMemAllocAsync(&copy[i], (size_t)r->length, st), "cuMemAllocAsync");
        if (rc == 0)
            rc = cx__lcu(cmd, cuMemcpyHtoDAsync(copy[i], r->host, (size_t)r->length, st),
                         "cuMemcpyHtoDAsync");
        at[i] = copy[i];
    }
    /* The parameter list is the descriptor's, built here: nothing of it
     * comes from the client but the scalars' values. The driver copies the
     * values when cuLaunchKernel is called. */
    uint64_t store[KN_KDESC_MAX_PARAMS];
    void *params[KN_KDESC_MAX_PARAMS];
    for (uint32_t i = 0; rc == 0 && i < k->nparams; i++) {
        const struct kn_kdesc_param *p = &k->params[i];
        uint64_t v = 0;
        switch (p->type) {
        case KN_KDESC_LEASE_PTR:
            v = (uint64_t)at[p->lease];
            break;
        case KN_KDESC_LEASE_LEN:
            v = l->ranges[p->lease].length;
            break;
        case KN_KDESC_RESULT_PTR:
            v = (uint64_t)result;
            break;
        case KN_KDESC_RESULT_LEN:
            v = l->result_bytes;
            break;
        default:
            memcpy(&v, l->args + p->arg_offset, p->size); /* little-endian: low bytes */
            break;
        }
        store[i] = v;
        params[i] = &store[i];
    }
    bool launched = false;
    if (rc == 0) {
        CUresult r = cuLaunchKernel(cmd->lk->fn, l->grid[0], l->grid[1], l->grid[2], l->block[0],
                                    l->block[1], l->block[2], l->shared_bytes, st,
                                    k->nparams ? params : NULL, NULL);
        rc = cx__lcu(cmd, r, "cuLaunchKernel");
        launched = rc == 0;
        cmd->launch_refused = r != CUDA_SUCCESS && rc != -EIO;
    }
    for (uint32_t i = 0; launched && rc == 0 && i < l->nranges; i++)
        if (copy[i] && (k->writes & (1u << i)))
            rc = cx__lcu(
                cmd, cuMemcpyDtoHAsync(l->ranges[i].host, copy[i], (size_t)l->ranges[i].length, st),
                "cuMemcpyDtoHAsync");
    if (launched && rc == 0)
        rc = cx__lcu(cmd,
                     cuMemcpyDtoHAsync(x->results + (size_t)cmd->slot * CX_RESULT_SLOT_BYTES,
                                       result, LT_LAUNCH_RESULT_MAX, st),
                     "cuMemcpyDtoHAsync");
    /* In stream order, after everything above: also after an error. */
    for (uint32_t i = 0; i < l->nranges; i++)
        if (copy[i])
            GA_CU(cuMemFreeAsync(copy[i], st));
    if (result)
        GA_CU(cuMemFreeAsync(result, st));
    return rc;
}

/* ---- the answer ------------------------------------------------------------------ */

static void cx__launch_cu_name(struct ga_exec_launch *l, CUresult r)
{
    memset(l->cu_error, 0, sizeof l->cu_error);
    if (r != CUDA_SUCCESS)
        lt_name_set(l->cu_error, sizeof l->cu_error, ga_cu_name(r));
}

void cx__launch_result(const struct cx *x, const struct cx_cmd *cmd, struct ga_exec_result *res)
{
    struct ga_exec_launch *l = cmd->w.launch;
    memset(res, 0, sizeof *res);
    cx__launch_cu_name(l, cmd->cu_rc);
    res->detail = (uint32_t)cmd->cu_rc;
    if (cmd->cancelled) {
        res->status = LT_E_SHUTTING_DOWN;
        return;
    }
    if (cmd->forced) {
        res->status = LT_E_BUSY; /* the agent released its wait (cx__retire_release) */
        return;
    }
    if (cmd->rc < 0) {
        res->status = cmd->launch_refused ? LT_E_LAUNCH_FAILED
                      : cmd->rc == -EIO   ? LT_E_GPU_FAULT
                                          : LT_E_SYSTEM;
        return;
    }
    memcpy(l->result, x->results + (size_t)cmd->slot * CX_RESULT_SLOT_BYTES, l->result_bytes);
    res->status = LT_OK;
}

void cx__launch_fault_note(struct cx_cmd *cmd, CUresult r)
{
    if (cmd->w.op == GA_EXEC_OP_LAUNCH && cmd->w.launch)
        cx__launch_cu_name(cmd->w.launch, r);
}
