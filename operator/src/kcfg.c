/* kcfg — kubeconfig and in-cluster configuration. */
#include "kcfg.h"

#include "jsonx.h"
#include "yamljson.h"

#include <errno.h>
#include <limits.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DEFAULT_SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount"

void kcfg_clear(KubeConfig *c)
{
    if (!c) return;
    free(c->server);
    free(c->namespace);
    free(c->ca_file);
    free(c->cert_file);
    free(c->key_file);
    free(c->ca_data);
    free(c->cert_data);
    free(c->key_data);
    free(c->token);
    free(c->token_file);
    free(c->exec_command);
    for (char **p = c->exec_args; p && *p; p++)
        free(*p);
    free(c->exec_args);
    for (char **p = c->exec_env; p && *p; p++)
        free(*p);
    free(c->exec_env);
    free(c->exec_api_version);
}

void kcfg_free(KubeConfig *c)
{
    if (!c) return;
    kcfg_clear(c);
    free(c);
}

int kcfg_read_file(const char *path, char **out, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return -errno;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t r = fread(buf + n, 1, cap - n - 1, f);
        n += r;
        if (r == 0) break;
        if (n + 1 == cap) {
            if (cap > (64u << 20)) break; /* no kubeconfig or token is this large */
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
    }
    int bad = ferror(f);
    fclose(f);
    if (!buf) return -ENOMEM;
    if (bad) {
        free(buf);
        return -EIO;
    }
    buf[n] = 0;
    *out = buf;
    if (len) *len = n;
    return 0;
}

/* Base64 (with line breaks allowed) into a malloc'd buffer. */
static int b64_decode(const char *in, unsigned char **out, size_t *outlen)
{
    size_t n = strlen(in);
    unsigned char *buf = malloc(n / 4 * 3 + 4);
    if (!buf) return -ENOMEM;
    EVP_ENCODE_CTX *ctx = EVP_ENCODE_CTX_new();
    int l1 = 0, l2 = 0;
    if (!ctx) {
        free(buf);
        return -ENOMEM;
    }
    EVP_DecodeInit(ctx);
    int ok = EVP_DecodeUpdate(ctx, buf, &l1, (const unsigned char *)in, (int)n) >= 0 &&
             EVP_DecodeFinal(ctx, buf + l1, &l2) == 1;
    EVP_ENCODE_CTX_free(ctx);
    if (!ok) {
        free(buf);
        return -EINVAL;
    }
    *out = buf;
    *outlen = (size_t)(l1 + l2);
    return 0;
}

/* A copy of `path`, made absolute against base_dir when relative. */
static char *resolve(const char *base_dir, const char *path)
{
    if (path[0] == '/' || !base_dir || !*base_dir) return strdup(path);
    size_t n = strlen(base_dir) + strlen(path) + 2;
    char *s = malloc(n);
    if (s) snprintf(s, n, "%s/%s", base_dir, path);
    return s;
}

/* The `field` object of the entry named `name` in list `list` ("clusters" ...). */
static const cJSON *named(const cJSON *root, const char *list, const char *name, const char *field)
{
    const cJSON *it;
    cJSON_ArrayForEach(it, jsonx_arr(root, list))
    {
        const char *n = jsonx_str(it, "name");
        if (n && strcmp(n, name) == 0) return jsonx_obj(it, field);
    }
    return NULL;
}

/* Reads "<what>" as a file name or "<what>-data" as base64. */
static int file_or_data(const cJSON *o, const char *what, const char *base_dir, char **file,
                        unsigned char **data, size_t *len, char *err, size_t errlen)
{
    char key[64];
    snprintf(key, sizeof key, "%s-data", what);
    const char *d = jsonx_key_str(o, key);
    const char *f = jsonx_key_str(o, what);
    if (d && *d) {
        if (b64_decode(d, data, len)) {
            snprintf(err, errlen, "%s: not valid base64", key);
            return -EINVAL;
        }
    } else if (f && *f) {
        if (!(*file = resolve(base_dir, f))) return -ENOMEM;
    }
    return 0;
}

static char **string_list(const cJSON *arr, const char *fmt_key, const char *fmt_val)
{
    size_t n = (size_t)cJSON_GetArraySize(arr);
    char **v = calloc(n + 1, sizeof *v);
    size_t k = 0;
    const cJSON *it;
    if (!v) return NULL;
    cJSON_ArrayForEach(it, arr)
    {
        if (!fmt_key) {
            if (cJSON_IsString(it) && !(v[k++] = strdup(it->valuestring))) goto err;
            continue;
        }
        const char *name = jsonx_str(it, fmt_key), *value = jsonx_str(it, fmt_val);
        if (!name || !value) continue;
        size_t len = strlen(name) + strlen(value) + 2;
        if (!(v[k] = malloc(len))) goto err;
        snprintf(v[k++], len, "%s=%s", name, value);
    }
    return v;
err:
    for (size_t i = 0; i < k; i++)
        free(v[i]);
    free(v);
    return NULL;
}

