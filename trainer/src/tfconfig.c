#include "tfconfig.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_WORKERS 4096

/* Formats one line into err and returns -EINVAL: every refusal below is
 * `return fail(err, errlen, ...)`. */
static int fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -EINVAL;
}

int tfconfig_parse_address(const char *addr, char *host, size_t hostlen, int *port, char *err,
                           size_t errlen)
{
    const char *h = addr, *hend, *p;
    if (addr[0] == '[') {
        h = addr + 1;
        hend = strchr(h, ']');
        if (!hend || hend[1] != ':')
            return fail(err, errlen, "\"%s\": expected [IPv6 address]:port", addr);
        p = hend + 2;
    } else {
        hend = strrchr(addr, ':');
        if (!hend) return fail(err, errlen, "\"%s\": expected host:port", addr);
        if (memchr(addr, ':', (size_t)(hend - addr)))
            return fail(err, errlen, "\"%s\": an IPv6 address must be written [address]:port",
                        addr);
        p = hend + 1;
    }
    size_t n = (size_t)(hend - h);
    if (n == 0 || n >= hostlen)
        return fail(err, errlen, "\"%s\": host is empty or longer than %zu characters", addr,
                    hostlen - 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)h[i];
        if (!isalnum(ch) && ch != '.' && ch != '-' && ch != '_' && !(addr[0] == '[' && ch == ':'))
            return fail(err, errlen, "\"%s\": host has an invalid character '%c'", addr, ch);
    }
    while (*p == ' ') p++; /* the tutorials write "localhost: 12345" */
    long v = 0;
    const char *d = p;
    while (isdigit((unsigned char)*d) && v <= 65535) v = v * 10 + (*d++ - '0');
    if (d == p || *d != '\0' || v < 1 || v > 65535)
        return fail(err, errlen, "\"%s\": port must be a number from 1 to 65535", addr);
    memcpy(host, h, n);
    host[n] = '\0';
    *port = (int)v;
    return 0;
}

/* Appends the string entries of `list` (cluster.<name>) to peers from index *count. */
static int parse_list(const cJSON *list, const char *name, TfPeer *peers, int *count, char *err,
                      size_t errlen)
{
    if (!cJSON_IsArray(list))
        return fail(err, errlen, "TF_CONFIG cluster.%s: expected a list of \"host:port\" strings",
                    name);
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, list)
    {
        if (!cJSON_IsString(e))
            return fail(err, errlen, "TF_CONFIG cluster.%s[%d]: expected a \"host:port\" string",
                        name, i);
        char why[384];
        TfPeer *p = &peers[*count];
        if (tfconfig_parse_address(e->valuestring, p->host, sizeof p->host, &p->port, why,
                                   sizeof why) < 0)
            return fail(err, errlen, "TF_CONFIG cluster.%s[%d]: %s", name, i, why);
        (*count)++;
        i++;
    }
    return 0;
}

/* The cluster object of TF_CONFIG (root): *worker and *chief, its lists (NULL when
 * absent, not both), and their lengths. Only these two task types are taken, the chief
 * list has exactly one entry, and 1 to MAX_WORKERS entries in all. */
static int cluster_lists(const cJSON *root, const cJSON **worker, const cJSON **chief, int *nworker,
                         int *nchief, char *err, size_t errlen)
{
    const cJSON *cluster = cJSON_GetObjectItemCaseSensitive(root, "cluster");
    if (!cJSON_IsObject(cluster))
        return fail(err, errlen, "TF_CONFIG cluster: expected an object with a \"worker\" list");
    const cJSON *e;
    *worker = *chief = NULL;
    cJSON_ArrayForEach(e, cluster)
    {
        if (strcmp(e->string, "worker") == 0) *worker = e;
        else if (strcmp(e->string, "chief") == 0) *chief = e;
        else if (strcmp(e->string, "ps") == 0 || strcmp(e->string, "evaluator") == 0)
            return fail(err, errlen,
                        "TF_CONFIG cluster.%s: the trainer runs synchronous all-reduce only "
                        "(MultiWorkerMirroredStrategy); remove the %s entries",
                        e->string, e->string);
        else
            return fail(err, errlen,
                        "TF_CONFIG cluster.%s: unknown task type (expected worker "
                        "or chief)",
                        e->string);
    }
    if (!*worker && !*chief) return fail(err, errlen, "TF_CONFIG cluster.worker: missing");
    if (*worker && !cJSON_IsArray(*worker))
        return fail(err, errlen,
                    "TF_CONFIG cluster.worker: expected a list of \"host:port\" strings");
    *nworker = *worker ? cJSON_GetArraySize(*worker) : 0;
    *nchief = *chief ? cJSON_GetArraySize(*chief) : 0;
    if (*chief && (!cJSON_IsArray(*chief) || *nchief != 1))
        return fail(err, errlen,
                    "TF_CONFIG cluster.chief: expected a list of exactly one "
                    "\"host:port\" string");
    if (*nworker + *nchief == 0 || *nworker + *nchief > MAX_WORKERS)
        return fail(err, errlen, "TF_CONFIG cluster.worker: expected 1 to %d entries, got %d",
                    MAX_WORKERS, *nworker + *nchief);
    return 0;
}

