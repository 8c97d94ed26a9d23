/* lease-types: the wire protocol, version 1 (docs/protocol.md).
 *
 * Transport: a Unix SOCK_SEQPACKET socket, one message per packet. Every
 * message starts with struct lt_header; numbers are in host byte order (both
 * peers run on one host). Every struct here is fixed-width, naturally
 * aligned, has its padding spelled out as reserved fields that must be zero,
 * and has its size and every field offset asserted below. Batched messages
 * are a fixed part whose u32 count sits at offset 24, followed by count
 * entries. Receive into an 8-byte-aligned buffer (union lt_msg_buffer) and
 * run a validator from validate.h before reading any field. */
#ifndef LEASE_TYPES_PROTO_H
#define LEASE_TYPES_PROTO_H

#include "lease_types/classes.h"
#include "lease_types/common.h"
#include "lease_types/errors.h"
#include "lease_types/ids.h"

LT_EXTERN_C_BEGIN

/* ---- Constants ---- */

#define LT_MAGIC 0x3150544cu /* the bytes "LTP1" in a little-endian dump */
#define LT_PROTO_VERSION 1u
#define LT_MSG_ALIGN 8u /* receive buffers must be aligned to this */

#define LT_NAME_LEN 32      /* client and agent names, NUL-terminated, zero-padded */
#define LT_ERROR_MSG_LEN 88 /* ERROR message text, NUL-terminated, zero-padded */

#define LT_MAX_BATCH 256        /* entries in a lease request, grant or release */
#define LT_MAX_STATS_CLIENTS 64 /* client entries in a stats reply */

/* Segments: sizes are page multiples up to 1 TiB, which keeps every
 * offset + length computed from validated fields far from 2^64. */
#define LT_SEGMENT_ALIGN 4096u
#define LT_SEGMENT_SIZE_MAX (1ull << 40)

#define LT_INDEX_NONE UINT32_MAX /* "no batch entry" in an ERROR */
#define LT_BLOCK_NONE UINT64_MAX /* "no bad block" / "no best record" in results */

/* Header flags: none defined in v1. */
#define LT_HDR_FLAGS_KNOWN 0u

/* Capability bits (hello caps). The client sends what it wants to use; the
 * agent replies with what it grants, a subset, plus agent-only bits. */
#define LT_CAP_DOORBELL (1u << 0)     /* submits may wait on a doorbell word */
#define LT_CAP_DONE_WORD (1u << 1)    /* submits may signal a completion word */
#define LT_CAP_TIMING (1u << 2)       /* timing events and EVENT_ELAPSED */
#define LT_CAP_HOST_BACKEND (1u << 3) /* agent only: no GPU, the host backend serves */
#define LT_CAP_RC_BATCH (1u << 4)     /* RELEASE_COMPLETE_BATCH may answer a release */
#define LT_CAP_STREAM (1u << 5)       /* 1.1: streaming rings (RING_OPEN .. RING_CLOSED) */
#define LT_CAP_WORDS (1u << 7)        /* 1.3: the agent's words area: WORDS_REQUEST/WORDS_GRANT */
#define LT_CAP_INTROSPECT (1u << 8)   /* 1.4: LEASE_LIST and SEGMENT_LIST (leasectl) */
/* Minor versions: version 1 stays the wire version; each later feature is a
 * minor version of it, negotiated by its own capability bit, so a peer that
 * does not know a bit never sees that feature's messages. Reserved, in order
 * (message types and error codes are appended in the same order):
 *   bit 5  LT_CAP_STREAM  1.1  streaming rings behind doorbells (types 30-37;
 *                              30-34 defined, 35-37 kept for it)
 *   bit 6  LT_CAP_LAUNCH  1.2  launch a loaded kernel on a lease (types 38-41)
 *   bit 7  LT_CAP_WORDS   1.3  agent-written completion words (types 42-45)
 *   bit 8  LT_CAP_INTROSPECT 1.4 (types 46-49): lease and segment lists
 * A bit joins LT_CAP_CLIENT_KNOWN only in the change that implements it. */
#define LT_PROTO_MINOR 4u /* the highest minor this build implements */
#define LT_CAP_LAUNCH (1u << 6) /* 1.2: LAUNCH a loaded kernel on leases (docs/launch.md) */
#define LT_CAP_CLIENT_KNOWN                                                                        \
    (LT_CAP_DOORBELL | LT_CAP_DONE_WORD | LT_CAP_TIMING | LT_CAP_RC_BATCH | LT_CAP_STREAM |        \
     LT_CAP_LAUNCH | LT_CAP_WORDS | LT_CAP_INTROSPECT)
#define LT_CAP_AGENT_ONLY LT_CAP_HOST_BACKEND
#define LT_CAP_AGENT_KNOWN (LT_CAP_CLIENT_KNOWN | LT_CAP_AGENT_ONLY)
/* A client may ask for caps this agent does not know (a newer client): the
 * agent grants only known ones, so old agents keep serving new clients. An
 * agent-only bit in a HELLO is refused, and a reply may grant only what was
 * asked (plus agent-only bits). */

/* ---- Message types ---- */

/* Wire values of lt_header.type. Never renumbered; new types are appended. */
enum lt_msg_type {
    LT_MSG_HELLO = 1,
    LT_MSG_HELLO_REPLY = 2,
    LT_MSG_SEGMENT_OFFER = 3, /* carries exactly one fd (SCM_RIGHTS) */
    LT_MSG_SEGMENT_ACCEPT = 4,
    LT_MSG_SEGMENT_RETIRE = 5,
    LT_MSG_SEGMENT_RETIRED = 6,
    LT_MSG_LEASE_REQUEST = 7,
    LT_MSG_LEASE_GRANT = 8,
    LT_MSG_LEASE_RELEASE = 9,
    LT_MSG_RELEASE_COMPLETE = 10,
    LT_MSG_SUBMIT = 11,
    LT_MSG_COMPLETION = 12,
    LT_MSG_STREAM_CREATE = 13,
    LT_MSG_STREAM_VALIDATE = 14,
    LT_MSG_STREAM_QUERY = 15,
    LT_MSG_STREAM_SYNCHRONIZE = 16,
    LT_MSG_STREAM_DESTROY = 17,
    LT_MSG_EVENT_RECORD = 18,
    LT_MSG_EVENT_WAIT = 19,
    LT_MSG_EVENT_QUERY = 20,
    LT_MSG_EVENT_SYNCHRONIZE = 21,
    LT_MSG_EVENT_DESTROY = 22,
    LT_MSG_EVENT_ELAPSED = 23,
    LT_MSG_DEVICE_SYNCHRONIZE = 24,
    LT_MSG_CTL_REPLY = 25,
    LT_MSG_STATS_REQUEST = 26,
    LT_MSG_STATS_REPLY = 27,
    LT_MSG_ERROR = 28,
    LT_MSG_RELEASE_COMPLETE_BATCH = 29, /* only to a client granted LT_CAP_RC_BATCH */
    /* 1.1, only with LT_CAP_STREAM granted (docs/streaming.md); 35..37 reserved for it */
    LT_MSG_RING_OPEN = 30,
    LT_MSG_RING_OPENED = 31,
    LT_MSG_RING_SHARD = 32, /* answered by a COMPLETION */
    LT_MSG_RING_CLOSE = 33,
    LT_MSG_RING_CLOSED = 34,
    LT_MSG_LAUNCH = 38,            /* 1.2, LT_CAP_LAUNCH: run a loaded kernel on leases */
    LT_MSG_LAUNCH_COMPLETION = 39, /* 1.2: the one answer to an accepted LAUNCH */
    /* 40, 41: reserved for LT_CAP_LAUNCH. */
    LT_MSG_WORDS_REQUEST = 42, /* 1.3, only from a client granted LT_CAP_WORDS */
    LT_MSG_WORDS_GRANT = 43,   /* 1.3: carries exactly one fd: the words area's memfd */
    /* 44, 45: reserved for LT_CAP_WORDS. */
    /* 1.4, only with LT_CAP_INTROSPECT granted (docs/operations.md, "Agent queries") */
    LT_MSG_LEASE_LIST_REQUEST = 46,
    LT_MSG_LEASE_LIST_REPLY = 47,
    LT_MSG_SEGMENT_LIST_REQUEST = 48,
    LT_MSG_SEGMENT_LIST_REPLY = 49,
};
/* Types run from FIRST to LAST with gaps (the reserved ranges): a type is
 * defined when lt_msg_info names it (lt_msg_type_is_known). */
#define LT_MSG_TYPE_FIRST 1
#define LT_MSG_TYPE_LAST 49
#define LT_MSG_LAUNCH_FIRST 38
#define LT_MSG_LAUNCH_LAST 39
#define LT_MSG_WORDS_FIRST 42
#define LT_MSG_WORDS_LAST 43

/* ---- Operations (submit) ---- */

enum lt_op {
    LT_OP_CHECKSUM_VERIFY = 1, /* verify per-block checksums (kernels/blockhash.h) */
    LT_OP_VECTOR_SCAN = 2,     /* best match of a query over packed vector records */
    LT_OP_COPY_H2D = 3,        /* plain copy of a lease range to device memory */
};
#define LT_OP_FIRST 1
#define LT_OP_LAST 3

/* Element types of vector records; the values match stagingd's shard format. */
enum lt_elem {
    LT_ELEM_F32 = 1,
    LT_ELEM_F16 = 2,
};
enum lt_scan_metric {
    LT_SCAN_DOT = 1, /* best = largest inner product */
    LT_SCAN_L2 = 2,  /* best = smallest squared Euclidean distance */
};
#define LT_SCAN_DIM_MAX 65536u
#define LT_SCAN_MAX_K 64u /* hits a VECTOR_SCAN may write (kernels' KN_SCAN_MAX_K) */

