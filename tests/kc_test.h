/*
 * kc_test.h - the smallest test harness that does the job. Each test file is
 * its own executable, run by ctest in its own process with a timeout; a
 * failed check prints where and why and exits non-zero.
 */
#ifndef KC_TEST_H
#define KC_TEST_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define KT_FAIL(...)                                                           \
	do {                                                                   \
		fprintf(stderr, "%s:%d: FAIL: ", __FILE__, __LINE__);          \
		fprintf(stderr, __VA_ARGS__);                                  \
		fprintf(stderr, "\n");                                         \
		exit(1);                                                       \
	} while (0)

#define KT_ASSERT(c)                                                           \
	do {                                                                   \
		if (!(c))                                                      \
			KT_FAIL("%s", #c);                                     \
	} while (0)

/* Checks that an int-returning kclaw call succeeded; shows the error. */
#define KT_OK(expr)                                                            \
	do {                                                                   \
		int kt_rv_ = (expr);                                           \
		if (kt_rv_ != 0)                                               \
			KT_FAIL("%s returned %d (%s): %s", #expr, kt_rv_,      \
			    kc_strerror(kt_rv_), kc_lasterr());                \
	} while (0)

#define KT_EQ_INT(a, b)                                                        \
	do {                                                                   \
		long long kt_a_ = (long long)(a), kt_b_ = (long long)(b);      \
		if (kt_a_ != kt_b_)                                            \
			KT_FAIL(                                               \
			    "%s == %s: %lld != %lld", #a, #b, kt_a_, kt_b_);   \
	} while (0)

#define KT_EQ_STR(a, b)                                                        \
	do {                                                                   \
		const char *kt_a_ = (a), *kt_b_ = (b);                         \
		if (kt_a_ == NULL || kt_b_ == NULL ||                          \
		    strcmp(kt_a_, kt_b_) != 0)                                 \
			KT_FAIL("%s == %s: '%s' != '%s'", #a, #b,              \
			    kt_a_ ? kt_a_ : "(null)",                          \
			    kt_b_ ? kt_b_ : "(null)");                         \
	} while (0)

#define KT_CONTAINS(hay, needle)                                               \
	do {                                                                   \
		const char *kt_h_ = (hay), *kt_n_ = (needle);                  \
		if (kt_h_ == NULL || strstr(kt_h_, kt_n_) == NULL)             \
			KT_FAIL("'%s' does not contain '%s'",                  \
			    kt_h_ ? kt_h_ : "(null)", kt_n_);                  \
	} while (0)

/* Runs one named test function and reports it. */
#define KT_RUN(fn)                                                             \
	do {                                                                   \
		fprintf(stderr, "-- %s\n", #fn);                               \
		fn();                                                          \
	} while (0)

/*
 * n (at most 8) distinct TCP ports of 127.0.0.1 that nothing listens on
 * now: the kernel's picks, each socket held until the last is picked. A
 * port derived from the pid can meet another test's listener or any
 * process's ephemeral port (32768-60999) when ctest runs tests in
 * parallel.
 */
static inline void
kt_free_ports(int *ports, int n)
{
	int fd[8];

	KT_ASSERT(n > 0 && n <= 8);
	for (int i = 0; i < n; i++) {
		struct sockaddr_in a = {.sin_family = AF_INET,
		    .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
		socklen_t len = sizeof(a);

		fd[i] = socket(AF_INET, SOCK_STREAM, 0);
		KT_ASSERT(fd[i] >= 0 &&
		    bind(fd[i], (struct sockaddr *)&a, sizeof(a)) == 0);
		KT_ASSERT(getsockname(fd[i], (struct sockaddr *)&a, &len) == 0);
		ports[i] = ntohs(a.sin_port);
	}
	for (int i = 0; i < n; i++)
		close(fd[i]);
}

#endif
