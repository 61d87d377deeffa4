/* The table of messages by which gloo, NCCL and the c10d store say that a peer went away, and the
 * peer address they name. Each entry has a unit test whose input is a real run's output
 * (tests/unit/test_peer.c says where each came from). */
#define _GNU_SOURCE
#include "runner/report/peer.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

/* Messages that can also come from unrelated code (an HTTP download's "Connection reset by peer")
 * need a second string naming the library. */
const struct xmp_peer_pattern xmp_peer_patterns[] = {
    {"gloo-closed", "Connection closed by peer", "gloo/transport", XMP_PEER_LOST},
    {"gloo-reset", "Connection reset by peer", "gloo/transport", XMP_PEER_LOST},
    {"gloo-timeout", "Timed out waiting", "gloo/transport", XMP_PEER_TIMEOUT},
    {"nccl-closed", "Connection closed by remote peer", NULL, XMP_PEER_LOST},
    {"nccl-reset", "Connection reset by peer", "socketProgress", XMP_PEER_LOST},
    {"nccl-remote-error", "ncclRemoteError", NULL, XMP_PEER_LOST},
    {"nccl-ib-completion", "Got completion from peer", "NET/IB", XMP_PEER_LOST},
    {"nccl-watchdog", "Watchdog caught collective operation timeout", NULL, XMP_PEER_TIMEOUT},
    {"store-connect", "The client socket has timed out after", NULL, XMP_PEER_UNREACHABLE},
    {"store-socket-timeout", "RuntimeError: Socket Timeout", NULL, XMP_PEER_JOIN},
    {"store-clients", "waiting for clients", "Timed out after", XMP_PEER_JOIN},
};
const size_t xmp_peer_n_patterns = sizeof(xmp_peer_patterns) / sizeof(xmp_peer_patterns[0]);

static void
copy_token(const char *start, size_t len, char *out, size_t size)
{
    if (len >= size)
        len = size - 1;
    memcpy(out, start, len);
    out[len] = '\0';
}

static bool
is_host_char(char c)
{
    return isalnum((unsigned char)c) || c == '.' || c == '-' || c == ':' || c == '_';
}

/* The peer a line names, in the forms the libraries print: NCCL's "host<port>", the store's
 * "connect to (host, port)", gloo's "[host]:port" (not its "[./gloo/...cc:598]" source
 * location), or a bare IPv4 address. */
static void
find_address(const char *line, char *out, size_t size)
{
    const char *p;

    out[0] = '\0';
    for (p = strchr(line, '<'); p != NULL; p = strchr(p + 1, '<')) {
        const char *start = p;
        if (!isdigit((unsigned char)p[1]))
            continue;
        while (start > line && is_host_char(start[-1]))
            start--;
        if (start < p) {
            copy_token(start, (size_t)(p - start), out, size);
            return;
        }
    }
    if ((p = strstr(line, "connect to (")) != NULL) {
        p += strlen("connect to (");
        copy_token(p, strcspn(p, ", )"), out, size);
        return;
    }
    for (p = strchr(line, '['); p != NULL; p = strchr(p + 1, '[')) {
        size_t len = strcspn(p + 1, "]");
        if (p[1 + len] == ']' && len > 0 && memchr(p + 1, '/', len) == NULL &&
            (isdigit((unsigned char)p[1]) || memchr(p + 1, ':', len) != NULL) &&
            memchr(p + 1, ' ', len) == NULL) {
            copy_token(p + 1, len, out, size);
            return;
        }
    }
    for (p = line; *p != '\0'; p++) {
        unsigned a, b, c, d;
        int n = 0;
        if (!isdigit((unsigned char)*p) ||
            (p > line && (isdigit((unsigned char)p[-1]) || p[-1] == '.')))
            continue;
        if (sscanf(p, "%3u.%3u.%3u.%3u%n", &a, &b, &c, &d, &n) == 4 && a < 256 && b < 256 &&
            c < 256 && d < 256) {
            copy_token(p, (size_t)n, out, size);
            return;
        }
    }
}

const struct xmp_peer_pattern *
xmp_peer_find(char *const *lines, size_t n, char *addr, size_t size)
{
    addr[0] = '\0';
    for (size_t i = n; i-- > 0;) {
        if (lines[i] == NULL)
            continue;
        for (size_t k = 0; k < xmp_peer_n_patterns; k++) {
            const struct xmp_peer_pattern *p = &xmp_peer_patterns[k];
            if (strstr(lines[i], p->needle) == NULL ||
                (p->also != NULL && strstr(lines[i], p->also) == NULL))
                continue;
            find_address(lines[i], addr, size);
            return p;
        }
    }
    return NULL;
}

void
xmp_peer_describe(const struct xmp_peer_pattern *p, const char *addr, bool multi_node, char *buf,
                  size_t size)
{
    const char *what = "lost its connection to a peer";
    const char *hint = "the job probably failed on another node first; see that node's report";
    char where[96] = "";

    switch (p->kind) {
    case XMP_PEER_LOST:
        break;
    case XMP_PEER_TIMEOUT:
        what = "timed out waiting for a peer";
        break;
    case XMP_PEER_JOIN:
        what = "timed out waiting for the other workers to join";
        hint = "a node may not have started, or failed first; see the other nodes' reports";
        break;
    case XMP_PEER_UNREACHABLE:
        what = "could not reach the rendezvous store";
        hint = "the master node's job may not have started, or failed first; see its report";
        break;
    }
    if (addr != NULL && addr[0] != '\0')
        snprintf(where, sizeof(where), " (%s)", addr);
    snprintf(buf, size, "%s%s%s%s", what, where, multi_node ? ": " : "", multi_node ? hint : "");
}
