/* xmprun's command line: parses options, dispatches to validate / plan / run / gc, prints errors
 * and picks the exit status. Nothing below this file prints errors or exits. */
#include "isolate/error.h"
#include "isolate/proc.h"
#include "runner/plan/enforce.h"
#include "runner/plan/host.h"
#include "runner/plan/plan.h"
#include "runner/report/report_load.h"
#include "runner/report/stacks.h"
#include "runner/run/state.h"
#include "runner/run/supervise.h"
#include "runner/spec/quantity.h"
#include "runner/spec/spec.h"
#include "runner/spec/spec_check.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <malloc.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

enum { EXIT_USAGE = 2, EXIT_SETUP = 125 };

struct cli {
    long workers;       /* -n N, 0 when not given */
    const char *report; /* --report PATH */
    char **sets;        /* --set KEY=VALUE, in order */
    size_t n_sets;
    int verbosity;
    char **args; /* positional arguments */
    size_t n_args;
    char **command; /* after `--`: the spec-less command */
    size_t n_command;
};

static const char usage_text[] =
    "usage: xmprun [OPTIONS] JOB.yaml              run the job\n"
    "       xmprun [OPTIONS] -n N -- CMD [ARGS...] run CMD as N workers without a spec file\n"
    "       xmprun [OPTIONS] validate JOB.yaml...   check specs, exit 0 or 2\n"
    "       xmprun [OPTIONS] plan JOB.yaml          print the resolved plan as JSON\n"
    "       xmprun [OPTIONS] plan -n N -- CMD...    the plan of a spec-less job\n"
    "       xmprun gc                               clean up after an xmprun that was SIGKILLed\n"
    "       xmprun report REPORT.json               print a saved report's summary\n"
    "       xmprun stacks [JOB]                     where every worker of a running job is now\n"
    "\n"
    "options:\n"
    "  -n, --workers N       number of workers (overrides the spec's `workers`)\n"
    "      --report PATH     where to write the JSON exit report\n"
    "      --set KEY=VALUE   override a spec field, e.g. --set resources.worker.memory=4Gi\n"
    "  -q, --quiet           print only errors\n"
    "  -v, --verbose         say more about what xmprun does\n"
    "      --version         print the version and exit\n"
    "  -h, --help            print this help and exit\n"
    "\n"
    "Exit status: 0, the failing worker's exit code or 128+signal, 124 timeout, 130/143\n"
    "interrupted, 2 bad usage or spec, 125 setup failed.\n"
    "The commands, spec fields, worker environment and report: man xmprun, man xmprun.yaml\n";

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int
usage_error(const char *fmt, ...)
{
    va_list ap;

    fputs("xmprun: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs("\nTry 'xmprun --help' for more information.\n", stderr);
    return EXIT_USAGE;
}

static const char *const subcommands[] = {"validate", "plan", "gc", "report", "stacks"};

static bool
is_subcommand(const char *word)
{
    for (size_t i = 0; i < sizeof(subcommands) / sizeof(subcommands[0]); i++)
        if (strcmp(word, subcommands[i]) == 0)
            return true;
    return false;
}

/* The first argument that is neither an option nor an option's value: the spec file, the
 * subcommand, or (when `--` was forgotten) the command. Returns its index, or 0. */
static int
first_operand(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0)
            return 0;
        if (strcmp(argv[i], "-n") == 0 || strcmp(argv[i], "--workers") == 0 ||
            strcmp(argv[i], "--report") == 0 || strcmp(argv[i], "--set") == 0) {
            i++;
            continue;
        }
        if (argv[i][0] != '-' || argv[i][1] == '\0')
            return i;
    }
    return 0;
}

/* True for what names a spec file, present or not. */
static bool
looks_like_spec(const char *arg)
{
    size_t len = strlen(arg);
    return (len > 5 && strcmp(arg + len - 5, ".yaml") == 0) ||
           (len > 4 && strcmp(arg + len - 4, ".yml") == 0) || access(arg, F_OK) == 0;
}