/* ---- The header ---- */

struct lt_header {
    uint32_t magic;      /* LT_MAGIC */
    uint16_t version;    /* LT_PROTO_VERSION */
    uint16_t type;       /* enum lt_msg_type */
    uint32_t length;     /* total bytes of the message, header included */
    uint16_t flags;      /* LT_HDR_FLAGS_KNOWN (none in v1) */
    uint16_t reserved;   /* 0 */
    uint64_t request_id; /* chosen by the requester, nonzero; replies echo it */
};

/* ---- Handshake ---- */

/* client -> agent, first message on a connection. */
struct lt_msg_hello {
    struct lt_header hdr;
    uint16_t version_min;   /* lowest protocol version the client speaks, >= 1 */
    uint16_t version_max;   /* highest, >= version_min */
    uint32_t caps;          /* LT_CAP_CLIENT_KNOWN bits the client wants */
    char name[LT_NAME_LEN]; /* printable ASCII, NUL-terminated, zero-padded, nonempty */
};

/* agent -> client: the limits this connection lives under. */
struct lt_msg_hello_reply {
    struct lt_header hdr;
    uint16_t version; /* the version chosen: 1 */
    uint16_t reserved0;
    uint32_t caps;            /* granted LT_CAP_AGENT_KNOWN bits */
    uint32_t client_id;       /* nonzero; names this client in stats */
    uint32_t max_lease_batch; /* 1..LT_MAX_BATCH entries per lease request / release */
    uint32_t max_streams;     /* streams this client may create */
    uint32_t max_events;      /* events this client may hold */
    uint32_t max_segments;    /* segments this client may offer */
    uint32_t reserved1;
    uint64_t max_segment_bytes;            /* LT_SEGMENT_ALIGN multiple, <= LT_SEGMENT_SIZE_MAX */
    uint64_t class_budget[LT_CLASS_SLOTS]; /* bytes this client may have registered per
                                              class; [0] is 0; UINT64_MAX = unbounded */
    char agent_name[LT_NAME_LEN];          /* e.g. "ga-cuda sm_90"; same rules as hello.name */
};

/* ---- Segments ---- */

/* client -> agent, with exactly one fd: a sealed memfd of @size bytes. */
struct lt_msg_segment_offer {
    struct lt_header hdr;
    uint64_t cookie;    /* the client's own name for the segment, echoed; any value */
    uint64_t size;      /* nonzero LT_SEGMENT_ALIGN multiple, <= LT_SEGMENT_SIZE_MAX */
    uint32_t mem_class; /* enum lt_class */
    uint32_t reserved;
};

/* agent -> client: the segment is mapped (and registered per its class). */
struct lt_msg_segment_accept {
    struct lt_header hdr;
    uint64_t cookie;              /* the offer's */
    struct lt_segment_id segment; /* issued */
    uint64_t size;                /* the verified size (the offer's) */
    uint32_t mem_class;           /* the offer's */
    uint32_t reserved;
};

/* client -> agent: unregister and unmap a segment with no live leases. */
struct lt_msg_segment_retire {
    struct lt_header hdr;
    struct lt_segment_id segment;
};

/* agent -> client: the segment is gone; its id is stale from now on. */
struct lt_msg_segment_retired {
    struct lt_header hdr;
    struct lt_segment_id segment;
    uint64_t cookie;
};

/* ---- Leases ---- */

/* Per-entry lease flags. */
#define LT_LEASE_F_ALLOW_STAGED (1u << 0) /* serve as STAGED when the class's budget is spent */
#define LT_LEASE_F_KNOWN LT_LEASE_F_ALLOW_STAGED
/* Per-request lease flags. */
#define LT_LEASE_REQ_F_ALL_OR_NOTHING (1u << 0) /* refuse every entry if one is refused */
#define LT_LEASE_REQ_F_KNOWN LT_LEASE_REQ_F_ALL_OR_NOTHING

struct lt_lease_req_entry {
    struct lt_segment_id segment;
    uint64_t offset;    /* from the segment's start */
    uint64_t length;    /* nonzero; offset + length <= the segment's size */
    uint32_t mem_class; /* the segment's class, or STAGED */
    uint32_t flags;     /* LT_LEASE_F_KNOWN */
};

/* client -> agent. */
struct lt_msg_lease_request {
    struct lt_header hdr;
    uint32_t count; /* 1..LT_MAX_BATCH */
    uint32_t flags; /* LT_LEASE_REQ_F_KNOWN */
    struct lt_lease_req_entry entries[];
};

struct lt_lease_grant_entry {
    struct lt_lease_id lease; /* issued when status is LT_OK, else {0, 0} */
    uint32_t mem_class;       /* class served (STAGED on fallback) when LT_OK, else 0 */
    uint32_t status;          /* enum lt_error */
};

/* agent -> client: one entry per request entry, in request order. */
struct lt_msg_lease_grant {
    struct lt_header hdr;
    uint32_t count; /* the request's count */
    uint32_t reserved;
    struct lt_lease_grant_entry entries[];
};

/* client -> agent: the leases are no longer needed once their GPU work ends. */
struct lt_msg_lease_release {
    struct lt_header hdr;
    uint32_t count; /* 1..LT_MAX_BATCH, no id twice */
    uint32_t reserved;
    struct lt_lease_id leases[];
};

/* agent -> client: one per released lease, sent only after every GPU
 * operation submitted on it has completed; request_id is the release's.
 * Only after LT_OK may the client reuse the bytes. */
struct lt_msg_release_complete {
    struct lt_header hdr;
    struct lt_lease_id lease;
    uint32_t status; /* enum lt_error */
    uint32_t reserved;
};

/* One lease's outcome in a RELEASE_COMPLETE_BATCH. */
struct lt_release_complete_entry {
    struct lt_lease_id lease;
    uint32_t status; /* enum lt_error */
    uint32_t reserved;
};

/* agent -> client granted LT_CAP_RC_BATCH: count RELEASE_COMPLETEs of one
 * LEASE_RELEASE (request_id is the release's) in one packet; each entry
 * means exactly what a RELEASE_COMPLETE with its lease and status means.
 * A release's leases may be answered by several batches and singles, each
 * lease exactly once. */
struct lt_msg_release_complete_batch {
    struct lt_header hdr;
    uint32_t count; /* 1..LT_MAX_BATCH, no lease twice */
    uint32_t reserved;
    struct lt_release_complete_entry entries[];
};

/* ---- Work ---- */

/* Submit flags. */
#define LT_SUBMIT_F_WAIT_BELL (1u << 0)   /* the GPU waits for bell >= bell_seq first */
#define LT_SUBMIT_F_SIGNAL_DONE (1u << 1) /* the GPU stores done_seq into done when finished */
#define LT_SUBMIT_F_QUIET (1u << 2)       /* send COMPLETION only on failure */
#define LT_SUBMIT_F_KNOWN (LT_SUBMIT_F_WAIT_BELL | LT_SUBMIT_F_SIGNAL_DONE | LT_SUBMIT_F_QUIET)

/* A 64-bit word in one of the client's MAPPED segments. */
struct lt_word_ref {
    struct lt_segment_id segment;
    uint64_t offset; /* multiple of 8; offset + 8 <= the segment's size */
};

/* Offsets in op arguments are relative to the lease's first byte. */
struct lt_op_checksum_verify {
    uint64_t offset;      /* the data: multiple of 8 */
    uint64_t length;      /* nonzero */
    uint64_t sums_offset; /* ceil(length / block_size) u64 checksums, multiple of 8 */
    uint32_t block_size;  /* nonzero multiple of 8 */
    uint32_t reserved;
};

struct lt_op_vector_scan {
    uint64_t offset;       /* records: multiple of the element size */
    uint64_t length;       /* nonzero multiple of dim * element size */
    uint64_t query_offset; /* dim elements, multiple of the element size */
    uint32_t dim;          /* 1..LT_SCAN_DIM_MAX elements per record */
    uint16_t elem;         /* enum lt_elem */
    uint16_t metric;       /* enum lt_scan_metric */
    /* Top-k: with k 1..LT_SCAN_MAX_K the agent writes k struct lt_scan_hit
     * at hits_offset (a multiple of 8, inside the lease), best first,
     * before it sends the COMPLETION; with k 0 both are 0 and only the
     * COMPLETION's single best is reported. */
    uint64_t hits_offset;
    uint32_t k;
    uint32_t reserved;
};

/* One VECTOR_SCAN hit in the lease; hits past the records scanned have
 * index LT_BLOCK_NONE and score bits 0. */
struct lt_scan_hit {
    uint32_t score_bits; /* binary32 bit pattern */
    uint32_t reserved;
    uint64_t index; /* record index within the scanned range */
};

struct lt_op_copy_h2d {
    uint64_t offset;
    uint64_t length; /* nonzero */
};

#define LT_OP_ARGS_BYTES 64
/* Bytes past the op's struct are zero. */
union lt_op_args {
    struct lt_op_checksum_verify checksum;
    struct lt_op_vector_scan scan;
    struct lt_op_copy_h2d copy;
    uint8_t bytes[LT_OP_ARGS_BYTES];
};

/* client -> agent: run @op over the lease on @stream. */
struct lt_msg_submit {
    struct lt_header hdr;
    struct lt_lease_id lease;
    struct lt_stream_id stream; /* {0, 0} = the default stream */
    uint16_t op;                /* enum lt_op */
    uint16_t reserved0;
    uint32_t flags;          /* LT_SUBMIT_F_KNOWN */
    struct lt_word_ref bell; /* with WAIT_BELL, else all zero */
    uint64_t bell_seq;       /* with WAIT_BELL: nonzero; else 0 */
    struct lt_word_ref done; /* with SIGNAL_DONE, else all zero */
    uint64_t done_seq;       /* with SIGNAL_DONE: nonzero; else 0 */
    union lt_op_args args;
};

