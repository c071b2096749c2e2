/* Bucket assignment (see bucket.h). */
#include "model/bucket.h"

int bucket_assign(const size_t *counts, int nparams, size_t elem_bytes, size_t first_cap,
                  size_t cap, bucket *out, int max)
{
    size_t end = 0;
    for (int i = 0; i < nparams; i++) end += counts[i];
    int nb = 0;
    size_t bytes = 0, hi = end, pos = end;
    int top = nparams - 1;
    for (int i = nparams - 1; i >= 0; i--) {
        pos -= counts[i];
        bytes += counts[i] * elem_bytes;
        if (bytes >= (nb == 0 ? first_cap : cap) || i == 0) {
            if (nb >= max) return -1;
            if (out) out[nb] = (bucket){.lo = pos, .hi = hi, .first_param = i, .nparams = top - i + 1};
            nb++;
            hi = pos;
            top = i - 1;
            bytes = 0;
        }
    }
    return nb;
}

int bucket_model_params(model_shape s, size_t *counts, int max)
{
    int n = 0;
    for (int l = 0; l <= s.layers && n + 2 <= max; l++) {
        size_t out = l < s.layers ? (size_t)s.width : (size_t)s.classes;
        counts[n++] = (size_t)s.width * out;
        counts[n++] = out;
    }
    return n;
}

int bucket_model_assign(model_shape s, double first_mb, double mb, bucket *out, int max)
{
    size_t counts[2 * BUCKET_MAX_LAYERS + 2];
    int np = bucket_model_params(s, counts, (int)(sizeof counts / sizeof counts[0]));
    return bucket_assign(counts, np, sizeof(float), (size_t)(first_mb * 1048576.0),
                         (size_t)(mb * 1048576.0), out, max);
}
