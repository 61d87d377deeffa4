/* Job spec parser on spec files: bad specs with the exact position and message of their first
 * error, several errors at once, and good specs with every parsed field and the defaults. All
 * specs are in-memory text. --set, the spec-less form and hostile input: test_spec_sources.c;
 * quantity parsers: test_quantity.c. */
#define _GNU_SOURCE /* asprintf */
#include "runner/spec/spec.h"
#include "unit/spec_helpers.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

static void
check_bad(const char *yaml, size_t len, int line, int col, const char *msg)
{
    struct xmp_spec spec;
    struct xmp_diags d;

    cr_assert_eq(load_len(yaml, len, NULL, 0, &spec, &d), -1, "accepted: %s", yaml);
    expect_first(&d, "job.yaml", line, col, msg);
    /* Nothing half-filled is handed back on failure. */
    cr_expect_null(spec.name);
    cr_expect_null(spec.command);
}

#define BAD(id, yaml, line, col, msg)                                                              \
    Test(bad, id)                                                                                  \
    {                                                                                              \
        check_bad(yaml, sizeof(yaml) - 1, line, col, msg);                                         \
    }

/* version, name, command */
BAD(version_2, "version: 2\nname: a\ncommand: x\n", 1, 10,
    "version: unsupported version 2 (this xmprun reads version 1)")
BAD(version_quoted, "version: \"1\"\nname: a\ncommand: x\n", 1, 10,
    "version: expected the integer 1, got the string \"1\"")
BAD(version_float, "version: 1.0\nname: a\ncommand: x\n", 1, 10,
    "version: expected the integer 1, got \"1.0\"")
BAD(version_huge, "version: 99999999999999999999999\nname: a\ncommand: x\n", 1, 10,
    "version: expected the integer 1, got \"99999999999999999999999\"")
BAD(missing_version, "name: a\ncommand: x\n", 1, 1, "version: required key is missing")
BAD(missing_name, "version: 1\ncommand: x\n", 1, 1, "name: required key is missing")
BAD(missing_command, "version: 1\nname: a\n", 1, 1, "command: required key is missing")
BAD(name_space, "version: 1\nname: my job\ncommand: x\n", 2, 7,
    "name: \"my job\" is not a valid name (1-63 letters, digits, '.', '_' or '-', starting with a "
    "letter or digit)")
BAD(name_dash, "version: 1\nname: -a\ncommand: x\n", 2, 7,
    "name: \"-a\" is not a valid name (1-63 letters, digits, '.', '_' or '-', starting with a "
    "letter or digit)")
BAD(name_64,
    "version: 1\nname: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n"
    "command: x\n",
    2, 7,
    "name: \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa...\" is not a valid name "
    "(1-63 letters, digits, '.', '_' or '-', starting with a letter or digit)")
BAD(name_list, "version: 1\nname: [a]\ncommand: x\n", 2, 7, "name: expected a string, got a list")
BAD(name_null, "version: 1\nname:\ncommand: x\n", 2, 6, "name: expected a string, got null")
BAD(command_empty_list, "version: 1\nname: a\ncommand: []\n", 3, 10,
    "command: must not be an empty list")
BAD(command_empty_string, "version: 1\nname: a\ncommand: \"\"\n", 3, 10,
    "command: must not be empty")
BAD(command_map, "version: 1\nname: a\ncommand: {a: 1}\n", 3, 10,
    "command: expected a list of strings or one string, got a mapping")
BAD(command_nested, "version: 1\nname: a\ncommand: [x, [y]]\n", 3, 14,
    "command[1]: expected a string, got a list")
BAD(command_null_item, "version: 1\nname: a\ncommand: [x, ~]\n", 3, 14,
    "command[1]: expected a string, got null")
BAD(command_empty_program, "version: 1\nname: a\ncommand: [\"\", x]\n", 3, 11,
    "command[0]: must not be empty")

/* workdir, env, inherit_env */
BAD(workdir_missing, BASE "workdir: /nonexistent-xmprun-dir\n", 4, 10,
    "workdir: \"/nonexistent-xmprun-dir\" does not exist")
BAD(workdir_file, BASE "workdir: /etc/passwd\n", 4, 10,
    "workdir: \"/etc/passwd\" is not a directory")
BAD(workdir_empty, BASE "workdir: ''\n", 4, 10, "workdir: must not be empty")
BAD(env_list, BASE "env: [A]\n", 4, 6, "env: expected a mapping of NAME: value, got a list")
BAD(env_bad_name, BASE "env: {1A: x}\n", 4, 7,
    "env.1A: not a valid variable name (letters, digits and _, not starting with a digit)")
BAD(env_dash_name, BASE "env:\n  A-B: x\n", 5, 3,
    "env.A-B: not a valid variable name (letters, digits and _, not starting with a digit)")
BAD(env_rank, BASE "env:\n  RANK: 0\n", 5, 3,
    "env.RANK: RANK is set by xmprun for each worker and cannot be set in the spec")
BAD(env_master_addr, BASE "env: {MASTER_ADDR: x}\n", 4, 7,
    "env.MASTER_ADDR: MASTER_ADDR is set by xmprun for each worker and cannot be set in the spec")
