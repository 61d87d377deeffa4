/* NULL-terminated string vectors (an environment, a host list): freeing one, setting a
 * variable in one. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* asprintf */
#endif
#include "runner/util/strv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void
xmp_strv_free(char **v)
{
    if (v == NULL)
        return;
    for (char **p = v; *p != NULL; p++)
        free(*p);
    free(v);
}

char **
xmp_strv_setenv(char **env, const char *name, const char *value)
{
    size_t n = 0, len = strlen(name);
    char *entry = NULL, **grown;

    if (env == NULL || asprintf(&entry, "%s=%s", name, value) < 0)
        return env;
    for (; env[n] != NULL; n++) {
        if (strncmp(env[n], name, len) == 0 && env[n][len] == '=') {
            free(env[n]);
            env[n] = entry;
            return env;
        }
    }
    grown = realloc(env, (n + 2) * sizeof(char *));
    if (grown == NULL) {
        free(entry);
        return env;
    }
    grown[n] = entry;
    grown[n + 1] = NULL;
    return grown;
}
