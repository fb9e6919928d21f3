/* kubeconfig fixtures: context selection, files and inline data, tokens, exec
 * plugins, the search order, in-cluster configuration, malformed input, and aliases
 * (kept, but a "billion laughs" is refused in little time and memory). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "kcfg.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../../trainer/tests/timescale.h"

static char tmpdir[256];

static void write_file(const char *name, const char *text)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", tmpdir, name);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static int setup(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/kt-kcfg-XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static KubeConfig *parse_ok(const char *yaml)
{
    KubeConfig *c = NULL;
    char err[512] = "";
    int rc = kcfg_parse(yaml, strlen(yaml), "/etc/kube", "fixture", &c, err, sizeof err);
    if (rc) fail_msg("kcfg_parse: %s", err);
    return c;
}

static void parse_err(const char *yaml, const char *want_substring)
{
    KubeConfig *c = NULL;
    char err[512] = "";
    int rc = kcfg_parse(yaml, strlen(yaml), "/etc/kube", "fixture", &c, err, sizeof err);
    assert_true(rc < 0);
    assert_null(c);
    if (!strstr(err, want_substring)) fail_msg("error \"%s\" lacks \"%s\"", err, want_substring);
}

/* "hello-ca" and "hello-cert" in base64. */
#define CA_B64 "aGVsbG8tY2E="
#define CERT_B64 "aGVsbG8t\n  Y2VydA=="

/* A kubeconfig's insecure-skip-tls-verify is recorded, never applied: only the caller
 * turns verification off (kubetrain-operator, with its explicit flag). */
static void test_insecure_is_recorded_not_applied(void **state)
{
    (void)state;
    KubeConfig *c = parse_ok(
        "current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\n"
        "clusters: [{name: c, cluster: {server: 'https://h', insecure-skip-tls-verify: true}}]\n");
    assert_int_equal(c->insecure_requested, 1);
    assert_int_equal(c->insecure_skip_tls_verify, 0);
    kcfg_free(c);
    c = parse_ok("current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\n"
                 "clusters: [{name: c, cluster: {server: 'https://h'}}]\n");
    assert_int_equal(c->insecure_requested, 0);
    assert_int_equal(c->insecure_skip_tls_verify, 0);
    kcfg_free(c);
}

static void test_current_context_token_and_data(void **state)
{
    (void)state;
    KubeConfig *c = parse_ok("apiVersion: v1\nkind: Config\n"
                             "current-context: b\n"
                             "clusters:\n"
                             "- name: one\n  cluster: {server: 'https://one:6443'}\n"
                             "- name: two\n  cluster:\n    server: https://two:6443/\n"
                             "    certificate-authority-data: " CA_B64 "\n"
                             "contexts:\n"
                             "- name: a\n  context: {cluster: one, user: u1}\n"
                             "- name: b\n  context: {cluster: two, user: u2, namespace: team}\n"
                             "users:\n"
                             "- name: u1\n  user: {token: wrong}\n"
                             "- name: u2\n  user:\n    token: s3cret\n"
                             "    client-certificate-data: \"" CERT_B64 "\"\n"
                             "    client-key: keys/u2.key\n");
    assert_string_equal(c->server, "https://two:6443");
    assert_string_equal(c->namespace, "team");
    assert_string_equal(c->token, "s3cret");
    assert_int_equal(c->ca_len, 8);
    assert_memory_equal(c->ca_data, "hello-ca", 8);
    assert_int_equal(c->cert_len, 10);
    assert_memory_equal(c->cert_data, "hello-cert", 10);
    assert_null(c->cert_file);
    assert_string_equal(c->key_file, "/etc/kube/keys/u2.key");
    assert_null(c->ca_file);
    kcfg_free(c);
}

