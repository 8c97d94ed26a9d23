/* lease-types: the protocol's error codes.
 *
 * One enum serves three places: what a validator returns (why the bytes are
 * not a valid message), the status fields on the wire (why the agent refused
 * or failed a well-formed request: per lease, per submit, in an ERROR
 * message), and, through lt_error_errno(), the negative errno a C API at the
 * edge of lease/, gpu/ or stagingd returns. Values are wire values: never
 * renumber one; new codes go before LT_E__COUNT and bump the protocol version.
 *
 * struct lt_failure carries a refusal across a C API: the function that
 * decides it fills the code and the words once (lt_failure_set), callers
 * pass it up unchanged, and the agent copies it into an ERROR message.
 * lt_failure_set formats with vsnprintf, so this header (alone among the
 * lease-types headers) also includes <stdarg.h> and <stdio.h>. */
#ifndef LEASE_TYPES_ERRORS_H
#define LEASE_TYPES_ERRORS_H

#include <stdarg.h>
#include <stdio.h>

#include "lease_types/common.h"

LT_EXTERN_C_BEGIN

enum lt_error {
    LT_OK = 0,

    /* Framing: the bytes are not a v1 message of the kind expected. */
    LT_E_TRUNCATED = 1,       /* fewer bytes than a header */
    LT_E_UNALIGNED = 2,       /* the receive buffer is not 8-byte aligned (a local bug) */
    LT_E_BAD_MAGIC = 3,       /* header magic is not LT_MAGIC */
    LT_E_BAD_VERSION = 4,     /* header or hello version is not one this side speaks */
    LT_E_UNKNOWN_TYPE = 5,    /* message type not defined in this version */
    LT_E_WRONG_TYPE = 6,      /* a defined type, but not the one expected here */
    LT_E_WRONG_DIRECTION = 7, /* a message only the other side may send */
    LT_E_LENGTH_MISMATCH = 8, /* header length differs from the bytes received */
    LT_E_BAD_LENGTH = 9,      /* length is not what the type (and its count) requires */
    LT_E_BAD_REQUEST_ID = 10, /* request id 0 where one is required */
    LT_E_FD_COUNT = 11,       /* wrong number of fds came with the message */

    /* Fields: one field of a well-framed message is invalid. */
    LT_E_RESERVED_NONZERO = 12,  /* a reserved or unused field is not zero */
    LT_E_UNKNOWN_FLAGS = 13,     /* a flag bit not defined (or not allowed) here */
    LT_E_BAD_CLASS = 14,         /* memory class is not STAGED, PINNED or MAPPED */
    LT_E_BAD_OP = 15,            /* operation code not defined */
    LT_E_BAD_ID = 16,            /* malformed id: generation 0, or the default stream where a
                                    created one is needed */
    LT_E_DUPLICATE_ID = 17,      /* the same id twice in one batch */
    LT_E_BAD_VALUE = 18,         /* a field outside its allowed values */
    LT_E_ZERO_LENGTH = 19,       /* a length or size that must be nonzero is 0 */
    LT_E_RANGE_OVERFLOW = 20,    /* offset + length wraps around 2^64 */
    LT_E_OUT_OF_RANGE = 21,      /* a range ends past its segment, lease or protocol limit */
    LT_E_MISALIGNED = 22,        /* an offset or size is not a multiple of what is required */
    LT_E_BATCH_EMPTY = 23,       /* a batch count of 0 */
    LT_E_BATCH_TOO_LARGE = 24,   /* a batch count over the protocol maximum */
    LT_E_NAME_UNTERMINATED = 25, /* no NUL inside a fixed char array */
    LT_E_NAME_EMPTY = 26,        /* a name or message with no characters */
    LT_E_NAME_BAD_CHAR = 27,     /* a byte outside printable ASCII in a name */
    LT_E_NAME_PADDING = 28,      /* nonzero bytes after a name's NUL */

