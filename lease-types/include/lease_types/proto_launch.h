/* lease-types: LAUNCH, protocol 1.2 (LT_CAP_LAUNCH; docs/launch.md).
 *
 * A client granted LT_CAP_LAUNCH may ask the agent to run a kernel it
 * loaded at start-up, named by image and kernel, on byte ranges of its
 * leases, with its own grid, block, dynamic shared memory and an argument
 * block. The agent builds the kernel's parameter list itself from the
 * kernel's descriptor (kernels/kdesc.h): lease pointers and lengths from the
 * ranges, the result area's pointer, scalars from the argument block in
 * the descriptor's order. Nothing in the message is an offset into that
 * list. Included by proto.h (the per-type facts there need the sizes);
 * include proto.h, not this. */
#ifndef LEASE_TYPES_PROTO_LAUNCH_H
#define LEASE_TYPES_PROTO_LAUNCH_H

#ifndef LEASE_TYPES_PROTO_H
#error "include lease_types/proto.h"
#endif

#define LT_LAUNCH_IMAGE_LEN 32        /* image names: as LT_NAME_LEN's rules */
#define LT_LAUNCH_KERNEL_LEN 64       /* kernel names */
#define LT_LAUNCH_MAX_LEASES 4        /* lease ranges one launch runs on */
#define LT_LAUNCH_ARGS_MAX 1024u      /* argument block bytes (128 words) */
#define LT_LAUNCH_RESULT_MAX 256u     /* result area bytes, returned in the completion */
#define LT_LAUNCH_BLOCK_THREADS 1024u /* threads per block, at most (CUDA's limit) */
#define LT_LAUNCH_PARAMS_MAX 64u      /* kernel parameters a descriptor may declare */
#define LT_LAUNCH_CU_ERROR_LEN 48     /* a CUresult's name, "CUDA_ERROR_..." */

/* Launch flags: none yet. */
#define LT_LAUNCH_F_KNOWN 0u
/* Per lease range: the kernel may write it (a PINNED range is copied back
 * to the lease after the kernel). A kernel whose descriptor writes a range
 * needs it; a range not marked is never written. */
#define LT_LAUNCH_LEASE_F_WRITE (1u << 0)
#define LT_LAUNCH_LEASE_F_KNOWN LT_LAUNCH_LEASE_F_WRITE

/* One byte range of a lease the kernel runs on; lease index i of the
 * request is what a descriptor's "lease=i" names. */
struct lt_launch_lease {
    struct lt_lease_id lease; /* issued */
    uint64_t offset;          /* from the lease's first byte */
    uint64_t length;          /* nonzero; offset + length within the lease */
    uint32_t flags;           /* LT_LAUNCH_LEASE_F_KNOWN */
    uint32_t reserved;
};

/* client -> agent: a batch-shaped message whose "count" is arg_words, the
 * argument block's 8-byte words after the fixed part. Answered by exactly
 * one LAUNCH_COMPLETION, or by an ERROR only when the message fails
 * validation or LT_CAP_LAUNCH was not granted. */
struct lt_msg_launch {
    struct lt_header hdr;
    uint32_t arg_words;                /* 0..LT_LAUNCH_ARGS_MAX / 8 */
    uint32_t flags;                    /* LT_LAUNCH_F_KNOWN */
    char image[LT_LAUNCH_IMAGE_LEN];   /* a name, as HELLO's */
    char kernel[LT_LAUNCH_KERNEL_LEN]; /* a name */
    uint32_t grid[3];                  /* blocks per dimension, each >= 1 */
    uint32_t block[3];                 /* threads per dimension, each >= 1, product <=
                                          LT_LAUNCH_BLOCK_THREADS */
    uint32_t shared_bytes;             /* dynamic shared memory per block */
    uint32_t result_bytes;             /* result area: 0..LT_LAUNCH_RESULT_MAX */
    struct lt_stream_id stream;        /* {0, 0} = the default stream */
    uint32_t lease_count;              /* 1..LT_LAUNCH_MAX_LEASES */
    uint32_t reserved;
    struct lt_launch_lease leases[LT_LAUNCH_MAX_LEASES]; /* past lease_count: zero */
    uint64_t args[]; /* the scalars, packed as the descriptor says */
};

