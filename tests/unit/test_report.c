/* Exit-status rules, root-cause choice and wording of the exit report, on report structs built
 * in memory; plus the JSON against schemas/report.schema.json and the atomic write. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "helpers/testlib.h"
#include "runner/report/report.h"

#include <criterion/criterion.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

static const char *const cpu_dev[] = {"cpu", NULL};
static const char *const cuda3[] = {"cuda:3", NULL};

static struct xmp_worker_report *
add_worker(struct xmp_report *r, enum xmp_worker_state state, int exit_code, int sig,
           int64_t ended_ns)
{
    struct xmp_worker_report *w;

    r->workers = realloc(r->workers, (r->n_workers + 1) * sizeof(*r->workers));
    cr_assert_not_null(r->workers);
    w = &r->workers[r->n_workers];
    memset(w, 0, sizeof(*w));
    w->rank = w->local_rank = (int)r->n_workers;
    w->pid = 1000 + (int)r->n_workers;
    w->devices = cpu_dev;
    w->state = state;
    w->exit_code = exit_code;
    w->signal = sig;
    w->memory_limit = w->memory_peak = w->oom_kills = w->job_memory_limit = -1;
    w->oom_limit = w->pids_limit = w->job_pids_limit = w->pids_hits = -1;
    w->started_at.tv_sec = 1700000000;
    w->ended_at.tv_sec = 1700000000 + ended_ns / 1000000000;
    w->ended_mono_ns = ended_ns;
    r->n_workers++;
    return w;
}

/* The write as the supervisor does it: started, then finished. */
static int
write_report(const struct xmp_report *r, const char *path, struct xmp_error *err)
{
    struct xmp_file_commit c;

    if (xmp_report_write_start(r, path, &c, err) < 0)
        return -1;
    return xmp_file_write_atomic_finish(&c, err);
}

static void
init_report(struct xmp_report *r)
{
    memset(r, 0, sizeof(*r));
    r->job_name = "unit";
    r->job_id = "123-abcdef";
    r->spec_path = "unit.yaml";
    r->host = "localhost";
    r->nnodes = 1;
    r->world_size = 2;
    r->cgroup_mode = "hybrid";
    r->started_at.tv_sec = 1700000000;
    r->ended_at.tv_sec = 1700000010;
    r->ended_mono_ns = 10000000000;
}

Test(report, all_succeeded)
{
    struct xmp_report r;
    init_report(&r);
    add_worker(&r, XMP_WORKER_EXITED, 0, 0, 100);
    add_worker(&r, XMP_WORKER_EXITED, 0, 0, 200);
    xmp_report_finish(&r);
    cr_assert_eq(r.outcome, XMP_OUTCOME_SUCCEEDED);
    cr_assert_eq(r.exit_code, 0);
    cr_assert_eq(r.cause, XMP_CAUSE_NONE);
    xmp_report_release(&r);
}

Test(report, exit_code_of_failed_worker)
{
    struct xmp_report r;
    init_report(&r);
    add_worker(&r, XMP_WORKER_EXITED, 0, 0, 100);
    add_worker(&r, XMP_WORKER_EXITED, 3, 0, 200);
    xmp_report_finish(&r);
    cr_assert_eq(r.outcome, XMP_OUTCOME_FAILED);
    cr_assert_eq(r.exit_code, 3);
    cr_assert_eq(r.cause_rank, 1);
    cr_assert_str_eq(r.cause_reason, "exited");
    cr_assert_str_eq(r.cause_message, "worker 1 (cpu) exited with status 3");
    xmp_report_release(&r);
}

Test(report, earliest_failure_is_root_cause)
{
    struct xmp_report r;
    init_report(&r);
    add_worker(&r, XMP_WORKER_EXITED, 1, 0, 500);
    add_worker(&r, XMP_WORKER_SIGNALED, -1, SIGSEGV, 300);
    add_worker(&r, XMP_WORKER_STOPPED_BY_XMPRUN, -1, SIGTERM, 200); /* a consequence */
    xmp_report_finish(&r);
    cr_assert_eq(r.cause_rank, 1);
    cr_assert_eq(r.exit_code, 128 + SIGSEGV);
    cr_assert_str_eq(r.cause_reason, "signaled");
    cr_assert_str_eq(r.cause_message,
                     "worker 1 (cpu) was killed by signal SIGSEGV (segmentation fault)");
    xmp_report_release(&r);
}