    /* Service: a valid request the agent refuses or fails. */
    LT_E_NO_HELLO = 29,          /* a request before the handshake, or a second hello */
    LT_E_NOT_FOUND = 30,         /* no such segment, lease, stream or event */
    LT_E_STALE_ID = 31,          /* the slot exists but the generation is not current */
    LT_E_NOT_OWNER = 32,         /* the id belongs to another client */
    LT_E_BUSY = 33,              /* still in use (a segment with live leases) */
    LT_E_BUDGET = 34,            /* the class's pin budget is spent */
    LT_E_MEMLOCK = 35,           /* over RLIMIT_MEMLOCK */
    LT_E_LIMIT = 36,             /* too many segments, leases, streams or events */
    LT_E_SEGMENT_UNSEALED = 37,  /* the fd is not a memfd sealed SHRINK|GROW|SEAL */
    LT_E_SEGMENT_SIZE = 38,      /* the fd's size differs from the offered size */
    LT_E_UNSUPPORTED = 39,       /* valid, but this agent cannot do it (capability) */
    LT_E_CHECKSUM_MISMATCH = 40, /* a block failed its checksum */
    LT_E_GPU_FAULT = 41,         /* the driver or device reported an error */
    LT_E_SHUTTING_DOWN = 42,     /* the agent is stopping */
    LT_E_SYSTEM = 43,            /* a system call failed; an ERROR's err field says which */
    LT_E_LAUNCH_FAILED = 44,     /* 1.2: the driver refused a LAUNCH (its CUresult named);
                                    the device is still usable */
    LT_E_SEGMENT_GONE = 45,      /* a segment's memory could not be read (SIGBUS): the peer
                                    freed or withheld its pages; the agent drops that peer */

    LT_E__COUNT = 46
};

/* 1 when @code is a defined enum lt_error value (LT_OK included), else 0. */
static inline int lt_error_is_known(uint32_t code)
{
    return code < LT_E__COUNT;
}

/* The enum constant's name ("LT_E_BAD_MAGIC"); "LT_E_UNKNOWN_CODE" for an
 * undefined value. Static storage, never NULL. */
static inline const char *lt_error_name(uint32_t code)
{
    /* clang-format off */
    switch (code) {
    case LT_OK: return "LT_OK";
    case LT_E_TRUNCATED: return "LT_E_TRUNCATED";
    case LT_E_UNALIGNED: return "LT_E_UNALIGNED";
    case LT_E_BAD_MAGIC: return "LT_E_BAD_MAGIC";
    case LT_E_BAD_VERSION: return "LT_E_BAD_VERSION";
    case LT_E_UNKNOWN_TYPE: return "LT_E_UNKNOWN_TYPE";
    case LT_E_WRONG_TYPE: return "LT_E_WRONG_TYPE";
    case LT_E_WRONG_DIRECTION: return "LT_E_WRONG_DIRECTION";
    case LT_E_LENGTH_MISMATCH: return "LT_E_LENGTH_MISMATCH";
    case LT_E_BAD_LENGTH: return "LT_E_BAD_LENGTH";
    case LT_E_BAD_REQUEST_ID: return "LT_E_BAD_REQUEST_ID";
    case LT_E_FD_COUNT: return "LT_E_FD_COUNT";
    case LT_E_RESERVED_NONZERO: return "LT_E_RESERVED_NONZERO";
    case LT_E_UNKNOWN_FLAGS: return "LT_E_UNKNOWN_FLAGS";
    case LT_E_BAD_CLASS: return "LT_E_BAD_CLASS";
    case LT_E_BAD_OP: return "LT_E_BAD_OP";
    case LT_E_BAD_ID: return "LT_E_BAD_ID";
    case LT_E_DUPLICATE_ID: return "LT_E_DUPLICATE_ID";
    case LT_E_BAD_VALUE: return "LT_E_BAD_VALUE";
    case LT_E_ZERO_LENGTH: return "LT_E_ZERO_LENGTH";
    case LT_E_RANGE_OVERFLOW: return "LT_E_RANGE_OVERFLOW";
    case LT_E_OUT_OF_RANGE: return "LT_E_OUT_OF_RANGE";
    case LT_E_MISALIGNED: return "LT_E_MISALIGNED";
    case LT_E_BATCH_EMPTY: return "LT_E_BATCH_EMPTY";
    case LT_E_BATCH_TOO_LARGE: return "LT_E_BATCH_TOO_LARGE";
    case LT_E_NAME_UNTERMINATED: return "LT_E_NAME_UNTERMINATED";
    case LT_E_NAME_EMPTY: return "LT_E_NAME_EMPTY";
    case LT_E_NAME_BAD_CHAR: return "LT_E_NAME_BAD_CHAR";
    case LT_E_NAME_PADDING: return "LT_E_NAME_PADDING";
    case LT_E_NO_HELLO: return "LT_E_NO_HELLO";
    case LT_E_NOT_FOUND: return "LT_E_NOT_FOUND";
    case LT_E_STALE_ID: return "LT_E_STALE_ID";
    case LT_E_NOT_OWNER: return "LT_E_NOT_OWNER";
    case LT_E_BUSY: return "LT_E_BUSY";
    case LT_E_BUDGET: return "LT_E_BUDGET";
    case LT_E_MEMLOCK: return "LT_E_MEMLOCK";
    case LT_E_LIMIT: return "LT_E_LIMIT";
    case LT_E_SEGMENT_UNSEALED: return "LT_E_SEGMENT_UNSEALED";
    case LT_E_SEGMENT_SIZE: return "LT_E_SEGMENT_SIZE";
    case LT_E_UNSUPPORTED: return "LT_E_UNSUPPORTED";
    case LT_E_CHECKSUM_MISMATCH: return "LT_E_CHECKSUM_MISMATCH";
    case LT_E_GPU_FAULT: return "LT_E_GPU_FAULT";
    case LT_E_SHUTTING_DOWN: return "LT_E_SHUTTING_DOWN";
    case LT_E_SYSTEM: return "LT_E_SYSTEM";
    case LT_E_LAUNCH_FAILED: return "LT_E_LAUNCH_FAILED";
    case LT_E_SEGMENT_GONE: return "LT_E_SEGMENT_GONE";
    default: return "LT_E_UNKNOWN_CODE";
    }
    /* clang-format on */
}

