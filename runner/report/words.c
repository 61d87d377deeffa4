/* What a worker (or the zygote) said of its own failure: the message of its torchelastic error
 * file, the last line of a Python traceback in its stderr tail, a shell's complaint about the
 * command. The root cause quotes it: "worker 1 (cpu) exited with status 1: KeyError: 'lr'". */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "runner/report/words.h"

#include <string.h>

const char *
xmp_words_error_file(const struct xmp_worker_report *w)
{
    json_t *m = json_is_object(w->error_file) ? json_object_get(w->error_file, "message") : NULL;

    if (json_is_object(m))
        m = json_object_get(m, "message");
    return json_is_string(m) && json_string_length(m) > 0 ? json_string_value(m) : NULL;
}

bool
xmp_words_is_exception(const char *line)
{
    static const char *const ends[] = {"Error", "Exception", "Interrupt", "Exit"};
    size_t n = strspn(line, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.");

    if (n == 0 || (line[n] != '\0' && strncmp(line + n, ": ", 2) != 0))
        return false;
    for (size_t i = 0; i < sizeof(ends) / sizeof(ends[0]); i++) {
        size_t e = strlen(ends[i]);
        if (n >= e && strncmp(line + n - e, ends[i], e) == 0)
            return true;
    }
    return false;
}

const char *
xmp_words_tail(const struct xmp_worker_report *z, bool *exception)
{
    const char *last = NULL;

    for (size_t i = z->n_tail; i-- > 0;) {
        const char *line = z->stderr_tail[i];
        if (xmp_words_is_exception(line)) {
            *exception = true;
            return line;
        }
        if (last == NULL && line[strspn(line, " \t\r")] != '\0')
            last = line;
    }
    *exception = false;
    return last;
}

/* A shell's or Python's complaint about the command itself, by the status it exits with: 127
 * "sh: 1: pyhton3: not found", 126 "sh: 1: ./data: Permission denied" or "Is a directory", 2
 * "python3: can't open file '/x/train.py': [Errno 2] No such file or directory". */
static bool
is_command_complaint(const char *line, int status)
{
    switch (status) {
    case 127:
        return strstr(line, ": not found") != NULL || strstr(line, "command not found") != NULL ||
               strstr(line, "No such file or directory") != NULL;
    case 126:
        return strstr(line, "Permission denied") != NULL ||
               strstr(line, "Is a directory") != NULL || strstr(line, "cannot execute") != NULL;
    case 2:
        return strstr(line, ": can't open file ") != NULL;
    default:
        return false;
    }
}

const char *
xmp_words_own(const struct xmp_worker_report *w)
{
    const char *m = xmp_words_error_file(w);

    if (m != NULL)
        return m;
    for (size_t i = w->n_tail; i-- > 0;) {
        const char *line = w->stderr_tail[i];
        if (xmp_words_is_exception(line) || is_command_complaint(line, w->exit_code))
            return line;
    }
    return NULL;
}
