#include "tfconfig.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_WORKERS 4096

int tfconfig_parse_address(const char *addr, char *host, size_t hostlen, int *port, char *err,
                           size_t errlen)
{
    const char *h = addr, *hend, *p;
    if (addr[0] == '[') {
        h = addr + 1;
        hend = strchr(h, ']');
        if (!hend || hend[1] != ':') {
            snprintf(err, errlen, "\"%s\": expected [IPv6 address]:port", addr);
            return -EINVAL;
        }
        p = hend + 2;
    } else {
        hend = strrchr(addr, ':');
        if (!hend) {
            snprintf(err, errlen, "\"%s\": expected host:port", addr);
            return -EINVAL;
        }
        if (memchr(addr, ':', (size_t)(hend - addr))) {
            snprintf(err, errlen, "\"%s\": an IPv6 address must be written [address]:port", addr);
            return -EINVAL;
        }
        p = hend + 1;
    }
    size_t n = (size_t)(hend - h);
    if (n == 0 || n >= hostlen) {
        snprintf(err, errlen, "\"%s\": host is empty or longer than %zu characters", addr,
                 hostlen - 1);
        return -EINVAL;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)h[i];
        if (!isalnum(ch) && ch != '.' && ch != '-' && ch != '_' && !(addr[0] == '[' && ch == ':')) {
            snprintf(err, errlen, "\"%s\": host has an invalid character '%c'", addr, ch);
            return -EINVAL;
        }
    }
    while (*p == ' ') p++; /* the tutorials write "localhost: 12345" */
    long v = 0;
    const char *d = p;
    while (isdigit((unsigned char)*d) && v <= 65535) v = v * 10 + (*d++ - '0');
    if (d == p || *d != '\0' || v < 1 || v > 65535) {
        snprintf(err, errlen, "\"%s\": port must be a number from 1 to 65535", addr);
        return -EINVAL;
    }
    memcpy(host, h, n);
    host[n] = '\0';
    *port = (int)v;
    return 0;
}

/* Appends the string entries of `list` (cluster.<name>) to peers from index *count. */
static int parse_list(const cJSON *list, const char *name, TfPeer *peers, int *count, char *err,
                      size_t errlen)
{
    if (!cJSON_IsArray(list)) {
        snprintf(err, errlen, "TF_CONFIG cluster.%s: expected a list of \"host:port\" strings",
                 name);
        return -EINVAL;
    }
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, list)
    {
        if (!cJSON_IsString(e)) {
            snprintf(err, errlen, "TF_CONFIG cluster.%s[%d]: expected a \"host:port\" string", name,
                     i);
            return -EINVAL;
        }
        char why[384];
        TfPeer *p = &peers[*count];
        if (tfconfig_parse_address(e->valuestring, p->host, sizeof p->host, &p->port, why,
                                   sizeof why) < 0) {
            snprintf(err, errlen, "TF_CONFIG cluster.%s[%d]: %s", name, i, why);
            return -EINVAL;
        }
        (*count)++;
        i++;
    }
    return 0;
}