/* An unknown option after a command that is not a spec: `xmprun -n 2 sh -c 'exit 3'` means
 * `xmprun -n 2 -- sh -c 'exit 3'`, whose options are the command's own, so say where the `--`
 * goes rather than only that -c is not xmprun's. */
static int
unknown_option(int argc, char **argv, const char *option)
{
    int cmd = first_operand(argc, argv);
    char before[256] = "";
    size_t len = 0;

    if (cmd == 0 || is_subcommand(argv[cmd]) || looks_like_spec(argv[cmd]))
        return usage_error("unknown option %s", option);
    for (int i = 1; i < cmd && len < sizeof(before); i++)
        len += (size_t)snprintf(before + len, sizeof(before) - len, "%s ", argv[i]);
    return usage_error("unknown option %s; to run `%s` with options of its own, put `--` before "
                       "it: xmprun %s-- %s ...",
                       option, argv[cmd], before, argv[cmd]);
}

/* Parses a positive worker count for -n with the same strictness as the spec parser. */
static int
parse_workers(const char *text, long *out)
{
    char *end = NULL;
    long v;

    errno = 0;
    v = strtol(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || v < 1 || v > 65536)
        return -1;
    *out = v;
    return 0;
}

/* Returns -1 on success, else the exit status to leave with (help, version, usage error). */
static int
parse_cli(int argc, char **argv, struct cli *cli)
{
    enum { OPT_REPORT = 256, OPT_SET, OPT_VERSION };
    static const struct option options[] = {
        {"workers", required_argument, NULL, 'n'}, {"report", required_argument, NULL, OPT_REPORT},
        {"set", required_argument, NULL, OPT_SET}, {"quiet", no_argument, NULL, 'q'},
        {"verbose", no_argument, NULL, 'v'},       {"version", no_argument, NULL, OPT_VERSION},
        {"help", no_argument, NULL, 'h'},          {NULL, 0, NULL, 0},
    };
    int c, dashdash = -1;

    /* getopt permutes options and operands but stops at `--`; remember where it was so that
     * everything after it is the command, untouched. */
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0) {
            dashdash = i;
            break;
        }
    }
    int opt_argc = dashdash >= 0 ? dashdash : argc;

    cli->sets = calloc((size_t)argc, sizeof(char *));
    cli->args = calloc((size_t)argc, sizeof(char *));
    if (cli->sets == NULL || cli->args == NULL)
        return usage_error("%s", "out of memory");
    opterr = 0;
    while ((c = getopt_long(opt_argc, argv, ":n:qvh", options, NULL)) != -1) {
        switch (c) {
        case 'n':
            if (parse_workers(optarg, &cli->workers) < 0)
                return usage_error("-n/--workers: \"%s\" is not a worker count (an integer >= 1)",
                                   optarg);
            break;
        case OPT_REPORT:
            cli->report = optarg;
            break;
        case OPT_SET:
            if (strchr(optarg, '=') == NULL)
                return usage_error("--set \"%s\": expected KEY=VALUE", optarg);
            cli->sets[cli->n_sets++] = optarg;
            break;
        case 'q':
            cli->verbosity = -1;
            break;
        case 'v':
            cli->verbosity = 1;
            break;
        case OPT_VERSION:
            printf("xmprun %s\n", XMP_VERSION);
            return 0;
        case 'h':
            fputs(usage_text, stdout);
            return 0;
        case ':':
            return usage_error("option %s needs a value", argv[optind - 1]);
        default:
            return unknown_option(opt_argc, argv, argv[optind - 1]);
        }
    }
    for (int i = optind; i < opt_argc; i++)
        cli->args[cli->n_args++] = argv[i];
    if (dashdash >= 0) {
        cli->command = argv + dashdash + 1;
        cli->n_command = (size_t)(argc - dashdash - 1);
        if (cli->n_command == 0)
            return usage_error("%s", "nothing after `--`: give the command to run");
    }
    return -1;
}