/* Builds the configuration from a parsed kubeconfig; takes ownership of root. */
static int from_tree(cJSON *root, const char *base_dir, const char *source, KubeConfig **out,
                     char *err, size_t errlen)
{
    char perr[256];
    KubeConfig *c = NULL;
    int rc = -EINVAL;
    *out = NULL;
    const char *ctx_name = jsonx_key_str(root, "current-context");
    if (!ctx_name || !*ctx_name) {
        snprintf(err, errlen, "%s: no current-context", source);
        goto err;
    }
    const cJSON *ctx = named(root, "contexts", ctx_name, "context");
    if (!ctx) {
        snprintf(err, errlen, "%s: context \"%s\" not found", source, ctx_name);
        goto err;
    }
    const char *cluster_name = jsonx_str(ctx, "cluster");
    const char *user_name = jsonx_str(ctx, "user");
    const cJSON *cluster = cluster_name ? named(root, "clusters", cluster_name, "cluster") : NULL;
    if (!cluster) {
        snprintf(err, errlen, "%s: cluster \"%s\" of context \"%s\" not found", source,
                 cluster_name ? cluster_name : "", ctx_name);
        goto err;
    }
    const cJSON *user = user_name ? named(root, "users", user_name, "user") : NULL;
    if (user_name && *user_name && !user) {
        snprintf(err, errlen, "%s: user \"%s\" of context \"%s\" not found", source, user_name,
                 ctx_name);
        goto err;
    }
    const char *server = jsonx_str(cluster, "server");
    if (!server || !*server) {
        snprintf(err, errlen, "%s: cluster \"%s\" has no server", source, cluster_name);
        goto err;
    }
    if (!(c = calloc(1, sizeof *c))) goto nomem;
    c->insecure_requested = jsonx_bool(cluster, "insecure-skip-tls-verify", 0);
    snprintf(c->source, sizeof c->source, "%s", source);
    if (!(c->server = strdup(server))) goto nomem;
    size_t sl = strlen(c->server);
    while (sl && c->server[sl - 1] == '/')
        c->server[--sl] = 0;
    const char *ns = jsonx_str(ctx, "namespace");
    if (ns && *ns && !(c->namespace = strdup(ns))) goto nomem;
    if ((rc = file_or_data(cluster, "certificate-authority", base_dir, &c->ca_file, &c->ca_data,
                           &c->ca_len, perr, sizeof perr)) ||
        (rc = file_or_data(user, "client-certificate", base_dir, &c->cert_file, &c->cert_data,
                           &c->cert_len, perr, sizeof perr)) ||
        (rc = file_or_data(user, "client-key", base_dir, &c->key_file, &c->key_data, &c->key_len,
                           perr, sizeof perr))) {
        snprintf(err, errlen, "%s: %s", source, perr);
        goto err;
    }
    rc = -EINVAL;
    const char *token = jsonx_str(user, "token");
    if (token && *token && !(c->token = strdup(token))) goto nomem;
    const char *token_file = jsonx_str(user, "tokenFile");
    if (token_file && *token_file && !(c->token_file = resolve(base_dir, token_file))) goto nomem;
    const cJSON *exec = jsonx_obj(user, "exec");
    if (exec) {
        const char *cmd = jsonx_str(exec, "command");
        if (!cmd || !*cmd) {
            snprintf(err, errlen, "%s: user \"%s\": exec has no command", source, user_name);
            goto err;
        }
        const char *api = jsonx_str(exec, "apiVersion");
        /* A command with a slash is relative to the kubeconfig's directory. */
        if (!(c->exec_command = strchr(cmd, '/') ? resolve(base_dir, cmd) : strdup(cmd)) ||
            !(c->exec_args = string_list(jsonx_arr(exec, "args"), NULL, NULL)) ||
            !(c->exec_env = string_list(jsonx_arr(exec, "env"), "name", "value")) ||
            !(c->exec_api_version = strdup(api ? api : "client.authentication.k8s.io/v1")))
            goto nomem;
    }
    if ((c->cert_file || c->cert_data) != (c->key_file || c->key_data)) {
        snprintf(err, errlen,
                 "%s: user \"%s\": a client certificate needs its key and the key "
                 "its certificate",
                 source, user_name ? user_name : "");
        goto err;
    }
    cJSON_Delete(root);
    *out = c;
    return 0;
nomem:
    snprintf(err, errlen, "%s: out of memory", source);
    rc = -ENOMEM;
err:
    cJSON_Delete(root);
    kcfg_free(c);
    return rc;
}

