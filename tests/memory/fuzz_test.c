/*
 * fuzz_test.c - hostile input never crashes the memory code: random byte
 * mutations of the shipped knowledge files and of evidence JSON, and
 * random expressions, each either accepted or refused with KC_EINVAL and a
 * message. Deterministic (fixed seed) so a failure reproduces; run under
 * the sanitizers in the test build.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kc_err.h"
#include "kc_test.h"
#include "kc_util.h"
#include "memory.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint32_t
next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)rng;
}

/* A copy of text with a few random edits: flip, delete, duplicate, or a
 * token from the language's alphabet. */
static char *
mutate(const char *text)
{
	static const char *const toks[] = {"{", "}", "[", "]", "\"", ",", ":",
	    "(", ")", "&&", "||", "!", "/ 0", "1e308", "-", "null", "true",
	    "\"name\"", "\"when\"", "\\u0000", "\xff", "max(", "default(",
	    "known("};
	size_t len = strlen(text);
	kc_str s = {0};
	size_t at = len ? next() % len : 0;

	KT_OK(kc_str_appendn(&s, text, at));
	switch (next() % 4) {
	case 0: /* flip a byte */
		if (at < len) {
			char c = (char)(text[at] ^ (1 << (next() % 7)));
			KT_OK(kc_str_appendn(&s, &c, c ? 1 : 0));
			at++;
		}
		break;
	case 1: /* delete a run */ at += next() % 16; break;
	case 2: /* duplicate a run */
		KT_OK(
		    kc_str_appendn(&s, text + at, at + 8 < len ? 8 : len - at));
		break;
	default: KT_OK(kc_str_append(&s, toks[next() % KC_ARRAY_LEN(toks)]));
	}
	if (at < len)
		KT_OK(kc_str_append(&s, text + at));
	return kc_str_take(&s);
}

static char *
read_src(const char *rel)
{
	char path[1024], *text;
	size_t len;
	const char *src = getenv("KCLAW_SRC");

	snprintf(path, sizeof(path), "%s/%s", src ? src : ".", rel);
	KT_OK(kc_read_file(path, 1 << 22, &text, &len));
	return text;
}

static void
test_knowledge_mutations(void)
{
	char *policy = read_src("store/knowledge/policy.json");
	char *methods = read_src("store/knowledge/methods.json");
	int accepted = 0, refused = 0;

	for (int i = 0; i < 300; i++) {
		char *p = mutate(policy), *m = NULL;
		kb *k = NULL;
		int rv;
		for (int j = next() % 3; j > 0; j--) {
			char *q = mutate(p);
			free(p);
			p = q;
		}
		if (i % 4 == 0)
			m = mutate(methods);
		rv = kb_load_json(
		    p, "policy.json", m ? m : methods, "methods.json", &k);
		if (rv == 0) {
			/* Whatever was accepted also retrieves. */
			memlt_evidence *ev;
			memlt_result res;
			KT_OK(memlt_evidence_new(&ev));
			KT_OK(memlt_evidence_set(
			    ev, KB_SRC_METRIC, "dram_throughput_pct", 90));
			KT_OK(memlt_retrieve(NULL, k, ev, NULL, &res));
			memlt_result_free(&res);
			memlt_evidence_free(ev);
			kb_free(k);
			accepted++;
		} else {
			KT_EQ_INT(rv, KC_EINVAL);
			KT_ASSERT(k == NULL);
			KT_ASSERT(strlen(kc_lasterr()) > 10);
			refused++;
		}
		free(p);
		free(m);
	}
	fprintf(stderr, "   %d accepted, %d refused\n", accepted, refused);
	KT_ASSERT(refused > 0);
	free(policy);
	free(methods);
}

static int
fuzz_lookup(void *arg, const char *name, expr_value *v)
{
	(void)arg;
	if (strcmp(name, "x") == 0) {
		*v = (expr_value){true, 3};
		return 0;
	}
	if (strcmp(name, "u") == 0) {
		*v = (expr_value){false, 0};
		return 0;
	}
	return KC_ENOENT;
}

static void
test_expression_mutations(void)
{
	static const char *const seeds[] = {
	    "default(x / (u - 3), 1) > max(x, 2) && !known(u) || clamp(x, 0, "
	    "1) == 1",
	    "-(-x) * 2 >= abs(x - 10) and not (x != 3)",
	};
	char err[256];

	for (int i = 0; i < 2000; i++) {
		char *e = mutate(seeds[i % 2]);
		expr_value v;
		int rv =
		    expr_eval_str(e, fuzz_lookup, NULL, &v, err, sizeof(err));
		KT_ASSERT(rv == 0 || rv == KC_EINVAL || rv == KC_ENOENT);
		if (rv == KC_EINVAL)
			KT_ASSERT(err[0] != '\0');
		free(e);
	}
}

static void
test_evidence_mutations(void)
{
	char *vectors = read_src("tests/memory/rule_vectors.json");
	kb *k;
	const char *src = getenv("KCLAW_SRC");
	char dir[1024];

	snprintf(dir, sizeof(dir), "%s/store/knowledge", src ? src : ".");
	KT_OK(kb_load_dir(dir, &k));
	for (int i = 0; i < 300; i++) {
		char *t = mutate(vectors + next() % 4000);
		memlt_evidence *ev;
		memlt_result res;
		int rv;
		KT_OK(memlt_evidence_new(&ev));
		rv = memlt_evidence_add_json(ev, t);
		KT_ASSERT(rv == 0 || rv == KC_EINVAL);
		KT_OK(memlt_retrieve(NULL, k, ev, NULL, &res));
		memlt_result_free(&res);
		memlt_evidence_free(ev);
		free(t);
	}
	kb_free(k);
	free(vectors);
}

int
main(void)
{
	KT_RUN(test_knowledge_mutations);
	KT_RUN(test_expression_mutations);
	KT_RUN(test_evidence_mutations);
	return 0;
}