/* A short lower-case description for log lines and ERROR messages. Static
 * storage, never NULL. */
static inline const char *lt_error_describe(uint32_t code)
{
    /* clang-format off */
    switch (code) {
    case LT_OK: return "success";
    case LT_E_TRUNCATED: return "message shorter than a header";
    case LT_E_UNALIGNED: return "receive buffer not 8-byte aligned";
    case LT_E_BAD_MAGIC: return "bad magic";
    case LT_E_BAD_VERSION: return "unsupported protocol version";
    case LT_E_UNKNOWN_TYPE: return "unknown message type";
    case LT_E_WRONG_TYPE: return "message type not expected here";
    case LT_E_WRONG_DIRECTION: return "message type only the other side may send";
    case LT_E_LENGTH_MISMATCH: return "header length differs from bytes received";
    case LT_E_BAD_LENGTH: return "length wrong for the message type or count";
    case LT_E_BAD_REQUEST_ID: return "request id must be nonzero";
    case LT_E_FD_COUNT: return "wrong number of file descriptors";
    case LT_E_RESERVED_NONZERO: return "reserved field not zero";
    case LT_E_UNKNOWN_FLAGS: return "unknown or disallowed flag bits";
    case LT_E_BAD_CLASS: return "bad memory class";
    case LT_E_BAD_OP: return "unknown operation";
    case LT_E_BAD_ID: return "malformed id";
    case LT_E_DUPLICATE_ID: return "same id twice in one batch";
    case LT_E_BAD_VALUE: return "field value out of range";
    case LT_E_ZERO_LENGTH: return "length must be nonzero";
    case LT_E_RANGE_OVERFLOW: return "offset plus length overflows";
    case LT_E_OUT_OF_RANGE: return "range out of bounds";
    case LT_E_MISALIGNED: return "offset or size misaligned";
    case LT_E_BATCH_EMPTY: return "empty batch";
    case LT_E_BATCH_TOO_LARGE: return "batch count over the maximum";
    case LT_E_NAME_UNTERMINATED: return "name not NUL-terminated";
    case LT_E_NAME_EMPTY: return "name empty";
    case LT_E_NAME_BAD_CHAR: return "name has a non-printable byte";
    case LT_E_NAME_PADDING: return "bytes after a name's NUL not zero";
    case LT_E_NO_HELLO: return "handshake required first, and only once";
    case LT_E_NOT_FOUND: return "no such id";
    case LT_E_STALE_ID: return "stale id generation";
    case LT_E_NOT_OWNER: return "id owned by another client";
    case LT_E_BUSY: return "still in use";
    case LT_E_BUDGET: return "pin budget exhausted";
    case LT_E_MEMLOCK: return "over RLIMIT_MEMLOCK";
    case LT_E_LIMIT: return "too many objects";
    case LT_E_SEGMENT_UNSEALED: return "segment fd not a sealed memfd";
    case LT_E_SEGMENT_SIZE: return "segment fd size differs from the offer";
    case LT_E_UNSUPPORTED: return "not supported by this agent";
    case LT_E_CHECKSUM_MISMATCH: return "checksum mismatch";
    case LT_E_GPU_FAULT: return "GPU or driver error";
    case LT_E_SHUTTING_DOWN: return "agent shutting down";
    case LT_E_SYSTEM: return "system call failed";
    case LT_E_LAUNCH_FAILED: return "kernel launch refused by the driver";
    case LT_E_SEGMENT_GONE: return "segment memory gone from under the agent";
    default: return "unknown error code";
    }
    /* clang-format on */
}