int kcfg_parse(const char *text, size_t len, const char *base_dir, const char *source,
               KubeConfig **out, char *err, size_t errlen)
{
    char perr[256];
    cJSON *root = NULL;
    *out = NULL;
    int rc = yamljson_parse(text, len, &root, perr, sizeof perr);
    if (rc) {
        snprintf(err, errlen, "%s: %s", source, perr);
        return rc;
    }
    return from_tree(root, base_dir, source, out, err, errlen);
}

/* Makes the relative file names in o[key] absolute against dir. */
static void absolutize_key(cJSON *o, const char *key, const char *dir, int only_with_slash)
{
    cJSON *v = cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;
    if (!cJSON_IsString(v) || !*v->valuestring || v->valuestring[0] == '/') return;
    if (only_with_slash && !strchr(v->valuestring, '/')) return;
    char *abs = resolve(dir, v->valuestring);
    if (abs) jsonx_set_str(o, key, abs);
    free(abs);
}

/* Rewrites every file name in a kubeconfig tree as absolute (relative names are
 * relative to the file that holds them), so that trees of several files can merge. */
static void absolutize(cJSON *root, const char *dir)
{
    cJSON *it;
    cJSON *clusters = cJSON_GetObjectItemCaseSensitive(root, "clusters");
    if (!cJSON_IsArray(clusters)) clusters = NULL;
    cJSON_ArrayForEach(it, clusters)
    {
        absolutize_key(cJSON_GetObjectItemCaseSensitive(it, "cluster"), "certificate-authority",
                       dir, 0);
    }
    cJSON *users = cJSON_GetObjectItemCaseSensitive(root, "users");
    if (!cJSON_IsArray(users)) users = NULL;
    cJSON_ArrayForEach(it, users)
    {
        cJSON *u = cJSON_GetObjectItemCaseSensitive(it, "user");
        absolutize_key(u, "client-certificate", dir, 0);
        absolutize_key(u, "client-key", dir, 0);
        absolutize_key(u, "tokenFile", dir, 0);
        absolutize_key(cJSON_IsObject(u) ? cJSON_GetObjectItemCaseSensitive(u, "exec") : NULL,
                       "command", dir, 1);
    }
}

/* Merges src into dst as kubectl does for $KUBECONFIG: the first file to set
 * current-context wins, and a named cluster, context or user from an earlier file
 * is never replaced. */
static void merge_into(cJSON *dst, const cJSON *src)
{
    const char *cc = jsonx_key_str(src, "current-context");
    const char *have = jsonx_key_str(dst, "current-context");
    if (cc && *cc && !(have && *have)) jsonx_set_str(dst, "current-context", cc);
    static const char *const lists[] = {"clusters", "contexts", "users"};
    for (int i = 0; i < 3; i++) {
        const cJSON *from = jsonx_arr(src, lists[i]);
        if (!from) continue;
        cJSON *to = cJSON_GetObjectItemCaseSensitive(dst, lists[i]);
        if (!cJSON_IsArray(to)) to = jsonx_set(dst, lists[i], cJSON_CreateArray());
        if (!to) return;
        const cJSON *e;
        cJSON_ArrayForEach(e, from)
        {
            const char *name = jsonx_str(e, "name");
            if (!name) continue;
            int dup = 0;
            const cJSON *x;
            cJSON_ArrayForEach(x, to)
            {
                const char *n = jsonx_str(x, "name");
                dup |= n && strcmp(n, name) == 0;
            }
            if (!dup) cJSON_AddItemToArray(to, cJSON_Duplicate(e, 1));
        }
    }
}

/* The directory of a file name, into dir. */
static void dir_of(const char *path, char *dir, size_t n)
{
    snprintf(dir, n, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash == dir)
        dir[1] = 0;
    else if (slash)
        *slash = 0;
    else
        snprintf(dir, n, ".");
}