struct lt_checksum_result {
    uint64_t blocks_checked;
    uint64_t first_bad_block; /* LT_BLOCK_NONE when all matched */
    uint64_t bad_blocks;
    uint64_t expected; /* of the first bad block; 0 when none */
    uint64_t actual;   /* of the first bad block; 0 when none */
};

struct lt_scan_result {
    uint64_t records_scanned;
    uint64_t best_index;      /* LT_BLOCK_NONE when no record was scanned */
    uint32_t best_score_bits; /* binary32 bit pattern (see CTL_REPLY's elapsed) */
    uint32_t reserved;
};

struct lt_copy_result {
    uint64_t bytes_copied;
};

#define LT_OP_RESULT_BYTES 48
/* Bytes past the op's struct are zero. */
union lt_op_result {
    struct lt_checksum_result checksum;
    struct lt_scan_result scan;
    struct lt_copy_result copy;
    uint8_t bytes[LT_OP_RESULT_BYTES];
};

/* agent -> client: request_id is the submit's. */
struct lt_msg_completion {
    struct lt_header hdr;
    struct lt_lease_id lease;
    uint16_t op;
    uint16_t reserved0;
    uint32_t status; /* enum lt_error; CHECKSUM_MISMATCH comes with the result filled */
    uint32_t detail; /* backend detail (a CUresult), 0 when none */
    uint32_t reserved1;
    uint64_t elapsed_ns; /* submit accepted to work done, as the agent saw it; 0 = unmeasured */
    union lt_op_result result;
};

/* ---- Streaming rings (1.1, LT_CAP_STREAM; docs/streaming.md) ----
 *
 * A ring is N slots of C bytes in one PINNED (or MAPPED) lease and, in one
 * MAPPED lease, a sequence word and a done word per slot. Chunk s of the
 * ring (s = 1, 2, ...) goes in slot s % N: the client fills the slot and
 * release-stores s into its sequence word; the GPU, which waits for the
 * word to reach s, copies the slot to the chunk's place in device memory
 * and stores s into the slot's done word. The client refills the slot with
 * chunk s + N once the done word reaches s. Per chunk there is no message.
 * A RING_SHARD says once which next chunks form one shard's device image
 * and what op runs on it; its COMPLETION carries the op's result. */

#define LT_RING_SLOTS_MAX 256u              /* slots per ring */
#define LT_RING_DEPTH_MAX 64u               /* shards a client may queue ahead on a ring */
#define LT_RING_SLOT_ALIGN 4096u            /* slot sizes are multiples of this */
#define LT_RING_SLOT_BYTES_MAX (1ull << 30) /* the largest slot */
#define LT_RING_OPEN_F_KNOWN 0u             /* no RING_OPEN flags in 1.1 */
#define LT_RING_SHARD_F_KNOWN 0u            /* no RING_SHARD flags in 1.1 */

/* client -> agent: open a ring over two leases of this connection. Both
 * stay pinned by the ring (a release of either completes only after the
 * ring's work is done) until RING_CLOSED or the connection's end. The
 * words must hold values below 1 (zero) when the ring opens. */
struct lt_msg_ring_open {
    struct lt_header hdr;
    struct lt_lease_id slots; /* PINNED or MAPPED: slot i at [i * slot_bytes, +slot_bytes) */
    struct lt_lease_id words; /* MAPPED: the sequence and done words (and scan hits) */
    uint64_t slot_bytes;  /* C: nonzero LT_RING_SLOT_ALIGN multiple, <= LT_RING_SLOT_BYTES_MAX */
    uint64_t seq_offset;  /* nslots u64 sequence words in @words, 8-aligned */
    uint64_t done_offset; /* nslots u64 done words in @words, 8-aligned, apart from the seqs */
    uint64_t max_shard_bytes; /* the largest image a RING_SHARD may name: nonzero */
    uint32_t nslots;          /* N: 1..LT_RING_SLOTS_MAX */
    uint32_t depth;           /* RING_SHARDs the client wants outstanding: 1..LT_RING_DEPTH_MAX */
    uint32_t flags;           /* LT_RING_OPEN_F_KNOWN */
    uint32_t reserved;
};

/* agent -> client: the ring is open. */
struct lt_msg_ring_opened {
    struct lt_header hdr;
    struct lt_ring_id ring;   /* issued */
    uint32_t depth;           /* RING_SHARDs it may have outstanding: 1..the asked depth */
    uint32_t nslots;          /* the request's */
    uint64_t max_shard_bytes; /* the request's */
};

/* client -> agent: the next ceil(length / slot_bytes) chunks of the ring,
 * sequences first_seq, first_seq + 1, ..., form the device image of one
 * shard of @length bytes (chunk i at image offset i * slot_bytes); once
 * the last is on the device, @op runs on the image and a COMPLETION
 * (request id this one's, lease the ring's slots lease) answers. @args'
 * offsets are relative to the image, except VECTOR_SCAN's hits_offset,
 * which is an offset in the ring's words lease (slots are reused; the hits
 * come back to host memory). first_seq must continue the ring: 1 for the
 * first RING_SHARD, then the last one's first_seq + chunks. At most the
 * ring's depth may be outstanding. */
struct lt_msg_ring_shard {
    struct lt_header hdr;
    struct lt_ring_id ring;
    uint64_t first_seq; /* nonzero */
    uint64_t length;    /* the image's bytes: nonzero, <= the ring's max_shard_bytes */
    uint16_t op;        /* enum lt_op */
    uint16_t reserved0;
    uint32_t flags; /* LT_RING_SHARD_F_KNOWN */
    union lt_op_args args;
};

/* client -> agent: the client stores no more sequence words of the ring.
 * Shards whose chunks were all stored run and are answered; from the first
 * shard with a chunk never stored on, they are answered LT_E_SHUTTING_DOWN
 * (the agent stores the awaited sequences itself); then RING_CLOSED. */
struct lt_msg_ring_close {
    struct lt_header hdr;
    struct lt_ring_id ring;
};

/* agent -> client: the ring's work has drained; its id is stale from now on. */
struct lt_msg_ring_closed {
    struct lt_header hdr;
    struct lt_ring_id ring;
    uint64_t shards; /* RING_SHARDs answered with the op's result */
    uint64_t chunks; /* chunks copied to the device */
};

/* ---- Streams, events, device ---- */

#define LT_STREAM_F_NONBLOCKING (1u << 0)   /* create: no implicit sync with stream 0 */
#define LT_STREAM_F_HIGH_PRIORITY (1u << 1) /* create: the device's greatest priority */
#define LT_STREAM_F_KNOWN (LT_STREAM_F_NONBLOCKING | LT_STREAM_F_HIGH_PRIORITY)
#define LT_EVENT_F_TIMING (1u << 0) /* record of a new event: it can time */
#define LT_EVENT_F_KNOWN LT_EVENT_F_TIMING

/* client -> agent, types STREAM_CREATE, _VALIDATE, _QUERY, _SYNCHRONIZE, _DESTROY. */
struct lt_msg_stream_cmd {
    struct lt_header hdr;
    struct lt_stream_id stream; /* CREATE: {0, 0}; DESTROY: an issued one; else usable */
    uint32_t flags;             /* CREATE: LT_STREAM_F_KNOWN; else 0 */
    uint32_t reserved;
};

/* client -> agent, types EVENT_RECORD, _WAIT, _QUERY, _SYNCHRONIZE, _DESTROY, _ELAPSED.
 *   RECORD:  event {0, 0} creates one (flags may ask TIMING) or re-records an issued
 *            one (flags 0), on stream.
 *   WAIT:    stream waits for event.
 *   ELAPSED: milliseconds from event to end.
 *   others:  event only. Fields a type does not use are zero. */
struct lt_msg_event_cmd {
    struct lt_header hdr;
    struct lt_event_id event;
    struct lt_event_id end;
    struct lt_stream_id stream;
    uint32_t flags;
    uint32_t reserved;
};

/* client -> agent: waits for all work; deferred launch errors come back as ERROR. */
struct lt_msg_device_sync {
    struct lt_header hdr;
};

/* agent -> client: the success reply to every stream, event and device command.
 * Fields the request type does not fill are zero.
 * elapsed_ms_bits holds the float milliseconds as a binary32 bit pattern in
 * a u32: the wire stays integers only, validators check it (finite) without
 * touching floating point, and an f32 field's NaN != NaN and -0 == +0 would
 * make byte-exact comparison of messages lie. lt_f32_from_bits() reads it. */
struct lt_msg_ctl_reply {
    struct lt_header hdr;
    uint16_t request_type; /* the request's type */
    uint16_t reserved0;
    uint32_t ready;             /* STREAM_QUERY / EVENT_QUERY: 1 done, 0 pending */
    struct lt_stream_id stream; /* STREAM_CREATE: the new stream */
    struct lt_event_id event;   /* EVENT_RECORD: the recorded event */
    uint32_t elapsed_ms_bits;   /* EVENT_ELAPSED: finite binary32 */
    uint32_t reserved1;
};

/* ---- Stats ---- */

#define LT_STATS_F_ALL_CLIENTS (1u << 0) /* every client, not only the requester */
#define LT_STATS_F_KNOWN LT_STATS_F_ALL_CLIENTS

/* client -> agent. */
struct lt_msg_stats_request {
    struct lt_header hdr;
    uint32_t flags; /* LT_STATS_F_KNOWN */
    uint32_t reserved;
};

struct lt_class_stats {
    uint64_t segments;         /* live segments of the class */
    uint64_t bytes_registered; /* bytes currently registered (or mapped, for STAGED) */
    uint64_t live_leases;
    uint64_t bytes_leased;
    uint64_t registrations;   /* since start */
    uint64_t registration_ns; /* total time spent registering */
    uint64_t unregistrations;
    uint64_t budget_refusals; /* requests refused (or served STAGED) over budget */
};