BAD(env_restart_count, BASE "env: {XMPRUN_RESTART_COUNT: 1}\n", 4, 7,
    "env.XMPRUN_RESTART_COUNT: XMPRUN_RESTART_COUNT is set by xmprun for each worker and cannot "
    "be set in the spec")
BAD(env_null, BASE "env:\n  A:\n", 5, 5, "env.A: expected a string, number or boolean, got null")
BAD(env_list_value, BASE "env: {A: [1]}\n", 4, 10,
    "env.A: expected a string, number or boolean, got a list")
BAD(inherit_yes, BASE "inherit_env: yes\n", 4, 14,
    "inherit_env: expected true or false, got \"yes\" (write true)")
BAD(inherit_off, BASE "inherit_env: off\n", 4, 14,
    "inherit_env: expected true or false, got \"off\" (write false)")
BAD(inherit_quoted, BASE "inherit_env: \"false\"\n", 4, 14,
    "inherit_env: expected true or false, got the string \"false\" (remove the quotes)")
BAD(inherit_int, BASE "inherit_env: 1\n", 4, 14, "inherit_env: expected true or false, got \"1\"")

/* workers, devices */
BAD(workers_zero, BASE "workers: 0\n", 4, 10,
    "workers: expected an integer >= 1 or \"auto\", got \"0\"")
BAD(workers_negative, BASE "workers: -2\n", 4, 10,
    "workers: expected an integer >= 1 or \"auto\", got \"-2\"")
BAD(workers_float, BASE "workers: 1.5\n", 4, 10,
    "workers: expected an integer >= 1 or \"auto\", got \"1.5\"")
BAD(workers_quoted, BASE "workers: \"4\"\n", 4, 10,
    "workers: expected an integer >= 1 or \"auto\", got the string \"4\" (remove the quotes)")
BAD(workers_huge, BASE "workers: 99999999999999999999\n", 4, 10,
    "workers: 99999999999999999999 is too large (maximum 2147483647)")
BAD(workers_int32, BASE "workers: 2147483648\n", 4, 10,
    "workers: 2147483648 is too large (maximum 2147483647)")
BAD(workers_octal, BASE "workers: 010\n", 4, 10,
    "workers: expected an integer >= 1 or \"auto\", got \"010\" (leading zeros are not allowed)")
BAD(workers_hex, BASE "workers: 0x10\n", 4, 10,
    "workers: expected an integer >= 1 or \"auto\", got \"0x10\"")
BAD(workers_word, BASE "workers: many\n", 4, 10,
    "workers: expected an integer >= 1 or \"auto\", got \"many\"")
BAD(kind_gpu, BASE "devices: {kind: gpu}\n", 4, 17,
    "devices.kind: expected one of auto, cuda, tpu, cpu, got \"gpu\" (did you mean \"cuda\"?)")
BAD(kind_typo, BASE "devices: {kind: cdua}\n", 4, 17,
    "devices.kind: expected one of auto, cuda, tpu, cpu, got \"cdua\" (did you mean \"cuda\"?)")
BAD(kind_list, BASE "devices: {kind: [cuda]}\n", 4, 17,
    "devices.kind: expected one of auto, cuda, tpu, cpu, got a list")
BAD(ids_string, BASE "devices: {ids: \"0,1\"}\n", 4, 16,
    "devices.ids: expected \"all\" or a list of device indices or GPU UUIDs, got the string "
    "\"0,1\"")
BAD(ids_empty, BASE "devices: {ids: []}\n", 4, 16,
    "devices.ids: must not be an empty list (use all)")
BAD(ids_negative, BASE "devices:\n  ids: [0, -1]\n", 5, 12,
    "devices.ids[1]: expected an integer >= 0, got \"-1\"")
BAD(ids_duplicate, BASE "devices:\n  ids: [0, 1, 0]\n", 5, 15,
    "devices.ids[2]: device 0 is listed twice")
BAD(ids_word, BASE "devices:\n  ids: [abc]\n", 5, 9,
    "devices.ids[0]: expected a device index (integer >= 0) or a GPU UUID (\"GPU-...\"), got "
    "\"abc\"")
BAD(per_worker_zero, BASE "devices:\n  per_worker: 0\n", 5, 15,
    "devices.per_worker: expected an integer >= 1, got \"0\"")
BAD(devices_unknown, BASE "devices:\n  kinds: cuda\n", 5, 3,
    "devices.kinds: unknown key (did you mean \"kind\"?)")
BAD(devices_scalar, BASE "devices: cuda\n", 4, 10, "devices: expected a mapping, got \"cuda\"")

/* resources */
#define RW BASE "resources:\n  worker:\n    "
BAD(memory_gb, RW "memory: 8GB\n", 6, 13,
    "resources.worker.memory: \"8GB\" is not a memory quantity (use 8Gi or 8G)")
BAD(memory_gib, RW "memory: 8GiB\n", 6, 13,
    "resources.worker.memory: \"8GiB\" is not a memory quantity (use 8Gi)")