/* The peers in rank order into peers (room for all): the chief's entry, then the
 * workers'; *count of them. Two ranks at one host:port are refused. */
static int cluster_peers(const cJSON *worker, const cJSON *chief, TfPeer *peers, int *count,
                         char *err, size_t errlen)
{
    int rc;
    *count = 0;
    if ((chief && (rc = parse_list(chief, "chief", peers, count, err, errlen))) ||
        (worker && (rc = parse_list(worker, "worker", peers, count, err, errlen))))
        return rc;
    for (int i = 0; i < *count; i++)
        for (int j = 0; j < i; j++)
            if (peers[i].port == peers[j].port && strcmp(peers[i].host, peers[j].host) == 0)
                return fail(err, errlen, "TF_CONFIG cluster: rank %d and rank %d are both %s:%d", j,
                            i, peers[i].host, peers[i].port);
    return 0;
}

/* This process's rank from TF_CONFIG's task object (root) and the cluster's list
 * lengths (has_chief: the cluster has a chief list): the chief is rank 0, worker i rank
 * nchief + i. index_override >= 0 replaces task.index (--index). */
static int task_rank(const cJSON *root, int index_override, int has_chief, int nworker, int nchief,
                     int *rank, char *err, size_t errlen)
{
    const cJSON *task = cJSON_GetObjectItemCaseSensitive(root, "task");
    if (!cJSON_IsObject(task))
        return fail(err, errlen,
                    "TF_CONFIG task: expected an object {\"type\": \"worker\", "
                    "\"index\": N}");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(task, "type");
    const cJSON *index = cJSON_GetObjectItemCaseSensitive(task, "index");
    if (!cJSON_IsString(type))
        return fail(err, errlen, "TF_CONFIG task.type: expected \"worker\" or \"chief\"");
    int is_chief = strcmp(type->valuestring, "chief") == 0;
    if (strcmp(type->valuestring, "ps") == 0 || strcmp(type->valuestring, "evaluator") == 0)
        return fail(err, errlen,
                    "TF_CONFIG task.type \"%s\": the trainer runs synchronous "
                    "all-reduce only (MultiWorkerMirroredStrategy)",
                    type->valuestring);
    if (!is_chief && strcmp(type->valuestring, "worker") != 0)
        return fail(err, errlen, "TF_CONFIG task.type \"%s\": expected \"worker\" or \"chief\"",
                    type->valuestring);
    if (is_chief && !has_chief)
        return fail(err, errlen, "TF_CONFIG task.type \"chief\": cluster has no chief entry");
    long idx;
    if (index_override >= 0) idx = index_override;
    else if (!index) idx = 0;
    else if (!cJSON_IsNumber(index) || index->valuedouble != floor(index->valuedouble) ||
             index->valuedouble < 0 || index->valuedouble > MAX_WORKERS)
        return fail(err, errlen, "TF_CONFIG task.index: expected a non-negative integer");
    else idx = (long)index->valuedouble;
    int n_of_type = is_chief ? nchief : nworker;
    if (idx >= n_of_type)
        return fail(err, errlen, "%s %ld: cluster.%s has %d entr%s",
                    index_override >= 0 ? "--index" : "TF_CONFIG task.index", idx,
                    is_chief ? "chief" : "worker", n_of_type, n_of_type == 1 ? "y" : "ies");
    *rank = is_chief ? 0 : nchief + (int)idx;
    return 0;
}

int tfconfig_parse(const char *json, int index_override, TfConfig *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (!json || !*json) {
        if (index_override > 0)
            return fail(err, errlen, "--index %d: without TF_CONFIG there is only worker 0",
                        index_override);
        out->world = 1;
        out->peers = calloc(1, sizeof *out->peers);
        if (!out->peers) return -ENOMEM;
        snprintf(out->peers[0].host, sizeof out->peers[0].host, "127.0.0.1");
        return 0;
    }

    const cJSON *worker = NULL, *chief = NULL;
    int rc, nworker = 0, nchief = 0, count = 0, rank = 0;
    TfPeer *peers = NULL;
    cJSON *root = cJSON_Parse(json);
    if (!root || !cJSON_IsObject(root)) {
        rc = fail(err, errlen, "TF_CONFIG: not a JSON object");
        goto err;
    }
    if ((rc = cluster_lists(root, &worker, &chief, &nworker, &nchief, err, errlen))) goto err;
    if (!(peers = calloc((size_t)(nworker + nchief), sizeof *peers))) {
        rc = -ENOMEM;
        goto err;
    }
    if ((rc = cluster_peers(worker, chief, peers, &count, err, errlen)) ||
        (rc = task_rank(root, index_override, chief != NULL, nworker, nchief, &rank, err, errlen)))
        goto err;
    out->world = count;
    out->rank = rank;
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
