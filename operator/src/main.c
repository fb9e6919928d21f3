/* kubetrain-operator — the TrainingJob controller's command line: flags, kubeconfig,
 * probes and metrics listeners, leader election, and orderly shutdown on SIGTERM or
 * SIGINT (workers finish their current job key, the lease is released). */
#include "clock.h"
#include "controller.h"
#include "httpserv.h"
#include "kcfg.h"
#include "kclient.h"
#include "leader.h"
#include "metrics.h"
#include "olog.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define VERSION "0.1.0"

static volatile int g_stop;
static volatile int g_lost;
static Controller *g_controller;
#define STOPPING() __atomic_load_n(&g_stop, __ATOMIC_ACQUIRE)

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: kubetrain-operator [options]\n"
        "  --kubeconfig FILE         kubeconfig (default: $KUBECONFIG, ~/.kube/config, "
        "in-cluster)\n"
        "  --namespace NS            watch one namespace (default: all)\n"
        "  --trainer-image IMG       image for jobs without spec.image (kubetrain/trainer:" VERSION
        ")\n"
        "  --cluster-domain DOMAIN   append .DOMAIN to peer names in TF_CONFIG (default: none,\n"
        "                            peers are <pod>.<job>-worker.<ns>.svc)\n"
        "  --metrics-addr ADDR       /metrics listener (:8080; \"0\" disables)\n"
        "  --health-addr ADDR        /healthz and /readyz listener (:8081; \"0\" disables)\n"
        "  --leader-elect            run only while holding the Lease\n"
        "  --leader-elect-namespace NS   namespace of the Lease (default: the kubeconfig's or "
        "\"default\")\n"
        "  --leader-elect-id ID      identity in the Lease (default: hostname_pid)\n"
        "  --leader-elect-name NAME  name of the Lease (default: kubetrain-operator); two\n"
        "                            installations in one namespace need different names\n"
        "  --qps N --burst N         API client rate limit (50, 100)\n"
        "  --workers N               reconcile threads (4)\n"
        "  --backoff-base S          delay before the first retry after a worker failure (10)\n"
        "  --backoff-max S           cap of that exponential delay (360)\n"
        "  --force-delete-after S    force-delete a pod still terminating S seconds after its\n"
        "                            grace period ended (its node is gone); 0: never (60)\n"
        "  --template-policy P       baseline: refuse a job whose spec.template asks what Pod\n"
        "                            Security's baseline level refuses (privileged, host\n"
        "                            namespaces, hostPath, ...) or a service account other\n"
        "                            than default; none: pass templates through (baseline)\n"
        "  --log-level LEVEL         debug | info | warn | error (info)\n"
        "  --insecure-skip-tls-verify  do not verify the API server's certificate (never in\n"
        "                            production; logged as a warning at start and every minute)\n"
        "  --version, --help\n");
}

static void *signal_thread(void *arg)
{
    sigset_t *set = arg;
    int sig;
    while (sigwait(set, &sig) == 0) {
        if (sig == SIGPIPE) continue;
        olog(OLOG_INFO, NULL, "received signal %d: shutting down", sig);
        __atomic_store_n(&g_stop, 1, __ATOMIC_RELEASE);
        if (sig != SIGHUP) break;
    }
    return NULL;
}

static void on_api(const char *verb, long code, double seconds)
{
    metrics_count_api(verb, code, seconds);
}

static void on_lost(void *ctx)
{
    (void)ctx;
    __atomic_store_n(&g_lost, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&g_stop, 1, __ATOMIC_RELEASE);
}

static void http_handler(void *ctx, const char *path, int *code, const char **ctype, char **body)
{
    (void)ctx;
    if (strcmp(path, "/metrics") == 0) {
        if (g_controller) controller_update_phase_metrics(g_controller);
        *body = metrics_render();
        *code = *body ? 200 : 500;
        *ctype = "text/plain; version=0.0.4; charset=utf-8";
    } else if (strcmp(path, "/healthz") == 0) {
        *code = 200;
        *body = strdup("ok\n");
    } else if (strcmp(path, "/readyz") == 0) {
        int ready = g_controller && controller_synced(g_controller) && !STOPPING();
        *code = ready ? 200 : 503;
        *body = strdup(ready ? "ok\n" : "informer caches not synced\n");
    } else {
        *code = 404;
    }
}

