/* Reading a saved exit report (schemas/report.schema.json) back into a struct xmp_report: the
 * inverse of xmp_report_to_json for the fields the summary table and root cause use. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "runner/report/report_load.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *
get_str(json_t *o, const char *key)
{
    return json_string_value(json_object_get(o, key)); /* NULL when absent or not a string */
}

/* An integer field, or dflt when it is null, absent or not an integer. */
static int64_t
get_int(json_t *o, const char *key, int64_t dflt)
{
    json_t *v = json_object_get(o, key);
    return json_is_integer(v) ? (int64_t)json_integer_value(v) : dflt;
}

/* "2026-11-23T12:00:01.250Z" as the report writes it; {0, 0} (unknown) otherwise. */
static struct timespec
get_time(json_t *o, const char *key)
{
    const char *s = get_str(o, key);
    struct tm tm = {0};
    int ms = 0;
    struct timespec ts = {0};

    if (s == NULL || sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d.%3dZ", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                            &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &ms) != 7)
        return ts;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    ts.tv_sec = timegm(&tm);
    ts.tv_nsec = (long)ms * 1000000;
    return ts;
}

static int
parse_outcome(const char *name, enum xmp_outcome *out)
{
    for (int o = XMP_OUTCOME_SUCCEEDED; o <= XMP_OUTCOME_SETUP_FAILED; o++) {
        if (name != NULL && strcmp(name, xmp_outcome_name((enum xmp_outcome)o)) == 0) {
            *out = (enum xmp_outcome)o;
            return 0;
        }
    }
    return -1;
}

static enum xmp_worker_state
parse_state(const char *name)
{
    for (int s = XMP_WORKER_EXITED; s <= XMP_WORKER_MEMORY_LIMIT; s++)
        if (name != NULL && strcmp(name, xmp_worker_state_name((enum xmp_worker_state)s)) == 0)
            return (enum xmp_worker_state)s;
    return XMP_WORKER_RUNNING; /* printed as "running": the report did not say */
}

/* "SIGKILL" -> 9, by the same names the report was written with. */
static int
parse_signal(const char *name)
{
    char buf[32];

    for (int sig = 1; name != NULL && sig < 65; sig++) {
        xmp_signal_name(sig, buf, sizeof(buf));
        if (strcmp(buf, name) == 0)
            return sig;
    }
    return 0;
}

static void
load_cause(json_t *cause, struct xmp_report *r)
{
    const char *reason = get_str(cause, "reason");
    const char *message = get_str(cause, "message");

    r->cause_rank = (int)get_int(cause, "rank", -1);
    if (!json_is_object(cause)) {
        r->cause = XMP_CAUSE_NONE;
        return;
    }
    if (r->cause_rank >= 0)
        r->cause = XMP_CAUSE_WORKER;
    else if (reason != NULL && strcmp(reason, "timeout") == 0)
        r->cause = XMP_CAUSE_TIMEOUT;
    else if (reason != NULL && strcmp(reason, "interrupted") == 0)
        r->cause = XMP_CAUSE_INTERRUPTED;
    else
        r->cause = XMP_CAUSE_SETUP;
    snprintf(r->cause_reason, sizeof(r->cause_reason), "%s", reason != NULL ? reason : "");
    snprintf(r->cause_message, sizeof(r->cause_message), "%s",
             message != NULL ? message : "(no message in the report)");
}

static int
load_workers(json_t *workers, struct xmp_report_file *f, struct xmp_error *err)
{
    struct xmp_report *r = &f->report;
    size_t n = json_array_size(workers), n_devs = 0, at = 0, i;
    json_t *w;

    json_array_foreach(workers, i, w) n_devs += json_array_size(json_object_get(w, "devices")) + 1;
    r->workers = calloc(n + 1, sizeof(*r->workers));
    f->devices = calloc(n_devs + 1, sizeof(*f->devices));
    if (r->workers == NULL || f->devices == NULL)
        return xmp_error_set(err, ENOMEM, "workers");
    r->n_workers = n;
    json_array_foreach(workers, i, w)
    {
        struct xmp_worker_report *wr = &r->workers[i];
        json_t *mem = json_object_get(w, "memory"), *dev;
        size_t k;

        if (!json_is_object(w))
            return xmp_error_set(err, 0, "workers[%zu] is not an object", i);
        wr->rank = (int)get_int(w, "rank", (int64_t)i);
        wr->local_rank = (int)get_int(w, "local_rank", 0);
        wr->pid = (pid_t)get_int(w, "pid", 0);
        wr->devices = &f->devices[at];
        json_array_foreach(json_object_get(w, "devices"), k, dev)
        {
            if (json_is_string(dev))
                f->devices[at++] = json_string_value(dev);
        }
        f->devices[at++] = NULL;
        wr->started_at = get_time(w, "started_at");
        wr->ended_at = get_time(w, "ended_at");
        wr->state = parse_state(get_str(w, "state"));
        wr->exit_code = (int)get_int(w, "exit_code", -1);
        wr->signal = parse_signal(get_str(w, "signal"));
        wr->memory_limit = get_int(mem, "limit_bytes", -1);
        wr->job_memory_limit = -1;
        wr->memory_peak = get_int(mem, "peak_bytes", -1);
        wr->oom_kills = get_int(mem, "oom_kills", -1);
        wr->memory_sampled = get_str(mem, "measured") != NULL;
        wr->stacks = xmp_stacks_from_json(json_object_get(w, "stacks"));
        if (wr->stacks != NULL && get_str(json_object_get(w, "stacks"), "file") != NULL)
            snprintf(wr->stacks_file, sizeof(wr->stacks_file), "%s",
                     get_str(json_object_get(w, "stacks"), "file"));
    }
    return 0;
}

/* start: fork: the zygote's row of the summary (its state, exit, peak memory and time). */
static void
load_zygote(json_t *z, struct xmp_report_file *f)
{
    struct xmp_worker_report *zr = &f->zygote;
    json_t *mem = json_object_get(z, "memory");

    if (!json_is_object(z))
        return;
    zr->rank = -1;
    zr->pid = (pid_t)get_int(z, "pid", 0);
    zr->state = parse_state(get_str(z, "state"));
    zr->exit_code = (int)get_int(z, "exit_code", -1);
    zr->signal = parse_signal(get_str(z, "signal"));
    zr->memory_limit = get_int(mem, "limit_bytes", -1);
    zr->job_memory_limit = -1;
    zr->memory_peak = get_int(mem, "peak_bytes", -1);
    zr->oom_kills = get_int(mem, "oom_kills", -1);
    zr->memory_sampled = get_str(mem, "measured") != NULL;
    zr->started_at = get_time(z, "started_at");
    zr->ended_at = get_time(z, "ended_at");
    f->report.zygote = zr;
}

int
xmp_report_load(const char *path, struct xmp_report_file *f, struct xmp_error *err)
{
    struct xmp_report *r = &f->report;
    json_error_t jerr;
    json_t *doc, *job, *cg, *dur;
    const char *schema;

    memset(f, 0, sizeof(*f));
    f->doc = doc = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (doc == NULL) {
        if (jerr.line <= 0)
            return xmp_error_set(err, 0, "%s: %s", path, jerr.text);
        return xmp_error_set(err, 0, "%s:%d:%d: %s", path, jerr.line, jerr.column, jerr.text);
    }
    schema = get_str(doc, "schema");
    if (schema == NULL || strcmp(schema, "xmprun.report/v1") != 0)
        return xmp_error_set(err, 0, "%s: not an xmprun report (its \"schema\" is not %s)", path,
                             "\"xmprun.report/v1\"");
    if (parse_outcome(get_str(doc, "outcome"), &r->outcome) < 0)
        return xmp_error_set(err, 0, "%s: \"outcome\" is missing or unknown", path);
    if (!json_is_integer(json_object_get(doc, "exit_code")))
        return xmp_error_set(err, 0, "%s: \"exit_code\" is missing", path);
    job = json_object_get(doc, "job");
    r->job_name = get_str(job, "name");
    r->job_id = get_str(job, "id");
    r->spec_path = get_str(job, "spec");
    r->host = get_str(job, "host");
    r->node_rank = (int)get_int(job, "node_rank", 0);
    r->nnodes = (int)get_int(job, "nnodes", 1);
    r->world_size = (int)get_int(job, "world_size", 0);
    r->started_at = get_time(doc, "started_at");
    r->ended_at = get_time(doc, "ended_at");
    /* The summary measures the job's time on the monotonic clock; the report keeps it as
     * duration_s. */
    dur = json_object_get(doc, "duration_s");
    r->started_mono_ns = 0;
    r->ended_mono_ns = json_is_number(dur) ? (int64_t)(json_number_value(dur) * 1e9) : 0;
    r->exit_code = (int)get_int(doc, "exit_code", 0);
    r->restarts = (int)get_int(doc, "restarts", 0);
    cg = json_object_get(doc, "cgroup");
    r->cgroup_mode = get_str(cg, "mode");
    r->cgroup_manager = get_str(cg, "manager");
    snprintf(r->cgroup_scope, sizeof(r->cgroup_scope), "%s",
             get_str(cg, "scope") != NULL ? get_str(cg, "scope") : "");
    snprintf(r->cgroup_path, sizeof(r->cgroup_path), "%s",
             get_str(cg, "path") != NULL ? get_str(cg, "path") : "");
    snprintf(r->cgroup_note, sizeof(r->cgroup_note), "%s",
             get_str(cg, "note") != NULL ? get_str(cg, "note") : "");
    load_cause(json_object_get(doc, "root_cause"), r);
    load_zygote(json_object_get(doc, "zygote"), f);
    if (json_object_get(doc, "workers") != NULL && !json_is_array(json_object_get(doc, "workers")))
        return xmp_error_set(err, 0, "%s: \"workers\" is not a list", path);
    return load_workers(json_object_get(doc, "workers"), f, err);
}

void
xmp_report_file_free(struct xmp_report_file *f)
{
    for (size_t i = 0; i < f->report.n_workers; i++) {
        xmp_stack_proc_free(f->report.workers[i].stacks);
        free(f->report.workers[i].stacks);
    }
    free(f->report.workers);
    free(f->devices);
    json_decref(f->doc);
    memset(f, 0, sizeof(*f));
}