Test(report, oom_kill_names_the_limit)
{
    struct xmp_report r;
    struct xmp_worker_report *w;
    init_report(&r);
    add_worker(&r, XMP_WORKER_EXITED, 0, 0, 100);
    add_worker(&r, XMP_WORKER_EXITED, 0, 0, 100);
    add_worker(&r, XMP_WORKER_STOPPED_BY_XMPRUN, -1, SIGTERM, 900);
    w = add_worker(&r, XMP_WORKER_OOM_KILLED, -1, SIGKILL, 800);
    w->devices = cuda3;
    w->memory_limit = w->memory_peak = 8LL << 30;
    w->oom_kills = 1;
    xmp_report_finish(&r);
    cr_assert_eq(r.exit_code, 137);
    cr_assert_eq(r.cause_rank, 3);
    cr_assert_str_eq(r.cause_reason, "oom_killed");
    cr_assert_str_eq(r.cause_message, "worker 3 (cuda:3) was killed by the kernel OOM killer at "
                                      "its 8.0 GiB memory limit (peak 8.0 GiB)");
    xmp_report_release(&r);
}

Test(report, failed_to_start)
{
    struct xmp_report r;
    struct xmp_worker_report *w;
    init_report(&r);
    add_worker(&r, XMP_WORKER_STOPPED_BY_XMPRUN, -1, SIGTERM, 100);
    add_worker(&r, XMP_WORKER_STOPPED_BY_XMPRUN, -1, SIGTERM, 100);
    w = add_worker(&r, XMP_WORKER_FAILED_TO_START, 127, 0, 50);
    snprintf(w->start_error, sizeof(w->start_error), "exec `nosuch`: No such file or directory");
    xmp_report_finish(&r);
    cr_assert_eq(r.exit_code, 127);
    cr_assert_str_eq(r.cause_message,
                     "worker 2 (cpu) could not start: exec `nosuch`: No such file or directory");
    w->exit_code = -1; /* fork itself failed: no child to report a code */
    xmp_report_finish(&r);
    cr_assert_eq(r.exit_code, 125);
    xmp_report_release(&r);
}

Test(report, timeout)
{
    struct xmp_report r;
    init_report(&r);
    add_worker(&r, XMP_WORKER_TIMEOUT, -1, SIGTERM, 31000);
    add_worker(&r, XMP_WORKER_TIMEOUT, 143, 0, 31000);
    r.timed_out = true;
    r.timeout_ms = 30000;
    r.timeout_mono_ns = 30000;
    xmp_report_finish(&r);
    cr_assert_eq(r.outcome, XMP_OUTCOME_TIMEOUT);
    cr_assert_eq(r.exit_code, 124);
    cr_assert_eq(r.cause_rank, -1);
    cr_assert_str_eq(r.cause_message, "the job hit its 30s timeout");
    xmp_report_release(&r);
}

Test(report, interrupted)
{
    struct xmp_report r;
    init_report(&r);
    add_worker(&r, XMP_WORKER_STOPPED_BY_XMPRUN, -1, SIGTERM, 600);
    r.interrupt_signal = SIGTERM;
    r.interrupt_mono_ns = 500;
    xmp_report_finish(&r);
    cr_assert_eq(r.outcome, XMP_OUTCOME_INTERRUPTED);
    cr_assert_eq(r.exit_code, 143);
    r.interrupt_signal = SIGINT;
    xmp_report_finish(&r);
    cr_assert_eq(r.exit_code, 130);
    cr_assert_str_eq(r.cause_message, "xmprun received SIGINT and stopped the job");
    /* A worker that failed before the signal arrived stays the root cause. */
    add_worker(&r, XMP_WORKER_EXITED, 4, 0, 400);
    xmp_report_finish(&r);
    cr_assert_eq(r.outcome, XMP_OUTCOME_FAILED);
    cr_assert_eq(r.exit_code, 4);
    xmp_report_release(&r);
}

