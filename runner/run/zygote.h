/* start: fork, xmprun's side (zygote.c): the zygote started in its cgroup, each worker forked
 * from it, its messages and its end. Called by supervise.c and group.c. */
#ifndef XMP_ZYGOTE_H
#define XMP_ZYGOTE_H

#include "runner/run/supervisor.h"

/* Starts `command` as the zygote in its cgroup, with its socket, and watches it. */
int xmp_zygote_start(struct xmp_supervisor *sv, struct xmp_error *err);
/* Has the zygote fork one worker: sends what the child needs, waits for its pid. Fills out as
 * xmp_spawn does; the worker then waits at its start gate for xmp_spawn_start. */
int xmp_zygote_fork_worker(struct xmp_supervisor *sv, const struct xmp_spawn_args *args,
                           const struct xmp_worker *w, struct xmp_spawned *out,
                           struct xmp_error *err);
/* Reads what the zygote sent (HELLO) when its socket is readable. */
void xmp_zygote_on_message(struct xmp_supervisor *sv);
/* Takes the zygote's exit status (siginfo from waitid) into sv->zy.rep. */
void xmp_zygote_finish(struct xmp_supervisor *sv, const siginfo_t *si);
/* Sends DONE. */
void xmp_zygote_send_done(struct xmp_supervisor *sv, bool ok);
/* The client's paths (sv->client_python, sv->client_lib) and the environment additions every
 * worker gets (PYTHONPATH, XMPRUN_CLIENT_LIB, XMPRUN_SERIAL_LOCK); env is replaced. */
char **xmp_zygote_client_env(struct xmp_supervisor *sv, char **env);
void xmp_zygote_find_client(struct xmp_supervisor *sv);

/* Frees what the zygote's state holds (its descriptors, paths, report, output): at the end of
 * the run, whether it was started or not. */
void xmp_zygote_free(struct xmp_zygote *zy);

#endif