BAD(memory_lower_m, RW "memory: 512m\n", 6, 13,
    "resources.worker.memory: \"512m\" is not a memory quantity (did you mean 512Mi?)")
BAD(memory_zero, RW "memory: 0\n", 6, 13, "resources.worker.memory: must be greater than 0")
BAD(memory_negative, RW "memory: -1Gi\n", 6, 13,
    "resources.worker.memory: \"-1Gi\" is not a memory quantity (it must not be negative)")
BAD(memory_huge, RW "memory: 99999999Ti\n", 6, 13,
    "resources.worker.memory: \"99999999Ti\" is too large")
BAD(memory_word, RW "memory: lots\n", 6, 13,
    "resources.worker.memory: \"lots\" is not a memory quantity (examples: 8Gi, 512Mi, 2G, "
    "1073741824)")
BAD(memory_list, RW "memory: [1]\n", 6, 13,
    "resources.worker.memory: expected a memory quantity (e.g. 8Gi), got a list")
BAD(memory_high_above, RW "memory: 8Gi\n    memory_high: 9Gi\n", 7, 18,
    "resources.worker.memory_high: \"9Gi\" is above resources.worker.memory (\"8Gi\")")
BAD(memory_high_zero, RW "memory_high: 0\n", 6, 18,
    "resources.worker.memory_high: must be greater than 0")
BAD(swap_word, RW "swap: some\n", 6, 11,
    "resources.worker.swap: \"some\" is not a memory quantity (examples: 8Gi, 512Mi, 2G, "
    "1073741824)")
BAD(cpus_zero, RW "cpus: 0\n", 6, 11,
    "resources.worker.cpus: \"0\" is not a CPU quantity (it must be greater than 0)")
BAD(cpus_precise, RW "cpus: 0.0005\n", 6, 11,
    "resources.worker.cpus: \"0.0005\" is too precise (at most 3 decimals: 0.001 = 1m)")
BAD(cpus_milli_decimal, RW "cpus: 1.5m\n", 6, 11,
    "resources.worker.cpus: \"1.5m\" is not a CPU quantity (examples: 4, 0.5, 500m)")
BAD(cpus_negative, RW "cpus: -1\n", 6, 11,
    "resources.worker.cpus: \"-1\" is not a CPU quantity (it must be greater than 0)")
BAD(cpuset_descending, RW "cpuset: 7-0\n", 6, 13,
    "resources.worker.cpuset: \"7-0\" is not a CPU list (range 7-0 is descending)")
BAD(cpuset_syntax, RW "cpuset: \"0-7,,8\"\n", 6, 13,
    "resources.worker.cpuset: \"0-7,,8\" is not a CPU list (expected auto, none or a list like "
    "\"0-7,16\")")
BAD(cpuset_range, RW "cpuset: 5000\n", 6, 13,
    "resources.worker.cpuset: CPU 5000 is out of range (at most 1023)")
BAD(pids_zero, RW "pids: 0\n", 6, 11, "resources.worker.pids: expected an integer >= 1, got \"0\"")
BAD(worker_typo, RW "memroy: 1Gi\n", 6, 5,
    "resources.worker.memroy: unknown key (did you mean \"memory\"?)")
BAD(shared_exec, BASE "resources:\n  shared:\n    memory: 1Gi\n", 6, 13,
    "resources.shared.memory: only valid with start: fork")
BAD(job_memory_zero, BASE "resources:\n  job: {memory: 0}\n", 5, 17,
    "resources.job.memory: must be greater than 0")
BAD(resources_typo, BASE "resources:\n  workers: {}\n", 5, 3,
    "resources.workers: unknown key (did you mean \"worker\"?)")

/* start, isolation, on_failure, timeout, logs, report, distributed */
BAD(start_spawn, BASE "start: spawn\n", 4, 8, "start: expected one of exec, fork, got \"spawn\"")
BAD(cgroups_maybe, BASE "isolation: {cgroups: maybe}\n", 4, 22,
    "isolation.cgroups: expected one of auto, required, optional, off, got \"maybe\"")
BAD(cgroup_manager_bad, BASE "isolation: {cgroup_manager: docker}\n", 4, 29,
    "isolation.cgroup_manager: expected one of auto, cgroupfs, systemd, got \"docker\"")
BAD(cgroups_false, BASE "isolation: {cgroups: false}\n", 4, 22,
    "isolation.cgroups: expected one of auto, required, optional, off, got \"false\" (did you mean "
    "\"off\"?)")
BAD(seccomp_false, BASE "isolation: {seccomp: false}\n", 4, 22,
    "isolation.seccomp: expected default, strict, off or a profile path, got \"false\" (did you "
    "mean \"off\"?)")
BAD(seccomp_empty, BASE "isolation: {seccomp: \"\"}\n", 4, 22,
    "isolation.seccomp: must not be empty")
BAD(no_new_privs_no, BASE "isolation: {no_new_privs: no}\n", 4, 27,
    "isolation.no_new_privs: expected true or false, got \"no\" (write false)")
