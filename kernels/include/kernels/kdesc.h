/* kn_kdesc: the launch descriptor of a cubin's kernels (docs/launch.md).
 *
 * A kernel may be LAUNCHed by a client only when the image it is in comes
 * with a descriptor that declares it: its parameters in order, each with a
 * type, and its bounds. The agent never takes a parameter list from a
 * client; it builds one from the descriptor (lease pointers and lengths,
 * the result area, scalars from the client's argument block). A descriptor
 * is a small text file:
 *
 *   # comments and blank lines are ignored
 *   kdesc 1
 *   kernel k_sum_u32 block_max=256 shared_max=0 result_max=8
 *   arg data  lease_ptr lease=0 access=read align=4
 *   arg bytes lease_len lease=0
 *   arg scale u32 min=1 max=1000
 *   arg out   result_ptr
 *
 * Checked twice against the cubin's own parameter table (.nv.info
 * EIATTR_KPARAM_INFO: count and sizes) and launch bound: at build time by
 * cubincheck --kdesc, and at agent start-up, so a descriptor that disagrees
 * with its cubin fails start-up, never a request. Pure C over libc, no
 * driver call; every byte of the text and the cubin bounds-checked. */
#ifndef KERNELS_KDESC_H
#define KERNELS_KDESC_H

#include <stddef.h>
#include <stdint.h>

#define KN_KDESC_VERSION 1
#define KN_KDESC_MAX_BYTES (64u << 10) /* a descriptor file, at most */
#define KN_KDESC_MAX_KERNELS 64
#define KN_KDESC_MAX_PARAMS 64 /* LT_LAUNCH_PARAMS_MAX */
#define KN_KDESC_MAX_LEASES 4  /* LT_LAUNCH_MAX_LEASES */
#define KN_KDESC_KERNEL_LEN 64 /* names, NUL included: LT_LAUNCH_KERNEL_LEN */
#define KN_KDESC_ARG_LEN 32
#define KN_KDESC_BLOCK_MAX 1024u
#define KN_KDESC_RESULT_MAX 256u /* LT_LAUNCH_RESULT_MAX */
#define KN_KDESC_ARGS_MAX 1024u  /* LT_LAUNCH_ARGS_MAX */

enum kn_kdesc_type {
    KN_KDESC_LEASE_PTR = 1, /* the lease range's device address (a device copy for PINNED) */
    KN_KDESC_LEASE_LEN,     /* the lease range's length, u64 */
    KN_KDESC_RESULT_PTR,    /* the agent's result area on the device */
    KN_KDESC_RESULT_LEN,    /* the result area's length (the launch's result_bytes), u64 */
    KN_KDESC_U32,           /* scalars, from the argument block */
    KN_KDESC_I32,
    KN_KDESC_U64,
    KN_KDESC_I64,
    KN_KDESC_F32,
    KN_KDESC_F64,
};

struct kn_kdesc_param {
    char name[KN_KDESC_ARG_LEN];
    enum kn_kdesc_type type;
    uint32_t size;       /* bytes in the kernel's parameter list: 4 or 8 */
    uint32_t lease;      /* LEASE_PTR, LEASE_LEN: the launch's lease range index */
    int write;           /* LEASE_PTR: access=write, the kernel writes the range */
    uint32_t align;      /* LEASE_PTR: the address must be a multiple (align=, default 1) */
    int ranged;          /* integer scalars: min/max given */
    int64_t imin, imax;  /* I32, I64 bounds (inclusive) */
    uint64_t umin, umax; /* U32, U64 bounds (inclusive) */
    uint32_t arg_offset; /* scalars: where it sits in the argument block */
};

struct kn_kdesc_kernel {
    char name[KN_KDESC_KERNEL_LEN];
    uint32_t block_max;  /* threads per block, at most (default 1024) */
    uint32_t shared_max; /* dynamic shared memory per block, bytes (default 0) */
    uint32_t result_max; /* result area bytes (default 0) */
    uint32_t leases;     /* lease ranges a launch gives: exactly this many */
    uint32_t writes;     /* bit i: lease range i is written */
    uint32_t arg_bytes;  /* the argument block: scalars in order, each aligned to its
                            size, the total rounded up to 8 */
    uint32_t nparams;
    struct kn_kdesc_param params[KN_KDESC_MAX_PARAMS];
};

struct kn_kdesc {
    size_t count;
    struct kn_kdesc_kernel *kernels; /* count of them; owned, kn_kdesc_free */
};

/* The type's name in the descriptor ("lease_ptr", "u32"), or "?". */
const char *kn_kdesc_type_name(enum kn_kdesc_type t);

/* Parses @len bytes of descriptor text at @text (need not be
 * NUL-terminated; at most KN_KDESC_MAX_BYTES). On success *@desc_p holds
 * the kernels (free with kn_kdesc_free). Returns 0, or -EINVAL (a syntax
 * or rule error: "line N: expected ..., found ..." in @err), -EFBIG (too
 * long), -E2BIG (too many kernels or parameters), -ENOMEM. Rules: the first
 * line is "kdesc 1"; kernel and arg names are C identifiers, each kernel
 * name once, each arg name once per kernel; every kernel has a lease_ptr,
 * its lease indices are 0..n-1 without gaps, a result_ptr needs
 * result_max > 0; min <= max, within the type. */
int kn_kdesc_parse(const char *text, size_t len, struct kn_kdesc *desc_p, char *err,
                   size_t err_len);

/* Frees what kn_kdesc_parse made; a zeroed struct is fine. */
void kn_kdesc_free(struct kn_kdesc *desc);

/* The kernel named @name, or NULL. */
const struct kn_kdesc_kernel *kn_kdesc_find(const struct kn_kdesc *desc, const char *name);

/* Checks @desc against the cubin in @size bytes at @cubin: every kernel a
 * defined entry of it, the cubin's parameter count and each parameter's
 * size equal to the descriptor's, block_max within its launch bound.
 * Returns 0, or a negative errno and a message naming the kernel and the
 * parameter in @err: -ENOENT (no such kernel), -EPROTO (the descriptor and
 * the cubin disagree), or kn_cubin_check's codes for a bad cubin. */
int kn_kdesc_check_cubin(const struct kn_kdesc *desc, const void *cubin, size_t size, char *err,
                         size_t err_len);

/* Checks a launch's argument block of @len bytes against @k: exactly
 * arg_bytes long, each ranged scalar within its bounds, padding zero.
 * Returns 0, or -EINVAL with *@index_p the parameter at fault
 * (UINT32_MAX: the block is too long or its trailing padding is not zero)
 * and the words in @err. */
int kn_kdesc_args_check(const struct kn_kdesc_kernel *k, const void *args, size_t len,
                        uint32_t *index_p, char *err, size_t err_len);

#endif /* KERNELS_KDESC_H */