static void test_files_token_file_and_exec(void **state)
{
    (void)state;
    KubeConfig *c = parse_ok("current-context: x\n"
                             "clusters: [{name: c, cluster: {server: 'https://h:1', "
                             "certificate-authority: /abs/ca.crt}}]\n"
                             "contexts: [{name: x, context: {cluster: c, user: u}}]\n"
                             "users:\n"
                             "- name: u\n"
                             "  user:\n"
                             "    tokenFile: tok\n"
                             "    exec:\n"
                             "      apiVersion: client.authentication.k8s.io/v1beta1\n"
                             "      command: ./bin/plugin\n"
                             "      args: [get-token, --cluster, c]\n"
                             "      env: [{name: A, value: '1'}, {name: B, value: two}]\n");
    assert_string_equal(c->ca_file, "/abs/ca.crt");
    assert_string_equal(c->token_file, "/etc/kube/tok");
    assert_null(c->token);
    assert_null(c->namespace);
    assert_string_equal(c->exec_command, "/etc/kube/./bin/plugin");
    assert_string_equal(c->exec_api_version, "client.authentication.k8s.io/v1beta1");
    assert_string_equal(c->exec_args[0], "get-token");
    assert_string_equal(c->exec_args[2], "c");
    assert_null(c->exec_args[3]);
    assert_string_equal(c->exec_env[0], "A=1");
    assert_string_equal(c->exec_env[1], "B=two");
    assert_null(c->exec_env[2]);
    kcfg_free(c);
}

static void test_errors_name_the_problem(void **state)
{
    (void)state;
    parse_err("clusters: []\n", "no current-context");
    parse_err("current-context: nope\ncontexts: []\n", "context \"nope\" not found");
    parse_err("current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\n",
              "cluster \"c\" of context \"x\" not found");
    parse_err("current-context: x\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"
              "clusters: [{name: c, cluster: {server: 'https://h'}}]\n"
              "users: [{name: u, user: {client-certificate: a.crt}}]\n",
              "needs its key");
    parse_err("current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\n"
              "clusters: [{name: c, cluster: {server: 'https://h', "
              "certificate-authority-data: '!!notbase64!!'}}]\n",
              "certificate-authority-data: not valid base64");
    parse_err("current-context: x\n  bad: [\n", "line");
    /* Wrong types anywhere read as absent: no crash, an error that names what is missing. */
    parse_err("current-context: [1, 2]\n", "no current-context");
    parse_err("current-context: x\ncontexts: {x: 1}\n", "context \"x\" not found");
    parse_err("current-context: x\ncontexts: [{name: x, context: {cluster: [c]}}]\n", "not found");
    parse_err("current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\n"
              "clusters: [{name: c, cluster: {server: {a: b}}}]\n",
              "has no server");
}

