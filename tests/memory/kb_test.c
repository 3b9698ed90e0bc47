/*
 * kb_test.c - expert knowledge: the shipped files load and are complete;
 * import validation names the file, the place and the problem; import,
 * versions, export and re-import round-trip through a real store.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kc_err.h"
#include "kc_test.h"
#include "kc_util.h"
#include "memory.h"

static char knowledge_dir[1024];

/* A small valid policy and methods file; tests break one thing each. */
static const char *base_policy =
    "{\n"
    "  \"version\": \"t1\",\n"
    "  \"fields\": [\n"
    "    {\"name\": \"dram_pct\", \"source\": \"metric\",\n"
    "     \"aliases\": [\"dram_throughput_pct\", {\"name\": \"dram\", "
    "\"scale\": 100}]},\n"
    "    {\"name\": \"vector_loads\", \"source\": \"feature\"}\n"
    "  ],\n"
    "  \"derived\": [{\"name\": \"dram_frac\", \"expr\": \"dram_pct / "
    "100\"}],\n"
    "  \"predicates\": [{\"name\": \"busy\", \"expr\": \"dram_frac > "
    "0.6\"}],\n"
    "  \"classes\": [\n"
    "    {\"name\": \"membw\", \"priority\": 5, \"when\": \"busy\", "
    "\"why\": \"w\"}\n"
    "  ],\n"
    "  \"rules\": [\n"
    "    {\"name\": \"widen\", \"class\": \"membw\",\n"
    "     \"when\": \"default(vector_loads, 0) == 0\",\n"
    "     \"allow\": [\"vec\"], \"why\": \"w\"}\n"
    "  ],\n"
    "  \"vetoes\": [\n"
    "    {\"name\": \"done\", \"when\": \"vector_loads == 1\", "
    "\"methods\": [\"vec\"], \"why\": \"w\"}\n"
    "  ]\n"
    "}\n";

static const char *base_methods =
    "{\"version\": \"t1\", \"methods\": [\n"
    "  {\"name\": \"vec\", \"title\": \"t\", \"intent\": \"i\",\n"
    "   \"applies_when\": \"a\", \"requires\": \"r\", \"expected\": "
    "\"e\",\n"
    "   \"cues\": {\"ampere\": \"AMP\", \"hopper\": \"HOP\"},\n"
    "   \"pitfalls\": \"p\", \"tags\": [\"memory\"]}\n"
    "]}\n";

/* base with the first occurrence of from replaced by to. */
static char *
patch(const char *base, const char *from, const char *to)
{
	const char *at = strstr(base, from);
	kc_str s = {0};

	if (at == NULL)
		KT_FAIL("patch: '%s' not in the base text", from);
	KT_OK(kc_str_appendn(&s, base, (size_t)(at - base)));
	KT_OK(kc_str_append(&s, to));
	KT_OK(kc_str_append(&s, at + strlen(from)));
	return kc_str_take(&s);
}

/* Loading the patched policy (or methods) must fail with all of wants. */
static void
expect_invalid(bool in_policy, const char *from, const char *to,
    const char *want1, const char *want2)
{
	char *text = patch(in_policy ? base_policy : base_methods, from, to);
	kb *k = NULL;
	int rv = kb_load_json(in_policy ? text : base_policy, "policy.json",
	    in_policy ? base_methods : text, "methods.json", &k);

	if (rv != KC_EINVAL || k != NULL)
		KT_FAIL("'%s' -> '%s' was accepted (rv %d)", from, to, rv);
	KT_CONTAINS(kc_lasterr(), want1);
	if (want2 != NULL)
		KT_CONTAINS(kc_lasterr(), want2);
	free(text);
}

