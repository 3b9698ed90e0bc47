/*
 * agent_parse.c - reading model replies: fenced blocks, JSON objects, and
 * candidates (source + launch plan) checked against the candidate contract
 * before they cost an evaluation. Every error is phrased for the model,
 * which gets it back verbatim when it is asked again.
 */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent.h"
#include "tunables.h"
#include "bundle.h"
#include "kc_err.h"
#include "kc_util.h"

/* -------------------------------------------------------------- blocks */

/* The last occurrence of needle in s, or NULL. */
static const char *
agent_last(const char *s, const char *needle)
{
	const char *p, *last = NULL;

	for (p = strstr(s, needle); p != NULL; p = strstr(p + 1, needle))
		last = p;
	return last;
}

/*
 * Reasoning inline in the content comes as <think>...</think> (Qwen,
 * DeepSeek-R1 and their distills; <thinking> for some), and sometimes
 * without the opening tag, when the chat template put it in the prompt.
 * The answer is what follows the last closing tag; a reply that opens a
 * reasoning section and never closes it (cut off while thinking) has no
 * answer at all: a draft in there must not be taken for one.
 */
const char *
agent_reply_body(const char *content)
{
	static const char *const close_tags[] = {"</think>", "</thinking>"};
	const char *p = content, *end, *best = NULL;
	size_t i, blen = 0;

	for (i = 0; i < KC_ARRAY_LEN(close_tags); i++) {
		end = agent_last(content, close_tags[i]);
		if (end != NULL && (best == NULL || end > best)) {
			best = end;
			blen = strlen(close_tags[i]);
		}
	}
	if (best != NULL)
		return best + blen;
	while (isspace((unsigned char)*p))
		p++;
	if (strncmp(p, "<think>", 7) == 0 || strncmp(p, "<thinking>", 10) == 0)
		return content + strlen(content);
	return content;
}

void
agent_blocks_free(agent_block *blocks, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		free(blocks[i].body);
	free(blocks);
}

/* A fence line: white space (any amount: a fence may be indented inside a
 * list item), then ```; *info is what follows, *indent the columns before
 * it. */
static bool
agent_is_fence(
    const char *line, const char *eol, const char **info, size_t *indent)
{
	const char *p = line;

	while (p < eol && (*p == ' ' || *p == '\t'))
		p++;
	if (eol - p < 3 || strncmp(p, "```", 3) != 0)
		return false;
	*info = p + 3;
	*indent = (size_t)(p - line);
	return true;
}

static bool
agent_blank(const char *p, const char *eol)
{
	for (; p < eol; p++)
		if (!isspace((unsigned char)*p))
			return false;
	return true;
}

/* The body between body and end, each line losing up to indent leading
 * blanks (the indentation of its fence). */
static char *
agent_block_body(const char *body, const char *end, size_t indent)
{
	kc_str s = {0};
	const char *p = body, *eol;
	size_t k;

	if (indent == 0)
		return strndup(body, (size_t)(end - body));
	while (p < end) {
		for (k = 0; k < indent && p < end && (*p == ' ' || *p == '\t');
		     k++)
			p++;
		eol = memchr(p, '\n', (size_t)(end - p));
		eol = eol != NULL ? eol + 1 : end;
		if (kc_str_appendn(&s, p, (size_t)(eol - p)) != 0) {
			kc_str_free(&s);
			return NULL;
		}
		p = eol;
	}
	return s.buf != NULL ? kc_str_take(&s) : strdup("");
}

