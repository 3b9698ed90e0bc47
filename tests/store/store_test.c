/*
 * store_test.c - the store keeps what it acknowledged: across reopen, in
 * atomic batches over column families, and when the writer is SIGKILLed in
 * the middle of a stream of synced writes.
 */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kc_err.h"
#include "kc_test.h"
#include "kc_util.h"
#include "store.h"

static char tmpdir[256];

static void
make_tmpdir(const char *tag)
{
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/kc-store-%s-XXXXXX", tag);
	KT_ASSERT(mkdtemp(tmpdir) != NULL);
}

static void
rm_tmpdir(void)
{
	char cmd[512];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
	KT_ASSERT(system(cmd) == 0);
}

static int
collect_seq(
    void *arg, const void *key, size_t klen, const void *val, size_t vlen)
{
	uint64_t *st = arg; /* st[0] = count, st[1] = last seq */

	(void)val;
	(void)vlen;
	KT_EQ_INT(klen, 8);
	uint64_t seq = store_key_get_u64(key);
	if (st[0] > 0)
		KT_ASSERT(seq > st[1]); /* numeric order == byte order */
	st[1] = seq;
	st[0]++;
	return 0;
}

static void
test_basic_and_reopen(void)
{
	store *s;
	void *v;
	size_t vl;
	uint8_t k[8];

	make_tmpdir("basic");
	KT_OK(store_open(&s, tmpdir));
	KT_OK(store_put(s, STORE_CF_TASKS, "t1", 2, "hello", 5, true));
	KT_OK(store_get(s, STORE_CF_TASKS, "t1", 2, &v, &vl));
	KT_EQ_INT(vl, 5);
	KT_ASSERT(memcmp(v, "hello", 5) == 0);
	free(v);
	KT_EQ_INT(store_get(s, STORE_CF_TASKS, "nope", 4, &v, &vl), KC_ENOENT);
	/* The same key in another column family is another record. */
	KT_EQ_INT(
	    store_get(s, STORE_CF_CANDIDATES, "t1", 2, &v, &vl), KC_ENOENT);
	/* Keys out of order: 300, 2, 70000, 1<<40. */
	uint64_t seqs[] = {300, 2, 70000, 1ull << 40, 256};
	for (size_t i = 0; i < KC_ARRAY_LEN(seqs); i++) {
		store_key_u64(k, seqs[i]);
		KT_OK(store_put(s, STORE_CF_EVENTS, k, 8, "e", 1, false));
	}
	KT_OK(store_delete(s, STORE_CF_TASKS, "t1", 2, true));
	store_close(s);

	KT_OK(store_open(&s, tmpdir));
	KT_EQ_INT(store_get(s, STORE_CF_TASKS, "t1", 2, &v, &vl), KC_ENOENT);
	uint64_t st[2] = {0, 0};
	KT_OK(
	    store_scan(s, STORE_CF_EVENTS, NULL, 0, NULL, 0, collect_seq, st));
	KT_EQ_INT(st[0], 5);
	KT_EQ_INT(st[1], 1ull << 40);
	/* Scan from a start key. */
	st[0] = st[1] = 0;
	store_key_u64(k, 301);
	KT_OK(store_scan(s, STORE_CF_EVENTS, NULL, 0, k, 8, collect_seq, st));
	KT_EQ_INT(st[0], 2);
	void *last;
	size_t ll;
	KT_OK(store_last_key(s, STORE_CF_EVENTS, NULL, 0, &last, &ll));
	KT_EQ_INT(store_key_get_u64(last), 1ull << 40);
	free(last);
	store_close(s);
	rm_tmpdir();
}

static int
count_fn(void *arg, const void *key, size_t klen, const void *val, size_t vlen)
{
	(void)key;
	(void)klen;
	(void)val;
	(void)vlen;
	(*(int *)arg)++;
	return 0;
}

static void
test_prefix_batch_blob(void)
{
	store *s;
	store_batch *b;
	char key[64], h[65], h2[65];
	int n = 0;
	void *v;
	size_t vl;

	make_tmpdir("prefix");
	KT_OK(store_open(&s, tmpdir));
	KT_OK(store_batch_new(&b));
	for (int t = 0; t < 3; t++)
		for (int i = 0; i < 10; i++) {
			int kl =
			    snprintf(key, sizeof(key), "task%d/%04d", t, i);
			KT_OK(store_batch_put(
			    b, STORE_CF_SHORT_TERM, key, (size_t)kl, "x", 1));
		}
	KT_OK(store_batch_put(b, STORE_CF_TASKS, "task1", 5, "rec", 3));
	KT_OK(store_batch_commit(s, b, true));
	store_batch_free(b);
	KT_OK(store_scan(
	    s, STORE_CF_SHORT_TERM, "task1/", 6, NULL, 0, count_fn, &n));
	KT_EQ_INT(n, 10);
	void *last;
	size_t ll;
	KT_OK(store_last_key(s, STORE_CF_SHORT_TERM, "task1/", 6, &last, &ll));
	KT_ASSERT(ll == 10 && memcmp(last, "task1/0009", 10) == 0);
	free(last);
	KT_EQ_INT(
	    store_last_key(s, STORE_CF_SHORT_TERM, "task9/", 6, &last, &ll),
	    KC_ENOENT);

	/* Blobs are content-addressed: same bytes, same hash, one record. */
	KT_OK(store_blob_put(s, "tensor bytes", 12, h));
	KT_OK(store_blob_put(s, "tensor bytes", 12, h2));
	KT_EQ_STR(h, h2);
	/* Known answer from sha256sum(1). */
	KT_EQ_STR(h,
	    "7fbf92250c5634411693a34f9263d5e5154fd14d246ef94476382bc6a591127c");
	KT_OK(store_blob_get(s, h, &v, &vl));
	KT_ASSERT(vl == 12 && memcmp(v, "tensor bytes", 12) == 0);
	free(v);
	KT_EQ_INT(store_blob_get(s, "short", &v, &vl), KC_EINVAL);
	store_close(s);
	rm_tmpdir();
}

