#!/bin/sh
# deploy/k8s: rendered with kustomize (`kubectl kustomize`), every object
# validated against the Kubernetes OpenAPI schemas (npm kubernetes-models)
# plus kclaw's own rules (k8s_validate.mjs); a broken manifest must fail.
set -u
SRC=${KCLAW_SRC:?}
H=$SRC/tests/deploy
K=$SRC/deploy/k8s
if ! command -v node >/dev/null 2>&1; then
	echo "SKIP: node not found (apt-get install nodejs npm; tools/install-deps.sh does)"
	exit 77
fi
if [ ! -d "$H/node_modules/kubernetes-models" ] || [ ! -d "$H/node_modules/yaml" ]; then
	echo "SKIP: tests/deploy/node_modules lacks kubernetes-models (cd tests/deploy && npm ci; tools/install-deps.sh does)"
	exit 77
fi
echo "node $(node --version), kubernetes-models $(node -p "require('$H/node_modules/kubernetes-models/package.json').version")"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0

if command -v kubectl >/dev/null 2>&1 && kubectl kustomize "$K" >"$T/rendered.yaml" 2>"$T/kustomize.err"; then
	echo "rendered with $(kubectl version --client 2>/dev/null | tr '\n' ' ')"
	node "$H/k8s_validate.mjs" "$T/rendered.yaml" || fails=$((fails + 1))
	# Image replaced, namespace set on every object.
	grep -q 'image: registry.example.internal/kclaw:0.1.0' "$T/rendered.yaml" || { echo "FAIL images: not applied"; fails=$((fails + 1)); }
	[ "$(grep -c '^  namespace: kclaw' "$T/rendered.yaml")" -ge 7 ] || { echo "FAIL namespace not set on every object"; fails=$((fails + 1)); }
else
	if command -v kubectl >/dev/null 2>&1; then
		echo "FAIL kubectl kustomize $K:"
		cat "$T/kustomize.err"
		fails=$((fails + 1))
	else
		echo "note kubectl not found: each resource of kustomization.yaml validated on its own (no kustomize rendering)"
	fi
fi
node "$H/k8s_validate.mjs" --dir "$K" >"$T/dir.out" || { cat "$T/dir.out"; fails=$((fails + 1)); }

# A broken manifest (a port that is not a number) must be refused.
mkdir "$T/broken"
cp "$K"/*.yaml "$T/broken/"
sed -i 's/containerPort: 8460/containerPort: api-port/' "$T/broken/kclawd-statefulset.yaml"
if node "$H/k8s_validate.mjs" --dir "$T/broken" >"$T/broken.out" 2>&1; then
	echo "FAIL the validator accepted containerPort: api-port"
	fails=$((fails + 1))
elif ! grep -q "containerPort must be integer" "$T/broken.out"; then
	echo "FAIL the validator refused the broken manifest for another reason:"
	cat "$T/broken.out"
	fails=$((fails + 1))
fi

[ $fails -eq 0 ] && echo "deploy_k8s: all checks passed" || echo "deploy_k8s: $fails failures"
[ $fails -eq 0 ]