int
agent_parse_blocks(
    const char *text, agent_block **blocks, size_t *n, kc_str *err)
{
	agent_block *b = NULL, *nb;
	const char *p = text, *eol, *info, *body = NULL;
	unsigned line = 1, open_line = 0;
	size_t nb_count = 0, i, indent, open_indent = 0;
	char lang[32] = "";
	bool in = false;

	while (*p != '\0') {
		eol = strchr(p, '\n');
		if (eol == NULL)
			eol = p + strlen(p);
		if (agent_is_fence(p, eol, &info, &indent)) {
			if (!in) {
				in = true;
				open_line = line;
				open_indent = indent;
				for (i = 0;
				     info + i < eol && i + 1 < sizeof(lang) &&
				     !isspace((unsigned char)info[i]);
				     i++)
					lang[i] = (char)tolower(
					    (unsigned char)info[i]);
				lang[i] = '\0';
				body = *eol ? eol + 1 : eol;
			} else if (agent_blank(info, eol)) {
				in = false;
				nb = realloc(b, (nb_count + 1) * sizeof(*b));
				if (nb == NULL)
					goto nomem;
				b = nb;
				memcpy(b[nb_count].lang, lang, sizeof(lang));
				b[nb_count].line = open_line;
				b[nb_count].body =
				    agent_block_body(body, p, open_indent);
				if (b[nb_count++].body == NULL)
					goto nomem;
			}
		}
		p = *eol ? eol + 1 : eol;
		line++;
	}
	if (in) {
		agent_blocks_free(b, nb_count);
		kc_str_printf(err,
		    "the ```%s block opened at line %u is never closed (was "
		    "the reply cut off?); close every block with a line of "
		    "three backticks and keep the reply shorter",
		    lang, open_line);
		return KC_EINVAL;
	}
	*blocks = b;
	*n = nb_count;
	return 0;
nomem:
	agent_blocks_free(b, nb_count);
	return KC_ENOMEM;
}

/* ---------------------------------------------------------------- JSON */

static int
agent_json_error(
    const char *what, const char *text, const char *end, kc_str *err)
{
	unsigned line = 1;
	const char *p;

	if (end == NULL)
		end = text;
	for (p = text; p < end; p++)
		if (*p == '\n')
			line++;
	if (*end == '\0')
		kc_str_printf(err,
		    "%s is not valid JSON: the parser gave up at its end "
		    "(line %u): is it cut off, or is there a trailing comma "
		    "or a comment? Reply with strict, complete JSON",
		    what, line);
	else
		kc_str_printf(err,
		    "%s is not valid JSON: parsing stopped at its line %u, "
		    "near '%.30s'; reply with strict JSON (double quotes, no "
		    "comments, no trailing commas)",
		    what, line, end);
	return KC_EINVAL;
}

/* Parses a whole JSON object from text; err describes what is wrong. */
static int
agent_json_object(const char *what, const char *text, cJSON **out, kc_str *err)
{
	const char *end = NULL;
	cJSON *root;

	root = cJSON_ParseWithOpts(text, &end, 0);
	if (root == NULL)
		return agent_json_error(what, text, end, err);
	if (!cJSON_IsObject(root)) {
		cJSON_Delete(root);
		kc_str_printf(err, "%s must be a JSON object {...}", what);
		return KC_EINVAL;
	}
	*out = root;
	return 0;
}

int
agent_parse_json(const char *text, cJSON **out, kc_str *err)
{
	agent_block *b;
	size_t n, i;
	const char *s;
	kc_str later = {0};
	size_t err0 = err->len;
	bool found = false;
	int rv;

	if ((rv = agent_parse_blocks(text, &b, &n, err)) != 0)
		return rv;
	/*
	 * The last ```json block that is a JSON object wins: a model may
	 * echo the format's example, or draft, before its real answer. When
	 * none parses, the last one's error is the one to fix.
	 */
	for (i = n; i-- > 0;) {
		if (strcmp(b[i].lang, "json") == 0) {
			char what[64];
			snprintf(what, sizeof(what),
			    "the ```json block at line %u", b[i].line);
			rv = agent_json_object(
			    what, b[i].body, out, found ? &later : err);
			if (rv == 0) {
				/* A later block's error no longer applies. */
				if (err->buf != NULL) {
					err->len = err0;
					err->buf[err0] = '\0';
				}
				kc_str_free(&later);
				agent_blocks_free(b, n);
				return 0;
			}
			found = true;
		}
	}
	kc_str_free(&later);
	agent_blocks_free(b, n);
	if (found)
		return KC_EINVAL;
	for (s = text; isspace((unsigned char)*s); s++)
		;
	if (*s == '{')
		return agent_json_object("the reply", s, out, err);
	kc_str_printf(err,
	    "no ```json block found; put the JSON object in a "
	    "```json block");
	return KC_EINVAL;
}

/* ------------------------------------------------------- source checks */

