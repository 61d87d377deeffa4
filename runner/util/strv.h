/* NULL-terminated, malloc'd string vectors, shared by every stage of runner/ (an environment,
 * a host list). */
#ifndef XMP_STRV_H
#define XMP_STRV_H

/* Frees the vector and its strings; NULL is allowed. */
void xmp_strv_free(char **v);
/* Sets NAME=value in env (malloc'd, NULL-terminated, as above), replacing an entry of that name.
 * Returns env or its grown copy; on failure env stays as it was. */
char **xmp_strv_setenv(char **env, const char *name, const char *value);

#endif