static void
test_base_is_valid(void)
{
	kb *k;
	char *t;

	KT_OK(kb_load_json(
	    base_policy, "policy.json", base_methods, "methods.json", &k));
	KT_EQ_STR(k->label, "t1");
	KT_EQ_INT(k->nfields, 2);
	KT_EQ_INT(k->fields[0].naliases, 2);
	KT_ASSERT(k->fields[0].aliases[1].scale == 100);
	/* A field without aliases reads its own name. */
	KT_EQ_STR(k->fields[1].aliases[0].name, "vector_loads");
	KT_ASSERT(kb_method_find(k, "vec") != NULL);
	KT_ASSERT(kb_method_find(k, "nope") == NULL);
	KT_EQ_INT(strlen(k->sha256), 64);
	KT_OK(kb_method_text(kb_method_find(k, "vec"), 80, 0, &t));
	KT_CONTAINS(t, "AMP");
	KT_ASSERT(strstr(t, "HOP") == NULL);
	free(t);
	KT_OK(kb_method_text(kb_method_find(k, "vec"), 90, 0, &t));
	KT_CONTAINS(t, "HOP");
	KT_ASSERT(strstr(t, "AMP") == NULL);
	free(t);
	KT_OK(kb_method_text(kb_method_find(k, "vec"), 0, 0, &t));
	KT_CONTAINS(t, "HOP");
	KT_CONTAINS(t, "AMP");
	free(t);
	kb_free(k);
}

static void
test_validation_errors(void)
{
	/* Unknown field, with file, line and the allowed ones. */
	expect_invalid(true, "\"allow\": [\"vec\"]", "\"alow\": [\"vec\"]",
	    "policy.json:14: rules[0] \"widen\": unknown field 'alow'",
	    "allowed: name, class, when, allow, why");
	/* A predicate that does not parse: where, and why. */
	expect_invalid(true, "dram_frac > 0.6", "dram_frac > (0.6",
	    "policy.json:9: predicates[0] \"busy\": expr: predicate does not "
	    "parse: column 17: expected ')'",
	    NULL);
	expect_invalid(true, "\"when\": \"busy\"", "\"when\": \"busy &&\"",
	    "classes[0] \"membw\": when: predicate does not parse", NULL);
	/* A method referenced but not defined. */
	expect_invalid(true, "\"allow\": [\"vec\"]",
	    "\"allow\": [\"vec\", \"fuse\"]",
	    "rules[0] \"widen\": allow: method 'fuse' is not defined in "
	    "methods.json",
	    NULL);
	expect_invalid(true, "\"methods\": [\"vec\"]",
	    "\"methods\": [\"nope\"]",
	    "vetoes[0] \"done\": methods: method 'nope' is not defined", NULL);
	/* Unknown identifiers, including one used before its definition. */
	expect_invalid(true, "dram_frac > 0.6", "dram_fraction > 0.6",
	    "unknown identifier 'dram_fraction'", NULL);
	expect_invalid(true, "dram_pct / 100", "busy / 100",
	    "derived[0] \"dram_frac\": expr: unknown identifier 'busy'", NULL);
	/* Classes cannot read classes; rules can. */
	expect_invalid(true, "\"when\": \"busy\"", "\"when\": \"membw\"",
	    "unknown identifier 'membw'", NULL);
	{
		char *p = patch(base_policy, "default(vector_loads, 0) == 0",
		    "membw && default(vector_loads, 0) == 0");
		kb *k;
		KT_OK(kb_load_json(
		    p, "policy.json", base_methods, "methods.json", &k));
		kb_free(k);
		free(p);
	}
	/* Other references and shapes. */
	expect_invalid(true, "\"class\": \"membw\"", "\"class\": \"compute\"",
	    "class 'compute' is not defined", NULL);
	expect_invalid(true, "\"why\": \"w\"}\n  ],\n  \"rules\"",
	    "\"why\": \"w\", \"suppresses\": [\"x\"]}\n  ],\n  \"rules\"",
	    "suppresses class 'x', which is not defined", NULL);
	expect_invalid(true, "\"name\": \"dram_frac\"",
	    "\"name\": \"dram_pct\"", "name 'dram_pct' is defined twice", NULL);
	expect_invalid(true, "\"name\": \"dram_frac\"", "\"name\": \"max\"",
	    "name 'max' is not an identifier", NULL);
	expect_invalid(true, "\"source\": \"metric\"", "\"source\": \"ncu\"",
	    "source 'ncu' is not one of metric, runtime, feature", NULL);
	expect_invalid(true, "\"priority\": 5", "\"priority\": 5.5",
	    "'priority' must be an integer", NULL);
	expect_invalid(true, ", \"why\": \"w\"}\n  ],\n  \"vetoes\"",
	    "}\n  ],\n  \"vetoes\"", "rules[0] \"widen\": missing field 'why'",
	    NULL);
	expect_invalid(true, "\"allow\": [\"vec\"]", "\"allow\": []",
	    "'allow' is empty", NULL);
	expect_invalid(true, "\"vetoes\": [", "\"vetos\": [",
	    "unknown field 'vetos'", NULL);
	expect_invalid(true, "\"dram_throughput_pct\", {", "3, {",
	    "an alias is a string", NULL);
	expect_invalid(true, "\"scale\": 100", "\"scale\": \"x\"",
	    "alias 'dram': 'scale' must be a number", NULL);
	/* JSON syntax: line and column. */
	expect_invalid(true, "\"t1\",\n", "\"t1\"\n",
	    "policy.json:3:3: JSON syntax error", NULL);
	/* Methods. */
	expect_invalid(false, "\"cues\": {\"ampere\": \"AMP\", ",
	    "\"cues\": {\"ampre\": \"AMP\", ",
	    "methods.json:2: methods[0] \"vec\": unknown field 'ampre'", NULL);
	expect_invalid(false, "\"intent\": \"i\",", "",
	    "methods[0] \"vec\": missing field 'intent'", NULL);
	expect_invalid(false, "\"pitfalls\": \"p\"", "\"pitfalls\": 3",
	    "'pitfalls' must be a string", NULL);
	expect_invalid(false, "]}\n", "]\n", "methods.json:", "JSON syntax");
}