/* String literals are kept: extern "C" must stay readable. */
char *
agent_strip_comments(const char *src)
{
	char *o = strdup(src), *p;

	if (o == NULL)
		return NULL;
	for (p = o; *p != '\0'; p++) {
		if (*p == '"' || *p == '\'') {
			char q = *p;
			for (p++; *p != '\0' && *p != q && *p != '\n'; p++)
				if (*p == '\\' && p[1] != '\0')
					p++;
			if (*p == '\0')
				break;
		} else if (p[0] == '/' && p[1] == '/') {
			while (*p != '\0' && *p != '\n')
				*p++ = ' ';
			if (*p == '\0')
				break;
		} else if (p[0] == '/' && p[1] == '*') {
			while (*p != '\0' && !(p[0] == '*' && p[1] == '/')) {
				if (*p != '\n')
					*p = ' ';
				p++;
			}
			if (*p == '\0')
				break;
			p[0] = p[1] = ' ';
			p++;
		}
	}
	return o;
}

static bool
agent_ident_char(char c)
{
	return isalnum((unsigned char)c) || c == '_';
}

/* The next occurrence of word w as a whole token. */
static const char *
agent_find_word(const char *s, const char *w)
{
	size_t n = strlen(w);
	const char *p = s;

	while ((p = strstr(p, w)) != NULL) {
		if ((p == s || !agent_ident_char(p[-1])) &&
		    !agent_ident_char(p[n]))
			return p;
		p += n;
	}
	return NULL;
}

#define AGENT_MAX_SPANS 64
#define AGENT_MAX_KERNELS 256
#define AGENT_MAX_SOURCE (1u << 20)

typedef struct {
	const char *b, *e;
} agent_span;

/* The extern "C" { ... } blocks of src, in one pass (an unclosed one runs
 * to the end). */
static size_t
agent_extern_blocks(const char *src, agent_span *v, size_t max)
{
	const char *p, *q;
	int depth = 0, open_at = -1;
	size_t n = 0;

	for (p = src; *p != '\0'; p++) {
		if (*p == '{') {
			depth++;
		} else if (*p == '}') {
			if (depth > 0)
				depth--;
			if (open_at >= 0 && depth == open_at) {
				v[n - 1].e = p;
				open_at = -1;
			}
		} else if (open_at < 0 && n < max &&
		    strncmp(p, "extern \"C\"", 10) == 0) {
			for (q = p + 10; isspace((unsigned char)*q); q++)
				;
			if (*q == '{') {
				v[n].b = p;
				v[n++].e = q + strlen(q);
				open_at = depth++;
				p = q;
			}
		}
	}
	return n;
}

/* Is the kernel at pos in an extern "C" block, or is extern "C" part of
 * its own declaration (looked for back to the previous ; { or })? */
static bool
agent_is_extern_c(
    const char *src, const char *pos, const agent_span *v, size_t nv)
{
	const char *stmt, *p;
	size_t i;

	for (i = 0; i < nv; i++)
		if (pos > v[i].b && pos < v[i].e)
			return true;
	for (stmt = pos; stmt > src && pos - stmt < 4096 && stmt[-1] != ';' &&
	     stmt[-1] != '{' && stmt[-1] != '}';
	     stmt--)
		;
	for (p = stmt; p + 10 <= pos; p++)
		if (strncmp(p, "extern \"C\"", 10) == 0)
			return true;
	return false;
}

void
agent_names_free(char **names, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		free(names[i]);
	free(names);
}

/* Kernel names; with not_c set, also the first kernel that is not extern
 * "C" (malloc'd into *not_c, or NULL). */
static int
agent_kernels(const char *clean, char ***names, size_t *n, char **not_c)
{
	const char *p = clean, *paren, *e, *s;
	char **v = NULL, **nv;
	agent_span spans[AGENT_MAX_SPANS];
	size_t cnt = 0, nspans = 0;

	if (not_c != NULL) {
		*not_c = NULL;
		nspans = agent_extern_blocks(clean, spans, AGENT_MAX_SPANS);
	}
	while ((p = agent_find_word(p, "__global__")) != NULL &&
	    cnt < AGENT_MAX_KERNELS) {
		const char *g = p;
		p += 10;
		/* The name is before the first '(' that is not an attribute's
		 * such as __launch_bounds__(256). */
		for (;;) {
			if ((paren = strchr(p, '(')) == NULL)
				goto done;
			for (e = paren; e > p && isspace((unsigned char)e[-1]);
			     e--)
				;
			for (s = e; s > p && agent_ident_char(s[-1]); s--)
				;
			if ((size_t)(e - s) < 2 || strncmp(s, "__", 2) != 0 ||
			    strncmp(e - 2, "__", 2) != 0)
				break;
			p = strchr(paren, ')');
			if (p == NULL)
				goto done;
		}
		if (s == e)
			continue;
		if ((nv = realloc(v, (cnt + 1) * sizeof(*v))) == NULL)
			goto nomem;
		v = nv;
		if ((v[cnt] = strndup(s, (size_t)(e - s))) == NULL)
			goto nomem;
		if (not_c != NULL && *not_c == NULL &&
		    !agent_is_extern_c(clean, g, spans, nspans) &&
		    (*not_c = strdup(v[cnt])) == NULL) {
			cnt++;
			goto nomem;
		}
		cnt++;
	}
done:
	*names = v;
	*n = cnt;
	return 0;
nomem:
	agent_names_free(v, cnt);
	return KC_ENOMEM;
}

