/* The cluster DNS probe (dnsprobe.h). */
#include "dnsprobe.h"

#include <arpa/inet.h>
#include <arpa/nameser.h>
#include <errno.h>
#include <netdb.h>
#include <resolv.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

/* Query types no program of a job resolves and that CoreDNS's kubernetes plugin answers
 * by the name's existence alone (its "default" case: NXDOMAIN, or an empty NOERROR):
 * HINFO, RP, AFSDB, X25, ISDN, RT, GPOS, LOC, NAPTR, KX, CERT, APL, SSHFP, IPSECKEY,
 * DHCID, TLSA, SMIMEA, HIP, OPENPGPKEY, CSYNC, SPF, NID, EUI48, EUI64, URI, CAA. The
 * rendezvous's client asks for a name at most 4 times a second (net.c), the announcer
 * twice: a type comes round again after several seconds, past CoreDNS's default negative
 * TTL of 5 s; under a longer one (kubeadm's Corefile: 30 s) the asks are fresh for the
 * first cycle, and after it whenever a type's cached "no" has expired, every second or
 * so. */
static const int probe_types[] = {13, 17, 18, 19, 20, 21, 27, 29, 35,  36,  37,  42,  44,
                                  45, 49, 52, 53, 55, 61, 62, 99, 104, 108, 109, 256, 257};
#define NTYPES (sizeof probe_types / sizeof probe_types[0])

static atomic_uint next_type;
static atomic_int seeded;

int dnsprobe_applies(const char *host)
{
    unsigned char buf[16];
    if (!host || !*host || inet_pton(AF_INET, host, buf) == 1 ||
        inet_pton(AF_INET6, host, buf) == 1)
        return 0;
    for (const char *l = host; l; l = strchr(l, '.')) {
        if (*l == '.') l++;
        if (strncmp(l, "svc", 3) == 0 && (l[3] == '.' || l[3] == '\0')) return 1;
    }
    return 0;
}

/* Whether /etc/hosts names host (the resolver reads it before DNS: such a name is never
 * waited for). */
static int in_etc_hosts(const char *host)
{
    FILE *f = fopen("/etc/hosts", "re");
    if (!f) return 0;
    char line[1024];
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) {
        char *save = NULL, *tok = strtok_r(line, " \t\r\n", &save); /* the address */
        if (!tok || tok[0] == '#') continue;
        while (!found && (tok = strtok_r(NULL, " \t\r\n", &save)) && tok[0] != '#')
            found = strcasecmp(tok, host) == 0;
    }
    fclose(f);
    return found;
}

/* The names the resolver asks for host, in its order (resolv.conf's search list and
 * ndots, as res_nsearch): 1 when one of them exists (an answer or an empty NOERROR),
 * 0 when none does and the DNS said so (NXDOMAIN) for at least one, -1 when it could
 * not tell (no server answered, or only failures). */
static int probe(const char *host, int type)
{
    struct __res_state st;
    memset(&st, 0, sizeof st);
    if (res_ninit(&st) != 0) return -1;
    size_t len = strlen(host);
    int dots = 0;
    for (const char *c = host; *c; c++) dots += *c == '.';
    const char *names[MAXDNSRCH + 2];
    int n = 0, as_is_first = dots >= (int)st.ndots || (len && host[len - 1] == '.');
    if (as_is_first) names[n++] = NULL;
    if (!(len && host[len - 1] == '.'))
        for (int i = 0; i < MAXDNSRCH && st.dnsrch[i]; i++) names[n++] = st.dnsrch[i];
    if (!as_is_first) names[n++] = NULL;
    int said_no = 0, exists = 0;
    unsigned char ans[512];
    for (int i = 0; i < n && !exists; i++) {
        errno = 0;
        int r = res_nquerydomain(&st, host, names[i], ns_c_in, type, ans, sizeof ans);
        if (r >= 0 || st.res_h_errno == NO_DATA) exists = 1;
        else if (st.res_h_errno == HOST_NOT_FOUND) said_no = 1;
        else if (errno == ECONNREFUSED || st.res_h_errno == NETDB_INTERNAL) break;
    }
    res_nclose(&st);
    return exists ? 1 : said_no ? 0 : -1;
}

int dnsprobe_ready(DnsProbe *pr, const char *host)
{
    if (pr->ready) return 1;
    const char *off = getenv("KUBETRAIN_DNS_PROBE");
    if (!dnsprobe_applies(host) || in_etc_hosts(host) || (off && strcmp(off, "0") == 0))
        return pr->ready = 1;
    if (!atomic_exchange(&seeded, 1)) /* each process starts elsewhere in the list */
        atomic_store(&next_type, (unsigned)getpid() ^ (unsigned)time(NULL));
    int type = probe_types[atomic_fetch_add(&next_type, 1) % NTYPES];
    return pr->ready = probe(host, type) != 0;
}
