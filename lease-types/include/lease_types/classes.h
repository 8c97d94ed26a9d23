/* lease-types: the three memory classes (DESIGN.md, "The three memory
 * classes"). A segment has one class; a lease asks for its segment's class
 * and may be served STAGED instead when it allows the fallback. */
#ifndef LEASE_TYPES_CLASSES_H
#define LEASE_TYPES_CLASSES_H

#include "lease_types/common.h"

LT_EXTERN_C_BEGIN

/* Wire values (u32 fields named mem_class). 0 is never a class, so a
 * zeroed field is caught. */
enum lt_class {
    LT_CLASS_INVALID = 0,
    LT_CLASS_STAGED = 1, /* pageable shared memfd, no registration */
    LT_CLASS_PINNED = 2, /* cuMemHostRegister(PORTABLE): copy-engine H2D */
    LT_CLASS_MAPPED = 3, /* cuMemHostRegister(PORTABLE|DEVICEMAP): zero-copy, doorbells */
};

/* The highest class: loops run LT_CLASS_STAGED..LT_CLASS_MAX. */
#define LT_CLASS_MAX 3
/* Arrays indexed by class have this many slots; slot 0 is unused and zero. */
#define LT_CLASS_SLOTS 4

LT_STATIC_ASSERT(LT_CLASS_MAX == LT_CLASS_MAPPED && LT_CLASS_SLOTS == LT_CLASS_MAX + 1,
                 "a new class moves LT_CLASS_MAX and LT_CLASS_SLOTS with it");

/* 1 when @c is STAGED, PINNED or MAPPED, else 0. */
static inline int lt_class_is_valid(uint32_t c)
{
    return c >= LT_CLASS_STAGED && c <= LT_CLASS_MAX;
}

/* "STAGED", "PINNED", "MAPPED" (as DESIGN.md and the log lines write them),
 * or "INVALID". Static storage. The one class-name function of the project. */
static inline const char *lt_class_name(uint32_t c)
{
    switch (c) {
    case LT_CLASS_STAGED:
        return "STAGED";
    case LT_CLASS_PINNED:
        return "PINNED";
    case LT_CLASS_MAPPED:
        return "MAPPED";
    default:
        return "INVALID";
    }
}

LT_EXTERN_C_END

#endif /* LEASE_TYPES_CLASSES_H */