int tfconfig_parse(const char *json, int index_override, TfConfig *out, char *err,
                   size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (!json || !*json) {
        if (index_override > 0) {
            snprintf(err, errlen, "--index %d: without TF_CONFIG there is only worker 0",
                     index_override);
            return -EINVAL;
        }
        out->world = 1;
        out->peers = calloc(1, sizeof *out->peers);
        if (!out->peers) return -ENOMEM;
        snprintf(out->peers[0].host, sizeof out->peers[0].host, "127.0.0.1");
        return 0;
    }

    int rc = -EINVAL;
    TfPeer *peers = NULL;
    cJSON *root = cJSON_Parse(json);
    if (!root || !cJSON_IsObject(root)) {
        snprintf(err, errlen, "TF_CONFIG: not a JSON object");
        goto err;
    }
    const cJSON *cluster = cJSON_GetObjectItemCaseSensitive(root, "cluster");
    if (!cJSON_IsObject(cluster)) {
        snprintf(err, errlen, "TF_CONFIG cluster: expected an object with a \"worker\" list");
        goto err;
    }
    const cJSON *worker = NULL, *chief = NULL, *e;
    cJSON_ArrayForEach(e, cluster)
    {
        if (strcmp(e->string, "worker") == 0) worker = e;
        else if (strcmp(e->string, "chief") == 0) chief = e;
        else if (strcmp(e->string, "ps") == 0 || strcmp(e->string, "evaluator") == 0) {
            snprintf(err, errlen,
                     "TF_CONFIG cluster.%s: the trainer runs synchronous all-reduce only "
                     "(MultiWorkerMirroredStrategy); remove the %s entries",
                     e->string, e->string);
            goto err;
        } else {
            snprintf(err, errlen, "TF_CONFIG cluster.%s: unknown task type (expected worker or "
                                  "chief)", e->string);
            goto err;
        }
    }
    if (!worker && !chief) {
        snprintf(err, errlen, "TF_CONFIG cluster.worker: missing");
        goto err;
    }
    if (worker && !cJSON_IsArray(worker)) {
        snprintf(err, errlen, "TF_CONFIG cluster.worker: expected a list of \"host:port\" strings");
        goto err;
    }
    int nworker = worker ? cJSON_GetArraySize(worker) : 0;
    int nchief = chief ? cJSON_GetArraySize(chief) : 0;
    if (chief && (!cJSON_IsArray(chief) || nchief != 1)) {
        snprintf(err, errlen, "TF_CONFIG cluster.chief: expected a list of exactly one "
                              "\"host:port\" string");
        goto err;
    }
    if (nworker + nchief == 0 || nworker + nchief > MAX_WORKERS) {
        snprintf(err, errlen, "TF_CONFIG cluster.worker: expected 1 to %d entries, got %d",
                 MAX_WORKERS, nworker + nchief);
        goto err;
    }
    peers = calloc((size_t)(nworker + nchief), sizeof *peers);
    if (!peers) {
        rc = -ENOMEM;
        goto err;
    }
    int count = 0;
    if (chief && parse_list(chief, "chief", peers, &count, err, errlen) < 0) goto err;
    if (worker && parse_list(worker, "worker", peers, &count, err, errlen) < 0) goto err;
    for (int i = 0; i < count; i++)
        for (int j = 0; j < i; j++)
            if (peers[i].port == peers[j].port && strcmp(peers[i].host, peers[j].host) == 0) {
                snprintf(err, errlen, "TF_CONFIG cluster: rank %d and rank %d are both %s:%d", j,
                         i, peers[i].host, peers[i].port);
                goto err;
            }

    const cJSON *task = cJSON_GetObjectItemCaseSensitive(root, "task");
    if (!cJSON_IsObject(task)) {
        snprintf(err, errlen, "TF_CONFIG task: expected an object {\"type\": \"worker\", "
                              "\"index\": N}");
        goto err;
    }
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(task, "type");
    const cJSON *index = cJSON_GetObjectItemCaseSensitive(task, "index");
    if (!cJSON_IsString(type)) {
        snprintf(err, errlen, "TF_CONFIG task.type: expected \"worker\" or \"chief\"");
        goto err;
    }
    int is_chief = strcmp(type->valuestring, "chief") == 0;
    if (strcmp(type->valuestring, "ps") == 0 || strcmp(type->valuestring, "evaluator") == 0) {
        snprintf(err, errlen, "TF_CONFIG task.type \"%s\": the trainer runs synchronous "
                              "all-reduce only (MultiWorkerMirroredStrategy)", type->valuestring);
        goto err;
    }
    if (!is_chief && strcmp(type->valuestring, "worker") != 0) {
        snprintf(err, errlen, "TF_CONFIG task.type \"%s\": expected \"worker\" or \"chief\"",
                 type->valuestring);
        goto err;
    }
    if (is_chief && !chief) {
        snprintf(err, errlen, "TF_CONFIG task.type \"chief\": cluster has no chief entry");
        goto err;
    }
    long idx;
    if (index_override >= 0) idx = index_override;
    else if (!index) idx = 0;
    else if (!cJSON_IsNumber(index) || index->valuedouble != floor(index->valuedouble) ||
             index->valuedouble < 0 || index->valuedouble > MAX_WORKERS) {
        snprintf(err, errlen, "TF_CONFIG task.index: expected a non-negative integer");
        goto err;
    } else idx = (long)index->valuedouble;
    int n_of_type = is_chief ? nchief : nworker;
    if (idx >= n_of_type) {
        snprintf(err, errlen, "%s %ld: cluster.%s has %d entr%s",
                 index_override >= 0 ? "--index" : "TF_CONFIG task.index", idx,
                 is_chief ? "chief" : "worker", n_of_type, n_of_type == 1 ? "y" : "ies");
        goto err;
    }
    out->world = count;
    out->rank = is_chief ? 0 : nchief + (int)idx;
    out->peers = peers;
    cJSON_Delete(root);
    return 0;
err:
    free(peers);
    cJSON_Delete(root);
    return rc;
}

void tfconfig_free(TfConfig *c)
{
    if (!c) return;
    free(c->peers);
    memset(c, 0, sizeof *c);
}