/* The negative errno a C API returns for @code: 0 for LT_OK, -EPROTO for an
 * undefined code. Several codes share an errno; the code is the precise one. */
static inline int lt_error_errno(uint32_t code)
{
    /* clang-format off */
    switch (code) {
    case LT_OK: return 0;
    case LT_E_TRUNCATED: return -EBADMSG;
    case LT_E_UNALIGNED: return -EFAULT;
    case LT_E_BAD_MAGIC: return -EPROTO;
    case LT_E_BAD_VERSION: return -EPROTONOSUPPORT;
    case LT_E_UNKNOWN_TYPE: return -ENOMSG;
    case LT_E_WRONG_TYPE: return -EPROTO;
    case LT_E_WRONG_DIRECTION: return -EPROTO;
    case LT_E_LENGTH_MISMATCH: return -EBADMSG;
    case LT_E_BAD_LENGTH: return -EMSGSIZE;
    case LT_E_BAD_REQUEST_ID: return -EPROTO;
    case LT_E_FD_COUNT: return -EBADF;
    case LT_E_RESERVED_NONZERO: return -EINVAL;
    case LT_E_UNKNOWN_FLAGS: return -EINVAL;
    case LT_E_BAD_CLASS: return -EINVAL;
    case LT_E_BAD_OP: return -EOPNOTSUPP;
    case LT_E_BAD_ID: return -EINVAL;
    case LT_E_DUPLICATE_ID: return -EINVAL;
    case LT_E_BAD_VALUE: return -EINVAL;
    case LT_E_ZERO_LENGTH: return -EINVAL;
    case LT_E_RANGE_OVERFLOW: return -EOVERFLOW;
    case LT_E_OUT_OF_RANGE: return -ERANGE;
    case LT_E_MISALIGNED: return -EINVAL;
    case LT_E_BATCH_EMPTY: return -EINVAL;
    case LT_E_BATCH_TOO_LARGE: return -E2BIG;
    case LT_E_NAME_UNTERMINATED: return -ENAMETOOLONG;
    case LT_E_NAME_EMPTY: return -EINVAL;
    case LT_E_NAME_BAD_CHAR: return -EILSEQ;
    case LT_E_NAME_PADDING: return -EINVAL;
    case LT_E_NO_HELLO: return -ENOTCONN;
    case LT_E_NOT_FOUND: return -ENOENT;
    case LT_E_STALE_ID: return -ESTALE;
    case LT_E_NOT_OWNER: return -EPERM;
    case LT_E_BUSY: return -EBUSY;
    case LT_E_BUDGET: return -ENOSPC;
    case LT_E_MEMLOCK: return -ENOMEM;
    case LT_E_LIMIT: return -EMFILE;
    case LT_E_SEGMENT_UNSEALED: return -EPERM;
    case LT_E_SEGMENT_SIZE: return -EINVAL;
    case LT_E_UNSUPPORTED: return -EOPNOTSUPP;
    case LT_E_CHECKSUM_MISMATCH: return -EBADMSG;
    case LT_E_GPU_FAULT: return -EIO;
    case LT_E_SHUTTING_DOWN: return -ESHUTDOWN;
    case LT_E_SYSTEM: return -EIO;
    case LT_E_LAUNCH_FAILED: return -ENOEXEC;
    case LT_E_SEGMENT_GONE: return -EFAULT;
    default: return -EPROTO;
    }
    /* clang-format on */
}