BAD(devices_word, BASE "isolation: {devices: workers}\n", 4, 22,
    "isolation.devices: expected one of job, worker, off, got \"workers\" (did you mean "
    "\"worker\"?)")
BAD(devices_no, BASE "isolation: {devices: no}\n", 4, 22,
    "isolation.devices: expected one of job, worker, off, got \"no\" (did you mean \"off\"?)")
BAD(devices_quoted_true, BASE "isolation: {devices: \"true\"}\n", 4, 22,
    "isolation.devices: expected one of job, worker, off, got the string \"true\"")
BAD(devices_list, BASE "isolation: {devices: [job]}\n", 4, 22,
    "isolation.devices: expected one of job, worker, off, got a list")
BAD(action_stop, BASE "on_failure: {action: stop}\n", 4, 22,
    "on_failure.action: expected one of kill-all, continue, got \"stop\"")
BAD(action_typo, BASE "on_failure: {action: kill_all}\n", 4, 22,
    "on_failure.action: expected one of kill-all, continue, got \"kill_all\" (did you mean "
    "\"kill-all\"?)")
BAD(grace_no_unit, BASE "on_failure: {grace: 10}\n", 4, 21,
    "on_failure.grace: \"10\" has no unit (write 10s)")
BAD(grace_fraction, BASE "on_failure: {grace: 1.5s}\n", 4, 21,
    "on_failure.grace: \"1.5s\" is not a duration (use whole numbers, e.g. 1500ms or 1m30s)")
BAD(restarts_negative, BASE "on_failure: {restarts: -1}\n", 4, 24,
    "on_failure.restarts: expected an integer >= 0, got \"-1\"")
BAD(timeout_bad_unit, BASE "timeout: 1h30x\n", 4, 10,
    "timeout: \"1h30x\" is not a duration (examples: 90s, 30m, 1h30m, 250ms)")
BAD(timeout_negative, BASE "timeout: -5s\n", 4, 10,
    "timeout: \"-5s\" is not a duration (it must not be negative)")
BAD(timeout_map, BASE "timeout: {s: 1}\n", 4, 10,
    "timeout: expected a duration (e.g. 90s, 1h30m), got a mapping")
BAD(console_pretty, BASE "logs: {console: pretty}\n", 4, 17,
    "logs.console: expected one of prefix, raw, rank0, none, got \"pretty\"")
BAD(tail_negative, BASE "logs: {tail: -1}\n", 4, 14,
    "logs.tail: expected an integer >= 0, got \"-1\"")
BAD(log_dir_list, BASE "logs: {dir: [a]}\n", 4, 13, "logs.dir: expected a string, got a list")
BAD(report_map, BASE "report: {a: 1}\n", 4, 9, "report: expected a string, got a mapping")
BAD(nnodes_zero, BASE "distributed: {nnodes: 0}\n", 4, 23,
    "distributed.nnodes: expected an integer >= 1 or \"auto\", got \"0\"")
BAD(node_rank_too_big, BASE "distributed: {nnodes: 2, node_rank: 2}\n", 4, 37,
    "distributed.node_rank: node_rank 2 must be less than nnodes 2")
BAD(port_big, BASE "distributed: {master_port: 70000}\n", 4, 28,
    "distributed.master_port: 70000 is too large (maximum 65535)")
BAD(port_zero, BASE "distributed: {master_port: 0}\n", 4, 28,
    "distributed.master_port: expected an integer from 1 to 65535, got \"0\"")
BAD(master_addr_empty, BASE "distributed: {master_addr: ''}\n", 4, 28,
    "distributed.master_addr: must not be empty")

/* keys and YAML structure */
BAD(top_typo, BASE "worker: 4\n", 4, 1, "worker: unknown key (did you mean \"workers\"?)")
BAD(top_unknown, BASE "foo: 1\n", 4, 1, "foo: unknown key")
BAD(wrong_level, BASE "memory: 8Gi\n", 4, 1,
    "memory: unknown key here (did you mean \"resources.worker.memory\"?)")
BAD(wrong_level_nested, BASE "resources:\n  worker:\n    grace: 5s\n", 6, 5,
    "resources.worker.grace: unknown key here (did you mean \"on_failure.grace\"?)")
BAD(top_case, BASE "Timeout: 5s\n", 4, 1, "Timeout: unknown key (did you mean \"timeout\"?)")
BAD(tab_indent, BASE "resources:\n  worker:\n\tmemory: 1Gi\n", 6, 1,
    "invalid YAML: tabs are not allowed for indentation; use spaces")
BAD(duplicate_key, "version: 1\nname: a\ncommand: x\nname: b\n", 4, 1,
    "name: duplicate key (first defined at line 2)")
BAD(duplicate_nested, BASE "resources:\n  worker:\n    memory: 1Gi\n    memory: 2Gi\n", 7, 5,
    "resources.worker.memory: duplicate key (first defined at line 6)")
BAD(two_documents, BASE "---\nversion: 1\n", 4, 1,
    "the spec must be a single YAML document (a second one starts here)")
BAD(empty_file, "", 1, 1,
    "empty spec: a job spec is a mapping with at least version, name and command")
