/* yamljson — a YAML document read into a cJSON tree with libyaml, so that kubeconfig
 * files are navigated with the same checked getters as API objects. Mappings become
 * objects, sequences arrays; scalars stay strings, except plain (unquoted) true/false
 * which become booleans, so `insecure-skip-tls-verify: true` reads as a boolean. */
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

#endif