static void
print_diags(const struct xmp_diags *diags)
{
    for (size_t i = 0; i < diags->count; i++) {
        const struct xmp_diag *d = &diags->items[i];
        if (d->line > 0)
            fprintf(stderr, "%s:%d:%d: %s\n", d->file, d->line, d->col, d->msg);
        else
            fprintf(stderr, "%s: %s\n", d->file, d->msg);
    }
    if (diags->dropped > 0)
        fprintf(stderr, "%s: %zu more error%s not shown\n",
                diags->count > 0 ? diags->items[0].file : "xmprun", diags->dropped,
                diags->dropped == 1 ? "" : "s");
}

/* -n N given with a spec file becomes one more --set, so that it goes through the same checks. */
static int
load_spec(const struct cli *cli, const char *path, struct xmp_spec *spec)
{
    struct xmp_spec_source src = {0};
    struct xmp_diags diags = {0};
    char workers_set[64];
    char **sets = cli->sets;
    size_t n_sets = cli->n_sets;

    if (path != NULL) {
        src.path = path;
        if (cli->workers > 0) {
            snprintf(workers_set, sizeof(workers_set), "workers=%ld", cli->workers);
            sets[n_sets++] = workers_set;
        }
    } else {
        src.argv = cli->command;
        src.argc = cli->n_command;
        src.workers = cli->workers;
    }
    src.sets = sets;
    src.n_sets = n_sets;
    if (xmp_spec_load(&src, spec, &diags) < 0) {
        print_diags(&diags);
        return -1;
    }
    return 0;
}

/* The job is either a spec file (exactly one positional argument) or `-n N -- CMD`. Returns -1
 * when one was given, else the usage error's exit status. */
static int
pick_job(const struct cli *cli, char **args, size_t n_args, const char **path, const char *what)
{
    *path = NULL;
    if (cli->command != NULL) {
        if (n_args > 0)
            return usage_error("give either a spec file or `-- CMD`, not both (%s)", args[0]);
        return -1;
    }
    if (n_args == 0)
        return usage_error("%s: no job spec given (xmprun JOB.yaml, or xmprun -n N -- CMD)", what);
    if (n_args > 1)
        return usage_error("%s: one job spec at a time (extra argument \"%s\")", what, args[1]);
    *path = args[0];
    return -1;
}

static int
cmd_validate(struct cli *cli)
{
    int status = 0;

    if (cli->n_args < 2 && cli->command == NULL)
        return usage_error("%s", "validate: give one or more spec files");
    if (cli->command != NULL) {
        struct xmp_spec spec = {0};
        if (load_spec(cli, NULL, &spec) < 0)
            return EXIT_USAGE;
        xmp_spec_free(&spec);
        return 0;
    }
    for (size_t i = 1; i < cli->n_args; i++) {
        struct xmp_spec spec = {0};
        if (load_spec(cli, cli->args[i], &spec) < 0) {
            status = EXIT_USAGE;
            continue;
        }
        if (cli->verbosity >= 0)
            printf("%s: valid (%s)\n", cli->args[i], spec.name);
        xmp_spec_free(&spec);
    }
    return status;
}

