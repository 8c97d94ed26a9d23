/* What a ring slot's sequence word says of a shard's chunks (plain C, no
 * CUDA: the CPU tests hold it to the chunk-by-chunk rule). A shard's chunks
 * first_seq .. first_seq + nseq - 1 sit in slot seq % nslots, so one word
 * decides the whole progression s0, s0 + n, ... of them in its slot, and a
 * shard takes O(min(nseq, nslots)) loads however many chunks it has. */
#ifndef GPU_RING_WORDS_H
#define GPU_RING_WORDS_H

#include <stdbool.h>
#include <stdint.h>

/* The last chunk before @end in the slot whose first chunk is @s0 (s0 < end)
 * of a ring of @n slots. */
static inline uint64_t cx_slot_last_seq(uint64_t s0, uint64_t end, uint64_t n)
{
    return s0 + (end - 1 - s0) / n * n;
}

/* Whether a chunk s0, s0 + n, ... before @end is not stored by word @v
 * (chunk s is stored when (int64_t)(v - s) >= 0; @loaded false, a load that
 * faulted: none is); if so the first such in *@seq_p. */
static inline bool cx_slot_first_unstored(uint64_t v, bool loaded, uint64_t s0, uint64_t end,
                                          uint64_t n, uint64_t *seq_p)
{
    if (!loaded || (int64_t)(v - s0) < 0) {
        *seq_p = s0;
        return true;
    }
    const uint64_t stored = (v - s0) / n; /* chunks s0 .. s0 + stored * n are */
    if (stored >= (end - 1 - s0) / n)
        return false;
    *seq_p = s0 + (stored + 1) * n;
    return true;
}

#endif /* GPU_RING_WORDS_H */
