/* podpolicy — the template policy; see podpolicy.h for the list. */
#include "podpolicy.h"

#include "jsonx.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char *const allowed_caps[] = {PODPOLICY_CAPS, NULL};
static const char *const allowed_selinux[] = {"", PODPOLICY_SELINUX, NULL};
static const char *const allowed_sysctls[] = {PODPOLICY_SYSCTLS, NULL};

#define APPARMOR_PREFIX "container.apparmor.security.beta.kubernetes.io/"

int podpolicy_parse_level(const char *s, PodPolicyLevel *out)
{
    if (strcmp(s, "none") == 0)
        *out = PODPOLICY_NONE;
    else if (strcmp(s, "baseline") == 0)
        *out = PODPOLICY_BASELINE;
    else
        return -EINVAL;
    return 0;
}

static int in_list(const char *s, const char *const *list)
{
    for (size_t i = 0; list[i]; i++)
        if (strcmp(s, list[i]) == 0) return 1;
    return 0;
}

/* Writes "<path>: <why>; <what to do>" into err; returns -EPERM. `path` is relative to
 * spec.template. */
static int refuse(char *err, size_t errlen, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int refuse(char *err, size_t errlen, const char *path, const char *fmt, ...)
{
    char why[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    snprintf(err, errlen,
             "spec.template.%s: %s; refused by kubetrain's template policy \"baseline\" "
             "(Pod Security baseline, no service account but default): remove it, or have "
             "the cluster admin run the operator with --template-policy none",
             path, why);
    return -EPERM;
}

static int is_true(const cJSON *o, const char *path)
{
    return cJSON_IsTrue(jsonx_at(o, path));
}

/* The array (or, with obj, the object) at path, quietly NULL when it is not one: the
 * API server validates the pods, the policy only needs what is there. */
static const cJSON *coll_at(const cJSON *o, const char *path, int obj)
{
    const cJSON *v = jsonx_at(o, path);
    return (obj ? cJSON_IsObject(v) : cJSON_IsArray(v)) ? v : NULL;
}

static const char *str_at(const cJSON *o, const char *path)
{
    const cJSON *v = jsonx_at(o, path);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* The checks a pod securityContext and a container securityContext share: Windows
 * host process, seccomp, AppArmor, SELinux. `at` names the securityContext. */
static int check_security_context(const cJSON *sc, const char *at, char *err, size_t errlen)
{
    char path[300];
    const char *v;
    if (is_true(sc, "windowsOptions.hostProcess")) {
        snprintf(path, sizeof path, "%s.windowsOptions.hostProcess", at);
        return refuse(err, errlen, path, "true runs the container as a process on the node");
    }
    if ((v = str_at(sc, "seccompProfile.type")) && strcmp(v, "Unconfined") == 0) {
        snprintf(path, sizeof path, "%s.seccompProfile.type", at);
        return refuse(err, errlen, path, "Unconfined turns system-call filtering off");
    }
    if ((v = str_at(sc, "appArmorProfile.type")) && strcmp(v, "Unconfined") == 0) {
        snprintf(path, sizeof path, "%s.appArmorProfile.type", at);
        return refuse(err, errlen, path, "Unconfined turns AppArmor off");
    }
    const cJSON *se = jsonx_at(sc, "seLinuxOptions");
    if ((v = str_at(se, "type")) && !in_list(v, allowed_selinux)) {
        snprintf(path, sizeof path, "%s.seLinuxOptions.type", at);
        return refuse(err, errlen, path,
                      "\"%s\" is not an SELinux type baseline allows (container_t, "
                      "container_init_t, container_kvm_t, container_engine_t)",
                      v);
    }
    static const char *const fixed[] = {"user", "role", NULL};
    for (size_t i = 0; fixed[i]; i++) {
        if ((v = str_at(se, fixed[i])) && *v) {
            snprintf(path, sizeof path, "%s.seLinuxOptions.%s", at, fixed[i]);
            return refuse(err, errlen, path, "a custom SELinux %s is not allowed", fixed[i]);
        }
    }
    return 0;
}

/* One container of spec.containers or spec.initContainers (`list`), at index i. */
static int check_container(const cJSON *c, const char *list, int i, char *err, size_t errlen)
{
    char at[128], path[300];
    snprintf(at, sizeof at, "spec.%s[%d]", list, i);
    const cJSON *sc = jsonx_at(c, "securityContext");
    if (is_true(sc, "privileged")) {
        snprintf(path, sizeof path, "%s.securityContext.privileged", at);
        return refuse(err, errlen, path,
                      "true gives the container the node's devices and every capability");
    }
    const cJSON *cap;
    int j = 0;
    const cJSON *add = coll_at(sc, "capabilities.add", 0);
    cJSON_ArrayForEach(cap, add)
    {
        if (!cJSON_IsString(cap) || !in_list(cap->valuestring, allowed_caps)) {
            snprintf(path, sizeof path, "%s.securityContext.capabilities.add[%d]", at, j);
            return refuse(err, errlen, path,
                          "\"%s\" is not a capability baseline allows (AUDIT_WRITE, CHOWN, "
                          "DAC_OVERRIDE, FOWNER, FSETID, KILL, MKNOD, NET_BIND_SERVICE, "
                          "SETFCAP, SETGID, SETPCAP, SETUID, SYS_CHROOT)",
                          cJSON_IsString(cap) ? cap->valuestring : "?");
        }
        j++;
    }
    const char *pm = str_at(sc, "procMount");
    if (pm && strcmp(pm, "Default") != 0) {
        snprintf(path, sizeof path, "%s.securityContext.procMount", at);
        return refuse(err, errlen, path, "\"%s\" exposes the node's /proc; only Default", pm);
    }
    snprintf(path, sizeof path, "%s.securityContext", at);
    int rc = check_security_context(sc, path, err, errlen);
    if (rc) return rc;
    const cJSON *p;
    const cJSON *ports = coll_at(c, "ports", 0);
    j = 0;
    cJSON_ArrayForEach(p, ports)
    {
        const cJSON *hp = jsonx_at(p, "hostPort");
        if (hp && !cJSON_IsNull(hp) && !(cJSON_IsNumber(hp) && hp->valuedouble == 0)) {
            snprintf(path, sizeof path, "%s.ports[%d].hostPort", at, j);
            return refuse(err, errlen, path, "a port on the node is not allowed");
        }
        j++;
    }
    /* Since Kubernetes 1.34 baseline: the kubelet makes these connections from the node's
     * network, so a host would reach the node's neighbours (169.254.169.254) for the pod. */
    static const char *const handlers[] = {"livenessProbe",     "readinessProbe",
                                           "startupProbe",      "lifecycle.postStart",
                                           "lifecycle.preStop", NULL};
    static const char *const kinds[] = {"httpGet", "tcpSocket", NULL};
    for (size_t h = 0; handlers[h]; h++) {
        const cJSON *hd = jsonx_at(c, handlers[h]);
        for (size_t k = 0; kinds[k]; k++) {
            char at_kind[64];
            snprintf(at_kind, sizeof at_kind, "%s.host", kinds[k]);
            const char *host = str_at(hd, at_kind);
            if (host && *host) {
                snprintf(path, sizeof path, "%s.%s.%s.host", at, handlers[h], kinds[k]);
                return refuse(err, errlen, path,
                              "\"%s\": the kubelet connects there from the node's network; "
                              "leave it empty (the pod's own IP)",
                              host);
            }
        }
    }
    return 0;
}

int podpolicy_check(PodPolicyLevel level, const cJSON *tmpl, char *err, size_t errlen)
{
    if (level == PODPOLICY_NONE || !tmpl) return 0;
    const cJSON *spec = jsonx_at(tmpl, "spec");
    static const char *const hostns[] = {"hostNetwork", "hostPID", "hostIPC", NULL};
    char path[300];
    for (size_t i = 0; hostns[i]; i++) {
        if (is_true(spec, hostns[i])) {
            snprintf(path, sizeof path, "spec.%s", hostns[i]);
            return refuse(err, errlen, path, "true shares the node's namespace");
        }
    }
    static const char *const sas[] = {"serviceAccountName", "serviceAccount", NULL};
    for (size_t i = 0; sas[i]; i++) {
        const char *sa = str_at(spec, sas[i]);
        if (sa && *sa && strcmp(sa, "default") != 0) {
            snprintf(path, sizeof path, "spec.%s", sas[i]);
            return refuse(err, errlen, path,
                          "\"%s\" would give the workers that service account's API "
                          "permissions; only \"default\" is allowed",
                          sa);
        }
    }
    const cJSON *psc = jsonx_at(spec, "securityContext");
    int rc = check_security_context(psc, "spec.securityContext", err, errlen);
    if (rc) return rc;
    const cJSON *it;
    const cJSON *sysctls = coll_at(psc, "sysctls", 0);
    int j = 0;
    cJSON_ArrayForEach(it, sysctls)
    {
        const char *n = str_at(it, "name");
        if (!n || !in_list(n, allowed_sysctls)) {
            snprintf(path, sizeof path, "spec.securityContext.sysctls[%d].name", j);
            return refuse(err, errlen, path, "\"%s\" is not a sysctl baseline allows", n ? n : "?");
        }
        j++;
    }
    const cJSON *vols = coll_at(spec, "volumes", 0);
    j = 0;
    cJSON_ArrayForEach(it, vols)
    {
        if (jsonx_at(it, "hostPath")) {
            snprintf(path, sizeof path, "spec.volumes[%d].hostPath", j);
            return refuse(err, errlen, path, "a hostPath volume mounts the node's filesystem");
        }
        j++;
    }
    static const char *const lists[] = {"containers", "initContainers", NULL};
    for (size_t l = 0; lists[l]; l++) {
        const cJSON *cs = coll_at(spec, lists[l], 0);
        j = 0;
        cJSON_ArrayForEach(it, cs)
        {
            if ((rc = check_container(it, lists[l], j, err, errlen))) return rc;
            j++;
        }
    }
    const cJSON *annots = coll_at(tmpl, "metadata.annotations", 1);
    cJSON_ArrayForEach(it, annots)
    {
        if (!it->string || strncmp(it->string, APPARMOR_PREFIX, strlen(APPARMOR_PREFIX)) != 0)
            continue;
        const char *v = cJSON_IsString(it) ? it->valuestring : "?";
        if (strcmp(v, "runtime/default") != 0 && strncmp(v, "localhost/", 10) != 0) {
            snprintf(path, sizeof path, "metadata.annotations[%s]", it->string);
            return refuse(err, errlen, path,
                          "\"%s\" turns AppArmor off (allowed: runtime/default, "
                          "localhost/<profile>)",
                          v);
        }
    }
    return 0;
}