int
agent_kernel_names(const char *source, char ***names, size_t *n)
{
	char *clean = agent_strip_comments(source);
	int rv;

	if (clean == NULL)
		return KC_ENOMEM;
	rv = agent_kernels(clean, names, n, NULL);
	free(clean);
	return rv;
}

/* Host-only headers NVRTC cannot compile, or that betray host code. */
static const char *const agent_host_headers[] = {"stdio.h", "stdlib.h",
    "string.h", "iostream", "cstdio", "cstdlib", "cstring", "vector", "string",
    "map", "memory", "cuda_runtime.h", "cuda_runtime_api.h", "cuda.h", "torch/",
    "ATen/", "c10/", "pybind11/", "cublas", "cudnn", "thrust/", "unistd.h",
    NULL};

/* Things only host code does. */
static const char *const agent_host_code[] = {"int main(", "cudaMalloc",
    "cudaMemcpy", "cudaFree", "cudaLaunchKernel", "cudaDeviceSynchronize",
    "<<<", NULL};

static int
agent_check_source(const char *clean, kc_str *err)
{
	const char *p = clean, *eol, *h;
	size_t i;

	while ((p = strstr(p, "#include")) != NULL) {
		for (h = p + 8; *h == ' ' || *h == '\t'; h++)
			;
		eol = strchr(h, '\n');
		if (*h == '"') {
			kc_str_printf(err,
			    "'%.*s': only toolkit headers in <...> are "
			    "available to NVRTC; inline what you need from "
			    "your own headers",
			    (int)(eol ? eol - p : (long)strlen(p)), p);
			return KC_EINVAL;
		}
		for (i = 0; *h == '<' && agent_host_headers[i] != NULL; i++) {
			size_t n = strlen(agent_host_headers[i]);
			if (strncmp(h + 1, agent_host_headers[i], n) == 0 &&
			    (h[1 + n] == '>' ||
			        agent_host_headers[i][n - 1] == '/' ||
			        strncmp(agent_host_headers[i], "cu", 2) == 0)) {
				kc_str_printf(err,
				    "'%.*s' is a host header; "
				    "NVRTC compiles device code only (toolkit "
				    "headers such as <cuda_fp16.h>, "
				    "<cuda_bf16.h>, <cooperative_groups.h>, "
				    "<cuda/pipeline>, <mma.h> are fine)",
				    (int)(eol ? eol - p : (long)strlen(p)), p);
				return KC_EINVAL;
			}
		}
		p = h;
	}
	for (i = 0; agent_host_code[i] != NULL; i++) {
		if (strstr(clean, agent_host_code[i]) != NULL) {
			kc_str_printf(err,
			    "the source contains host code ('%s'); a candidate "
			    "is device code only: the sandbox allocates the "
			    "tensors and launches the kernels from the plan",
			    agent_host_code[i]);
			return KC_EINVAL;
		}
	}
	return 0;
}

/* --------------------------------------------------------- plan checks */

static bool
agent_has_name(char **names, size_t n, const char *name)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (strcmp(names[i], name) == 0)
			return true;
	return false;
}