static int parse_num(const char *flag, const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || v < lo || v > hi) {
        fprintf(stderr, "kubetrain-operator: %s: expected a number in [%g, %g], got \"%s\"\n", flag,
                lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

/* A DNS-1123 subdomain, which object names such as a Lease's must be. */
static int dns_subdomain(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 253 || !isalnum((unsigned char)s[0]) || !isalnum((unsigned char)s[n - 1]))
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!(islower((unsigned char)s[i]) || isdigit((unsigned char)s[i]) || s[i] == '-' ||
              s[i] == '.'))
            return 0;
    return 1;
}

static void nap(double s)
{
    struct timespec ts = {.tv_sec = (time_t)s, .tv_nsec = (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

int main(int argc, char **argv)
{
    const char *kubeconfig = NULL, *ns = "", *image = "kubetrain/trainer:" VERSION;
    const char *domain = "", *metrics_addr = ":8080", *health_addr = ":8081";
    const char *le_ns = NULL, *le_id = NULL, *le_name = "kubetrain-operator", *level = "info";
    /* Safe unless told otherwise: whoever may create TrainingJobs gets pods made for them
     * without being allowed to create pods; "none" is the cluster admin's decision. */
    PodPolicyLevel template_policy = PODPOLICY_BASELINE;
    int leader_elect = 0, insecure = 0;
    double qps = 50, burst = 100, workers = 4, backoff_base = 10, backoff_max = 360, force_after = 60;
    enum {
        O_KCFG = 256,
        O_NS,
        O_IMAGE,
        O_DOMAIN,
        O_MADDR,
        O_HADDR,
        O_LE,
        O_LENS,
        O_LEID,
        O_LENAME,
        O_QPS,
        O_BURST,
        O_WORKERS,
        O_BBASE,
        O_BMAX,
        O_FORCE,
        O_TPOLICY,
        O_LEVEL,
        O_INSECURE,
        O_VERSION,
        O_HELP
    };
    static const struct option opts[] = {
        {"kubeconfig", required_argument, 0, O_KCFG},
        {"namespace", required_argument, 0, O_NS},
        {"trainer-image", required_argument, 0, O_IMAGE},
        {"cluster-domain", required_argument, 0, O_DOMAIN},
        {"metrics-addr", required_argument, 0, O_MADDR},
        {"health-addr", required_argument, 0, O_HADDR},
        {"leader-elect", no_argument, 0, O_LE},
        {"leader-elect-namespace", required_argument, 0, O_LENS},
        {"leader-elect-id", required_argument, 0, O_LEID},
        {"leader-elect-name", required_argument, 0, O_LENAME},
        {"qps", required_argument, 0, O_QPS},
        {"burst", required_argument, 0, O_BURST},
        {"workers", required_argument, 0, O_WORKERS},
        {"backoff-base", required_argument, 0, O_BBASE},
        {"backoff-max", required_argument, 0, O_BMAX},
        {"force-delete-after", required_argument, 0, O_FORCE},
        {"template-policy", required_argument, 0, O_TPOLICY},
        {"log-level", required_argument, 0, O_LEVEL},
        {"insecure-skip-tls-verify", no_argument, 0, O_INSECURE},
        {"version", no_argument, 0, O_VERSION},
        {"help", no_argument, 0, O_HELP},
        {0, 0, 0, 0},
    };
    int o, bad = 0;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (o) {
        case O_KCFG:
            kubeconfig = optarg;
            break;
        case O_NS:
            ns = optarg;
            break;
        case O_IMAGE:
            image = optarg;
            break;
        case O_DOMAIN:
            domain = optarg;
            break;
        case O_MADDR:
            metrics_addr = optarg;
            break;
        case O_HADDR:
            health_addr = optarg;
            break;
        case O_LE:
            leader_elect = 1;
            break;
        case O_INSECURE:
            insecure = 1;
            break;
        case O_LENS:
            le_ns = optarg;
            break;
        case O_LEID:
            le_id = optarg;
            break;
        case O_LENAME:
            le_name = optarg;
            if (!dns_subdomain(le_name)) {
                fprintf(stderr,
                        "kubetrain-operator: --leader-elect-name: \"%s\" is not a valid Lease "
                        "name (lowercase letters, digits, '-' and '.', at most 253 characters, "
                        "starting and ending with a letter or digit)\n",
                        le_name);
                bad = 1;
            }
            break;
        case O_QPS:
            bad |= parse_num("--qps", optarg, 0, 100000, &qps);
            break;
        case O_BURST:
            bad |= parse_num("--burst", optarg, 1, 100000, &burst);
            break;
        case O_WORKERS:
            bad |= parse_num("--workers", optarg, 1, 64, &workers);
            break;
        case O_BBASE:
            bad |= parse_num("--backoff-base", optarg, 0, 86400, &backoff_base);
            break;
        case O_BMAX:
            bad |= parse_num("--backoff-max", optarg, 0, 86400, &backoff_max);
            break;
        case O_FORCE:
            bad |= parse_num("--force-delete-after", optarg, 0, 86400, &force_after);
            break;
        case O_TPOLICY:
            if (podpolicy_parse_level(optarg, &template_policy) != 0) {
                fprintf(stderr,
                        "kubetrain-operator: --template-policy: expected baseline|none, got "
                        "\"%s\"\n",
                        optarg);
                bad = 1;
            }
            break;
        case O_LEVEL:
            level = optarg;
            break;
        case O_VERSION:
            printf("kubetrain-operator %s\n", VERSION);
            return 0;
        case O_HELP:
            usage(stdout);
            return 0;
        default:
            bad = 1;
        }
    }
    OlogLevel lv;
    if (olog_parse_level(level, &lv) != 0) {
        fprintf(stderr,
                "kubetrain-operator: --log-level: expected debug|info|warn|error, got \"%s\"\n",
                level);
        bad = 1;
    }
    if (bad || optind != argc) {
        if (optind != argc)
            fprintf(stderr, "kubetrain-operator: unexpected argument \"%s\"\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    olog_set_level(lv);
    metrics_init();
    /* glibc gives each thread its own malloc arena; the threads here allocate little,
     * and one arena keeps the resident size small with many informers and workers.
     * A fixed mmap threshold keeps glibc from raising it after each large free (list
     * and watch buffers): large blocks then always go back to the system. */
    mallopt(M_ARENA_MAX, 1);
    mallopt(M_MMAP_THRESHOLD, 64 * 1024);

    /* Signals go to one thread; every other thread inherits the blocked mask. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    pthread_t sigth;
    pthread_create(&sigth, NULL, signal_thread, &set);
    pthread_detach(sigth);

    char err[1024];
    KubeConfig *kc = NULL;
    if (kcfg_load(kubeconfig, &kc, err, sizeof err) != 0) {
        olog(OLOG_ERROR, NULL, "configuration: %s", err);
        return 2;
    }
    if (kc->insecure_requested && !insecure) {
        olog(OLOG_ERROR, NULL,
             "configuration: %s: the cluster sets insecure-skip-tls-verify; kubetrain-operator "
             "verifies TLS unless started with --insecure-skip-tls-verify: give "
             "certificate-authority(-data) instead",
             kc->source);
        kcfg_free(kc);
        return 2;
    }
    kc->insecure_skip_tls_verify = insecure;
    KubeClient *client = kclient_new(kc, qps, (int)burst, err, sizeof err);
    if (!client) {
        olog(OLOG_ERROR, NULL, "configuration: %s", err);
        kcfg_free(kc);
        return 2;
    }
    kclient_set_observer(client, on_api);
    olog(OLOG_INFO, NULL, "kubetrain-operator %s: API server %s (from %s), namespace %s", VERSION,
         kc->server, kc->source, *ns ? ns : "(all)");
    static const char insecure_warning[] =
        "TLS VERIFICATION IS OFF (--insecure-skip-tls-verify): anyone between the operator and "
        "%s can pose as the API server and receive the operator's credentials; give "
        "certificate-authority(-data) in the kubeconfig instead";
    if (insecure) olog(OLOG_WARN, NULL, insecure_warning, kc->server);
    if (template_policy == PODPOLICY_NONE)
        olog(OLOG_WARN, NULL,
             "--template-policy none: TrainingJob templates pass through (privileged, host "
             "namespaces, hostPath, any service account); whoever may create TrainingJobs gets "
             "any pod the namespace's Pod Security admission allows");

    char hostname[256] = "kubetrain-operator", id[300];
    gethostname(hostname, sizeof hostname - 1);
    snprintf(id, sizeof id, "%s_%d", hostname, (int)getpid());
    ControllerConfig cc = {
        .namespace = ns,
        .reconcile = {.desired = {.trainer_image = image, .cluster_domain = domain},
                      .backoff_base_s = backoff_base,
                      .backoff_max_s = backoff_max,
                      .force_delete_after_s = force_after,
                      .template_policy = template_policy},
        .workers = (int)workers,
        .identity = le_id ? le_id : id,
    };
    int exit_code = 0;
    HttpServer *mh = NULL, *hh = NULL;
    Leader *leader = NULL;
    Controller *ctl = controller_new(client, &cc, err, sizeof err);
    if (!ctl) {
        olog(OLOG_ERROR, NULL, "%s", err);
        exit_code = 1;
        goto out;
    }
    g_controller = ctl;
    if (strcmp(metrics_addr, "0") != 0 &&
        !(mh = httpserv_start(metrics_addr, http_handler, NULL, err, sizeof err))) {
        olog(OLOG_ERROR, NULL, "metrics: %s", err);
        exit_code = 1;
        goto out;
    }
    if (strcmp(health_addr, "0") != 0 &&
        !(hh = httpserv_start(health_addr, http_handler, NULL, err, sizeof err))) {
        olog(OLOG_ERROR, NULL, "health: %s", err);
        exit_code = 1;
        goto out;
    }
    if (mh) olog(OLOG_INFO, NULL, "serving /metrics on port %d", httpserv_port(mh));
    if (hh) olog(OLOG_INFO, NULL, "serving /healthz and /readyz on port %d", httpserv_port(hh));
    /* Caches warm up while a standby waits for the lease, so takeover is quick. */
    if (controller_start_informers(ctl) != 0) {
        olog(OLOG_ERROR, NULL, "cannot start informers");
        exit_code = 1;
        goto out;
    }
    if (leader_elect) {
        LeaderConfig lc = {.ns = le_ns ? le_ns
                                       : (*ns ? ns : (kc->namespace ? kc->namespace : "default")),
                           .name = le_name,
                           .identity = cc.identity};
        leader = leader_new(client, &lc);
        if (!leader || leader_acquire(leader, &g_stop) != 0) goto out;
        if (leader_start_renewing(leader, on_lost, NULL) != 0) {
            olog(OLOG_ERROR, NULL, "cannot start the lease renewal thread");
            exit_code = 1;
            goto out;
        }
    }
    double t0 = clock_mono();
    while (!STOPPING() && !controller_synced(ctl))
        nap(0.05);
    if (STOPPING()) goto out;
    olog(OLOG_INFO, NULL, "caches synced in %.2f s; starting %d workers", clock_mono() - t0,
         cc.workers);
    if (controller_start_workers(ctl) != 0) {
        olog(OLOG_ERROR, NULL, "cannot start worker threads");
        exit_code = 1;
        goto out;
    }
    double warned = clock_mono();
    while (!STOPPING()) {
        nap(0.1);
        if (insecure && clock_mono() - warned >= 60) {
            olog(OLOG_WARN, NULL, insecure_warning, kc->server);
            warned = clock_mono();
        }
    }
    if (__atomic_load_n(&g_lost, __ATOMIC_ACQUIRE)) exit_code = 1;
out:
    olog(OLOG_INFO, NULL, "stopping");
    /* Workers first, then the lease (a standby may act at once), then the watches. */
    controller_stop_workers(ctl);
    leader_release(leader);
    controller_stop(ctl);
    leader_free(leader);
    g_controller = NULL;
    httpserv_stop(mh);
    httpserv_stop(hh);
    controller_free(ctl);
    kclient_free(client);
    kcfg_free(kc);
    olog(OLOG_INFO, NULL, "stopped");
    return exit_code;
}