static int
cmd_plan(struct cli *cli)
{
    struct xmp_spec spec = {0};
    struct xmp_host host = {0};
    struct xmp_plan plan = {0};
    struct xmp_error err = {0};
    const char *path = NULL;
    int status;

    status = pick_job(cli, cli->args + 1, cli->n_args - 1, &path, "plan");
    if (status >= 0)
        return status;
    if (load_spec(cli, path, &spec) < 0)
        return EXIT_USAGE;
    status = EXIT_SETUP;
    if (xmp_host_discover(getenv("XMPRUN_HOST_ROOT"), &host, &err) < 0) {
        xmp_error_wrap(&err, "host discovery");
        goto out;
    }
    if (cli->report != NULL) {
        free(spec.report);
        spec.report = strdup(cli->report);
    }
    if (xmp_plan_build(&spec, &host, environ, getpid(), &plan, &err) < 0) {
        xmp_error_wrap(&err, "%s", spec.file);
        goto out;
    }
    for (char **w = plan.warnings; w != NULL && *w != NULL; w++)
        fprintf(stderr, "xmprun: warning: %s\n", *w);
    json_t *j = xmp_plan_to_json(&plan, &host);
    if (j != NULL)
        json_object_set_new(j, "enforcement", xmp_enforce_predict(&plan));
    if (j == NULL || json_dumpf(j, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER) < 0) {
        xmp_error_set(&err, errno, "write the plan");
        json_decref(j);
        goto out;
    }
    json_decref(j);
    fputc('\n', stdout);
    status = fflush(stdout) == 0 ? 0 : EXIT_SETUP;
out:
    if (status != 0 && err.msg[0] != '\0')
        fprintf(stderr, "xmprun: %s\n", err.msg);
    xmp_plan_free(&plan);
    xmp_host_free(&host);
    xmp_spec_free(&spec);
    return status;
}

static int
cmd_run(struct cli *cli)
{
    struct xmp_spec spec = {0};
    struct xmp_run_options opts = {cli->verbosity, cli->report, environ};
    struct xmp_error err = {0};
    const char *path = NULL;
    int status;

    status = pick_job(cli, cli->args, cli->n_args, &path, "run");
    if (status >= 0)
        return status;
    if (load_spec(cli, path, &spec) < 0)
        return EXIT_USAGE;
    status = xmp_job_run(&spec, &opts, &err);
    if (err.msg[0] != '\0')
        fprintf(stderr, "xmprun: %s\n", err.msg);
    xmp_spec_free(&spec);
    return status;
}

static int
cmd_gc(const struct cli *cli)
{
    struct xmp_run_options opts = {cli->verbosity, NULL, environ};
    struct xmp_error err = {0};
    int n;

    if (cli->n_args > 1 || cli->command != NULL)
        return usage_error("%s", "gc takes no arguments");
    n = xmp_job_gc(&opts, &err);
    if (n < 0) {
        fprintf(stderr, "xmprun: gc: %s\n", err.msg);
        return EXIT_SETUP;
    }
    if (cli->verbosity >= 0)
        printf("xmprun: gc: cleaned up %d orphaned job%s\n", n, n == 1 ? "" : "s");
    return 0;
}

/* `xmprun report FILE.json`: the saved report's summary, printed by the live run's own code, and
 * the job's exit status. */
static int
cmd_report(const struct cli *cli)
{
    struct xmp_report_file f = {0};
    struct xmp_error err = {0};
    int status;

    if (cli->n_args != 2 || cli->command != NULL)
        return usage_error("%s", "report: give one report file (xmprun report JOB.report.json)");
    if (xmp_report_load(cli->args[1], &f, &err) < 0) {
        fprintf(stderr, "xmprun: report: %s\n", err.msg);
        xmp_report_file_free(&f);
        return EXIT_USAGE;
    }
    xmp_report_print_summary(&f.report, stdout);
    status = f.report.exit_code;
    xmp_report_file_free(&f);
    return status;
}

/* `xmprun stacks [JOB]`: every thread of every worker of a running job, now; the job goes on
 * (each worker is stopped only while it is read). */
