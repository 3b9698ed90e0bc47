/*
 * export_int.h - what the exporter's parts share (tools/export).
 */
#ifndef KC_EXPORT_INT_H
#define KC_EXPORT_INT_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "kc_util.h"
#include "kclaw.pb-c.h"

/* "f32", "bf16", ...; "?" for an unknown value. */
const char *kx_dtype_name(Kclaw__DType d);
/* Bytes per element (bool is one byte); 0 for an unknown value. */
size_t kx_dtype_size(Kclaw__DType d);
/* "input", "parameter", "output", "scalar". */
const char *kx_kind_name(Kclaw__TensorKind k);
/* Elements of t (the product of its shape). */
unsigned long long kx_numel(const Kclaw__TensorSpec *t);

/* The task's tensors as JSON: name, kind, dtype, shape, bytes and, where
 * set, source_name, value (scalars) and init. */
cJSON *kx_tensors_json(const Kclaw__TaskSpec *spec);

/* Appends text as a C string literal (split in lines of at most 76
 * characters; every byte outside printable ASCII escaped). */
int kx_c_literal(kc_str *s, const char *text);
/* Appends text as a Python bytes literal in parentheses (the same). */
int kx_py_literal(kc_str *s, const char *text);

/* The fixed parts of launcher.c, main.c and model_new.py
 * (export_templates.c). */
extern const char kx_launcher_body[];
extern const char kx_main_c[];
extern const char kx_model_body[];

/* launcher.h, launcher.c and main.c for source + plan_json. */
int kx_write_c(const char *dir, const Kclaw__TaskSpec *spec, const char *source,
    const char *plan_json);
/* model_new.py. */
int kx_write_py(const char *dir, const Kclaw__TaskSpec *spec,
    const char *source, const char *plan_json);

#endif
