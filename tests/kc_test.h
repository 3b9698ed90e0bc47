/*
 * kc_test.h - the smallest test harness that does the job. Each test file is
 * its own executable, run by ctest in its own process with a timeout; a
 * failed check prints where and why and exits non-zero.
 */
#ifndef KC_TEST_H
#define KC_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

#endif