BAD(only_comments, "# a comment\n\n# another\n", 1, 1,
    "empty spec: a job spec is a mapping with at least version, name and command")
BAD(top_list, "- version: 1\n", 1, 1,
    "the spec must be a mapping of keys (version, name, command, ...), got a list")
BAD(top_scalar, "hello\n", 1, 1,
    "the spec must be a mapping of keys (version, name, command, ...), got \"hello\"")
BAD(bad_utf8, "version: 1\nname: a\xff\ncommand: x\n", 2, 8,
    "invalid YAML: invalid leading UTF-8 octet (the spec must be UTF-8 text)")
BAD(nul_byte, "version: 1\nname: a\0b\ncommand: x\n", 2, 8,
    "invalid YAML: control characters are not allowed")
BAD(unknown_alias, BASE "workers: *n\n", 4, 10, "invalid YAML: unknown alias *n")
BAD(merge_scalar, BASE "resources:\n  <<: 1\n", 5, 7,
    "resources.<<: a merge key takes a mapping or a list of mappings")
BAD(unclosed_quote, "version: 1\nname: \"abc\ncommand: x\n", 4, 1,
    "invalid YAML: found unexpected end of stream (while scanning a quoted scalar at line 2, "
    "column 7)")
BAD(empty_key, BASE "resources:\n  \"\": 1\n", 5, 3, "resources.\"\": unknown key")
BAD(list_key, BASE "? [a]\n: 1\n", 4, 3, "keys must be plain strings, not lists")
BAD(bad_indent, "version: 1\n  name: a\n", 2, 7,
    "invalid YAML: mapping values are not allowed in this context")

/* ---- several errors at once, and the cap ---- */

Test(multi, all_errors_reported_in_order)
{
    struct xmp_spec spec;
    struct xmp_diags d;
    const char *yaml = "version: 2\n"
                       "name: a b\n"
                       "command: []\n"
                       "workers: 0\n"
                       "resources:\n"
                       "  worker:\n"
                       "    memroy: 1Gi\n"
                       "    memory: 8GB\n";

    cr_assert_eq(load_sets(yaml, NULL, 0, &spec, &d), -1);
    cr_assert_eq(d.count, 6);
    cr_expect_eq(d.dropped, 0);
    cr_expect_eq(d.items[0].line, 1);
    cr_expect_str_eq(d.items[0].msg,
                     "version: unsupported version 2 (this xmprun reads version 1)");
    cr_expect_eq(d.items[1].line, 2);
    cr_expect_eq(d.items[2].line, 3);
    cr_expect_str_eq(d.items[2].msg, "command: must not be an empty list");
    cr_expect_eq(d.items[3].line, 4);
    cr_expect_eq(d.items[4].line, 7);
    cr_expect_str_eq(d.items[4].msg,
                     "resources.worker.memroy: unknown key (did you mean \"memory\"?)");
    cr_expect_eq(d.items[5].line, 8);
    cr_expect_eq(d.items[5].col, 13);
    cr_expect_str_eq(d.items[5].msg,
                     "resources.worker.memory: \"8GB\" is not a memory quantity (use 8Gi or 8G)");
}

Test(multi, capped_at_twenty)
{
    struct xmp_spec spec;
    struct xmp_diags d;
    char yaml[4096];
    size_t o = 0;

    o += (size_t)snprintf(yaml + o, sizeof(yaml) - o, BASE "env:\n");
    for (int i = 0; i < 25; i++)
        o += (size_t)snprintf(yaml + o, sizeof(yaml) - o, "  %dX: v\n", i);
    cr_assert_eq(load_sets(yaml, NULL, 0, &spec, &d), -1);
    cr_expect_eq(d.count, XMP_SPEC_MAX_ERRORS);
    cr_expect_eq(d.dropped, 5);
    for (size_t i = 0; i < d.count; i++)
        cr_expect_eq(d.items[i].line, 5 + (int)i);
    cr_expect_str_eq(d.items[0].msg, "env.0X: not a valid variable name (letters, digits and _, "
                                     "not starting with a digit)");
}

/* ---- good specs ---- */

