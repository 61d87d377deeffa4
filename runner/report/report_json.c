/* The exit report as JSON (SPEC.md section 5, schemas/report.schema.json): each worker, the
 * zygote, the root cause, the attempts; and its atomic write. The rules that decide the root
 * cause, the outcome and the exit status are report.c's. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "runner/report/report.h"

#include "isolate/cleanup.h"
#include "isolate/file.h"
#include "runner/report/gpu.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef XMP_VERSION
#define XMP_VERSION "0.0.0"
#endif

/* Rounds a non-negative value to 1/scale (milliseconds, microseconds), without libm. */
static double
round_to(double v, double scale)
{
    return v > 0 ? (double)(int64_t)(v * scale + 0.5) / scale : 0.0;
}

static json_t *
time_json(const struct timespec *ts)
{
    struct tm tm;
    char buf[64];

    if (ts->tv_sec == 0 && ts->tv_nsec == 0)
        return json_null();
    gmtime_r(&ts->tv_sec, &tm);
    snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts->tv_nsec / 1000000);
    return json_string(buf);
}

static json_t *
str_or_null(const char *s)
{
    return s != NULL && s[0] != '\0' ? json_string(s) : json_null();
}

static json_t *
int_or_null(int64_t v)
{
    return v >= 0 ? json_integer(v) : json_null();
}

