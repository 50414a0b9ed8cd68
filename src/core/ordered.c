/* ordered.c: the canonical-order sum's cut and plan (ordered.h). */
#include "core/ordered.h"

void dp_shard(size_t n, int w, int k, size_t *lo, size_t *len) {
    *lo = n * (size_t)k / (size_t)w;
    *len = n * (size_t)(k + 1) / (size_t)w - *lo;
}

dp_ordered_xfer dp_ordered_scatter(size_t n, int w, int me, int peer, size_t slot) {
    dp_ordered_xfer x;
    size_t mine_lo;
    dp_shard(n, w, peer, &x.send_lo, &x.send_len);
    dp_shard(n, w, me, &mine_lo, &x.recv_len);
    x.recv_lo = slot * (size_t)peer;
    return x;
}

dp_ordered_xfer dp_ordered_gather(size_t n, int w, int me, int peer, int root) {
    dp_ordered_xfer x;
    dp_shard(n, w, me, &x.send_lo, &x.send_len);
    dp_shard(n, w, peer, &x.recv_lo, &x.recv_len);
    if (root >= 0 && peer != root) x.send_len = 0;
    if (root >= 0 && me != root) x.recv_len = 0;
    return x;
}