static void
test_second_open_refused(void)
{
	store *s, *s2;

	make_tmpdir("lock");
	KT_OK(store_open(&s, tmpdir));
	/* Only one process may open the database: a second open is refused
	 * with a message that says what to do. RocksDB's lock is per process,
	 * so try from a child. */
	pid_t pid = fork();
	if (pid == 0) {
		int rv = store_open(&s2, tmpdir);
		if (rv == KC_EBUSY && strstr(kc_lasterr(), "in use") != NULL)
			_exit(0);
		fprintf(stderr, "second open: %d %s\n", rv, kc_lasterr());
		_exit(1);
	}
	int st;
	KT_ASSERT(waitpid(pid, &st, 0) == pid);
	KT_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	store_close(s);
	rm_tmpdir();
}

/*
 * The writer: an endless stream of synced batches, each putting the same
 * sequence number into two column families, acknowledging each one on fd
 * after the commit returned.
 */
static void
writer(int fd)
{
	store *s;
	uint8_t k[8];
	char val[100];

	if (store_open(&s, tmpdir) != 0)
		_exit(2);
	for (uint64_t seq = 1;; seq++) {
		store_batch *b;
		store_key_u64(k, seq);
		memset(val, (int)(seq & 0xff), sizeof(val));
		if (store_batch_new(&b) != 0 ||
		    store_batch_put(
		        b, STORE_CF_EVENTS, k, 8, val, sizeof(val)) != 0 ||
		    store_batch_put(b, STORE_CF_TASKS, k, 8, val, 10) != 0 ||
		    store_batch_commit(s, b, true) != 0)
			_exit(3);
		store_batch_free(b);
		if (write(fd, &seq, sizeof(seq)) != sizeof(seq))
			_exit(4);
	}
}

struct kill_check {
	store *s;
	uint64_t count;
	uint64_t max;
};

static int
kill_check_fn(
    void *arg, const void *key, size_t klen, const void *val, size_t vlen)
{
	struct kill_check *kc = arg;
	uint64_t seq = store_key_get_u64(key);
	void *v2;
	size_t l2;

	KT_EQ_INT(klen, 8);
	KT_EQ_INT(vlen, 100);
	KT_ASSERT(((const uint8_t *)val)[99] == (uint8_t)(seq & 0xff));
	/* Atomic across column families: the batch's other half is there. */
	KT_OK(store_get(kc->s, STORE_CF_TASKS, key, 8, &v2, &l2));
	KT_EQ_INT(l2, 10);
	free(v2);
	kc->count++;
	KT_EQ_INT(seq, kc->count); /* no holes */
	kc->max = seq;
	return 0;
}

static void
test_sigkill_loses_nothing_acknowledged(void)
{
	make_tmpdir("kill");
	srand((unsigned)getpid());
	uint64_t acked = 0;
	for (int round = 0; round < 5; round++) {
		int p[2];
		KT_ASSERT(pipe(p) == 0);
		pid_t pid = fork();
		KT_ASSERT(pid >= 0);
		if (pid == 0) {
			close(p[0]);
			writer(p[1]);
		}
		close(p[1]);
		/* Kill at a random moment: after 20..220 acknowledgements, at
		 * a random sub-millisecond offset. */
		uint64_t want = 20 + (uint64_t)(rand() % 200), seq = 0, got = 0;
		while (got < want &&
		    read(p[0], &seq, sizeof(seq)) == (ssize_t)sizeof(seq))
			got++;
		usleep((useconds_t)(rand() % 800));
		KT_ASSERT(kill(pid, SIGKILL) == 0);
		/* Acknowledgements already in the pipe count too. */
		uint64_t s2;
		while (read(p[0], &s2, sizeof(s2)) == (ssize_t)sizeof(s2))
			seq = s2;
		close(p[0]);
		int st;
		KT_ASSERT(waitpid(pid, &st, 0) == pid);
		KT_ASSERT(WIFSIGNALED(st));
		acked = seq;

		store *s;
		KT_OK(store_open(&s, tmpdir));
		struct kill_check kc = {.s = s};
		KT_OK(store_scan(
		    s, STORE_CF_EVENTS, NULL, 0, NULL, 0, kill_check_fn, &kc));
		fprintf(stderr, "round %d: acknowledged %llu, found %llu\n",
		    round, (unsigned long long)acked,
		    (unsigned long long)kc.max);
		KT_ASSERT(kc.max >= acked);
		store_close(s);
		/* The next writer restarts at 1 and overwrites the same
		 * keys; clear the database so "no holes" stays exact. */
		rm_tmpdir();
		make_tmpdir("kill");
	}
	rm_tmpdir();
}

int
main(void)
{
	KT_RUN(test_basic_and_reopen);
	KT_RUN(test_prefix_batch_blob);
	KT_RUN(test_second_open_refused);
	KT_RUN(test_sigkill_loses_nothing_acknowledged);
	return 0;
}