Test(good, every_field)
{
    struct xmp_spec s;
    struct xmp_diags d;
    char *yaml = NULL;
    const char *fixtures = getenv("XMPRUN_FIXTURES");

    cr_assert_not_null(fixtures);
    cr_assert(asprintf(&yaml,
                       "version: 1\n"
                       "name: mnist-ddp_2.0\n"
                       "command: [python3, train.py, --epochs, 3, true]\n"
                       "workdir: tmp\n"
                       "env: {OMP_NUM_THREADS: 4, DEBUG: true, EMPTY: '', PI: 3.14}\n"
                       "inherit_env: false\n"
                       "workers: 8\n"
                       "devices:\n"
                       "  kind: cuda\n"
                       "  ids: [0, 3, GPU-8f6a2c1e-1b2c-4d5e-8f90-123456789abc]\n"
                       "  per_worker: 2\n"
                       "resources:\n"
                       "  worker:\n"
                       "    memory: 8Gi\n"
                       "    memory_high: 7.5Gi\n"
                       "    swap: 0\n"
                       "    cpus: \"500m\"\n"
                       "    cpuset: 0-7,16\n"
                       "    pids: 4096\n"
                       "    rlimits: {nofile: 65536, memlock: unlimited, core: 0}\n"
                       "  job:\n"
                       "    memory: 64G\n"
                       "  shared:\n"
                       "    memory: 32Gi\n"
                       "start: fork\n"
                       "isolation:\n"
                       "  cgroups: optional\n"
                       "  cgroup_manager: systemd\n"
                       "  seccomp: %s/seccomp/train.yaml\n"
                       "  no_new_privs: False\n"
                       "  devices: false\n"
                       "  user: nobody\n"
                       "on_failure:\n"
                       "  action: continue\n"
                       "  grace: 1m30s\n"
                       "  restarts: 3\n"
                       "timeout: 1h30m\n"
                       "logs:\n"
                       "  console: rank0\n"
                       "  dir: logs\n"
                       "  tail: 0\n"
                       "report: out/r.json\n"
                       "distributed:\n"
                       "  nnodes: 4\n"
                       "  node_rank: 3\n"
                       "  master_addr: 10.0.0.1\n"
                       "  master_port: 1234\n",
                       fixtures) > 0);

    cr_assert_eq(load_sets(yaml, NULL, 0, &s, &d), 0, "%s", d.count ? d.items[0].msg : "");
    cr_expect_str_eq(s.file, "job.yaml");
    cr_expect_eq(s.version, 1);
    cr_expect_str_eq(s.name, "mnist-ddp_2.0");
    cr_assert_eq(s.command_len, 5);
    cr_expect_str_eq(s.command[0], "python3");
    cr_expect_str_eq(s.command[3], "3");
    cr_expect_str_eq(s.command[4], "true");
    cr_expect_null(s.command[5]);
    cr_expect_not(s.command_shell);
    cr_expect_str_eq(s.workdir, "/tmp");
    cr_assert_eq(s.env_len, 4);
    cr_expect_str_eq(s.env[0].name, "OMP_NUM_THREADS");
    cr_expect_str_eq(s.env[0].value, "4");
    cr_expect_str_eq(s.env[1].value, "true");
    cr_expect_str_eq(s.env[2].value, "");
    cr_expect_str_eq(s.env[3].value, "3.14");
    cr_expect_not(s.inherit_env);
    cr_expect_eq(s.workers, 8);
    cr_expect_eq(s.device_kind, XMP_DEVICE_CUDA);
    cr_assert_eq(s.device_ids_len, 3);
    cr_expect_str_eq(s.device_ids[0], "0");
    cr_expect_str_eq(s.device_ids[1], "3");
    cr_expect_str_eq(s.device_ids[2], "GPU-8f6a2c1e-1b2c-4d5e-8f90-123456789abc");
    cr_expect_null(s.device_ids[3]);
    cr_expect_eq(s.per_worker, 2);
    cr_expect_eq(s.worker.memory, INT64_C(8) << 30);
    cr_expect_eq(s.worker.memory_high, (INT64_C(15) << 30) / 2);
    cr_expect_eq(s.worker.swap, 0);
    cr_expect_eq(s.worker.cpus_milli, 500);
    cr_expect_eq(s.worker.cpuset_mode, XMP_CPUSET_LIST);
    cr_expect_str_eq(s.worker.cpuset, "0-7,16");
    cr_expect_eq(s.worker.pids, 4096);
    cr_expect_eq(s.job_memory, INT64_C(64000000000));
    cr_expect_eq(s.shared_memory, INT64_C(32) << 30);
    cr_expect_eq(s.start, XMP_START_FORK);
    cr_expect_eq(s.cgroups, XMP_CGROUPS_OPTIONAL);
    cr_expect_eq(s.cgroup_manager, XMP_CGROUP_MANAGER_SYSTEMD);
    cr_expect_eq(s.seccomp, XMP_SECCOMP_PROFILE);
    char want[4096];
    snprintf(want, sizeof(want), "%s/seccomp/train.yaml", fixtures);
    cr_expect_str_eq(s.seccomp_profile, want);
    cr_expect_not(s.no_new_privs);
    cr_expect_eq(s.devices, XMP_DEVICES_OFF);
    cr_expect(s.devices_explicit);
    cr_expect_str_eq(s.user, "nobody");
    cr_expect(s.worker.rlimit_set[XMP_RLIMIT_NOFILE]);
    cr_expect_eq(s.worker.rlimit[XMP_RLIMIT_NOFILE], 65536);
    cr_expect_eq(s.worker.rlimit[XMP_RLIMIT_MEMLOCK], RLIM_INFINITY);
    cr_expect(s.worker.rlimit_set[XMP_RLIMIT_CORE]);
    cr_expect_eq(s.worker.rlimit[XMP_RLIMIT_CORE], 0);
    cr_expect_not(s.worker.rlimit_set[XMP_RLIMIT_STACK]);
    /* The profile file, validated and resolved with the spec. */
    cr_expect_eq(s.seccomp_rules.default_action, XMP_SCMP_ALLOW);
    cr_expect_eq(s.seccomp_rules.n_rules, 8);
    cr_expect_eq(s.seccomp_rules.rules[0].action, XMP_SCMP_KILL);
    cr_expect_eq(s.seccomp_rules.rules[6].errnum, 38);
    cr_expect_eq(s.seccomp_rules.rules[7].action, XMP_SCMP_LOG);
    cr_expect_eq(s.on_failure, XMP_FAILURE_CONTINUE);
    cr_expect_eq(s.grace_ms, 90000);
    cr_expect_eq(s.restarts, 3);
    cr_expect_eq(s.timeout_ms, 5400000);
    cr_expect_eq(s.console, XMP_CONSOLE_RANK0);
    cr_expect_str_eq(s.log_dir, "logs");
    cr_expect_eq(s.log_tail, 0);
    cr_expect_str_eq(s.report, "out/r.json");
    cr_expect_eq(s.nnodes, 4);
    cr_expect_eq(s.node_rank, 3);
    cr_expect_str_eq(s.master_addr, "10.0.0.1");
    cr_expect_eq(s.master_port, 1234);
    xmp_spec_free(&s);
    free(yaml);
    cr_expect_null(s.name);
}

