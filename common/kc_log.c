#include "kc_log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static char kc_log_name[64] = "kclaw";
static enum kc_log_level kc_log_min = KC_LOG_INFO;

void
kc_log_init(const char *name)
{
	const char *lvl = getenv("KCLAW_LOG");

	snprintf(kc_log_name, sizeof(kc_log_name), "%s", name);
	if (lvl == NULL)
		return;
	if (strcmp(lvl, "debug") == 0)
		kc_log_min = KC_LOG_DEBUG;
	else if (strcmp(lvl, "warn") == 0)
		kc_log_min = KC_LOG_WARN;
	else if (strcmp(lvl, "error") == 0)
		kc_log_min = KC_LOG_ERROR;
}

void
kc_log_set_level(enum kc_log_level level)
{
	kc_log_min = level;
}

void
kc_log(enum kc_log_level level, const char *fmt, ...)
{
	static const char *names[] = {"debug", "info", "warn", "error"};
	char line[4096];
	struct timespec ts;
	struct tm tm;
	va_list ap;
	int n;

	if (level < kc_log_min)
		return;
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	n = snprintf(line, sizeof(line),
	    "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %s[%d] %s: ",
	    tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
	    tm.tm_sec, ts.tv_nsec / 1000000, kc_log_name, (int)getpid(),
	    names[level]);
	va_start(ap, fmt);
	if (n > 0 && (size_t)n < sizeof(line))
		vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
	va_end(ap);
	/* One write per line so lines of concurrent processes do not mix. */
	n = (int)strlen(line);
	if (n < (int)sizeof(line) - 1)
		line[n++] = '\n';
	if (write(STDERR_FILENO, line, (size_t)n) < 0)
		return;
}
