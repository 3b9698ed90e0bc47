/*
 * fuzz_task.h - a small fixed task for fuzz targets that parse against one
 * (launch plans, LLM replies): x and w inputs, y output, f32 [1024].
 */
#ifndef FUZZ_TASK_H
#define FUZZ_TASK_H

#include <stdint.h>

#include "kclaw.pb-c.h"

static inline Kclaw__TaskSpec *
fuzz_task(void)
{
	static Kclaw__TaskSpec spec = KCLAW__TASK_SPEC__INIT;
	static Kclaw__TensorSpec x = KCLAW__TENSOR_SPEC__INIT,
	                         w = KCLAW__TENSOR_SPEC__INIT,
	                         y = KCLAW__TENSOR_SPEC__INIT;
	static Kclaw__TensorSpec *ts[3];
	static int64_t shape[1] = {1024};

	if (spec.n_tensors == 0) {
		x.name = "x", x.kind = KCLAW__TENSOR_KIND__INPUT;
		w.name = "w", w.kind = KCLAW__TENSOR_KIND__PARAMETER;
		y.name = "y", y.kind = KCLAW__TENSOR_KIND__OUTPUT;
		Kclaw__TensorSpec *all[3] = {&x, &w, &y};
		for (int i = 0; i < 3; i++) {
			all[i]->dtype = KCLAW__DTYPE__F32;
			all[i]->n_shape = 1;
			all[i]->shape = shape;
			ts[i] = all[i];
		}
		spec.name = "fuzz";
		spec.n_tensors = 3;
		spec.tensors = ts;
	}
	return &spec;
}

/* A NUL-terminated copy of the fuzzer's bytes (caller frees). */
static inline char *
fuzz_text(const uint8_t *data, size_t size)
{
	char *t = malloc(size + 1);
	if (t != NULL) {
		memcpy(t, data, size);
		t[size] = '\0';
	}
	return t;
}

#endif
