/*
 * notify.h - kclawd's readiness and watchdog for systemd (Type=notify,
 * WatchdogSec=): READY=1 once kclawd answers its own Health, then
 * WATCHDOG=1 while it keeps answering with every listener healthy, as
 * datagrams to $NOTIFY_SOCKET (sd_notify's protocol; no libsystemd).
 */
#ifndef ORCH_NOTIFY_H
#define ORCH_NOTIFY_H
#include "kc_config.h"

typedef struct orch_notify orch_notify;

/*
 * Starts the notifier thread when $NOTIFY_SOCKET is set (*out NULL when
 * not): it asks cfg's API for Health every half of $WATCHDOG_USEC (every
 * second without one). cfg must outlive it.
 */
int orch_notify_start(orch_notify **out, const kc_config *cfg);

/* Sends STOPPING=1 and stops the thread; n may be NULL. */
void orch_notify_stop(orch_notify *n);

/* One datagram of text to the socket at path ('@': abstract); 0 or a
 * negative kclaw error. */
int orch_notify_send(const char *path, const char *text);
#endif
