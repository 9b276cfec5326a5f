/* What the C check programs share: CHECK counts a failed condition and goes
 * on (the program exits non-zero at the end when `failures` is not 0); MUST
 * stops at once, for conditions later checks depend on. */
#ifndef SOFTVERBS_CHECK_H
#define SOFTVERBS_CHECK_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

static int failures;
#define CHECK(cond, ...)                                                   \
	do {                                                               \
		if (!(cond)) {                                             \
			failures++;                                        \
			fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
			fprintf(stderr, __VA_ARGS__);                      \
			fprintf(stderr, "\n");                             \
		}                                                          \
	} while (0)
#define MUST(cond)                                                         \
	do {                                                               \
		if (!(cond)) {                                             \
			fprintf(stderr, "FATAL %s:%d: %s (errno %d)\n", __FILE__, __LINE__, #cond, errno); \
			exit(2);                                           \
		}                                                          \
	} while (0)

#endif