/* Length of the valid UTF-8 sequence at p (1-4), or 0 if it is not one. */
static size_t
utf8_seq(const unsigned char *p)
{
    size_t n;
    unsigned cp;

    if (p[0] < 0x80)
        return 1;
    if (p[0] >= 0xc2 && p[0] <= 0xdf)
        n = 2, cp = p[0] & 0x1f;
    else if (p[0] >= 0xe0 && p[0] <= 0xef)
        n = 3, cp = p[0] & 0x0f;
    else if (p[0] >= 0xf0 && p[0] <= 0xf4)
        n = 4, cp = p[0] & 0x07;
    else
        return 0;
    for (size_t i = 1; i < n; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (p[i] & 0x3f);
    }
    /* No overlong forms, surrogates or code points past U+10FFFF. */
    if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
        (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return n;
}

/* A JSON string of a worker's output line: bytes that are not UTF-8 (a binary blob, a latin-1
 * message) become U+FFFD, so the rest of the line survives. */
static json_t *
utf8_json(const char *text)
{
    const unsigned char *p = (const unsigned char *)text;
    size_t len = strlen(text), o = 0;
    char *copy;
    json_t *j = json_string(text);

    if (j != NULL)
        return j;
    copy = malloc(len * 3 + 1);
    if (copy == NULL)
        return json_string("");
    for (size_t i = 0; i < len;) {
        size_t n = utf8_seq(p + i);
        if (n == 0) {
            memcpy(copy + o, "\xef\xbf\xbd", 3);
            o += 3;
            i++;
        } else {
            memcpy(copy + o, p + i, n);
            o += n;
            i += n;
        }
    }
    copy[o] = '\0';
    j = json_string(copy);
    free(copy);
    return j != NULL ? j : json_string("");
}

json_t *
xmp_report_text_json(const char *text)
{
    return utf8_json(text);
}

static json_t *
worker_json(const struct xmp_worker_report *w)
{
    json_t *o = json_object(), *devs = json_array(), *tail = json_array();
    char sig[32];

    for (size_t i = 0; w->devices != NULL && w->devices[i] != NULL; i++)
        json_array_append_new(devs, json_string(w->devices[i]));
    for (size_t i = 0; i < w->n_tail; i++)
        json_array_append_new(tail, utf8_json(w->stderr_tail[i]));
    xmp_signal_name(w->signal, sig, sizeof(sig));

    json_object_set_new(o, "rank", json_integer(w->rank));
    json_object_set_new(o, "local_rank", json_integer(w->local_rank));
    json_object_set_new(o, "pid", w->pid > 0 ? json_integer(w->pid) : json_null());
    json_object_set_new(o, "devices", devs);
    json_object_set_new(o, "cpuset", str_or_null(w->cpuset));
    json_object_set_new(o, "started_at", time_json(&w->started_at));
    json_object_set_new(o, "ended_at", time_json(&w->ended_at));
    json_object_set_new(o, "state", json_string(xmp_worker_state_name(w->state)));
    json_object_set_new(o, "exit_code", int_or_null(w->exit_code));
    json_object_set_new(o, "signal", w->signal > 0 ? json_string(sig) : json_null());
    json_t *memory =
        json_pack("{s:o, s:o, s:o, s:o}", "limit_bytes", int_or_null(w->memory_limit), "peak_bytes",
                  int_or_null(w->memory_peak), "oom_kills", int_or_null(w->oom_kills), "oom_at",
                  w->oom_at != NULL ? json_string(w->oom_at) : json_null());
    if (w->memory_sampled || w->memory_unmeasured[0] != '\0') {
        /* The watchdog's measure, not a cgroup's: how often, what it found, and why not. */
        json_object_set_new(memory, "measured", json_string("samples"));
        json_object_set_new(memory, "sample_period_ms", json_integer(w->memory_period_ms));
        json_object_set_new(memory, "stopped_at",
                            w->memory_over != NULL ? json_string(w->memory_over) : json_null());
        if (w->memory_over != NULL)
            json_object_set_new(memory, "used_bytes", json_integer(w->memory_used));
        if (w->memory_unmeasured[0] != '\0')
            json_object_set_new(memory, "not_measured", utf8_json(w->memory_unmeasured));
    }
    json_object_set_new(o, "memory", memory);
    json_object_set_new(o, "pids",
                        json_pack("{s:o, s:o}", "limit", int_or_null(w->pids_limit), "hits",
                                  int_or_null(w->pids_hits)));
    json_object_set_new(o, "cpu",
                        json_pack("{s:f, s:f}", "user_s", round_to(w->user_s, 1e6), "system_s",
                                  round_to(w->system_s, 1e6)));
    json_object_set_new(o, "stderr_tail", tail);
    json_object_set_new(o, "error_file",
                        w->error_file != NULL ? json_incref(w->error_file) : json_null());
    if (w->error_file_note[0] != '\0')
        json_object_set_new(o, "error_file_note", utf8_json(w->error_file_note));
    if (w->state == XMP_WORKER_FAILED_TO_START)
        json_object_set_new(o, "start_error", str_or_null(w->start_error));
    if (w->log_error[0] != '\0')
        json_object_set_new(o, "log_error", json_string(w->log_error));
    if (w->stacks != NULL) {
        json_t *st = xmp_stacks_to_json(w->stacks);
        json_object_set_new(st, "file", str_or_null(w->stacks_file));
        json_object_set_new(o, "stacks", st);
    }
    if (w->state == XMP_WORKER_UNKILLABLE) {
        const struct xmp_unkillable *u = &w->unkillable;
        json_t *stack = u->n_stack > 0 ? json_array() : json_null();
        for (size_t i = 0; i < u->n_stack; i++)
            json_array_append_new(stack, utf8_json(u->stack[i]));
        json_object_set_new(o, "unkillable",
                            json_pack("{s:o, s:o, s:o, s:o}", "state", str_or_null(u->state),
                                      "wchan", str_or_null(u->wchan), "kernel_stack", stack,
                                      "cgroup", str_or_null(u->cgroup)));
    }
    if (w->n_faults > 0) {
        json_t *faults = json_array();
        for (size_t i = 0; i < w->n_faults; i++) {
            const struct xmp_gpu_fault *f = &w->faults[i];
            const char *name = xmp_gpu_xid_name(f->xid);
            json_array_append_new(faults,
                                  json_pack("{s:i, s:o, s:s, s:s, s:o, s:o}", "xid", f->xid, "name",
                                            name != NULL ? json_string(name) : json_null(),
                                            "device", f->device, "pci", f->pci, "at",
                                            time_json(&f->at), "text", utf8_json(f->text)));
        }
        json_object_set_new(o, "gpu_faults", faults);
    }
    if (w->n_gpu_memory > 0) {
        json_t *mem = json_array();
        for (size_t i = 0; i < w->n_gpu_memory; i++) {
            const struct xmp_gpu_memory *m = &w->gpu_memory[i];
            json_array_append_new(mem, json_pack("{s:s, s:o, s:o}", "device", m->device,
                                                 "peak_bytes", int_or_null(m->peak), "total_bytes",
                                                 int_or_null(m->total)));
        }
        json_object_set_new(o, "gpu_memory", mem);
    }
    return o;
}

static json_t *
cause_json(enum xmp_cause_kind kind, int rank, const char *reason, const char *message)
{
    if (kind == XMP_CAUSE_NONE)
        return json_null();
    return json_pack("{s:o, s:s, s:s}", "rank", rank >= 0 ? json_integer(rank) : json_null(),
                     "reason", reason, "message", message);
}

json_t *
xmp_report_to_json(const struct xmp_report *r)
{
    json_t *o = json_object(), *workers = json_array(), *attempts = json_array();
    double duration = (double)(r->ended_mono_ns - r->started_mono_ns) / 1e9;

    for (size_t i = 0; i < r->n_workers; i++)
        json_array_append_new(workers, worker_json(&r->workers[i]));
    for (size_t i = 0; i < r->n_attempts; i++) {
        const struct xmp_attempt *a = &r->attempts[i];
        json_t *c = cause_json(a->kind, a->rank, a->reason, a->message);
        json_t *at = json_pack("{s:i, s:o, s:i}", "restart", a->restart, "root_cause",
                               c != NULL ? c : json_null(), "exit_code", a->exit_code);
        json_array_append_new(attempts, at);
    }

    json_object_set_new(o, "schema", json_string("xmprun.report/v1"));
    json_object_set_new(o, "xmprun_version", json_string(XMP_VERSION));
    json_object_set_new(o, "job",
                        json_pack("{s:o, s:o, s:o, s:o, s:i, s:i, s:i, s:o, s:o, s:o}", "name",
                                  str_or_null(r->job_name), "id", str_or_null(r->job_id), "spec",
                                  str_or_null(r->spec_path), "host", str_or_null(r->host),
                                  "node_rank", r->node_rank, "nnodes", r->nnodes, "world_size",
                                  r->world_size, "master_addr", str_or_null(r->master_addr),
                                  "master_port",
                                  int_or_null(r->master_port > 0 ? r->master_port : -1), "run_id",
                                  str_or_null(r->run_id)));
    json_object_set_new(o, "started_at", time_json(&r->started_at));
    json_object_set_new(o, "ended_at", time_json(&r->ended_at));
    json_object_set_new(o, "duration_s", json_real(duration > 0 ? round_to(duration, 1e3) : 0.0));
    json_object_set_new(o, "outcome", json_string(xmp_outcome_name(r->outcome)));
    json_object_set_new(o, "exit_code", json_integer(r->exit_code));
    json_t *paths = json_object();
    for (size_t i = 0; i < r->n_cgroup_paths; i++)
        json_object_set_new(paths, r->cgroup_paths[i].hier, json_string(r->cgroup_paths[i].path));
    json_object_set_new(o, "cgroup",
                        json_pack("{s:s, s:o, s:o, s:o, s:o, s:o}", "mode",
                                  r->cgroup_mode != NULL ? r->cgroup_mode : "none", "manager",
                                  str_or_null(r->cgroup_manager), "scope",
                                  str_or_null(r->cgroup_scope), "path", str_or_null(r->cgroup_path),
                                  "note", str_or_null(r->cgroup_note), "paths", paths));
    json_object_set_new(o, "enforcement",
                        r->enforcement != NULL ? json_incref(r->enforcement) : json_object());
    json_object_set_new(o, "root_cause",
                        cause_json(r->cause, r->cause_rank, r->cause_reason, r->cause_message));
    json_object_set_new(o, "restarts", json_integer(r->restarts));
    json_object_set_new(o, "attempts", attempts);
    json_object_set_new(o, "workers", workers);
    if (r->zygote != NULL) {
        const struct xmp_worker_report *z = r->zygote;
        char sig[32];
        xmp_signal_name(z->signal, sig, sizeof(sig));
        json_object_set_new(
            o, "zygote",
            json_pack("{s:o, s:s, s:o, s:o, s:{s:o, s:o, s:o}}", "pid",
                      z->pid > 0 ? json_integer(z->pid) : json_null(), "state",
                      xmp_worker_state_name(z->state), "exit_code", int_or_null(z->exit_code),
                      "signal", z->signal > 0 ? json_string(sig) : json_null(), "memory",
                      "limit_bytes", int_or_null(z->memory_limit), "peak_bytes",
                      int_or_null(z->memory_peak), "oom_kills", int_or_null(z->oom_kills)));
        json_t *zo = json_object_get(o, "zygote"), *ztail = json_array();
        /* What the summary's zygote row shows, so that `xmprun report` shows it too. */
        if (z->memory_sampled)
            json_object_set_new(json_object_get(zo, "memory"), "measured", json_string("samples"));
        json_object_set_new(zo, "started_at", time_json(&z->started_at));
        json_object_set_new(zo, "ended_at", time_json(&z->ended_at));
        for (size_t i = 0; i < z->n_tail; i++)
            json_array_append_new(ztail, utf8_json(z->stderr_tail[i]));
        json_object_set_new(zo, "stderr_tail", ztail);
        json_object_set_new(zo, "error_file",
                            z->error_file != NULL ? json_incref(z->error_file) : json_null());
        if (z->error_file_note[0] != '\0')
            json_object_set_new(zo, "error_file_note", utf8_json(z->error_file_note));
    }
    return o;
}

int
xmp_report_write_start(const struct xmp_report *r, const char *path, struct xmp_file_commit *c,
                       struct xmp_error *err)
{
    cleanup_free char *text = NULL;
    json_t *doc = xmp_report_to_json(r);

    /* 15 significant digits: durations and CPU times without binary-fraction noise. */
    text = json_dumps(doc, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(15));
    json_decref(doc);
    if (text == NULL)
        return xmp_error_set(err, ENOMEM, "report: encode JSON");
    return xmp_file_write_atomic_start(path, text, true, c, err);
}
