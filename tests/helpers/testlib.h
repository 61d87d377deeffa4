/* Shared helpers for the Criterion tests: run the real xmprun binary with captured output, write
 * temporary spec files, validate JSON against the schemas with an independent validator. */
#ifndef XMP_TESTLIB_H
#define XMP_TESTLIB_H

#include <stddef.h>

struct xt_result {
    int status; /* exit code, or 128+n when killed by signal n */
    char *out;  /* captured stdout, NUL-terminated */
    char *err;  /* captured stderr, NUL-terminated */
};

/* Paths from the environment ctest sets (XMPRUN_BIN, XMPRUN_PROBE, XMPRUN_SOURCE_DIR,
 * XMPRUN_FIXTURES); abort the test with a clear message when unset. */
const char *xt_bin(void);
const char *xt_probe(void);
const char *xt_source_dir(void);
const char *xt_fixtures(void);

/* Runs argv (argv[0] is the program path) with extra "NAME=VALUE" entries laid over the current
 * environment (envp may be NULL), in directory cwd (NULL: current), with a wall-clock limit in
 * seconds after which the whole process group is SIGKILLed (status 137). */
int xt_run(struct xt_result *r, char *const argv[], char *const envp[], const char *cwd,
           int timeout_s);
void xt_result_free(struct xt_result *r);

/* A fresh directory under /tmp for this test (removed by xt_tmpdir_remove), and a file in it. */
char *xt_tmpdir(void);
char *xt_write_file(const char *dir, const char *name, const char *text);
char *xt_read_file(const char *path); /* NULL if unreadable */
/* Splits text in place at its newlines into lines (at most max, empty ones skipped), as the
 * report keeps a worker's stderr tail. Returns how many. */
size_t xt_split_lines(char *text, char **lines, size_t max);
void xt_tmpdir_remove(const char *dir);

/* Validates the JSON file against schemas/<schema> with Debian's python3-jsonschema. Returns 0
 * when valid, else -1 with the validator's message in msg. */
int xt_validate_json(const char *schema, const char *json_path, char *msg, size_t msg_size);

#endif