static void test_search_order_and_in_cluster(void **state)
{
    (void)state;
#define KCFG_FMT                                                                                   \
    "current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\n"                           \
    "clusters: [{name: c, cluster: {server: 'https://%s:6443'}}]\n"
    char buf[512], path[512], err[512];
    snprintf(buf, sizeof buf, KCFG_FMT, "explicit");
    write_file("explicit.yaml", buf);
    snprintf(buf, sizeof buf, KCFG_FMT, "env");
    write_file("env.yaml", buf);
    snprintf(path, sizeof path, "%s/.kube", tmpdir);
    mkdir(path, 0700);
    snprintf(buf, sizeof buf, KCFG_FMT, "home");
    write_file(".kube/config", buf);

    KubeConfig *c = NULL;
    snprintf(path, sizeof path, "%s/explicit.yaml", tmpdir);
    char envlist[1000];
    snprintf(envlist, sizeof envlist, "%s/missing.yaml:%s/env.yaml", tmpdir, tmpdir);
    setenv("KUBECONFIG", envlist, 1);
    setenv("HOME", tmpdir, 1);
    assert_int_equal(kcfg_load(path, &c, err, sizeof err), 0);
    assert_string_equal(c->server, "https://explicit:6443");
    kcfg_free(c);
    assert_int_equal(kcfg_load(NULL, &c, err, sizeof err), 0);
    assert_string_equal(c->server, "https://env:6443");
    kcfg_free(c);

    /* Several files merge: the first current-context, the first entry of each name, and
     * relative names resolved against the file that holds them. */
    snprintf(path, sizeof path, "%s/sub", tmpdir);
    mkdir(path, 0700);
    write_file("a.yaml", "current-context: ctx\n"
                         "users: [{name: u, user: {tokenFile: tok}}]\n"
                         "clusters: [{name: c, cluster: {server: 'https://first:1', "
                         "certificate-authority: ca-a.crt}}]\n");
    write_file("sub/b.yaml",
               "current-context: other\n"
               "contexts: [{name: ctx, context: {cluster: c, user: u, namespace: n}}]\n"
               "clusters: [{name: c, cluster: {server: 'https://second:2'}}]\n"
               "users: [{name: u, user: {token: ignored}}, {name: v, user: {}}]\n");
    snprintf(envlist, sizeof envlist, "%s/a.yaml:%s/none.yaml:%s/sub/b.yaml", tmpdir, tmpdir,
             tmpdir);
    setenv("KUBECONFIG", envlist, 1);
    if (kcfg_load(NULL, &c, err, sizeof err)) fail_msg("%s", err);
    assert_string_equal(c->server, "https://first:1");
    assert_string_equal(c->namespace, "n");
    assert_null(c->token);
    char want_path[600];
    snprintf(want_path, sizeof want_path, "%s/tok", tmpdir);
    assert_string_equal(c->token_file, want_path);
    snprintf(want_path, sizeof want_path, "%s/ca-a.crt", tmpdir);
    assert_string_equal(c->ca_file, want_path);
    kcfg_free(c);

    unsetenv("KUBECONFIG");
    assert_int_equal(kcfg_load(NULL, &c, err, sizeof err), 0);
    assert_string_equal(c->server, "https://home:6443");
    kcfg_free(c);

    /* In-cluster: the service account directory and the service env. */
    snprintf(path, sizeof path, "%s/sa", tmpdir);
    mkdir(path, 0700);
    write_file("sa/token", "tok-1\n");
    write_file("sa/ca.crt", "-----BEGIN CERTIFICATE-----\n");
    write_file("sa/namespace", "kubetrain-system");
    unsetenv("KUBERNETES_SERVICE_HOST");
    assert_int_equal(kcfg_in_cluster(path, &c, err, sizeof err), -ENOENT);
    assert_non_null(strstr(err, "KUBERNETES_SERVICE_HOST"));
    setenv("KUBERNETES_SERVICE_HOST", "fd00::1", 1);
    setenv("KUBERNETES_SERVICE_PORT", "443", 1);
    assert_int_equal(kcfg_in_cluster(path, &c, err, sizeof err), 0);
    assert_string_equal(c->server, "https://[fd00::1]:443");
    assert_string_equal(c->namespace, "kubetrain-system");
    char want[512];
    snprintf(want, sizeof want, "%s/sa/token", tmpdir);
    assert_string_equal(c->token_file, want);
    snprintf(want, sizeof want, "%s/sa/ca.crt", tmpdir);
    assert_string_equal(c->ca_file, want);
    kcfg_free(c);
    kcfg_free(NULL);
}

/* Anchors as PyYAML's yaml.dump writes them where one object appears twice: expanded. */
static void test_aliases_are_expanded(void **state)
{
    (void)state;
    KubeConfig *c = parse_ok("current-context: b\n"
                             "clusters:\n"
                             "- name: one\n  cluster: &id001\n    server: https://one:6443\n"
                             "- name: two\n  cluster: *id001\n"
                             "contexts:\n"
                             "- name: a\n  context: {cluster: one, user: u}\n"
                             "- name: b\n  context: {cluster: two, user: u}\n"
                             "users:\n- name: u\n  user: {token: &t s3cret, username: *t}\n");
    assert_string_equal(c->server, "https://one:6443");
    assert_string_equal(c->token, "s3cret");
    kcfg_free(c);
}

/* A "billion laughs": 9 levels of 9 aliases of the level above, 9^9 scalars once
 * expanded (before the bound the converter took 3.8 GB, then failed as if the YAML were
 * malformed). Line 1 is the kubeconfig's, the anchors are on lines 2 to 10. */