Test(good, defaults)
{
    struct xmp_spec s;
    struct xmp_diags d;

    cr_assert_eq(load_sets("version: 1\nname: a\ncommand: echo hi | cat\n", NULL, 0, &s, &d), 0);
    cr_expect_eq(d.count, 0);
    cr_assert_eq(s.command_len, 3);
    cr_expect_str_eq(s.command[0], "/bin/sh");
    cr_expect_str_eq(s.command[1], "-c");
    cr_expect_str_eq(s.command[2], "echo hi | cat");
    cr_expect(s.command_shell);
    cr_expect_str_eq(s.workdir, "/");
    cr_expect_eq(s.env_len, 0);
    cr_expect(s.inherit_env);
    cr_expect_eq(s.workers, 0);
    cr_expect_eq(s.device_kind, XMP_DEVICE_AUTO);
    cr_expect_null(s.device_ids);
    cr_expect_eq(s.per_worker, 1);
    cr_expect_eq(s.worker.memory, -1);
    cr_expect_eq(s.worker.memory_high, -1);
    cr_expect_eq(s.worker.swap, -1);
    cr_expect_eq(s.worker.cpus_milli, -1);
    cr_expect_eq(s.worker.cpuset_mode, XMP_CPUSET_AUTO);
    cr_expect_null(s.worker.cpuset);
    cr_expect_eq(s.worker.pids, -1);
    cr_expect_eq(s.job_memory, -1);
    cr_expect_eq(s.shared_memory, -1);
    cr_expect_eq(s.start, XMP_START_EXEC);
    cr_expect_eq(s.cgroups, XMP_CGROUPS_AUTO);
    cr_expect_eq(s.cgroup_manager, XMP_CGROUP_MANAGER_AUTO);
    cr_expect_eq(s.seccomp, XMP_SECCOMP_DEFAULT);
    cr_expect_null(s.seccomp_profile);
    cr_expect(s.no_new_privs);
    cr_expect_eq(s.devices, XMP_DEVICES_JOB);
    cr_expect_not(s.devices_explicit, "left to its default");
    cr_expect_eq(s.on_failure, XMP_FAILURE_KILL_ALL);
    cr_expect_eq(s.grace_ms, 5000);
    cr_expect_eq(s.restarts, 0);
    cr_expect_eq(s.timeout_ms, 0);
    cr_expect_eq(s.console, XMP_CONSOLE_PREFIX);
    cr_expect_null(s.log_dir);
    cr_expect_eq(s.log_tail, 40);
    cr_expect_null(s.report);
    cr_expect_eq(s.nnodes, 1);
    cr_expect_eq(s.node_rank, 0);
    cr_expect_null(s.master_addr);
    cr_expect_eq(s.master_port, 29500);
    xmp_spec_free(&s);
}

Test(good, auto_words_and_alternatives)
{
    struct xmp_spec s;
    struct xmp_diags d;
    const char *yaml = "version: 1\nname: a\ncommand: [x]\nworkers: auto\n"
                       "devices: {kind: cpu, ids: all}\n"
                       "resources: {worker: {cpuset: none, cpus: 2.5, memory: 1073741824}}\n"
                       "isolation: {cgroups: off, cgroup_manager: cgroupfs, seccomp: off, "
                       "no_new_privs: TRUE}\n"
                       "timeout: 0\nlogs: {dir: '', console: none}\nreport: ''\n"
                       "distributed: {nnodes: auto, node_rank: auto, master_addr: auto}\n";

    cr_assert_eq(load_sets(yaml, NULL, 0, &s, &d), 0, "%s", d.count ? d.items[0].msg : "");
    cr_expect_eq(s.workers, 0);
    cr_expect_eq(s.device_kind, XMP_DEVICE_CPU);
    cr_expect_null(s.device_ids);
    cr_expect_eq(s.worker.cpuset_mode, XMP_CPUSET_NONE);
    cr_expect_eq(s.worker.cpus_milli, 2500);
    cr_expect_eq(s.worker.memory, 1073741824);
    cr_expect_eq(s.cgroups, XMP_CGROUPS_OFF);
    cr_expect_eq(s.cgroup_manager, XMP_CGROUP_MANAGER_CGROUPFS);
    cr_expect_eq(s.seccomp, XMP_SECCOMP_OFF);
    cr_expect(s.no_new_privs);
    cr_expect_eq(s.timeout_ms, 0);
    cr_expect_null(s.log_dir);
    cr_expect_eq(s.console, XMP_CONSOLE_NONE);
    cr_expect_null(s.report);
    cr_expect_eq(s.nnodes, -1);
    cr_expect_eq(s.node_rank, -1);
    cr_expect_null(s.master_addr);
    xmp_spec_free(&s);
}

