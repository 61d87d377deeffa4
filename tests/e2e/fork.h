/* Helpers shared by the start: fork end-to-end tests (test_fork*.c): a spec that runs the
 * multi-call zygote tests/helpers/zygote.py, and the zygote's checks. */
#ifndef XMP_E2E_FORK_H
#define XMP_E2E_FORK_H

#include "e2e/e2e.h"

#define PY "/usr/bin/python3"

/* job.yaml for zygote.py MODE ARGS (space-separated, given as an argv list: the zygote must
 * be xmprun's own child) with extra spec lines. */
static inline void
fork_spec(struct e2e *e, const char *args, const char *extra)
{
    char *text = NULL, list[2048] = "";
    char *copy = strdup(args), *save = NULL;

    for (char *tok = strtok_r(copy, " ", &save); tok != NULL; tok = strtok_r(NULL, " ", &save)) {
        strncat(list, ", '", sizeof(list) - strlen(list) - 1);
        strncat(list, tok, sizeof(list) - strlen(list) - 1);
        strncat(list, "'", sizeof(list) - strlen(list) - 1);
    }
    free(copy);
    cr_assert_eq(asprintf(&text,
                          "version: 1\nname: fork\nstart: fork\ndevices: {kind: cpu}\n"
                          "command: [" PY ", '%s/tests/helpers/zygote.py'%s]\n%s",
                          xt_source_dir(), list, extra) > 0,
                 1);
    e2e_set_spec(e, text);
}

static inline int64_t
mem_of(json_t *obj, const char *key)
{
    return json_integer_value(json_object_get(json_object_get(obj, "memory"), key));
}

static inline void
need_python(void)
{
    if (!e2e_can_cgroup())
        cr_skip_test("needs root or a delegated cgroup");
    if (access(PY, X_OK) != 0)
        cr_skip_test(PY " is not installed");
}

static inline void
assert_zygote_gone(const struct e2e *e)
{
    json_t *z = json_object_get(e->rep, "zygote");
    cr_assert_not_null(z, "no zygote in the report");
    pid_t pid = (pid_t)json_integer_value(json_object_get(z, "pid"));
    cr_assert(e2e_pid_dead(pid), "the zygote %d is still alive", (int)pid);
}

#endif