static const char *billion_laughs(void)
{
    static char s[4096];
    size_t n = sizeof s, len = 0;
    len += (size_t)snprintf(s + len, n - len, "current-context: x\n");
    len += (size_t)snprintf(s + len, n - len,
                            "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, "
                            "lol]\n");
    for (char c = 'b'; c <= 'i'; c++) {
        len += (size_t)snprintf(s + len, n - len, "%c: &%c [", c, c);
        for (int k = 0; k < 9; k++)
            len += (size_t)snprintf(s + len, n - len, "%s*%c", k ? ", " : "", c - 1);
        len += (size_t)snprintf(s + len, n - len, "]\n");
    }
    snprintf(s + len, n - len, "contexts: [{name: x, context: {cluster: *i}}]\n");
    return s;
}

typedef struct {
    int rc;
    double seconds;
    char err[512];
} BoundedResult;

/* The value of field `key` ("VmData:") of /proc/self/status, in bytes; -1 if absent. */
static long long proc_status_bytes(const char *key)
{
    char line[256];
    long long kb = -1;
    FILE *f = fopen("/proc/self/status", "r");
    while (f && kb < 0 && fgets(line, sizeof line, f))
        if (strncmp(line, key, strlen(key)) == 0) kb = atoll(line + strlen(key));
    if (f) fclose(f);
    return kb < 0 ? -1 : kb * 1024;
}

/* Runs load(arg) in a child whose writable memory may grow by at most `grow` bytes
 * over its size at the fork (RLIMIT_DATA relative to VmData: ASan's shadow and heap
 * reservations are terabytes of it, so an absolute limit, or one on the address space,
 * which ASan's heap grows inside of, would not bound it) and which gets SIGALRM after
 * `seconds`, so that a parser without the bound fails the test at once instead of
 * taking the machine's memory. Returns the child's wait status and its peak RSS in
 * *peak_kib; the result lands in *res. */
static int run_bounded(int (*load)(const char *arg, char *err, size_t errlen), const char *arg,
                       size_t grow, unsigned seconds, BoundedResult *res, long *peak_kib)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        long long now = proc_status_bytes("VmData:");
        struct rlimit rl = {(rlim_t)now + grow, (rlim_t)now + grow};
        if (now < 0 || setrlimit(RLIMIT_DATA, &rl) != 0) _exit(99);
        alarm(seconds);
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        res->rc = load(arg, res->err, sizeof res->err);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        res->seconds = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
        _exit(0);
    }
    int status;
    struct rusage ru;
    assert_int_equal(wait4(pid, &status, 0, &ru), pid);
    *peak_kib = ru.ru_maxrss;
    return status;
}

static int parse_text(const char *text, char *err, size_t errlen)
{
    KubeConfig *c = NULL;
    int rc = kcfg_parse(text, strlen(text), "/etc/kube", "fixture", &c, err, errlen);
    kcfg_free(c);
    return rc;
}

/* kcfg_load on a path, or with the path as $KUBECONFIG when it starts with "env:" (the
 * list's own loader, which merges files). */
static int load_path(const char *path, char *err, size_t errlen)
{
    KubeConfig *c = NULL;
    int rc;
    if (strncmp(path, "env:", 4) == 0) {
        setenv("KUBECONFIG", path + 4, 1);
        rc = kcfg_load(NULL, &c, err, errlen);
    } else {
        rc = kcfg_load(path, &c, err, errlen);
    }
    kcfg_free(c);
    return rc;
}

static void expect_bounded_refusal(int (*load)(const char *, char *, size_t), const char *arg,
                                   const char *want)
{
    BoundedResult *res =
        mmap(NULL, sizeof *res, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(res != MAP_FAILED);
    memset(res, 0, sizeof *res);
    /* 256 MiB more and 5 s: the bounded tree needs a few MiB and milliseconds */
    long peak;
    int status = run_bounded(load, arg, (size_t)256 << 20, (unsigned)scaled(5), res, &peak);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("the billion laughs took its child down (%s %d, peak RSS %ld MiB) instead of "
                 "being refused",
                 WIFSIGNALED(status) ? "signal" : "exit",
                 WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status), peak / 1024);
    print_message("# refused in %.3f s: %s\n", res->seconds, res->err);
    assert_int_equal(res->rc, -EINVAL);
    if (!strstr(res->err, want)) fail_msg("error \"%s\" lacks \"%s\"", res->err, want);
    if (res->seconds > scaled(1.0))
        fail_msg("refusal took %.3f s > %.1f s", res->seconds, scaled(1.0));
    munmap(res, sizeof *res);
}