static void
test_shipped(void)
{
	kb *k;

	KT_OK(kb_load_dir(knowledge_dir, &k));
	/* The issue asks for at least 30 methods and 8 bottleneck classes,
	 * each rule justified in a sentence. */
	KT_ASSERT(k->nmethods >= 30);
	KT_ASSERT(k->nclasses >= 8);
	for (size_t i = 0; i < k->nclasses; i++) {
		bool has_rule = false;
		KT_ASSERT(strlen(k->classes[i].why) > 20);
		for (size_t r = 0; r < k->nrules; r++)
			if (strcmp(k->rules[r].cls, k->classes[i].name) == 0)
				has_rule = true;
		if (!has_rule)
			KT_FAIL("class %s has no rule", k->classes[i].name);
	}
	for (size_t r = 0; r < k->nrules; r++)
		KT_ASSERT(strlen(k->rules[r].why) > 20);
	/* Every method is reachable from some rule. */
	for (size_t m = 0; m < k->nmethods; m++) {
		bool used = false;
		for (size_t r = 0; r < k->nrules; r++)
			for (size_t j = 0; j < k->rules[r].nallow; j++)
				if (strcmp(k->rules[r].allow[j],
				        k->methods[m].name) == 0)
					used = true;
		if (!used)
			KT_FAIL("method %s is allowed by no rule",
			    k->methods[m].name);
	}
	/* Classes come sorted by priority. */
	for (size_t i = 1; i < k->nclasses; i++)
		KT_ASSERT(k->classes[i - 1].priority >= k->classes[i].priority);
	/* Method text stays within its budget, cut at a line. */
	for (size_t m = 0; m < k->nmethods; m++) {
		char *t;
		KT_OK(kb_method_text(&k->methods[m], 80, 300, &t));
		KT_ASSERT(strlen(t) <= 300);
		KT_CONTAINS(t, k->methods[m].name);
		free(t);
	}
	kb_free(k);
	KT_EQ_INT(kb_load_dir("/nonexistent-kclaw", &k), KC_ENOENT);
	KT_CONTAINS(kc_lasterr(), "policy.json");
}