struct lt_client_stats {
    uint32_t client_id; /* nonzero */
    uint32_t pid;       /* from SO_PEERCRED */
    char name[LT_NAME_LEN];
    uint64_t segments;
    uint64_t bytes_registered;
    uint64_t live_leases;
    uint64_t bytes_leased;
    uint64_t leases_granted; /* since connect */
    uint64_t submits;        /* since connect */
    uint32_t streams;
    uint32_t events;
};

/* agent -> client. */
struct lt_msg_stats_reply {
    struct lt_header hdr;
    uint32_t client_count; /* 0..LT_MAX_STATS_CLIENTS */
    uint32_t reserved;
    uint64_t uptime_ns;
    struct lt_class_stats classes[LT_CLASS_SLOTS]; /* [0] all zero */
    struct lt_client_stats clients[];
};

/* ---- The agent's words area (LT_CAP_WORDS) ---- */

/* Bytes a words area may have: a multiple of 4096 in 4096..LT_WORDS_MAX_BYTES. */
#define LT_WORDS_MAX_BYTES (2u << 20)

/* client -> agent, once per connection: a words area of @bytes. The agent
 * makes a memfd it maps read-write and registers MAPPED, seals it so the
 * client can only map it read-only and nobody can free its pages, and
 * answers WORDS_GRANT with its fd. From then on the client's done words may
 * name it and its VECTOR_SCAN hits go there (hits_offset is an offset in the
 * words area, no longer in the lease). */
struct lt_msg_words_request {
    struct lt_header hdr;
    uint32_t bytes;
    uint32_t reserved;
};

/* agent -> client, with one fd. @segment names the words area in SUBMIT's
 * done word ({segment, offset}); it is never leased, and goes with the
 * connection. */
struct lt_msg_words_grant {
    struct lt_header hdr;
    struct lt_segment_id segment;
    uint64_t size; /* the bytes asked for */
    uint64_t reserved;
};

/* ---- Introspection (1.4, LT_CAP_INTROSPECT) ----
 *
 * What leasectl shows: the agent's leases and segments, a page at a time.
 * A request names one client (its HELLO_REPLY client_id) or every client
 * (0); the agent answers only a client granted LT_CAP_INTROSPECT, and
 * lists other clients' entries only to a privileged peer (the agent's own
 * uid or root; docs/operations.md). The cursor is the agent's: 0 starts,
 * a reply with MORE gives the next; a list taken while entries come and go
 * never repeats one and may miss one made meanwhile. */

#define LT_LIST_MAX_ENTRIES 127   /* entries per reply: a full one fits LT_MSG_MAX_BYTES */
#define LT_LIST_F_KNOWN 0u        /* request flags: none in 1.4 */
#define LT_LIST_F_MORE (1u << 0)  /* reply: call again with next_cursor */
#define LT_LIST_REPLY_F_KNOWN LT_LIST_F_MORE

/* client -> agent, types LEASE_LIST_REQUEST and SEGMENT_LIST_REQUEST. */
struct lt_msg_list_request {
    struct lt_header hdr;
    uint32_t client_id; /* 0: every client */
    uint32_t flags;     /* LT_LIST_F_KNOWN */
    uint64_t cursor;    /* 0: from the start; else a reply's next_cursor */
};

/* A lease's state in a list. */
#define LT_LEASE_STATE_HELD 1u      /* granted, not released */
#define LT_LEASE_STATE_RELEASING 2u /* LEASE_RELEASE received, waiting for its work */

struct lt_lease_info {
    struct lt_lease_id lease;
    struct lt_segment_id segment;
    uint32_t client_id;     /* the holder's HELLO_REPLY client_id */
    uint32_t mem_class;     /* the class served */
    uint64_t offset;        /* in the segment */
    uint64_t length;        /* nonzero */
    uint64_t age_ns;        /* since the grant, as the agent saw it */
    uint32_t work_inflight; /* submits on it without their COMPLETION */
    uint32_t state;         /* LT_LEASE_STATE_* */
    uint64_t reserved;
};

/* agent -> client: up to LT_LIST_MAX_ENTRIES leases. */
struct lt_msg_lease_list_reply {
    struct lt_header hdr;
    uint32_t count;       /* 0..LT_LIST_MAX_ENTRIES */
    uint32_t flags;       /* LT_LIST_REPLY_F_KNOWN */
    uint64_t next_cursor; /* nonzero with MORE, else 0 */
    struct lt_lease_info entries[];
};

/* A segment's flags in a list. */
#define LT_SEGMENT_INFO_F_REGISTERED (1u << 0) /* registered (pinned) now */
#define LT_SEGMENT_INFO_F_DRAINING (1u << 1)   /* its client is gone: waiting for work */
#define LT_SEGMENT_INFO_F_HUGE (1u << 2)       /* backed by pages larger than 4 KiB */
#define LT_SEGMENT_INFO_F_KNOWN                                                                    \
    (LT_SEGMENT_INFO_F_REGISTERED | LT_SEGMENT_INFO_F_DRAINING | LT_SEGMENT_INFO_F_HUGE)

struct lt_segment_info {
    struct lt_segment_id segment;
    uint32_t client_id; /* the offering client's HELLO_REPLY client_id */
    uint32_t mem_class; /* the segment's class */
    uint64_t size;
    uint64_t cookie;          /* the client's name for it (its offer's) */
    uint64_t age_ns;          /* since accepted */
    uint64_t registration_ns; /* how long registering it took (0: STAGED) */
    uint32_t live_leases;     /* leases not yet release-complete */
    uint32_t holds;           /* doorbell and done words in use by work */
    uint32_t flags;           /* LT_SEGMENT_INFO_F_* */
    uint32_t page_kib;        /* the backing pages' size in KiB: 4, 2048, ... (a power of two) */
};

/* agent -> client: up to LT_LIST_MAX_ENTRIES segments. */
struct lt_msg_segment_list_reply {
    struct lt_header hdr;
    uint32_t count;       /* 0..LT_LIST_MAX_ENTRIES */
    uint32_t flags;       /* LT_LIST_REPLY_F_KNOWN */
    uint64_t next_cursor; /* nonzero with MORE, else 0 */
    struct lt_segment_info entries[];
};

/* ---- Errors ---- */

/* either direction: the request named by request_id was refused. request_id
 * is 0 only when the offending message was too broken to read one. */
struct lt_msg_error {
    struct lt_header hdr;
    uint32_t code;        /* enum lt_error, not LT_OK */
    int32_t err;          /* negative errno, -4095..-1: lt_error_errno(code) or, for
                             LT_E_SYSTEM, the call's own */
    uint16_t failed_type; /* the offending message's header type, verbatim; 0 if unread */
    uint16_t reserved;
    uint32_t index;                 /* the failing batch entry, or LT_INDEX_NONE */
    char message[LT_ERROR_MSG_LEN]; /* printable, NUL-terminated, zero-padded, nonempty:
                                       what was expected and what was found */
};

/* ---- Layout, asserted ---- */

LT_ASSERT_FIELD(lt_header, magic, 0);
LT_ASSERT_FIELD(lt_header, version, 4);
LT_ASSERT_FIELD(lt_header, type, 6);
LT_ASSERT_FIELD(lt_header, length, 8);
LT_ASSERT_FIELD(lt_header, flags, 12);
LT_ASSERT_FIELD(lt_header, reserved, 14);
LT_ASSERT_FIELD(lt_header, request_id, 16);
LT_ASSERT_SIZE(lt_header, 24);

LT_ASSERT_FIELD(lt_msg_hello, hdr, 0);
LT_ASSERT_FIELD(lt_msg_hello, version_min, 24);
LT_ASSERT_FIELD(lt_msg_hello, version_max, 26);
LT_ASSERT_FIELD(lt_msg_hello, caps, 28);
LT_ASSERT_FIELD(lt_msg_hello, name, 32);
LT_ASSERT_SIZE(lt_msg_hello, 64);

LT_ASSERT_FIELD(lt_msg_hello_reply, hdr, 0);
LT_ASSERT_FIELD(lt_msg_hello_reply, version, 24);
LT_ASSERT_FIELD(lt_msg_hello_reply, reserved0, 26);
LT_ASSERT_FIELD(lt_msg_hello_reply, caps, 28);
LT_ASSERT_FIELD(lt_msg_hello_reply, client_id, 32);
LT_ASSERT_FIELD(lt_msg_hello_reply, max_lease_batch, 36);
LT_ASSERT_FIELD(lt_msg_hello_reply, max_streams, 40);
LT_ASSERT_FIELD(lt_msg_hello_reply, max_events, 44);
LT_ASSERT_FIELD(lt_msg_hello_reply, max_segments, 48);
LT_ASSERT_FIELD(lt_msg_hello_reply, reserved1, 52);
LT_ASSERT_FIELD(lt_msg_hello_reply, max_segment_bytes, 56);
LT_ASSERT_FIELD(lt_msg_hello_reply, class_budget, 64);
LT_ASSERT_FIELD(lt_msg_hello_reply, agent_name, 96);
LT_ASSERT_SIZE(lt_msg_hello_reply, 128);

LT_ASSERT_FIELD(lt_msg_segment_offer, hdr, 0);
LT_ASSERT_FIELD(lt_msg_segment_offer, cookie, 24);
LT_ASSERT_FIELD(lt_msg_segment_offer, size, 32);
LT_ASSERT_FIELD(lt_msg_segment_offer, mem_class, 40);
LT_ASSERT_FIELD(lt_msg_segment_offer, reserved, 44);
LT_ASSERT_SIZE(lt_msg_segment_offer, 48);

