/* Recognising a worker that failed because a peer went away (gloo, NCCL, the c10d store), from
 * its stderr tail: on a multi-node job the real cause is then on another node. */
#ifndef XMP_PEER_H
#define XMP_PEER_H

#include <stdbool.h>
#include <stddef.h>

enum xmp_peer_kind {
    XMP_PEER_LOST,        /* a peer's connection closed or reset, or NCCL saw a remote error */
    XMP_PEER_TIMEOUT,     /* a collective or a receive waited for a peer past its timeout */
    XMP_PEER_JOIN,        /* the rendezvous waited for workers that never joined */
    XMP_PEER_UNREACHABLE, /* the rendezvous store (the master) could not be reached */
};

/* One known message: a line of the tail that contains needle (and also, when set) matches. */
struct xmp_peer_pattern {
    const char *name; /* "gloo-closed": for tests and notes */
    const char *needle;
    const char *also; /* NULL, or a second string the line must contain */
    enum xmp_peer_kind kind;
};

extern const struct xmp_peer_pattern xmp_peer_patterns[];
extern const size_t xmp_peer_n_patterns;

/* The pattern that the newest matching line of the tail matches, or NULL. addr gets the peer's
 * address when the line names one ("10.231.77.2", "node2"), else "". */
const struct xmp_peer_pattern *xmp_peer_find(char *const *lines, size_t n, char *addr, size_t size);

/* The words for a worker with that match: "lost its connection to a peer (10.231.77.2): the job
 * probably failed on another node first; see that node's report" (the hint only when
 * multi_node). */
void xmp_peer_describe(const struct xmp_peer_pattern *p, const char *addr, bool multi_node,
                       char *buf, size_t size);

#endif