/* Loads and merges every readable file of a colon-separated list. -ENOENT when none is. */
static int load_list(const char *list_env, KubeConfig **out, char *err, size_t errlen)
{
    char *list = strdup(list_env), *save = NULL;
    cJSON *merged = cJSON_CreateObject();
    int nfiles = 0, rc = 0;
    char source[512] = "";
    if (!list || !merged) {
        free(list);
        cJSON_Delete(merged);
        return -ENOMEM;
    }
    for (char *p = strtok_r(list, ":", &save); p && !rc; p = strtok_r(NULL, ":", &save)) {
        if (access(p, R_OK) != 0) continue;
        char *text, perr[256], dir[PATH_MAX];
        size_t len;
        cJSON *tree = NULL;
        if ((rc = kcfg_read_file(p, &text, &len))) {
            snprintf(err, errlen, "%s: %s", p, strerror(-rc));
            break;
        }
        rc = yamljson_parse(text, len, &tree, perr, sizeof perr);
        free(text);
        if (rc) {
            snprintf(err, errlen, "%s: %s", p, perr);
            break;
        }
        dir_of(p, dir, sizeof dir);
        absolutize(tree, dir);
        merge_into(merged, tree);
        cJSON_Delete(tree);
        size_t sl = strlen(source);
        snprintf(source + sl, sizeof source - sl, "%s%s", nfiles ? ":" : "", p);
        nfiles++;
    }
    free(list);
    if (rc || nfiles == 0) {
        cJSON_Delete(merged);
        return rc ? rc : -ENOENT;
    }
    return from_tree(merged, NULL, source, out, err, errlen);
}

static int load_file(const char *path, KubeConfig **out, char *err, size_t errlen)
{
    char *text;
    size_t len;
    int rc = kcfg_read_file(path, &text, &len);
    if (rc) {
        snprintf(err, errlen, "%s: %s", path, strerror(-rc));
        return rc;
    }
    char dir[PATH_MAX];
    dir_of(path, dir, sizeof dir);
    rc = kcfg_parse(text, len, dir, path, out, err, errlen);
    free(text);
    return rc;
}

int kcfg_in_cluster(const char *sa_dir, KubeConfig **out, char *err, size_t errlen)
{
    const char *host = getenv("KUBERNETES_SERVICE_HOST");
    const char *port = getenv("KUBERNETES_SERVICE_PORT");
    char path[PATH_MAX];
    *out = NULL;
    if (!host || !*host || !port || !*port) {
        snprintf(err, errlen,
                 "not in a cluster: KUBERNETES_SERVICE_HOST/PORT are not set, and no "
                 "kubeconfig was found (--kubeconfig, $KUBECONFIG, ~/.kube/config)");
        return -ENOENT;
    }
    if (!sa_dir) sa_dir = DEFAULT_SA_DIR;
    KubeConfig *c = calloc(1, sizeof *c);
    if (!c) return -ENOMEM;
    snprintf(c->source, sizeof c->source, "in-cluster");
    size_t n = strlen(host) + strlen(port) + 16;
    if (!(c->server = malloc(n))) goto nomem;
    /* An IPv6 address needs brackets in a URL. */
    snprintf(c->server, n, strchr(host, ':') ? "https://[%s]:%s" : "https://%s:%s", host, port);
    snprintf(path, sizeof path, "%s/token", sa_dir);
    if (!(c->token_file = strdup(path))) goto nomem;
    snprintf(path, sizeof path, "%s/ca.crt", sa_dir);
    if (!(c->ca_file = strdup(path))) goto nomem;
    struct stat st;
    if (stat(c->token_file, &st) != 0) {
        snprintf(err, errlen, "in-cluster: %s: %s", c->token_file, strerror(errno));
        kcfg_free(c);
        return -ENOENT;
    }
    snprintf(path, sizeof path, "%s/namespace", sa_dir);
    char *ns;
    if (kcfg_read_file(path, &ns, NULL) == 0) {
        ns[strcspn(ns, " \r\n")] = 0;
        c->namespace = ns;
    }
    *out = c;
    return 0;
nomem:
    kcfg_free(c);
    snprintf(err, errlen, "out of memory");
    return -ENOMEM;
}

int kcfg_load(const char *path, KubeConfig **out, char *err, size_t errlen)
{
    if (path && *path) return load_file(path, out, err, errlen);
    const char *env = getenv("KUBECONFIG");
    if (env && *env) {
        int rc = load_list(env, out, err, errlen);
        if (rc != -ENOENT) return rc;
    }
    const char *home = getenv("HOME");
    if (home && *home) {
        char p[PATH_MAX];
        snprintf(p, sizeof p, "%s/.kube/config", home);
        if (access(p, R_OK) == 0) return load_file(p, out, err, errlen);
    }
    return kcfg_in_cluster(NULL, out, err, errlen);
}