LT_ASSERT_FIELD(lt_msg_segment_accept, hdr, 0);
LT_ASSERT_FIELD(lt_msg_segment_accept, cookie, 24);
LT_ASSERT_FIELD(lt_msg_segment_accept, segment, 32);
LT_ASSERT_FIELD(lt_msg_segment_accept, size, 40);
LT_ASSERT_FIELD(lt_msg_segment_accept, mem_class, 48);
LT_ASSERT_FIELD(lt_msg_segment_accept, reserved, 52);
LT_ASSERT_SIZE(lt_msg_segment_accept, 56);

LT_ASSERT_FIELD(lt_msg_segment_retire, hdr, 0);
LT_ASSERT_FIELD(lt_msg_segment_retire, segment, 24);
LT_ASSERT_SIZE(lt_msg_segment_retire, 32);

LT_ASSERT_FIELD(lt_msg_segment_retired, hdr, 0);
LT_ASSERT_FIELD(lt_msg_segment_retired, segment, 24);
LT_ASSERT_FIELD(lt_msg_segment_retired, cookie, 32);
LT_ASSERT_SIZE(lt_msg_segment_retired, 40);

LT_ASSERT_FIELD(lt_lease_req_entry, segment, 0);
LT_ASSERT_FIELD(lt_lease_req_entry, offset, 8);
LT_ASSERT_FIELD(lt_lease_req_entry, length, 16);
LT_ASSERT_FIELD(lt_lease_req_entry, mem_class, 24);
LT_ASSERT_FIELD(lt_lease_req_entry, flags, 28);
LT_ASSERT_SIZE(lt_lease_req_entry, 32);

LT_ASSERT_FIELD(lt_msg_lease_request, hdr, 0);
LT_ASSERT_FIELD(lt_msg_lease_request, count, 24);
LT_ASSERT_FIELD(lt_msg_lease_request, flags, 28);
LT_ASSERT_FIELD(lt_msg_lease_request, entries, 32);
LT_ASSERT_SIZE(lt_msg_lease_request, 32);

LT_ASSERT_FIELD(lt_lease_grant_entry, lease, 0);
LT_ASSERT_FIELD(lt_lease_grant_entry, mem_class, 8);
LT_ASSERT_FIELD(lt_lease_grant_entry, status, 12);
LT_ASSERT_SIZE(lt_lease_grant_entry, 16);

LT_ASSERT_FIELD(lt_msg_lease_grant, hdr, 0);
LT_ASSERT_FIELD(lt_msg_lease_grant, count, 24);
LT_ASSERT_FIELD(lt_msg_lease_grant, reserved, 28);
LT_ASSERT_FIELD(lt_msg_lease_grant, entries, 32);
LT_ASSERT_SIZE(lt_msg_lease_grant, 32);

LT_ASSERT_FIELD(lt_msg_lease_release, hdr, 0);
LT_ASSERT_FIELD(lt_msg_lease_release, count, 24);
LT_ASSERT_FIELD(lt_msg_lease_release, reserved, 28);
LT_ASSERT_FIELD(lt_msg_lease_release, leases, 32);
LT_ASSERT_SIZE(lt_msg_lease_release, 32);

LT_ASSERT_FIELD(lt_msg_release_complete, hdr, 0);
LT_ASSERT_FIELD(lt_msg_release_complete, lease, 24);
LT_ASSERT_FIELD(lt_msg_release_complete, status, 32);
LT_ASSERT_FIELD(lt_msg_release_complete, reserved, 36);
LT_ASSERT_SIZE(lt_msg_release_complete, 40);

LT_ASSERT_FIELD(lt_release_complete_entry, lease, 0);
LT_ASSERT_FIELD(lt_release_complete_entry, status, 8);
LT_ASSERT_FIELD(lt_release_complete_entry, reserved, 12);
LT_ASSERT_SIZE(lt_release_complete_entry, 16);

LT_ASSERT_FIELD(lt_msg_release_complete_batch, hdr, 0);
LT_ASSERT_FIELD(lt_msg_release_complete_batch, count, 24);
LT_ASSERT_FIELD(lt_msg_release_complete_batch, reserved, 28);
LT_ASSERT_FIELD(lt_msg_release_complete_batch, entries, 32);
LT_ASSERT_SIZE(lt_msg_release_complete_batch, 32);

LT_ASSERT_FIELD(lt_word_ref, segment, 0);
LT_ASSERT_FIELD(lt_word_ref, offset, 8);
LT_ASSERT_SIZE(lt_word_ref, 16);

LT_ASSERT_FIELD(lt_op_checksum_verify, offset, 0);
LT_ASSERT_FIELD(lt_op_checksum_verify, length, 8);
LT_ASSERT_FIELD(lt_op_checksum_verify, sums_offset, 16);
LT_ASSERT_FIELD(lt_op_checksum_verify, block_size, 24);
LT_ASSERT_FIELD(lt_op_checksum_verify, reserved, 28);
LT_ASSERT_SIZE(lt_op_checksum_verify, 32);

LT_ASSERT_FIELD(lt_op_vector_scan, offset, 0);
LT_ASSERT_FIELD(lt_op_vector_scan, length, 8);
LT_ASSERT_FIELD(lt_op_vector_scan, query_offset, 16);
LT_ASSERT_FIELD(lt_op_vector_scan, dim, 24);
LT_ASSERT_FIELD(lt_op_vector_scan, elem, 28);
LT_ASSERT_FIELD(lt_op_vector_scan, metric, 30);
LT_ASSERT_FIELD(lt_op_vector_scan, hits_offset, 32);
LT_ASSERT_FIELD(lt_op_vector_scan, k, 40);
LT_ASSERT_FIELD(lt_op_vector_scan, reserved, 44);
LT_ASSERT_SIZE(lt_op_vector_scan, 48);

LT_ASSERT_FIELD(lt_scan_hit, score_bits, 0);
LT_ASSERT_FIELD(lt_scan_hit, reserved, 4);
LT_ASSERT_FIELD(lt_scan_hit, index, 8);
LT_ASSERT_SIZE(lt_scan_hit, 16);

LT_ASSERT_FIELD(lt_op_copy_h2d, offset, 0);
LT_ASSERT_FIELD(lt_op_copy_h2d, length, 8);
LT_ASSERT_SIZE(lt_op_copy_h2d, 16);

LT_STATIC_ASSERT(sizeof(union lt_op_args) == LT_OP_ARGS_BYTES, "op args are 64 bytes");
LT_STATIC_ASSERT(LT_ALIGNOF(union lt_op_args) == 8, "op args 8-aligned");

LT_ASSERT_FIELD(lt_msg_submit, hdr, 0);
LT_ASSERT_FIELD(lt_msg_submit, lease, 24);
LT_ASSERT_FIELD(lt_msg_submit, stream, 32);
LT_ASSERT_FIELD(lt_msg_submit, op, 40);
LT_ASSERT_FIELD(lt_msg_submit, reserved0, 42);
LT_ASSERT_FIELD(lt_msg_submit, flags, 44);
LT_ASSERT_FIELD(lt_msg_submit, bell, 48);
LT_ASSERT_FIELD(lt_msg_submit, bell_seq, 64);
LT_ASSERT_FIELD(lt_msg_submit, done, 72);
LT_ASSERT_FIELD(lt_msg_submit, done_seq, 88);
LT_ASSERT_FIELD(lt_msg_submit, args, 96);
LT_ASSERT_SIZE(lt_msg_submit, 160);

LT_ASSERT_FIELD(lt_msg_ring_open, hdr, 0);
LT_ASSERT_FIELD(lt_msg_ring_open, slots, 24);
LT_ASSERT_FIELD(lt_msg_ring_open, words, 32);
LT_ASSERT_FIELD(lt_msg_ring_open, slot_bytes, 40);
LT_ASSERT_FIELD(lt_msg_ring_open, seq_offset, 48);
LT_ASSERT_FIELD(lt_msg_ring_open, done_offset, 56);
LT_ASSERT_FIELD(lt_msg_ring_open, max_shard_bytes, 64);
LT_ASSERT_FIELD(lt_msg_ring_open, nslots, 72);
LT_ASSERT_FIELD(lt_msg_ring_open, depth, 76);
LT_ASSERT_FIELD(lt_msg_ring_open, flags, 80);
LT_ASSERT_FIELD(lt_msg_ring_open, reserved, 84);
LT_ASSERT_SIZE(lt_msg_ring_open, 88);

LT_ASSERT_FIELD(lt_msg_ring_opened, hdr, 0);
LT_ASSERT_FIELD(lt_msg_ring_opened, ring, 24);
LT_ASSERT_FIELD(lt_msg_ring_opened, depth, 32);
LT_ASSERT_FIELD(lt_msg_ring_opened, nslots, 36);
LT_ASSERT_FIELD(lt_msg_ring_opened, max_shard_bytes, 40);
LT_ASSERT_SIZE(lt_msg_ring_opened, 48);

LT_ASSERT_FIELD(lt_msg_ring_shard, hdr, 0);
LT_ASSERT_FIELD(lt_msg_ring_shard, ring, 24);
LT_ASSERT_FIELD(lt_msg_ring_shard, first_seq, 32);
LT_ASSERT_FIELD(lt_msg_ring_shard, length, 40);
LT_ASSERT_FIELD(lt_msg_ring_shard, op, 48);
LT_ASSERT_FIELD(lt_msg_ring_shard, reserved0, 50);
LT_ASSERT_FIELD(lt_msg_ring_shard, flags, 52);
LT_ASSERT_FIELD(lt_msg_ring_shard, args, 56);
LT_ASSERT_SIZE(lt_msg_ring_shard, 120);