static int
agent_check_dims(const cJSON *step, const char *key, int i, const char *k,
    long long *product, kc_str *err)
{
	const cJSON *d = cJSON_GetObjectItemCaseSensitive(step, key), *x;
	int n = 0;

	*product = 1;
	/* One integer is a 1-D launch (docs/plan.md). */
	if (cJSON_IsNumber(d) && d->valuedouble >= 1 &&
	    d->valuedouble == (double)(long long)d->valuedouble &&
	    d->valuedouble <= 2147483647.0) {
		*product = (long long)d->valuedouble;
		return 0;
	}
	if (!cJSON_IsArray(d) || cJSON_GetArraySize(d) < 1 ||
	    cJSON_GetArraySize(d) > 3) {
		kc_str_printf(err,
		    "plan: steps[%d] '%s': '%s' must be a positive integer "
		    "or an array of 1 to 3 positive integers such as [256, "
		    "1, 1]",
		    i, k, key);
		return KC_EINVAL;
	}
	cJSON_ArrayForEach(x, d)
	{
		if (!cJSON_IsNumber(x) || x->valuedouble < 1 ||
		    x->valuedouble != (double)(long long)x->valuedouble ||
		    x->valuedouble > 2147483647.0) {
			kc_str_printf(err,
			    "plan: steps[%d] '%s': %s[%d] must be a positive "
			    "integer",
			    i, k, key, n);
			return KC_EINVAL;
		}
		*product *= (long long)x->valuedouble;
		n++;
	}
	return 0;
}

static int
agent_check_scalar(const cJSON *a, int i, const char *k, int j, kc_str *err)
{
	static const char *const types[] = {"i32", "i64", "u32", "f32", "f64"};
	const cJSON *v = a->child;
	size_t t;

	if (v != NULL && v->next == NULL && cJSON_IsNumber(v))
		for (t = 0; t < KC_ARRAY_LEN(types); t++)
			if (v->string != NULL &&
			    strcmp(v->string, types[t]) == 0)
				return 0;
	kc_str_printf(err,
	    "plan: steps[%d] '%s': args[%d] must be a tensor name or one "
	    "typed scalar such as {\"i32\": 1024} (types: i32, i64, u32, "
	    "f32, f64)",
	    i, k, j);
	return KC_EINVAL;
}

static int
agent_check_steps(const cJSON *plan, char **kernels, size_t nk, kc_str *err)
{
	const cJSON *steps = cJSON_GetObjectItemCaseSensitive(plan, "steps");
	const cJSON *step, *kernel, *a, *sh;
	long long grid, block;
	int i = 0, j, rv;

	cJSON_ArrayForEach(step, steps)
	{
		kernel = cJSON_GetObjectItemCaseSensitive(step, "kernel");
		if (kernel == NULL) {
			i++;
			continue; /* a library step, see docs/plan.md */
		}
		if (!agent_has_name(kernels, nk, kernel->valuestring)) {
			size_t q;
			kc_str_printf(err,
			    "plan: steps[%d] launches kernel '%s', which the "
			    "source does not define; kernels defined:",
			    i, kernel->valuestring);
			for (q = 0; q < nk; q++)
				kc_str_printf(err, " %s", kernels[q]);
			return KC_EINVAL;
		}
		if ((rv = agent_check_dims(step, "grid", i, kernel->valuestring,
		         &grid, err)) != 0 ||
		    (rv = agent_check_dims(step, "block", i,
		         kernel->valuestring, &block, err)) != 0)
			return rv;
		if (block > 1024) {
			kc_str_printf(err,
			    "plan: steps[%d] '%s': a block of %lld threads is "
			    "more than the 1024 a GPU allows",
			    i, kernel->valuestring, block);
			return KC_EINVAL;
		}
		sh = cJSON_GetObjectItemCaseSensitive(step, "shared_bytes");
		if (sh != NULL &&
		    (!cJSON_IsNumber(sh) || sh->valuedouble < 0 ||
		        sh->valuedouble !=
		            (double)(long long)sh->valuedouble)) {
			kc_str_printf(err,
			    "plan: steps[%d] '%s': 'shared_bytes' must be a "
			    "non-negative integer (dynamic shared memory)",
			    i, kernel->valuestring);
			return KC_EINVAL;
		}
		j = 0;
		cJSON_ArrayForEach(
		    a, cJSON_GetObjectItemCaseSensitive(step, "args"))
		{
			if (cJSON_IsObject(a) &&
			    (rv = agent_check_scalar(
			         a, i, kernel->valuestring, j, err)) != 0)
				return rv;
			j++;
		}
		i++;
	}
	return 0;
}