Test(report, setup_failure)
{
    struct xmp_report r;
    init_report(&r);
    snprintf(r.setup_error, sizeof(r.setup_error), "cgroup: mkdir: Read-only file system");
    xmp_report_finish(&r);
    cr_assert_eq(r.outcome, XMP_OUTCOME_SETUP_FAILED);
    cr_assert_eq(r.exit_code, 125);
    cr_assert_str_eq(r.cause_reason, "setup_failed");
    xmp_report_release(&r);
}

Test(report, formatting)
{
    char buf[64];
    xmp_format_bytes(8LL << 30, buf, sizeof(buf));
    cr_assert_str_eq(buf, "8.0 GiB");
    xmp_format_bytes(512LL << 20, buf, sizeof(buf));
    cr_assert_str_eq(buf, "512.0 MiB");
    xmp_format_bytes(100, buf, sizeof(buf));
    cr_assert_str_eq(buf, "100 B");
    xmp_format_duration(30000, buf, sizeof(buf));
    cr_assert_str_eq(buf, "30s");
    xmp_format_duration(5400000, buf, sizeof(buf));
    cr_assert_str_eq(buf, "1h30m");
    xmp_format_duration(250, buf, sizeof(buf));
    cr_assert_str_eq(buf, "250ms");
    xmp_signal_name(SIGKILL, buf, sizeof(buf));
    cr_assert_str_eq(buf, "SIGKILL");
}

Test(report, json_matches_schema, .timeout = 60)
{
    struct xmp_report r;
    struct xmp_worker_report *w;
    char msg[4096];
    char *dir = xt_tmpdir(), *path = NULL, *text;
    struct xmp_error err = {0};

    init_report(&r);
    w = add_worker(&r, XMP_WORKER_EXITED, 0, 0, 100);
    snprintf(w->cpuset, sizeof(w->cpuset), "0-3,8");
    w->memory_limit = 1 << 30;
    w->memory_peak = 12345;
    w->oom_kills = 0;
    w->n_tail = 2;
    w->stderr_tail = calloc(2, sizeof(char *));
    w->stderr_tail[0] = strdup("warning: something");
    w->stderr_tail[1] = strdup("bad \xff utf8");
    w->error_file = json_pack("{s:{s:s}}", "message", "message", "boom");
    w = add_worker(&r, XMP_WORKER_SIGNALED, -1, SIGSEGV, 50);
    r.master_addr = "10.231.77.1";
    r.master_port = 29512;
    r.run_id = "8812";
    /* An error file that was cut: its text, and the note that says so. */
    w->error_file = xmp_report_text_json("{\"message\": \"Traceback \xff");
    snprintf(w->error_file_note, sizeof(w->error_file_note), "cut: the error file is 1.0 MiB");
    r.attempts = calloc(1, sizeof(*r.attempts));
    r.n_attempts = 1;
    r.restarts = 1;
    r.attempts[0] = (struct xmp_attempt){.restart = 0,
                                         .kind = XMP_CAUSE_WORKER,
                                         .rank = 1,
                                         .reason = "exited",
                                         .message = "worker 1 exited",
                                         .exit_code = 1};
    xmp_report_finish(&r);
    cr_assert_eq(asprintf(&path, "%s/unit.report.json", dir) > 0, 1);
    cr_assert_eq(write_report(&r, path, &err), 0, "%s", err.msg);
    cr_assert_eq(xt_validate_json("report.schema.json", path, msg, sizeof(msg)), 0, "%s", msg);
    text = xt_read_file(path);
    cr_assert_not_null(strstr(text, "\"schema\": \"xmprun.report/v1\""));
    cr_assert_not_null(strstr(text, "\"signal\": \"SIGSEGV\""));
    /* The nodes' reports of one run can be put side by side. */
    cr_assert_not_null(strstr(text, "\"world_size\": 2,\n    \"master_addr\": \"10.231.77.1\",\n"
                                    "    \"master_port\": 29512,\n    \"run_id\": \"8812\"\n"),
                       "%s", text);
    cr_assert_not_null(
        strstr(text, "\"error_file\": \"{\\\"message\\\": \\\"Traceback \xef\xbf\xbd\""), "%s",
        text);
    cr_assert_not_null(strstr(text, "\"error_file_note\": \"cut: the error file is 1.0 MiB\""));
    /* The invalid byte is replaced, the rest of the line kept. */
    cr_assert_not_null(strstr(text, "\"bad \xef\xbf\xbd utf8\""), "%s", text);
    cr_assert_not_null(strstr(text, "\"started_at\": \"2023-11-14T22:13:20.000Z\""));
    free(text);

    /* A setup failure writes a report with no workers, and it validates too. */
    xmp_report_release(&r);
    init_report(&r);
    snprintf(r.setup_error, sizeof(r.setup_error), "no cgroups");
    xmp_report_finish(&r);
    cr_assert_eq(write_report(&r, path, &err), 0, "%s", err.msg);
    cr_assert_eq(xt_validate_json("report.schema.json", path, msg, sizeof(msg)), 0, "%s", msg);
    xmp_report_release(&r);
    free(path);
    xt_tmpdir_remove(dir);
    free(dir);
}