/* isolation.devices: job, worker and off, the booleans it was before (true = job, false = off),
 * from the spec or --set; either way it is then explicit. */
Test(good, devices_modes)
{
    static const struct {
        const char *yaml, *set;
        enum xmp_devices_mode want;
    } cases[] = {
        {"job", NULL, XMP_DEVICES_JOB},
        {"worker", NULL, XMP_DEVICES_WORKER},
        {"off", NULL, XMP_DEVICES_OFF},
        {"true", NULL, XMP_DEVICES_JOB},
        {"True", NULL, XMP_DEVICES_JOB},
        {"false", NULL, XMP_DEVICES_OFF},
        {"'worker'", NULL, XMP_DEVICES_WORKER},
        {NULL, "isolation.devices=worker", XMP_DEVICES_WORKER},
        {NULL, "isolation.devices=false", XMP_DEVICES_OFF},
        {"worker", "isolation.devices=job", XMP_DEVICES_JOB},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct xmp_spec s;
        struct xmp_diags d;
        char *yaml = NULL;
        char *sets[] = {(char *)cases[i].set};
        if (cases[i].yaml != NULL)
            cr_assert(asprintf(&yaml,
                               "version: 1\nname: a\ncommand: [x]\nisolation: {devices: %s}\n",
                               cases[i].yaml) > 0);
        else
            cr_assert(asprintf(&yaml, "version: 1\nname: a\ncommand: [x]\n") > 0);
        cr_assert_eq(load_sets(yaml, sets, cases[i].set != NULL, &s, &d), 0, "case %zu: %s", i,
                     d.count ? d.items[0].msg : "");
        cr_expect_eq(s.devices, cases[i].want, "case %zu", i);
        cr_expect(s.devices_explicit, "case %zu", i);
        xmp_spec_free(&s);
        free(yaml);
    }
}

/* Integers are decimal with an optional sign, as YAML 1.2 reads them. */
Test(good, signed_integers)
{
    struct xmp_spec s;
    struct xmp_diags d;

    cr_assert_eq(load_sets(BASE "workers: +10\non_failure: {restarts: +3}\n", NULL, 0, &s, &d), 0,
                 "%s", d.count ? d.items[0].msg : "");
    cr_expect_eq(s.workers, 10);
    cr_expect_eq(s.restarts, 3);
    xmp_spec_free(&s);
}

Test(good, anchors_aliases_and_merge_keys)
{
    struct xmp_spec s;
    struct xmp_diags d;
    const char *yaml = "version: 1\nname: a\n"
                       "command: &cmd [python3, -m, train]\n"
                       "env:\n"
                       "  <<: &common {A: '1', B: '2'}\n"
                       "  B: override\n"
                       "resources:\n"
                       "  worker: &w {memory: 2Gi, memory_high: 1Gi}\n"
                       "  job: {memory: 4Gi}\n"
                       "seccomp_anchor_free: &x 1\n";

    /* The last key is unknown: aliases do not make unknown keys acceptable. */
    cr_assert_eq(load_sets(yaml, NULL, 0, &s, &d), -1);
    cr_expect_str_eq(d.items[0].msg, "seccomp_anchor_free: unknown key");
    cr_assert_eq(load_sets("version: 1\nname: a\ncommand: &cmd [python3, -m, train]\n"
                           "env:\n  <<: &common {A: '1', B: '2'}\n  B: override\n"
                           "report: *cmd\n",
                           NULL, 0, &s, &d),
                 -1);
    cr_expect_str_eq(d.items[0].msg, "report: expected a string, got a list");
    cr_expect_eq(d.items[0].line, 7);
    cr_assert_eq(load_sets("version: 1\nname: &n a\ncommand: [*n, *n]\n"
                           "env:\n  <<: &common {A: '1', B: '2'}\n  B: override\n",
                           NULL, 0, &s, &d),
                 0);
    cr_expect_str_eq(s.command[1], "a");
    cr_assert_eq(s.env_len, 2);
    cr_expect_str_eq(s.env[0].name, "B");
    cr_expect_str_eq(s.env[0].value, "override");
    cr_expect_str_eq(s.env[1].name, "A");
    cr_expect_str_eq(s.env[1].value, "1");
    xmp_spec_free(&s);
}