/* agent -> client: request_id is the launch's. */
struct lt_msg_launch_completion {
    struct lt_header hdr;
    uint32_t status;       /* enum lt_error: LT_OK; NOT_FOUND (no such launchable kernel);
                              BAD_VALUE / OUT_OF_RANGE (arg_index names the parameter);
                              LIMIT; UNSUPPORTED; LAUNCH_FAILED (cu_error names why);
                              GPU_FAULT; SHUTTING_DOWN; the lease service's codes */
    uint32_t detail;       /* the CUresult of a failed launch or a fault, 0 when none */
    uint32_t arg_index;    /* the descriptor's parameter a refusal is about, else
                              LT_INDEX_NONE */
    uint32_t result_bytes; /* LT_OK: the launch's result_bytes; else 0 */
    uint64_t elapsed_ns;   /* accepted to done, as the agent saw it; 0 = unmeasured */
    char cu_error[LT_LAUNCH_CU_ERROR_LEN]; /* detail's name, a name; all zero when detail is 0 */
    char message[LT_ERROR_MSG_LEN];        /* status != LT_OK: the words, a name; else zero */
    uint8_t result[LT_LAUNCH_RESULT_MAX];  /* what the kernel left in its result area; zero
                                              past result_bytes */
};

LT_ASSERT_FIELD(lt_launch_lease, lease, 0);
LT_ASSERT_FIELD(lt_launch_lease, offset, 8);
LT_ASSERT_FIELD(lt_launch_lease, length, 16);
LT_ASSERT_FIELD(lt_launch_lease, flags, 24);
LT_ASSERT_FIELD(lt_launch_lease, reserved, 28);
LT_ASSERT_SIZE(lt_launch_lease, 32);

LT_ASSERT_FIELD(lt_msg_launch, hdr, 0);
LT_ASSERT_FIELD(lt_msg_launch, arg_words, 24);
LT_ASSERT_FIELD(lt_msg_launch, flags, 28);
LT_ASSERT_FIELD(lt_msg_launch, image, 32);
LT_ASSERT_FIELD(lt_msg_launch, kernel, 64);
LT_ASSERT_FIELD(lt_msg_launch, grid, 128);
LT_ASSERT_FIELD(lt_msg_launch, block, 140);
LT_ASSERT_FIELD(lt_msg_launch, shared_bytes, 152);
LT_ASSERT_FIELD(lt_msg_launch, result_bytes, 156);
LT_ASSERT_FIELD(lt_msg_launch, stream, 160);
LT_ASSERT_FIELD(lt_msg_launch, lease_count, 168);
LT_ASSERT_FIELD(lt_msg_launch, reserved, 172);
LT_ASSERT_FIELD(lt_msg_launch, leases, 176);
LT_ASSERT_FIELD(lt_msg_launch, args, 304);
LT_ASSERT_SIZE(lt_msg_launch, 304);

LT_ASSERT_FIELD(lt_msg_launch_completion, hdr, 0);
LT_ASSERT_FIELD(lt_msg_launch_completion, status, 24);
LT_ASSERT_FIELD(lt_msg_launch_completion, detail, 28);
LT_ASSERT_FIELD(lt_msg_launch_completion, arg_index, 32);
LT_ASSERT_FIELD(lt_msg_launch_completion, result_bytes, 36);
LT_ASSERT_FIELD(lt_msg_launch_completion, elapsed_ns, 40);
LT_ASSERT_FIELD(lt_msg_launch_completion, cu_error, 48);
LT_ASSERT_FIELD(lt_msg_launch_completion, message, 96);
LT_ASSERT_FIELD(lt_msg_launch_completion, result, 184);
LT_ASSERT_SIZE(lt_msg_launch_completion, 440);

LT_STATIC_ASSERT(LT_LAUNCH_ARGS_MAX % 8 == 0, "the argument block is whole words");
LT_STATIC_ASSERT(sizeof(struct lt_msg_launch) + LT_LAUNCH_ARGS_MAX <= LT_MSG_MAX_BYTES,
                 "a full launch fits LT_MSG_MAX_BYTES");

#endif /* LEASE_TYPES_PROTO_LAUNCH_H */