int
agent_check_candidate(const Kclaw__TaskSpec *task, const char *source,
    const char *plan_json, kc_str *err)
{
	char *clean = NULL, *not_c = NULL, **kernels = NULL;
	size_t nk = 0;
	cJSON *plan = NULL;
	int rv;

	if (strlen(source) > AGENT_MAX_SOURCE) {
		kc_str_printf(err,
		    "the source is longer than %u bytes; a kernel file is far "
		    "smaller",
		    AGENT_MAX_SOURCE);
		return KC_EINVAL;
	}
	if ((clean = agent_strip_comments(source)) == NULL)
		return KC_ENOMEM;
	if ((rv = agent_check_source(clean, err)) != 0)
		goto out;
	if ((rv = agent_kernels(clean, &kernels, &nk, &not_c)) != 0)
		goto out;
	if (nk == 0) {
		kc_str_printf(err,
		    "the source defines no __global__ kernel; "
		    "define extern \"C\" __global__ kernels");
		rv = KC_EINVAL;
		goto out;
	}
	if (not_c != NULL) {
		kc_str_printf(err,
		    "kernel '%s' is not extern \"C\"; declare every kernel as "
		    "extern \"C\" __global__ (no templates or overloads), so "
		    "the plan can name it",
		    not_c);
		rv = KC_EINVAL;
		goto out;
	}
	if ((rv = agent_json_object("the plan", plan_json, &plan, err)) != 0)
		goto out;
	/* A plan with tunables is checked as its default configuration (the
	 * sandbox expands and checks every one). */
	if (cJSON_GetObjectItemCaseSensitive(plan, "tunables") != NULL) {
		kc_tune_config *cfg;
		size_t n;
		if (kc_tune_expand(source, plan_json, &cfg, &n) != 0) {
			kc_str_append(err, kc_lasterr());
			rv = KC_EINVAL;
			goto out;
		}
		cJSON_Delete(plan);
		plan = cJSON_Parse(n ? cfg[0].plan_json : "{}");
		rv = n && kc_plan_check(task, cfg[0].plan_json, "plan", 1) != 0
		    ? KC_EINVAL
		    : 0;
		kc_tune_free(cfg, n);
		if (rv != 0) {
			kc_str_append(err, kc_lasterr());
			goto out;
		}
		rv = agent_check_steps(plan, kernels, nk, err);
		goto out;
	}
	if (kc_plan_check(task, plan_json, "plan", 1) != 0) {
		kc_str_append(err, kc_lasterr());
		rv = KC_EINVAL;
		goto out;
	}
	rv = agent_check_steps(plan, kernels, nk, err);
out:
	cJSON_Delete(plan);
	agent_names_free(kernels, nk);
	free(not_c);
	free(clean);
	return rv;
}

/* ---------------------------------------------------------- candidates */

static bool
agent_is_code_lang(const char *lang)
{
	static const char *const langs[] = {
	    "cuda", "cpp", "c++", "cu", "cuh", "c", "cc", "cxx"};
	size_t i;

	for (i = 0; i < KC_ARRAY_LEN(langs); i++)
		if (strcmp(lang, langs[i]) == 0)
			return true;
	return false;
}

/*
 * A new Candidate whose id is a hash of its content, so a replayed job
 * names its candidates as the recorded one did. The plan is kept as the
 * model wrote it, minus the block's surrounding white space.
 */
static Kclaw__Candidate *
agent_new_candidate(const char *source, const char *plan)
{
	Kclaw__Candidate *c;
	char hex[65], id[20];
	size_t plen;
	kc_str s = {0};

	while (isspace((unsigned char)*plan))
		plan++;
	for (plen = strlen(plan);
	     plen > 0 && isspace((unsigned char)plan[plen - 1]); plen--)
		;
	if ((c = malloc(sizeof(*c))) == NULL)
		return NULL;
	kclaw__candidate__init(c);
	if (kc_str_append(&s, source) != 0 || kc_str_appendn(&s, "", 1) != 0 ||
	    kc_str_appendn(&s, plan, plen) != 0) {
		kc_str_free(&s);
		free(c);
		return NULL;
	}
	kc_sha256_hex(s.buf, s.len, hex);
	snprintf(id, sizeof(id), "c%.16s", hex);
	if (agent_pb_setstr(&c->id, id) != 0 ||
	    agent_pb_setstr(&c->source, source) != 0 ||
	    agent_pb_setstr(&c->plan_json, s.buf + strlen(source) + 1) != 0) {
		kc_str_free(&s);
		kclaw__candidate__free_unpacked(c, NULL);
		return NULL;
	}
	kc_str_free(&s);
	return c;
}