LT_ASSERT_FIELD(lt_msg_ring_close, hdr, 0);
LT_ASSERT_FIELD(lt_msg_ring_close, ring, 24);
LT_ASSERT_SIZE(lt_msg_ring_close, 32);

LT_ASSERT_FIELD(lt_msg_ring_closed, hdr, 0);
LT_ASSERT_FIELD(lt_msg_ring_closed, ring, 24);
LT_ASSERT_FIELD(lt_msg_ring_closed, shards, 32);
LT_ASSERT_FIELD(lt_msg_ring_closed, chunks, 40);
LT_ASSERT_SIZE(lt_msg_ring_closed, 48);
LT_STATIC_ASSERT((uint64_t)LT_RING_SLOTS_MAX *LT_RING_SLOT_BYTES_MAX <= LT_SEGMENT_SIZE_MAX,
                 "a full ring's slots fit the largest segment");

LT_ASSERT_FIELD(lt_checksum_result, blocks_checked, 0);
LT_ASSERT_FIELD(lt_checksum_result, first_bad_block, 8);
LT_ASSERT_FIELD(lt_checksum_result, bad_blocks, 16);
LT_ASSERT_FIELD(lt_checksum_result, expected, 24);
LT_ASSERT_FIELD(lt_checksum_result, actual, 32);
LT_ASSERT_SIZE(lt_checksum_result, 40);

LT_ASSERT_FIELD(lt_scan_result, records_scanned, 0);
LT_ASSERT_FIELD(lt_scan_result, best_index, 8);
LT_ASSERT_FIELD(lt_scan_result, best_score_bits, 16);
LT_ASSERT_FIELD(lt_scan_result, reserved, 20);
LT_ASSERT_SIZE(lt_scan_result, 24);

LT_ASSERT_FIELD(lt_copy_result, bytes_copied, 0);
LT_ASSERT_SIZE(lt_copy_result, 8);

LT_STATIC_ASSERT(sizeof(union lt_op_result) == LT_OP_RESULT_BYTES, "op results are 48 bytes");
LT_STATIC_ASSERT(LT_ALIGNOF(union lt_op_result) == 8, "op results 8-aligned");

LT_ASSERT_FIELD(lt_msg_completion, hdr, 0);
LT_ASSERT_FIELD(lt_msg_completion, lease, 24);
LT_ASSERT_FIELD(lt_msg_completion, op, 32);
LT_ASSERT_FIELD(lt_msg_completion, reserved0, 34);
LT_ASSERT_FIELD(lt_msg_completion, status, 36);
LT_ASSERT_FIELD(lt_msg_completion, detail, 40);
LT_ASSERT_FIELD(lt_msg_completion, reserved1, 44);
LT_ASSERT_FIELD(lt_msg_completion, elapsed_ns, 48);
LT_ASSERT_FIELD(lt_msg_completion, result, 56);
LT_ASSERT_SIZE(lt_msg_completion, 104);

LT_ASSERT_FIELD(lt_msg_stream_cmd, hdr, 0);
LT_ASSERT_FIELD(lt_msg_stream_cmd, stream, 24);
LT_ASSERT_FIELD(lt_msg_stream_cmd, flags, 32);
LT_ASSERT_FIELD(lt_msg_stream_cmd, reserved, 36);
LT_ASSERT_SIZE(lt_msg_stream_cmd, 40);

LT_ASSERT_FIELD(lt_msg_event_cmd, hdr, 0);
LT_ASSERT_FIELD(lt_msg_event_cmd, event, 24);
LT_ASSERT_FIELD(lt_msg_event_cmd, end, 32);
LT_ASSERT_FIELD(lt_msg_event_cmd, stream, 40);
LT_ASSERT_FIELD(lt_msg_event_cmd, flags, 48);
LT_ASSERT_FIELD(lt_msg_event_cmd, reserved, 52);
LT_ASSERT_SIZE(lt_msg_event_cmd, 56);

LT_ASSERT_FIELD(lt_msg_device_sync, hdr, 0);
LT_ASSERT_SIZE(lt_msg_device_sync, 24);

LT_ASSERT_FIELD(lt_msg_ctl_reply, hdr, 0);
LT_ASSERT_FIELD(lt_msg_ctl_reply, request_type, 24);
LT_ASSERT_FIELD(lt_msg_ctl_reply, reserved0, 26);
LT_ASSERT_FIELD(lt_msg_ctl_reply, ready, 28);
LT_ASSERT_FIELD(lt_msg_ctl_reply, stream, 32);
LT_ASSERT_FIELD(lt_msg_ctl_reply, event, 40);
LT_ASSERT_FIELD(lt_msg_ctl_reply, elapsed_ms_bits, 48);
LT_ASSERT_FIELD(lt_msg_ctl_reply, reserved1, 52);
LT_ASSERT_SIZE(lt_msg_ctl_reply, 56);

LT_ASSERT_FIELD(lt_msg_stats_request, hdr, 0);
LT_ASSERT_FIELD(lt_msg_stats_request, flags, 24);
LT_ASSERT_FIELD(lt_msg_stats_request, reserved, 28);
LT_ASSERT_SIZE(lt_msg_stats_request, 32);

LT_ASSERT_FIELD(lt_class_stats, segments, 0);
LT_ASSERT_FIELD(lt_class_stats, bytes_registered, 8);
LT_ASSERT_FIELD(lt_class_stats, live_leases, 16);
LT_ASSERT_FIELD(lt_class_stats, bytes_leased, 24);
LT_ASSERT_FIELD(lt_class_stats, registrations, 32);
LT_ASSERT_FIELD(lt_class_stats, registration_ns, 40);
LT_ASSERT_FIELD(lt_class_stats, unregistrations, 48);
LT_ASSERT_FIELD(lt_class_stats, budget_refusals, 56);
LT_ASSERT_SIZE(lt_class_stats, 64);

LT_ASSERT_FIELD(lt_client_stats, client_id, 0);
LT_ASSERT_FIELD(lt_client_stats, pid, 4);
LT_ASSERT_FIELD(lt_client_stats, name, 8);
LT_ASSERT_FIELD(lt_client_stats, segments, 40);
LT_ASSERT_FIELD(lt_client_stats, bytes_registered, 48);
LT_ASSERT_FIELD(lt_client_stats, live_leases, 56);
LT_ASSERT_FIELD(lt_client_stats, bytes_leased, 64);
LT_ASSERT_FIELD(lt_client_stats, leases_granted, 72);
LT_ASSERT_FIELD(lt_client_stats, submits, 80);
LT_ASSERT_FIELD(lt_client_stats, streams, 88);
LT_ASSERT_FIELD(lt_client_stats, events, 92);
LT_ASSERT_SIZE(lt_client_stats, 96);

LT_ASSERT_FIELD(lt_msg_stats_reply, hdr, 0);
LT_ASSERT_FIELD(lt_msg_stats_reply, client_count, 24);
LT_ASSERT_FIELD(lt_msg_stats_reply, reserved, 28);
LT_ASSERT_FIELD(lt_msg_stats_reply, uptime_ns, 32);
LT_ASSERT_FIELD(lt_msg_stats_reply, classes, 40);
LT_ASSERT_FIELD(lt_msg_stats_reply, clients, 296);
LT_ASSERT_SIZE(lt_msg_stats_reply, 296);

LT_ASSERT_FIELD(lt_msg_error, hdr, 0);
LT_ASSERT_FIELD(lt_msg_error, code, 24);
LT_ASSERT_FIELD(lt_msg_error, err, 28);
LT_ASSERT_FIELD(lt_msg_error, failed_type, 32);
LT_ASSERT_FIELD(lt_msg_error, reserved, 34);
LT_ASSERT_FIELD(lt_msg_error, index, 36);
LT_ASSERT_FIELD(lt_msg_error, message, 40);
LT_ASSERT_SIZE(lt_msg_error, 128);

LT_ASSERT_FIELD(lt_msg_words_request, bytes, 24);
LT_ASSERT_FIELD(lt_msg_words_request, reserved, 28);
LT_ASSERT_SIZE(lt_msg_words_request, 32);
LT_ASSERT_FIELD(lt_msg_words_grant, segment, 24);
LT_ASSERT_FIELD(lt_msg_words_grant, size, 32);
LT_ASSERT_FIELD(lt_msg_words_grant, reserved, 40);
LT_ASSERT_SIZE(lt_msg_words_grant, 48);
LT_ASSERT_FIELD(lt_msg_list_request, hdr, 0);
LT_ASSERT_FIELD(lt_msg_list_request, client_id, 24);
LT_ASSERT_FIELD(lt_msg_list_request, flags, 28);
LT_ASSERT_FIELD(lt_msg_list_request, cursor, 32);
LT_ASSERT_SIZE(lt_msg_list_request, 40);

LT_ASSERT_FIELD(lt_lease_info, lease, 0);
LT_ASSERT_FIELD(lt_lease_info, segment, 8);
LT_ASSERT_FIELD(lt_lease_info, client_id, 16);
LT_ASSERT_FIELD(lt_lease_info, mem_class, 20);
LT_ASSERT_FIELD(lt_lease_info, offset, 24);
LT_ASSERT_FIELD(lt_lease_info, length, 32);
LT_ASSERT_FIELD(lt_lease_info, age_ns, 40);
LT_ASSERT_FIELD(lt_lease_info, work_inflight, 48);
LT_ASSERT_FIELD(lt_lease_info, state, 52);
LT_ASSERT_FIELD(lt_lease_info, reserved, 56);
LT_ASSERT_SIZE(lt_lease_info, 64);

LT_ASSERT_FIELD(lt_msg_lease_list_reply, hdr, 0);
LT_ASSERT_FIELD(lt_msg_lease_list_reply, count, 24);
LT_ASSERT_FIELD(lt_msg_lease_list_reply, flags, 28);
LT_ASSERT_FIELD(lt_msg_lease_list_reply, next_cursor, 32);
LT_ASSERT_FIELD(lt_msg_lease_list_reply, entries, 40);
LT_ASSERT_SIZE(lt_msg_lease_list_reply, 40);