static void
test_import_export(void)
{
	char dir[64], db[128], out[128], cmd[512];
	store *s;
	kb *k;
	uint64_t v;
	bool changed;
	kb_version_info *vs;
	size_t n;
	char *text;
	size_t len;

	snprintf(dir, sizeof(dir), "/tmp/kc-kb-test-XXXXXX");
	KT_ASSERT(mkdtemp(dir) != NULL);
	snprintf(db, sizeof(db), "%s/db", dir);
	snprintf(out, sizeof(out), "%s/export", dir);
	KT_OK(store_open(&s, db));
	KT_EQ_INT(kb_load(s, 0, &k), KC_ENOENT);
	KT_CONTAINS(kc_lasterr(), "kclaw memory import");
	KT_EQ_INT(kb_export(s, 0, out), KC_ENOENT);

	KT_OK(kb_import(s, knowledge_dir, &v, &changed));
	KT_EQ_INT(v, 1);
	KT_ASSERT(changed);
	/* The same content again: no new version. */
	KT_OK(kb_import(s, knowledge_dir, &v, &changed));
	KT_EQ_INT(v, 1);
	KT_ASSERT(!changed);
	/* Export and re-import: same content, so still version 1. */
	KT_OK(kb_export(s, 0, out));
	KT_OK(kb_import(s, out, &v, &changed));
	KT_EQ_INT(v, 1);
	KT_ASSERT(!changed);
	/* An edited export becomes version 2. */
	snprintf(cmd, sizeof(cmd),
	    "sed -i 's/\"version\":[[:space:]]*\"[^\"]*\"/\"version\": "
	    "\"edited\"/' "
	    "'%s/policy.json'",
	    out);
	KT_EQ_INT(system(cmd), 0);
	KT_OK(kb_import(s, out, &v, &changed));
	KT_EQ_INT(v, 2);
	KT_ASSERT(changed);
	/* A broken file is refused and the head stays. */
	snprintf(cmd, sizeof(cmd), "echo '{' > '%s/methods.json'", out);
	KT_EQ_INT(system(cmd), 0);
	KT_EQ_INT(kb_import(s, out, &v, &changed), KC_EINVAL);
	KT_CONTAINS(kc_lasterr(), "methods.json:2:1: JSON syntax error");
	store_close(s);

	/* Versions survive a reopen. */
	KT_OK(store_open(&s, db));
	KT_OK(kb_load(s, 0, &k));
	KT_EQ_INT(k->version, 2);
	KT_EQ_STR(k->label, "edited");
	KT_ASSERT(k->imported_unix_ms > 0);
	KT_ASSERT(k->nmethods >= 30);
	kb_free(k);
	KT_OK(kb_load(s, 1, &k));
	KT_EQ_INT(k->version, 1);
	KT_ASSERT(strcmp(k->label, "edited") != 0);
	kb_free(k);
	KT_EQ_INT(kb_load(s, 7, &k), KC_ENOENT);
	KT_OK(kb_versions(s, &vs, &n));
	KT_EQ_INT(n, 2);
	KT_EQ_INT(vs[0].version, 1);
	KT_EQ_STR(vs[1].label, "edited");
	KT_EQ_STR(vs[0].source, knowledge_dir);
	free(vs);
	/* Export of an old version writes what was imported then. */
	KT_OK(kb_export(s, 1, out));
	KT_OK(kc_read_file(
	    strcat(strcpy(cmd, out), "/policy.json"), 1 << 22, &text, &len));
	KT_ASSERT(strstr(text, "\"edited\"") == NULL);
	free(text);
	store_close(s);

	/* kb_ensure imports into an empty store, and only then. */
	snprintf(db, sizeof(db), "%s/db2", dir);
	KT_OK(store_open(&s, db));
	KT_OK(kb_ensure(s, knowledge_dir, &k));
	KT_EQ_INT(k->version, 1);
	kb_free(k);
	KT_OK(kb_ensure(s, "/nonexistent", &k));
	KT_EQ_INT(k->version, 1);
	kb_free(k);
	store_close(s);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	KT_EQ_INT(system(cmd), 0);
}

int
main(void)
{
	const char *src = getenv("KCLAW_SRC");

	snprintf(knowledge_dir, sizeof(knowledge_dir), "%s/store/knowledge",
	    src ? src : ".");
	KT_RUN(test_base_is_valid);
	KT_RUN(test_validation_errors);
	KT_RUN(test_shipped);
	KT_RUN(test_import_export);
	return 0;
}
