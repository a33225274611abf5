/* core/reduce.h - elementwise reduction kernels for every tr_dtype and tr_redop: the
 * arithmetic shared by the object-store allreduce and the collective backends.
 * float16 and bfloat16 are computed in float32 and rounded to nearest even.
 * Pure functions; thread safety: any thread.
 */
#ifndef TR_CORE_REDUCE_H
#define TR_CORE_REDUCE_H

#include <stddef.h>

#include "troupe/troupe.h"

/* Bytes per element of dtype (tr_dtype_size); 0 for an unknown dtype. */
size_t tr__dtype_size(tr_dtype dtype);

/* acc[i] = acc[i] op in[i] for count elements. TR_AVG accumulates a sum (finish with
 * tr__reduce_finish). Returns 0 or TR_EINVAL (unknown dtype or op). */
int tr__reduce(void *acc, const void *in, size_t count, tr_dtype dtype, tr_redop op);
/* out[i] = a[i] op b[i], also stored in out2[i] unless out2 is NULL (one pass where a
 * result goes to two places). out and out2 may each be exactly a or b, never partly
 * overlap one. */
int tr__reduce_to(void *out, void *out2, const void *a, const void *b, size_t count, tr_dtype dtype,
                  tr_redop op);
/* For TR_AVG: divides by n (integers truncate toward zero). Otherwise a no-op. */
int tr__reduce_finish(void *acc, size_t count, tr_dtype dtype, tr_redop op, int n);

#endif
