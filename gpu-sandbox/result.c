/*
 * result.c - building EvalResults whose members are all malloc'd, so the
 * protobuf-c free function releases them.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "integrity.h"
#include "sandbox.h"
#include "spec_check.h"

Kclaw__EvalResult *
sbx_result_new(const char *job_id)
{
	Kclaw__EvalResult *r = malloc(sizeof(*r));

	if (r == NULL)
		return NULL;
	kclaw__eval_result__init(r);
	r->job_id = strdup(job_id ? job_id : "");
	if (r->job_id == NULL) {
		free(r);
		return NULL;
	}
	return r;
}

static void
result_vset(char **field, const char *fmt, va_list ap)
{
	char *s = NULL;

	if (vasprintf(&s, fmt, ap) < 0)
		return;
	if (*field != NULL && *field != protobuf_c_empty_string)
		free(*field);
	*field = s;
}

void
sbx_result_set(char **field, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	result_vset(field, fmt, ap);
	va_end(ap);
}

void
sbx_result_status(
    Kclaw__EvalResult *r, Kclaw__EvalStatus status, const char *fmt, ...)
{
	va_list ap;

	r->status = status;
	va_start(ap, fmt);
	result_vset(&r->message, fmt, ap);
	va_end(ap);
}

void
sbx_result_add_metric(
    Kclaw__EvalResult *r, const char *name, double value, const char *unit)
{
	Kclaw__Metric **g, *m;

	g = realloc(r->metrics, (r->n_metrics + 1) * sizeof(*g));
	if (g == NULL)
		return;
	r->metrics = g;
	if ((m = malloc(sizeof(*m))) == NULL)
		return;
	kclaw__metric__init(m);
	m->name = strdup(name);
	m->unit = strdup(unit ? unit : "");
	m->value = value;
	if (m->name == NULL || m->unit == NULL) {
		free(m->name);
		free(m->unit);
		free(m);
		return;
	}
	r->metrics[r->n_metrics++] = m;
}

const char *
sbx_status_name(Kclaw__EvalStatus s)
{
	const ProtobufCEnumValue *v = protobuf_c_enum_descriptor_get_value(
	    &kclaw__eval_status__descriptor, (int)s);

	return v ? v->name : "UNKNOWN";
}