LT_ASSERT_FIELD(lt_segment_info, segment, 0);
LT_ASSERT_FIELD(lt_segment_info, client_id, 8);
LT_ASSERT_FIELD(lt_segment_info, mem_class, 12);
LT_ASSERT_FIELD(lt_segment_info, size, 16);
LT_ASSERT_FIELD(lt_segment_info, cookie, 24);
LT_ASSERT_FIELD(lt_segment_info, age_ns, 32);
LT_ASSERT_FIELD(lt_segment_info, registration_ns, 40);
LT_ASSERT_FIELD(lt_segment_info, live_leases, 48);
LT_ASSERT_FIELD(lt_segment_info, holds, 52);
LT_ASSERT_FIELD(lt_segment_info, flags, 56);
LT_ASSERT_FIELD(lt_segment_info, page_kib, 60);
LT_ASSERT_SIZE(lt_segment_info, 64);

LT_ASSERT_FIELD(lt_msg_segment_list_reply, hdr, 0);
LT_ASSERT_FIELD(lt_msg_segment_list_reply, count, 24);
LT_ASSERT_FIELD(lt_msg_segment_list_reply, flags, 28);
LT_ASSERT_FIELD(lt_msg_segment_list_reply, next_cursor, 32);
LT_ASSERT_FIELD(lt_msg_segment_list_reply, entries, 40);
LT_ASSERT_SIZE(lt_msg_segment_list_reply, 40);

/* The largest message: a full lease request. */
#define LT_MSG_MAX_BYTES (32u + LT_MAX_BATCH * 32u)
LT_STATIC_ASSERT(LT_MSG_MAX_BYTES == sizeof(struct lt_msg_lease_request) +
                                         LT_MAX_BATCH * sizeof(struct lt_lease_req_entry),
                 "a full lease request is the largest message");
LT_STATIC_ASSERT(sizeof(struct lt_msg_lease_grant) +
                         LT_MAX_BATCH * sizeof(struct lt_lease_grant_entry) <=
                     LT_MSG_MAX_BYTES,
                 "a full grant fits");
LT_STATIC_ASSERT(sizeof(struct lt_msg_lease_release) + LT_MAX_BATCH * sizeof(struct lt_lease_id) <=
                     LT_MSG_MAX_BYTES,
                 "a full release fits");
LT_STATIC_ASSERT(sizeof(struct lt_msg_release_complete_batch) +
                         LT_MAX_BATCH * sizeof(struct lt_release_complete_entry) <=
                     LT_MSG_MAX_BYTES,
                 "a full release-complete batch fits");
LT_STATIC_ASSERT(sizeof(struct lt_msg_stats_reply) +
                         LT_MAX_STATS_CLIENTS * sizeof(struct lt_client_stats) <=
                     LT_MSG_MAX_BYTES,
                 "a full stats reply fits");
LT_STATIC_ASSERT(sizeof(struct lt_msg_lease_list_reply) +
                         LT_LIST_MAX_ENTRIES * sizeof(struct lt_lease_info) <=
                     LT_MSG_MAX_BYTES,
                 "a full lease list fits");
LT_STATIC_ASSERT(sizeof(struct lt_msg_segment_list_reply) +
                         LT_LIST_MAX_ENTRIES * sizeof(struct lt_segment_info) <=
                     LT_MSG_MAX_BYTES,
                 "a full segment list fits");
LT_STATIC_ASSERT(LT_LIST_MAX_ENTRIES <= LT_MAX_BATCH, "list ids are checked unique as batches");
LT_STATIC_ASSERT(LT_SEGMENT_SIZE_MAX % LT_SEGMENT_ALIGN == 0, "segment limits agree");

/* An aligned receive buffer for any one message; recv() into .bytes with
 * room for one more byte than LT_MSG_MAX_BYTES to see an oversized packet. */
union lt_msg_buffer {
    uint64_t align;
    struct lt_header hdr;
    unsigned char bytes[LT_MSG_MAX_BYTES + LT_MSG_ALIGN];
};

/* LAUNCH (1.2): its messages, before the facts that size them. */
#include "lease_types/proto_launch.h"

/* ---- Per-type facts ---- */

enum lt_dir {
    LT_DIR_TO_AGENT = 1,  /* sent by a client */
    LT_DIR_TO_CLIENT = 2, /* sent by the agent */
    LT_DIR_EITHER = 3,    /* ERROR */
};

/* What the protocol fixes about one message type. */
struct lt_msg_info {
    const char *name;   /* "HELLO", ...; NULL for an unknown type */
    uint32_t fixed;     /* sizeof the struct (the fixed part, for batches) */
    uint32_t entry;     /* bytes per batch entry; 0 for fixed-size messages */
    uint32_t min_count; /* batches: smallest count allowed */
    uint32_t max_count; /* batches: largest count allowed */
    uint16_t dir;       /* enum lt_dir */
    uint16_t fds;       /* fds that travel with it: 1 for SEGMENT_OFFER, else 0 */
    uint16_t reply;     /* the success reply's type to a request; 0 for replies */
};

/* The facts for @type; .name == NULL when @type is not defined in v1 (or
 * the minor versions this build implements). */
