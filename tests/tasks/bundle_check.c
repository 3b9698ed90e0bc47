/*
 * bundle_check.c - loads a bundle folder with kc_bundle_load and prints what
 * the loader saw, one fact a line, or the refusal. The KernelBench bridge's
 * tests run it to prove that what the bridge writes is what kclaw reads.
 *
 *     tasks_bundle_check DIR
 */
#include <stdio.h>
#include <string.h>

#include "bundle.h"
#include "kc_err.h"

int
main(int argc, char **argv)
{
	Kclaw__TaskSpec *s = NULL;
	int rv;

	if (argc != 2) {
		fprintf(stderr, "usage: %s BUNDLE_DIR\n", argv[0]);
		return 2;
	}
	if ((rv = kc_bundle_load(argv[1], &s)) != 0) {
		fprintf(stderr, "refused: %s\n", kc_lasterr());
		return 1;
	}
	printf("name %s\n", s->name);
	printf("reference %s\n",
	    s->reference->kind == KCLAW__REFERENCE__KIND__CUDA ? "cuda"
	                                                       : "tensors");
	printf("baseline_ms %g\n", s->reference->baseline_ms);
	printf("torch_compile_ms %g\n", s->reference->torch_compile_ms);
	for (size_t i = 0; i < s->n_tensors; i++) {
		const Kclaw__TensorSpec *t = s->tensors[i];
		printf("tensor %s %s %s", t->name, kc_tensor_kind_name(t->kind),
		    kc_dtype_name(t->dtype));
		for (size_t d = 0; d < t->n_shape; d++)
			printf("%c%lld", d ? ',' : ' ', (long long)t->shape[d]);
		printf("\n");
	}
	for (size_t i = 0; i < s->reference->n_sets; i++) {
		const Kclaw__TensorSet *set = s->reference->sets[i];
		for (size_t k = 0; k < set->n_inputs; k++)
			printf("set %zu %llu input %s %s\n", i,
			    (unsigned long long)set->seed, set->inputs[k]->name,
			    set->inputs[k]->path);
		for (size_t k = 0; k < set->n_expected; k++)
			printf("set %zu %llu expected %s %s\n", i,
			    (unsigned long long)set->seed,
			    set->expected[k]->name, set->expected[k]->path);
	}
	printf("context_bytes %zu\n", strlen(s->context));
	kclaw__task_spec__free_unpacked(s, NULL);
	return 0;
}