static int
cmd_stacks(const struct cli *cli)
{
    struct xmp_state_job job;
    struct xmp_error err = {0};
    struct xmp_stacks st = {0};
    const char *timeout = getenv("XMPRUN_STACKS_TIMEOUT");
    int64_t budget_ms = XMP_STACKS_COMMAND_BUDGET_MS;
    char buf[512];
    const char *dir = xmp_state_dir(environ, buf, sizeof(buf));

    if (cli->n_args > 2 || cli->command != NULL)
        return usage_error("%s", "stacks: give at most one job (its name, id or xmprun's pid)");
    if (dir == NULL ||
        xmp_state_find_job(dir, cli->n_args == 2 ? cli->args[1] : NULL, &job, &err) < 0) {
        fprintf(stderr, "xmprun: stacks: %s\n", dir != NULL ? err.msg : "no state directory");
        return 1;
    }
    if (timeout != NULL && xmp_parse_duration(timeout, &budget_ms, err.msg, sizeof(err.msg)) < 0) {
        fprintf(stderr, "xmprun: stacks: XMPRUN_STACKS_TIMEOUT: %s\n", err.msg);
        return EXIT_USAGE;
    }
    /* Each worker with the processes below it (the Python under `sh -c`, its DataLoaders). */
    pid_t *pids = calloc(job.n_pids * XMP_STACKS_MAX_PROCS + 1, sizeof(pid_t));
    size_t *count = calloc(job.n_pids + 1, sizeof(size_t)), n = 0;
    if (pids == NULL || count == NULL) {
        free(pids);
        free(count);
        fprintf(stderr, "xmprun: stacks: out of memory\n");
        return EXIT_SETUP;
    }
    for (size_t i = 0; i < job.n_pids; i++) {
        pids[n] = job.pids[i];
        count[i] = 1 + (job.pids[i] > 0 ? xmp_proc_descendants(job.pids[i], pids + n + 1,
                                                               XMP_STACKS_MAX_PROCS - 1)
                                        : 0);
        n += count[i];
    }
    if (xmp_stacks_capture(pids, n, budget_ms > 0 ? (long)budget_ms : 1, &st) < 0) {
        free(pids);
        free(count);
        fprintf(stderr, "xmprun: stacks: out of memory\n");
        return EXIT_SETUP;
    }
    printf("job %s (xmprun pid %d): %zu worker%s\n", job.cgroup_name, (int)job.owner, job.n_pids,
           job.n_pids == 1 ? "" : "s");
    for (size_t i = 0, at = 0; i < job.n_pids; at += count[i++]) {
        struct xmp_stack_proc *p = xmp_stacks_take_group(&st, at, count[i]);
        printf("\n=== worker %zu ===\n", i);
        if (job.pids[i] <= 0)
            printf("not running\n");
        else if (p != NULL)
            xmp_stacks_print(p, stdout);
        xmp_stack_proc_free(p);
        free(p);
    }
    xmp_stacks_free(&st);
    free(pids);
    free(count);
    return 0;
}

int
main(int argc, char **argv)
{
    struct cli cli = {0};
    const char *hint = NULL;
    int status;

    /* One malloc arena: xmprun's few threads are short-lived helpers (the start's gc, the
     * report's fsyncs), and an arena of their own would stay resident (0.1 MiB) for the job. */
    mallopt(M_ARENA_MAX, 1);
    status = parse_cli(argc, argv, &cli);

    if (status < 0) {
        const char *verb = cli.n_args > 0 ? cli.args[0] : NULL;
        if (verb != NULL && strcmp(verb, "validate") == 0) {
            status = cmd_validate(&cli);
        } else if (verb != NULL && strcmp(verb, "plan") == 0) {
            status = cmd_plan(&cli);
        } else if (verb != NULL && strcmp(verb, "gc") == 0) {
            status = cmd_gc(&cli);
        } else if (verb != NULL && strcmp(verb, "report") == 0) {
            status = cmd_report(&cli);
        } else if (verb != NULL && strcmp(verb, "stacks") == 0) {
            status = cmd_stacks(&cli);
        } else if (verb == NULL && cli.command == NULL) {
            status = usage_error("%s", "no job given: xmprun JOB.yaml, or xmprun -n N -- CMD");
        } else if (verb != NULL && access(verb, F_OK) < 0 &&
                   (hint = xmp_suggest(verb, subcommands,
                                       sizeof(subcommands) / sizeof(subcommands[0]))) != NULL) {
            /* A mistyped subcommand would otherwise be taken for a spec file. */
            status = usage_error("\"%s\" is neither a command nor a spec file (did you mean `%s`?)",
                                 verb, hint);
        } else {
            status = cmd_run(&cli);
        }
    }
    free(cli.sets);
    free(cli.args);
    return status;
}