Test(report, write_fails_cleanly)
{
    struct xmp_report r;
    struct xmp_error err = {0};
    init_report(&r);
    xmp_report_finish(&r);
    cr_assert_eq(write_report(&r, "/nonexistent-dir/x.json", &err), -1);
    cr_assert_not_null(strstr(err.msg, "/nonexistent-dir"));
    xmp_report_release(&r);
}

Test(report, oom_of_a_child_is_mentioned)
{
    struct xmp_report r;
    struct xmp_worker_report *w;
    init_report(&r);
    w = add_worker(&r, XMP_WORKER_EXITED, 1, 0, 100);
    w->memory_limit = 512LL << 20;
    w->oom_kills = 1;
    xmp_report_finish(&r);
    cr_assert_eq(r.exit_code, 1);
    cr_assert_str_eq(r.cause_reason, "exited");
    cr_assert_str_eq(r.cause_message, "worker 0 (cpu) exited with status 1 after the kernel OOM "
                                      "killer killed a process in it at its 512.0 MiB memory "
                                      "limit");
    xmp_report_release(&r);
}

Test(report, oom_at_the_job_limit)
{
    struct xmp_report r;
    struct xmp_worker_report *w;
    init_report(&r);
    w = add_worker(&r, XMP_WORKER_OOM_KILLED, -1, SIGKILL, 100);
    w->job_memory_limit = 2LL << 30;
    w->oom_kills = 1;
    xmp_report_finish(&r);
    cr_assert_eq(r.exit_code, 137);
    cr_assert_str_eq(r.cause_message,
                     "worker 0 (cpu) was killed by the kernel OOM killer at the job's 2.0 GiB "
                     "memory limit");
    xmp_report_release(&r);
}

/* memory.oom_at decides the words, not which limits the worker has. */
Test(report, oom_at_job_although_the_worker_has_a_limit)
{
    struct xmp_report r;
    struct xmp_worker_report *w;
    init_report(&r);
    w = add_worker(&r, XMP_WORKER_OOM_KILLED, -1, SIGKILL, 100);
    w->memory_limit = 100LL << 20;
    w->job_memory_limit = 150LL << 20;
    w->oom_kills = 1;
    w->oom_at = "job";
    w->oom_limit = 150LL << 20;
    xmp_report_finish(&r);
    cr_assert_str_eq(r.cause_message,
                     "worker 0 (cpu) was killed by the kernel OOM killer at the job's 150.0 MiB "
                     "memory limit");
    json_t *j = xmp_report_to_json(&r);
    json_t *mem = json_object_get(json_array_get(json_object_get(j, "workers"), 0), "memory");
    cr_assert_str_eq(json_string_value(json_object_get(mem, "oom_at")), "job");
    json_decref(j);
    xmp_report_release(&r);
}

