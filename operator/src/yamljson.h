/* yamljson — YAML read into cJSON trees and cJSON written out as YAML, with libyaml, so
 * that kubeconfig files and manifests are navigated with the same checked getters as API
 * objects. Mappings become objects, sequences arrays. yamljson_parse (kubeconfig) keeps
 * scalars as strings, except plain (unquoted) true/false which become booleans, so
 * `insecure-skip-tls-verify: true` reads as a boolean; yamljson_parse_manifests types
 * plain scalars as kubectl does (numbers, booleans, null). */
#ifndef KT_YAMLJSON_H
#define KT_YAMLJSON_H

#include <cjson/cJSON.h>
#include <stddef.h>

/* Parses the first document of `text` (len bytes). Returns 0 and *out (the caller
 * frees it with cJSON_Delete; an empty document gives an empty object), -EINVAL with
 * "line L: problem" in err, or -ENOMEM. Aliases are expanded, but a document whose
 * aliases would add more than its own size and more than 1 MiB to the tree (a "billion
 * laughs") is refused with the line of the anchor, before the tree grows past that. */
int yamljson_parse(const char *text, size_t len, cJSON **out, char *err, size_t errlen);

/* Parses every document of a stream of manifests (`---` between them) into *docs, a new
 * cJSON array (the caller frees it), with the aliases of each bounded as above. Plain
 * scalars are typed as kubectl's YAML reader types them: null and ~ (and an empty value)
 * are null; true/false, yes/no, on/off, y/n in their usual cases are booleans; integers
 * (decimal, 0x hexadecimal, leading-0 octal) and decimal floats are numbers; the rest,
 * and every quoted scalar, are strings. Empty documents are left out. Returns 0, -EINVAL
 * with "document N, line L: problem" in err, or -ENOMEM. */
int yamljson_parse_manifests(const char *text, size_t len, cJSON **docs, char *err, size_t errlen);

/* Writes `doc` as one YAML document in block style (a sequence of short scalars in flow
 * style, [a, b]) in the order of its members: a string that the typing above (or YAML 1.1)
 * would read as something else is double-quoted, a multi-line string is a literal block,
 * so that yamljson_parse_manifests and kubectl read back exactly `doc`. Returns a malloc'd
 * NUL-terminated text (the caller frees it), or NULL with the reason in err. */
char *yamljson_emit(const cJSON *doc, char *err, size_t errlen);

#endif