/* A block that holds kernel source: a code language, or no language at
 * all around a __global__ function. */
static bool
agent_is_code_block(const agent_block *b)
{
	return agent_is_code_lang(b->lang) ||
	    (b->lang[0] == '\0' && strstr(b->body, "__global__") != NULL);
}

/*
 * Each ```json block is the plan of the code block nearest before it (with
 * no other plan between them); a code block without a plan after it is a
 * snippet quoted in the prose, not a candidate. Of the pairs that pass the
 * contract checks the last max are taken, so a format example or an early
 * draft before the real answer does not win; the errors of the others are
 * reported only when fewer than max pass.
 */
int
agent_parse_candidates(const Kclaw__TaskSpec *task, const char *text,
    size_t max, Kclaw__Candidate ***out, size_t *n, kc_str *err)
{
	Kclaw__Candidate **v = NULL, **nv, *c;
	agent_block *b;
	size_t nb, i, j, cnt = 0, code_blocks = 0, pairs = 0;
	size_t *code_no = NULL;
	bool *paired = NULL;
	kc_str e = {0}, why = {0};
	int rv = 0, bad = 0;

	*out = NULL;
	*n = 0;
	if ((rv = agent_parse_blocks(text, &b, &nb, err)) != 0)
		return rv;
	if ((paired = calloc(nb + 1, sizeof(*paired))) == NULL ||
	    (code_no = calloc(nb + 1, sizeof(*code_no))) == NULL)
		goto nomem;
	for (i = 0; i < nb; i++)
		if (agent_is_code_block(&b[i]))
			code_no[i] = ++code_blocks;
	for (j = 0; j < nb; j++) {
		if (strcmp(b[j].lang, "json") != 0)
			continue;
		for (i = j; i-- > 0 && strcmp(b[i].lang, "json") != 0 &&
		     code_no[i] == 0;)
			;
		if (i >= j || code_no[i] == 0 || paired[i])
			continue;
		paired[i] = true;
		pairs++;
		e.len = 0;
		if (e.buf != NULL)
			e.buf[0] = '\0';
		rv = agent_check_candidate(task, b[i].body, b[j].body, &e);
		if (rv == KC_ENOMEM)
			goto fail;
		if (rv != 0) {
			kc_str_printf(&why, "%scandidate %zu: %s",
			    bad++ ? "; " : "", code_no[i], e.buf);
			continue;
		}
		if ((c = agent_new_candidate(b[i].body, b[j].body)) == NULL)
			goto nomem;
		if ((nv = realloc(v, (cnt + 1) * sizeof(*v))) == NULL) {
			kclaw__candidate__free_unpacked(c, NULL);
			goto nomem;
		}
		v = nv;
		v[cnt++] = c;
	}
	rv = 0;
	/* Keep the last max. */
	if (cnt > max) {
		for (i = 0; i < cnt - max; i++)
			kclaw__candidate__free_unpacked(v[i], NULL);
		memmove(v, v + (cnt - max), max * sizeof(*v));
		cnt = max;
	}
	if (code_blocks == 0) {
		kc_str_printf(err,
		    "no ```cuda code block found; put the kernel source in a "
		    "```cuda block and its launch plan in a ```json block "
		    "right after it");
		rv = KC_EINVAL;
	} else if (cnt < max && (bad > 0 || pairs < code_blocks)) {
		if (bad > 0)
			kc_str_append(err, why.buf);
		for (i = 0; i < nb; i++)
			if (code_no[i] != 0 && !paired[i])
				kc_str_printf(err,
				    "%scandidate %zu: the ```%s block at line "
				    "%u has no ```json launch plan block after "
				    "it",
				    bad++ ? "; " : "", code_no[i], b[i].lang,
				    b[i].line);
		rv = KC_EINVAL;
	}
	kc_str_free(&e);
	kc_str_free(&why);
	free(paired);
	free(code_no);
	agent_blocks_free(b, nb);
	*out = v;
	*n = cnt;
	return rv;
nomem:
	rv = KC_ENOMEM;
fail:
	kc_str_free(&e);
	kc_str_free(&why);
	free(paired);
	free(code_no);
	agent_blocks_free(b, nb);
	for (i = 0; i < cnt; i++)
		kclaw__candidate__free_unpacked(v[i], NULL);
	free(v);
	return rv;
}