Test(report, oom_at_an_enclosing_limit)
{
    struct xmp_report r;
    struct xmp_worker_report *w;
    init_report(&r);
    w = add_worker(&r, XMP_WORKER_OOM_KILLED, -1, SIGKILL, 100);
    w->memory_limit = 1LL << 30;
    w->memory_peak = 126LL << 20;
    w->oom_kills = 1;
    w->oom_at = "enclosing";
    w->oom_limit = 128LL << 20;
    snprintf(w->oom_path, sizeof(w->oom_path), "/machine.slice/libpod-3f2a.scope");
    xmp_report_finish(&r);
    cr_assert_str_eq(r.cause_message,
                     "worker 0 (cpu) was killed by the kernel OOM killer at the enclosing cgroup's "
                     "128.0 MiB limit (container /machine.slice/libpod-3f2a.scope); its own limit "
                     "is 1.0 GiB");
    xmp_report_release(&r);
}

Test(report, pids_limit_hit_is_named)
{
    struct xmp_report r;
    struct xmp_worker_report *w;
    init_report(&r);
    w = add_worker(&r, XMP_WORKER_EXITED, 1, 0, 100);
    w->pids_limit = 64;
    w->pids_hits = 12;
    xmp_report_finish(&r);
    cr_assert_str_eq(r.cause_message, "worker 0 (cpu) exited with status 1 after it could not "
                                      "fork: it hit its 64 pids limit");
    w->pids_limit = -1;
    w->job_pids_limit = 200;
    xmp_report_finish(&r);
    cr_assert_str_eq(r.cause_message, "worker 0 (cpu) exited with status 1 after it could not "
                                      "fork: it hit the job's 200 pids limit");
    xmp_report_release(&r);
}

/* The chain was read and no limit fired: the words must not blame the worker's limit. */
Test(report, oom_without_a_visible_limit)
{
    struct xmp_report r;
    struct xmp_worker_report *w;
    init_report(&r);
    w = add_worker(&r, XMP_WORKER_OOM_KILLED, -1, SIGKILL, 100);
    w->memory_limit = 8LL << 30;
    w->memory_peak = 3LL << 30;
    w->oom_kills = 1;
    w->oom_unseen = true;
    xmp_report_finish(&r);
    cr_assert_str_eq(r.cause_message,
                     "worker 0 (cpu) was killed by the kernel OOM killer although no memory limit "
                     "that xmprun can see was reached (the machine, or a cgroup above this cgroup "
                     "namespace, ran out of memory)");
    xmp_report_release(&r);
}

/* The memory watchdog's stop, at the worker's own limit and at the job's: 137, and the words. */
Test(report, memory_watchdog_stops_are_named_with_the_limit)
{
    struct xmp_report r;
    init_report(&r);
    struct xmp_worker_report *w = add_worker(&r, XMP_WORKER_MEMORY_LIMIT, -1, SIGKILL, 10);
    w->memory_limit = 128 << 20;
    w->memory_over = "worker";
    w->memory_used = 290 << 20;
    w->memory_period_ms = 100;
    xmp_report_finish(&r);
    cr_assert_eq(r.exit_code, 137);
    cr_assert_str_eq(r.cause_reason, "memory_limit");
    cr_assert_str_eq(r.cause_message,
                     "worker 0 (cpu) was stopped by xmprun at its 128.0 MiB memory limit (it used "
                     "290.0 MiB; measured every 100 ms: no writable cgroup here)");
    w->memory_over = "job";
    w->job_memory_limit = 1LL << 30;
    w->memory_job_used = 1200LL << 20;
    xmp_report_finish(&r);
    cr_assert_str_eq(r.cause_message,
                     "worker 0 (cpu) was stopped by xmprun at the job's 1.0 GiB memory limit (the "
                     "job used 1.2 GiB, this worker 290.0 MiB; measured every 100 ms: no writable "
                     "cgroup here)");
    xmp_report_release(&r);
}