static inline struct lt_msg_info lt_msg_info(uint32_t type)
{
    struct lt_msg_info i;
    i.name = NULL;
    i.fixed = 0;
    i.entry = 0;
    i.min_count = 0;
    i.max_count = 0;
    i.dir = LT_DIR_TO_AGENT;
    i.fds = 0;
    i.reply = LT_MSG_CTL_REPLY;
    switch (type) {
    case LT_MSG_HELLO:
        i.name = "HELLO";
        i.fixed = sizeof(struct lt_msg_hello);
        i.reply = LT_MSG_HELLO_REPLY;
        break;
    case LT_MSG_HELLO_REPLY:
        i.name = "HELLO_REPLY";
        i.fixed = sizeof(struct lt_msg_hello_reply);
        i.dir = LT_DIR_TO_CLIENT;
        break;
    case LT_MSG_SEGMENT_OFFER:
        i.name = "SEGMENT_OFFER";
        i.fixed = sizeof(struct lt_msg_segment_offer);
        i.fds = 1;
        i.reply = LT_MSG_SEGMENT_ACCEPT;
        break;
    case LT_MSG_SEGMENT_ACCEPT:
        i.name = "SEGMENT_ACCEPT";
        i.fixed = sizeof(struct lt_msg_segment_accept);
        i.dir = LT_DIR_TO_CLIENT;
        break;
    case LT_MSG_SEGMENT_RETIRE:
        i.name = "SEGMENT_RETIRE";
        i.fixed = sizeof(struct lt_msg_segment_retire);
        i.reply = LT_MSG_SEGMENT_RETIRED;
        break;
    case LT_MSG_SEGMENT_RETIRED:
        i.name = "SEGMENT_RETIRED";
        i.fixed = sizeof(struct lt_msg_segment_retired);
        i.dir = LT_DIR_TO_CLIENT;
        break;
    case LT_MSG_LEASE_REQUEST:
        i.name = "LEASE_REQUEST";
        i.fixed = sizeof(struct lt_msg_lease_request);
        i.entry = sizeof(struct lt_lease_req_entry);
        i.min_count = 1;
        i.max_count = LT_MAX_BATCH;
        i.reply = LT_MSG_LEASE_GRANT;
        break;
    case LT_MSG_LEASE_GRANT:
        i.name = "LEASE_GRANT";
        i.fixed = sizeof(struct lt_msg_lease_grant);
        i.entry = sizeof(struct lt_lease_grant_entry);
        i.min_count = 1;
        i.max_count = LT_MAX_BATCH;
        i.dir = LT_DIR_TO_CLIENT;
        break;
    case LT_MSG_LEASE_RELEASE:
        i.name = "LEASE_RELEASE";
        i.fixed = sizeof(struct lt_msg_lease_release);
        i.entry = sizeof(struct lt_lease_id);
        i.min_count = 1;
        i.max_count = LT_MAX_BATCH;
        i.reply = LT_MSG_RELEASE_COMPLETE;
        break;
    case LT_MSG_RELEASE_COMPLETE:
        i.name = "RELEASE_COMPLETE";
        i.fixed = sizeof(struct lt_msg_release_complete);
        i.dir = LT_DIR_TO_CLIENT;
        break;
    case LT_MSG_SUBMIT:
        i.name = "SUBMIT";
        i.fixed = sizeof(struct lt_msg_submit);
        i.reply = LT_MSG_COMPLETION;
        break;
    case LT_MSG_COMPLETION:
        i.name = "COMPLETION";
        i.fixed = sizeof(struct lt_msg_completion);
        i.dir = LT_DIR_TO_CLIENT;
        break;
    case LT_MSG_STREAM_CREATE:
        i.name = "STREAM_CREATE";
        break;
    case LT_MSG_STREAM_VALIDATE:
        i.name = "STREAM_VALIDATE";
        break;
    case LT_MSG_STREAM_QUERY:
        i.name = "STREAM_QUERY";
        break;
    case LT_MSG_STREAM_SYNCHRONIZE:
        i.name = "STREAM_SYNCHRONIZE";
        break;
    case LT_MSG_STREAM_DESTROY:
        i.name = "STREAM_DESTROY";
        break;
    case LT_MSG_EVENT_RECORD:
        i.name = "EVENT_RECORD";
        break;
    case LT_MSG_EVENT_WAIT:
        i.name = "EVENT_WAIT";
        break;
    case LT_MSG_EVENT_QUERY:
        i.name = "EVENT_QUERY";
        break;
    case LT_MSG_EVENT_SYNCHRONIZE:
        i.name = "EVENT_SYNCHRONIZE";
        break;
    case LT_MSG_EVENT_DESTROY:
        i.name = "EVENT_DESTROY";
        break;
    case LT_MSG_EVENT_ELAPSED:
        i.name = "EVENT_ELAPSED";
        break;
    case LT_MSG_DEVICE_SYNCHRONIZE:
        i.name = "DEVICE_SYNCHRONIZE";
        i.fixed = sizeof(struct lt_msg_device_sync);
        break;
    case LT_MSG_CTL_REPLY:
        i.name = "CTL_REPLY";
        i.fixed = sizeof(struct lt_msg_ctl_reply);
        i.dir = LT_DIR_TO_CLIENT;
        break;
    case LT_MSG_STATS_REQUEST:
        i.name = "STATS_REQUEST";
        i.fixed = sizeof(struct lt_msg_stats_request);
        i.reply = LT_MSG_STATS_REPLY;
        break;
    case LT_MSG_STATS_REPLY:
        i.name = "STATS_REPLY";
        i.fixed = sizeof(struct lt_msg_stats_reply);
        i.entry = sizeof(struct lt_client_stats);
        i.min_count = 0;
        i.max_count = LT_MAX_STATS_CLIENTS;
        i.dir = LT_DIR_TO_CLIENT;
        break;
    case LT_MSG_ERROR:
        i.name = "ERROR";
        i.fixed = sizeof(struct lt_msg_error);
        i.dir = LT_DIR_EITHER;
        break;
    case LT_MSG_RELEASE_COMPLETE_BATCH:
        i.name = "RELEASE_COMPLETE_BATCH";
        i.fixed = sizeof(struct lt_msg_release_complete_batch);
        i.entry = sizeof(struct lt_release_complete_entry);
        i.min_count = 1;
        i.max_count = LT_MAX_BATCH;
        i.dir = LT_DIR_TO_CLIENT;
        break;
    case LT_MSG_WORDS_REQUEST:
        i.name = "WORDS_REQUEST";
        i.fixed = sizeof(struct lt_msg_words_request);
        i.reply = LT_MSG_WORDS_GRANT;
        break;
    case LT_MSG_WORDS_GRANT:
        i.name = "WORDS_GRANT";
        i.fixed = sizeof(struct lt_msg_words_grant);
        i.dir = LT_DIR_TO_CLIENT;
        i.fds = 1;
        break;
    case LT_MSG_LEASE_LIST_REQUEST:
        i.name = "LEASE_LIST_REQUEST";
        i.fixed = sizeof(struct lt_msg_list_request);
        i.reply = LT_MSG_LEASE_LIST_REPLY;
        break;
    case LT_MSG_LEASE_LIST_REPLY:
        i.name = "LEASE_LIST_REPLY";
        i.fixed = sizeof(struct lt_msg_lease_list_reply);
        i.entry = sizeof(struct lt_lease_info);
        i.max_count = LT_LIST_MAX_ENTRIES;
        i.dir = LT_DIR_TO_CLIENT;
        break;
    case LT_MSG_SEGMENT_LIST_REQUEST:
        i.name = "SEGMENT_LIST_REQUEST";
        i.fixed = sizeof(struct lt_msg_list_request);
        i.reply = LT_MSG_SEGMENT_LIST_REPLY;
        break;
    case LT_MSG_SEGMENT_LIST_REPLY:
        i.name = "SEGMENT_LIST_REPLY";
        i.fixed = sizeof(struct lt_msg_segment_list_reply);
        i.entry = sizeof(struct lt_segment_info);
        i.max_count = LT_LIST_MAX_ENTRIES;
        i.dir = LT_DIR_TO_CLIENT;
        break;
    case LT_MSG_RING_OPEN:
        i.name = "RING_OPEN";
        i.fixed = sizeof(struct lt_msg_ring_open);
        i.reply = LT_MSG_RING_OPENED;
        break;
    case LT_MSG_RING_OPENED:
        i.name = "RING_OPENED";
        i.fixed = sizeof(struct lt_msg_ring_opened);
        i.dir = LT_DIR_TO_CLIENT;
        break;
    case LT_MSG_RING_SHARD:
        i.name = "RING_SHARD";
        i.fixed = sizeof(struct lt_msg_ring_shard);
        i.reply = LT_MSG_COMPLETION;
        break;
    case LT_MSG_RING_CLOSE:
        i.name = "RING_CLOSE";
        i.fixed = sizeof(struct lt_msg_ring_close);
        i.reply = LT_MSG_RING_CLOSED;
        break;
    case LT_MSG_RING_CLOSED:
        i.name = "RING_CLOSED";
        i.fixed = sizeof(struct lt_msg_ring_closed);
        i.dir = LT_DIR_TO_CLIENT;
        break;
    case LT_MSG_LAUNCH:
        i.name = "LAUNCH";
        i.fixed = sizeof(struct lt_msg_launch);
        i.entry = 8; /* the argument block's words: "count" is arg_words */
        i.min_count = 0;
        i.max_count = LT_LAUNCH_ARGS_MAX / 8;
        i.reply = LT_MSG_LAUNCH_COMPLETION;
        break;
    case LT_MSG_LAUNCH_COMPLETION:
        i.name = "LAUNCH_COMPLETION";
        i.fixed = sizeof(struct lt_msg_launch_completion);
        i.dir = LT_DIR_TO_CLIENT;
        break;
    default:
        i.reply = 0;
        return i;
    }
    if (type >= LT_MSG_STREAM_CREATE && type <= LT_MSG_STREAM_DESTROY)
        i.fixed = sizeof(struct lt_msg_stream_cmd);
    else if (type >= LT_MSG_EVENT_RECORD && type <= LT_MSG_EVENT_ELAPSED)
        i.fixed = sizeof(struct lt_msg_event_cmd);
    if (i.dir != LT_DIR_TO_AGENT)
        i.reply = 0;
    return i;
}

/* 1 when @type is defined in v1 or a minor this build implements, else 0
 * (the reserved ranges between are not). */
static inline int lt_msg_type_is_known(uint32_t type)
{
    return type >= LT_MSG_TYPE_FIRST && type <= LT_MSG_TYPE_LAST && lt_msg_info(type).name != NULL;
}

/* The type's name ("LEASE_GRANT"), or "UNKNOWN". Static storage. */
static inline const char *lt_msg_type_name(uint32_t type)
{
    const char *n = lt_msg_info(type).name;
    return n ? n : "UNKNOWN";
}

/* The total size of a message of @type with @count batch entries (count 0
 * for fixed-size types) into *@size_p. Returns LT_OK; LT_E_UNKNOWN_TYPE;
 * LT_E_BATCH_EMPTY / LT_E_BATCH_TOO_LARGE for a count outside the type's
 * limits (or nonzero for a fixed-size type). Nothing written on failure. */
static inline enum lt_error lt_msg_size(uint32_t type, uint32_t count, size_t *size_p)
{
    struct lt_msg_info i = lt_msg_info(type);
    size_t body;
    if (!i.name)
        return LT_E_UNKNOWN_TYPE;
    if (count > i.max_count)
        return LT_E_BATCH_TOO_LARGE;
    if (count < i.min_count)
        return LT_E_BATCH_EMPTY;
    if (lt_size_mul_checked(count, i.entry, &body) != 0 || body > SIZE_MAX - i.fixed)
        return LT_E_BATCH_TOO_LARGE;
    *size_p = i.fixed + body;
    return LT_OK;
}

/* ---- Building messages ---- */

/* Fills @h: magic, version, @type, @length, @request_id; flags and reserved 0. */
static inline void lt_header_init(struct lt_header *h, uint16_t type, uint32_t length,
                                  uint64_t request_id)
{
    h->magic = LT_MAGIC;
    h->version = LT_PROTO_VERSION;
    h->type = type;
    h->length = length;
    h->flags = 0;
    h->reserved = 0;
    h->request_id = request_id;
}

/* Zeroes @size bytes at @msg (8-aligned, caller-owned) and writes a header
 * for @type with length @size. For batches, set count and the entries
 * afterwards. Returns LT_OK, or LT_E_BAD_LENGTH (nothing written) when @size
 * is not a size lt_msg_size() gives for @type, LT_E_UNKNOWN_TYPE. */
static inline enum lt_error lt_msg_init(void *msg, size_t size, uint16_t type, uint64_t request_id)
{
    struct lt_msg_info i = lt_msg_info(type);
    if (!i.name)
        return LT_E_UNKNOWN_TYPE;
    if (size < i.fixed || size > LT_MSG_MAX_BYTES ||
        (i.entry == 0 ? size != i.fixed : (size - i.fixed) % i.entry != 0))
        return LT_E_BAD_LENGTH;
    lt_bytes_zero(msg, size);
    lt_header_init((struct lt_header *)msg, type, (uint32_t)size, request_id);
    return LT_OK;
}

/* Copies @src into the fixed array @dst of @cap bytes as the protocol wants
 * names: at most cap - 1 bytes, bytes outside printable ASCII replaced by
 * '?', NUL-terminated, zero-padded. Returns the bytes copied; a caller that
 * needs the whole string compares it with its own length. */
static inline size_t lt_name_set(char *dst, size_t cap, const char *src)
{
    size_t n = 0;
    if (cap == 0)
        return 0;
    for (; src && src[n] != '\0' && n < cap - 1; n++) {
        unsigned char c = (unsigned char)src[n];
        dst[n] = (c >= 0x20 && c <= 0x7e) ? (char)c : '?';
    }
    for (size_t i = n; i < cap; i++)
        dst[i] = '\0';
    return n;
}

LT_EXTERN_C_END

#endif /* LEASE_TYPES_PROTO_H */
