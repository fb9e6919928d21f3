/* podpolicy — what a TrainingJob's spec.template may ask of the pods the operator
 * creates. The operator creates pods on behalf of whoever may create TrainingJobs, who
 * need not be allowed to create pods: without a limit of its own, such a user gets any
 * pod the namespace's Pod Security admission lets through (privileged, host namespaces,
 * hostPath, any service account).
 *
 * The "baseline" policy refuses what Pod Security's baseline level refuses, plus a
 * service account other than "default":
 *
 *   spec.hostNetwork, spec.hostPID, spec.hostIPC            true
 *   [*].securityContext.privileged                          true
 *   [*].securityContext.capabilities.add[*]                 beyond PODPOLICY_CAPS
 *   spec.volumes[*].hostPath                                any
 *   [*].ports[*].hostPort                                   other than 0
 *   [*].{liveness,readiness,startup}Probe.{httpGet,tcpSocket}.host,
 *   [*].lifecycle.{postStart,preStop}.{httpGet,tcpSocket}.host
 *                                                           other than "" (1.34)
 *   spec / [*] securityContext.windowsOptions.hostProcess   true
 *   spec / [*] securityContext.seccompProfile.type          Unconfined
 *   spec / [*] securityContext.appArmorProfile.type         Unconfined
 *   metadata.annotations[container.apparmor.security.beta.kubernetes.io/<c>]
 *                                                           not runtime/default or
 *                                                           localhost/<profile>
 *   spec / [*] securityContext.seLinuxOptions               type beyond PODPOLICY_SELINUX
 *                                                           types, any user or role
 *   [*].securityContext.procMount                           other than Default
 *   spec.securityContext.sysctls[*].name                    beyond PODPOLICY_SYSCTLS
 *   spec.serviceAccountName, spec.serviceAccount            other than "default"
 *
 * where [*] is each of spec.containers and spec.initContainers. The chart's
 * ValidatingAdmissionPolicy (charts/kubetrain/templates/admissionpolicy.yaml) applies
 * the same list in CEL at admission; operator/tests/podpolicy-cases.json holds the cases
 * both are tested against (test-podpolicy.c, charts/tests/test-chart.sh). */
#ifndef KT_PODPOLICY_H
#define KT_PODPOLICY_H

#include <cjson/cJSON.h>
#include <stddef.h>

/* Baseline is 0, so that a zeroed configuration is the safe one. */
typedef enum {
    PODPOLICY_BASELINE, /* the list above */
    PODPOLICY_NONE,     /* templates pass through; Pod Security admission is the limit */
} PodPolicyLevel;

/* Capabilities baseline allows a container to add. */
#define PODPOLICY_CAPS                                                                             \
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",                   \
        "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"
/* SELinux types baseline allows ("" too). */
#define PODPOLICY_SELINUX "container_t", "container_init_t", "container_kvm_t", "container_engine_t"
/* Sysctls baseline allows (namespaced, safe). */
#define PODPOLICY_SYSCTLS                                                                          \
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range",                                      \
        "net.ipv4.ip_unprivileged_port_start", "net.ipv4.tcp_syncookies",                          \
        "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",                           \
        "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl", \
        "net.ipv4.tcp_keepalive_probes"

/* "none" | "baseline" -> *out; -EINVAL for anything else. */
int podpolicy_parse_level(const char *s, PodPolicyLevel *out);

/* Checks a PodTemplateSpec (NULL: nothing to check) against `level`. Returns 0 when
 * allowed, else -EPERM with one line in err that starts with the first refused field's
 * full path in the TrainingJob ("spec.template.spec.containers[0].securityContext
 * .privileged: ...") and says what to do. */
int podpolicy_check(PodPolicyLevel level, const cJSON *tmpl, char *err, size_t errlen);

#endif