/* The code for a negative errno returned by a C API of lease/, gpu/ or
 * stagingd, for a refusal that did not come with its own struct lt_failure.
 * The inverse of lt_error_errno() for the service codes whose errno says
 * what happened; every other errno (0 excepted) is LT_E_SYSTEM, whose ERROR
 * carries the errno itself. Deliberately not inverted:
 *   -ENOMEM: an allocation failure is not RLIMIT_MEMLOCK; a refusal for lack
 *            of lockable memory sets LT_E_MEMLOCK itself;
 *   -ENOSPC: a driver's resource shortage is not the pin budget; the budget
 *            check sets LT_E_BUDGET itself;
 *   framing and field errnos (-EBADF, -EPROTO, -EBADMSG, ...): a local call
 *            failing with them says nothing about the peer's bytes.
 * Several errnos share a code: -EALREADY (released: gone, as a stale id)
 * with -ESTALE, -EAGAIN (not done yet) with -EBUSY, -EDQUOT with -EMFILE. */
static inline uint32_t lt_error_from_errno(int neg_errno)
{
    /* clang-format off */
    switch (neg_errno) {
    case 0: return LT_OK;
    case -ENOENT: return LT_E_NOT_FOUND;
    case -ESTALE: return LT_E_STALE_ID;
    case -EALREADY: return LT_E_STALE_ID;
    case -EPERM: return LT_E_NOT_OWNER;
    case -EBUSY: return LT_E_BUSY;
    case -EAGAIN: return LT_E_BUSY;
    case -EDQUOT: return LT_E_LIMIT;
    case -EMFILE: return LT_E_LIMIT;
    case -ERANGE: return LT_E_OUT_OF_RANGE;
    case -EINVAL: return LT_E_BAD_VALUE;
    case -ESHUTDOWN: return LT_E_SHUTTING_DOWN;
    case -EOPNOTSUPP: return LT_E_UNSUPPORTED; /* also -ENOTSUP on Linux */
    case -EIO: return LT_E_GPU_FAULT;
    default: return LT_E_SYSTEM;
    }
    /* clang-format on */
}

/* Room for a failure's words. Longer than an ERROR message's text
 * (LT_ERROR_MSG_LEN in proto.h), so logs and C callers keep the whole
 * sentence; the agent sends the first LT_ERROR_MSG_LEN - 1 bytes. */
#define LT_FAILURE_MSG_LEN 256

/* Why a call was refused. Not a wire struct, but fixed-width like one so it
 * can be copied into an ERROR message field by field. */
struct lt_failure {
    uint32_t code;                    /* enum lt_error, never LT_OK once set */
    int32_t err;                      /* the negative errno the call returned */
    char message[LT_FAILURE_MSG_LEN]; /* NUL-terminated: what was expected, what was found */
};

LT_ASSERT_FIELD(lt_failure, code, 0);
LT_ASSERT_FIELD(lt_failure, err, 4);
LT_ASSERT_FIELD(lt_failure, message, 8);
LT_ASSERT_SIZE(lt_failure, 8 + LT_FAILURE_MSG_LEN);

#if defined(__GNUC__)
#define LT__PRINTF(fmt, first) __attribute__((format(printf, fmt, first)))
#else
#define LT__PRINTF(fmt, first)
#endif

/* lt_failure_set with a va_list. */
static inline int lt_failure_vset(struct lt_failure *why_p, uint32_t code, int err, const char *fmt,
                                  va_list ap) LT__PRINTF(4, 0);

static inline int lt_failure_vset(struct lt_failure *why_p, uint32_t code, int err, const char *fmt,
                                  va_list ap)
{
    if (err == 0)
        err = lt_error_errno(code);
    if (why_p) {
        why_p->code = code;
        why_p->err = (int32_t)err;
        if (vsnprintf(why_p->message, sizeof why_p->message, fmt, ap) < 0)
            why_p->message[0] = '\0';
    }
    return err;
}

/* Fills *@why_p (NULL: nothing is written) with @code, @err (0: the errno
 * lt_error_errno gives @code) and a printf-formatted message, and returns
 * that errno, so a refusal reads `return lt_failure_set(why_p, ...);`. */
static inline int lt_failure_set(struct lt_failure *why_p, uint32_t code, int err, const char *fmt,
                                 ...) LT__PRINTF(4, 5);

static inline int lt_failure_set(struct lt_failure *why_p, uint32_t code, int err, const char *fmt,
                                 ...)
{
    va_list ap;
    va_start(ap, fmt);
    err = lt_failure_vset(why_p, code, err, fmt, ap);
    va_end(ap);
    return err;
}

LT_EXTERN_C_END

#endif /* LEASE_TYPES_ERRORS_H */
