/* leader — leader election on a coordination.k8s.io/v1 Lease, as client-go does it:
 * a candidate takes the lease when it is free, released (no holder) or expired
 * (renewTime + leaseDurationSeconds in the past); the holder renews it every retry
 * period; if it cannot renew within the renew deadline it has lost leadership. On
 * shutdown the holder releases the lease so that a standby takes over at once. */
#ifndef KT_LEADER_H
#define KT_LEADER_H

#include "clock.h"
#include "kclient.h"

#include <cjson/cJSON.h>

typedef struct LeaderConfig {
    const char *ns, *name, *identity;
    double lease_s;          /* leaseDurationSeconds, default 15 */
    double renew_deadline_s; /* default 10 */
    double retry_s;          /* default 2 */
} LeaderConfig;

/* Pure decision: given the observed lease (NULL: none), may `identity` take or renew it
 * at wall time `now`? Another holder's lease has expired when `observed_age` (seconds
 * since this process saw its holder or renewTime change; < 0: unknown) exceeds its
 * leaseDurationSeconds, or, when the age is unknown, when renewTime + duration is
 * past `now`. Returns 1 and a new Lease body in *out (caller frees; based on the
 * observed one so its resourceVersion guards the update), or 0 when another holder's
 * lease is still valid (*out NULL). -ENOMEM on allocation failure. */
int leader_lease_decide(const cJSON *lease, const char *ns, const char *name, const char *identity,
                        double lease_s, double now, double observed_age, cJSON **out);

typedef struct Leader Leader;

Leader *leader_new(KubeClient *client, const LeaderConfig *cfg);
void leader_free(Leader *l);

/* Blocks until this process holds the lease (0) or stop is set (-ECANCELED, at once:
 * between tries it waits on stop rather than polling it). */
int leader_acquire(Leader *l, ClockStop *stop);

/* Starts renewing in a thread; on_lost is called (from that thread) if renewal fails
 * for longer than the renew deadline. */
int leader_start_renewing(Leader *l, void (*on_lost)(void *ctx), void *ctx);

/* Stops renewing and gives the lease up (holder cleared). */
void leader_release(Leader *l);

#endif
