/* Whether a peer's cluster DNS name has its record yet, asked in a way that does not
 * make the answer the connect needs wait out a negative cache.
 *
 * Workers of a job start at about the same moment, each a fraction of a second before
 * the cluster DNS publishes its record (the kubelet reports the pod's IP, the
 * EndpointSlice follows, CoreDNS watches it). A worker that asks for a peer's address
 * in that window gets "no such name", and the cluster DNS caches that answer per name
 * and query type (CoreDNS: for the zone's negative TTL, 5 s by default; RFC 2308) —
 * the A and AAAA answers of every worker that asks next, the record long published.
 * Two workers that both asked early waited out the whole TTL before their ring formed
 * (bench/results/gang-kueue.json: in 4 of 8 plain starts, 7 of 8 gang + Kueue starts).
 *
 * So before its first A/AAAA lookup of a name under a Kubernetes service (a label
 * `svc`) the rendezvous asks whether the name exists with a query type nobody resolves
 * (HINFO, NAPTR, CAA, ...; CoreDNS answers any of them with NXDOMAIN while the name does
 * not exist and with an empty NOERROR once it does), a different type each time, so
 * that each ask is answered afresh while the caches hold the earlier "no" under types
 * the connect never asks. Only once the name exists is it resolved as before. */
#ifndef KT_DNSPROBE_H
#define KT_DNSPROBE_H

#include <stddef.h>

/* The probe of one name across the retries of one dialer. */
typedef struct DnsProbe {
    int ready; /* said 1 once: resolved as usual from then on */
} DnsProbe;

/* 1 when host may be resolved now: it exists in DNS, is not a cluster service name
 * (no label `svc`) or is in /etc/hosts, is numeric, KUBETRAIN_DNS_PROBE=0 turned the
 * probe off, or the DNS could not tell (no server answered, only failures). 0 while the
 * DNS says the name does not exist (yet): looking it up would only fail the same way,
 * and have the "no" cached for the lookups of everyone after. */
int dnsprobe_ready(DnsProbe *pr, const char *host);

/* Whether host is a name the probe applies to (a DNS name with a label `svc`). */
int dnsprobe_applies(const char *host);

#endif