static void test_billion_laughs_refused(void **state)
{
    (void)state;
    const char *bomb = billion_laughs();
    char path[600], want[1024];
    write_file("laughs.yaml", bomb);
    /* the bound is spent while e's row copies d: the line is d's anchor, that of the
     * outermost node being copied */
    const char *why = ": aliases of the node anchored there add more than the document's own "
                      "size and more than 1 MiB";
    snprintf(want, sizeof want, "fixture: line %d%s", 5, why);
    expect_bounded_refusal(parse_text, bomb, want);
    snprintf(path, sizeof path, "%s/laughs.yaml", tmpdir);
    snprintf(want, sizeof want, "%s: line %d%s", path, 5, why);
    expect_bounded_refusal(load_path, path, want);
    snprintf(path, sizeof path, "env:%s/laughs.yaml", tmpdir);
    expect_bounded_refusal(load_path, path, want);
    /* an alias inside the node it names is a cycle in libyaml's tree */
    parse_err("current-context: x\nusers: &u [{name: u, user: *u}]\n",
              "line 2: nested deeper than 64 levels (or an alias inside the node it names)");
}

static void test_mangled_input_never_crashes(void **state)
{
    (void)state;
    static const char base[] = "current-context: b\n"
                               "clusters:\n"
                               "- name: two\n  cluster:\n    server: https://two:6443/\n"
                               "    certificate-authority-data: " CA_B64 "\n"
                               "contexts:\n"
                               "- name: b\n  context: {cluster: two, user: u2, namespace: team}\n"
                               "users:\n"
                               "- name: u2\n  user:\n    token: s3cret\n"
                               "    exec: {command: x, args: [a], env: [{name: A, value: b}]}\n";
    static const char junk[] = ":-[]{}&*!|>'\"%@`#,?\n \t\\0aZ";
    uint64_t x = 0x853c49e6748fea9bull;
    char buf[sizeof base + 64];
    int ok = 0;
    for (int round = 0; round < 3000; round++) {
        memcpy(buf, base, sizeof base);
        size_t n = sizeof base - 1;
        int edits = 1 + (int)(x % 6);
        for (int e = 0; e < edits; e++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            size_t at = (size_t)(x >> 16) % n;
            if (x % 3 == 0 && n > 1) { /* delete a byte */
                memmove(buf + at, buf + at + 1, n - at);
                n--;
            } else if (x % 3 == 1 && n + 1 < sizeof buf) { /* insert one */
                memmove(buf + at + 1, buf + at, n - at + 1);
                buf[at] = junk[(x >> 40) % (sizeof junk - 1)];
                n++;
            } else { /* replace one */
                buf[at] = junk[(x >> 40) % (sizeof junk - 1)];
            }
        }
        KubeConfig *c = NULL;
        char err[512];
        int rc = kcfg_parse(buf, n, "/d", "fuzz", &c, err, sizeof err);
        if (rc == 0) {
            assert_non_null(c);
            assert_non_null(c->server);
            ok++;
        } else {
            assert_null(c);
            assert_true(err[0] != 0);
        }
        kcfg_free(c);
    }
    /* Some mangled files still parse (an edit inside a value): both paths were taken. */
    assert_true(ok > 0 && ok < 3000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_current_context_token_and_data),
        cmocka_unit_test(test_insecure_is_recorded_not_applied),
        cmocka_unit_test(test_files_token_file_and_exec),
        cmocka_unit_test(test_errors_name_the_problem),
        cmocka_unit_test(test_search_order_and_in_cluster),
        cmocka_unit_test(test_mangled_input_never_crashes),
        cmocka_unit_test(test_aliases_are_expanded),
        cmocka_unit_test(test_billion_laughs_refused),
    };
    return cmocka_run_group_tests_name("kcfg", tests, setup, teardown);
}
