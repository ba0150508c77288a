/* The capture store's record format (capture_store.c: "record format"), encoded once on the
 * submitting thread straight into the store's queue, and parsed for the index without
 * allocating. Internal to ops/capture_store.c and its tests. Pure. */
#ifndef FY_OPS_CAPTURE_RECORD_H
#define FY_OPS_CAPTURE_RECORD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ops/capture_store.h"

#define FY__CS_REC_MAGIC "FYR1"
#define FY__CS_REC_FIXED (8 + 8 + 8 + 4 * 6 + 8 + 8 + 4 + 4)
#define FY__CS_REC_MAX (256u << 20) /* a record longer than this is corrupt */
#define FY__CS_REC_ID_OFF 8         /* the u64 id's offset in a record */

/* Header names whose values are stored as "[redacted]", precompiled so that the check for a
   name that is not listed (nearly all of them) costs a bit test and a byte lookup, not a
   case-blind compare with every listed name. */
typedef struct fy__cs_hred {
    uint64_t lens;            /* bit L: a listed name has L bytes (L < 63); bit 63: one is longer */
    uint8_t first[32];        /* bit set of the listed names' first bytes (lowercase) */
    const char *const *names; /* borrowed, lowercase, NULL-terminated */
} fy__cs_hred_t;

/* Compile `names` (lowercase, NULL-terminated, borrowed for the table's life) into t. */
void fy__cs_hred_init(fy__cs_hred_t *t, const char *const *names);
/* Is the (any case) header name listed? */
bool fy__cs_hred_slow(const fy__cs_hred_t *t, fy_str_t name);
static inline bool fy__cs_hred_match(const fy__cs_hred_t *t, fy_str_t name)
{
    size_t b = name.len < 63 ? name.len : 63;
    if (!(t->lens >> b & 1) || !name.len) return false;
    unsigned char c = (unsigned char)fy_lower(name.p[0]);
    if (!(t->first[c >> 3] >> (c & 7) & 1)) return false;
    return fy__cs_hred_slow(t, name);
}

/* Most strings of a record are short (names, values of a few bytes): copied inline, not by a
   call to memcpy each (callgrind: a tenth of the capture cost was memcpy calls), and through
   one jump on the length rather than a chain of size tests (~7 instructions a string less). */
static inline void fy__cs_copy(char *d, const char *s, size_t n)
{
    switch (n) {
    case 0:
        return;
    case 1:
        d[0] = s[0];
        return;
    case 2 ... 3: {
        uint16_t a, b;
        memcpy(&a, s, 2);
        memcpy(&b, s + n - 2, 2);
        memcpy(d, &a, 2);
        memcpy(d + n - 2, &b, 2);
        return;
    }
    case 4 ... 7: {
        uint32_t a, b;
        memcpy(&a, s, 4);
        memcpy(&b, s + n - 4, 4);
        memcpy(d, &a, 4);
        memcpy(d + n - 4, &b, 4);
        return;
    }
    case 8 ... 15: {
        uint64_t a, b;
        memcpy(&a, s, 8);
        memcpy(&b, s + n - 8, 8);
        memcpy(d, &a, 8);
        memcpy(d + n - 8, &b, 8);
        return;
    }
    case 16 ... 32: {
        char a[16], b[16];
        memcpy(a, s, 16);
        memcpy(b, s + n - 16, 16);
        memcpy(d, a, 16);
        memcpy(d + n - 16, b, 16);
        return;
    }
    default:
        memcpy(d, s, n);
    }
}

/* What the store changes in a flow when encoding it: bodies cut to the cap and JSON-redacted,
   WebSocket text messages JSON-redacted (meta_values: NULL, or n_meta values used instead of
   f->meta[i].value), header values redacted by hred (NULL: none). */
typedef struct fy__cs_rec_edit {
    fy_str_t req_body, res_body;
    unsigned flags;
    const fy_str_t *meta_values;
    const fy__cs_hred_t *hred;
} fy__cs_rec_edit_t;

/* Bytes the record of f with edit e takes (the tests check the encoder against it). */
size_t fy__cs_rec_size(const fy_cs_flow_t *f, const fy__cs_rec_edit_t *e);
/* Encode the record of f with edit e and `id` at dst, in at most `room` bytes: its length
   (fy__cs_rec_size), or 0 when it needs more room (dst[0..room) is then scratch: encode again
   into a larger buffer). ct: where the first response Content-Type value is in the record
   (offset, length; 0, 0 when there is none), for fy__cs_rec_index_encoded. */
size_t fy__cs_rec_encode(char *dst, size_t room, const fy_cs_flow_t *f, const fy__cs_rec_edit_t *e,
                         uint64_t id, uint32_t ct[2]);

/* What the index keeps of a record: e's strings point into the record (not NUL-terminated:
   the lengths are in *lens, method, host, target, ctype; the first three in that order, as the
   record holds them, which the index relies on to copy them as one run). 0, or -EIO when the record
   (whole, magic and length included) is not a valid one; the same records as fy__cs_rec_decode. */
int fy__cs_rec_index(const char *p, size_t n, fy_cs_entry_t *e, fy_str_t str[4]);
/* The same for a record fy__cs_rec_encode wrote (trusted: not checked), with its ct. */
void fy__cs_rec_index_encoded(const char *p, const uint32_t ct[2], fy_cs_entry_t *e,
                              fy_str_t str[4]);
/* Decode a whole record held in buf (out->buf = buf on success; the header arrays are
   malloc'd). 0 or -EIO. */
int fy__cs_rec_decode(char *buf, size_t n, fy_cs_loaded_t *out);

#endif
