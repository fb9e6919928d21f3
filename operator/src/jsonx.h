/* jsonx — typed reads of API objects held as cJSON. Every getter checks the type
 * of each step: a field that is absent reads as absent, and a field of the wrong
 * type is logged (once per call) and also reads as absent, so that a malformed
 * object from the API server can never crash the operator.
 *
 * Paths are dotted field names ("status.containerStatuses"); array elements are not
 * addressed by paths. Returned pointers are borrowed from the object. */
#ifndef KT_JSONX_H
#define KT_JSONX_H

#include <cjson/cJSON.h>
#include <stddef.h>

/* The value at `path` if every step is an object, or NULL. */
const cJSON *jsonx_at(const cJSON *o, const char *path);

/* The object at `path`, or NULL (absent, or not an object: logged). */
const cJSON *jsonx_obj(const cJSON *o, const char *path);

/* The array at `path`, or NULL (absent, or not an array: logged). */
const cJSON *jsonx_arr(const cJSON *o, const char *path);

/* The string at `path`, or NULL (absent, or not a string: logged). */
const char *jsonx_str(const cJSON *o, const char *path);

/* The number at `path` if it is an integer that fits in long long; else `dflt`
 * (a non-integer or non-number is logged). */
long long jsonx_int(const cJSON *o, const char *path, long long dflt);

/* The number at `path`, else `dflt` (a non-number is logged). */
double jsonx_num(const cJSON *o, const char *path, double dflt);

/* The boolean at `path`, else `dflt` (a non-boolean is logged). */
int jsonx_bool(const cJSON *o, const char *path, int dflt);

/* The string member `key` of o, taken whole (label and annotation keys contain dots);
 * NULL when absent or not a string (logged). */
const char *jsonx_key_str(const cJSON *o, const char *key);

/* Like jsonx_str but the value is one of `allowed` (NULL-terminated); returns the
 * matching allowed string, `dflt` when absent, NULL when present but not allowed. */
const char *jsonx_enum(const cJSON *o, const char *path, const char *const *allowed,
                       const char *dflt);

/* Returns the object at `path` under `o`, creating missing intermediate objects
 * (replacing a non-object in the way). NULL only on allocation failure. */
cJSON *jsonx_ensure_obj(cJSON *o, const char *path);

/* Replaces (or adds) o[name] with `v`; takes ownership of v. Returns v or NULL
 * (v freed) on failure. */
cJSON *jsonx_set(cJSON *o, const char *name, cJSON *v);

/* Sets o[name] to a copy of the string s. */
cJSON *jsonx_set_str(cJSON *o, const char *name, const char *s);

/* Sets o[name] to the number v. */
cJSON *jsonx_set_num(cJSON *o, const char *name, double v);

/* Sets o[name] to the boolean v. */
cJSON *jsonx_set_bool(cJSON *o, const char *name, int v);

/* Reads of JSON text without parsing it, for an object cJSON cannot parse (nested
 * deeper than CJSON_NESTING_LIMIT) that must still be named: one pass over the bytes, at
 * any depth, no recursion. */

/* The deepest nesting of objects and arrays in the text (1 for {"a":1}, 0 for a scalar). */
size_t jsonx_text_depth(const char *s, size_t n);

/* The string, or the number as written, at the dotted path of objects in the text (the
 * first of duplicate keys) into out (cut to outlen - 1 bytes). Returns 0; -ENOENT when
 * absent, or not a number or a string without escapes. */
int jsonx_text_str(const char *s, size_t n, const char *path, char *out, size_t outlen);

/* 1 when c is JSON whitespace (RFC 8259: space, tab, line feed, carriage return). */
int jsonx_is_space(char c);

#endif
