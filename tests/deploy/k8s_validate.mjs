// Validates kclaw's Kubernetes manifests: every object against the
// Kubernetes OpenAPI schemas (the npm package kubernetes-models, whose
// validators are generated from them), then what kclaw needs of them.
//   node k8s_validate.mjs rendered.yaml       (output of kubectl kustomize)
//   node k8s_validate.mjs --dir deploy/k8s    (no kustomize: each resource
//                                              file of kustomization.yaml)
import fs from "node:fs";
import path from "node:path";
import { parseAllDocuments, parse } from "yaml";

const kinds = {
  "v1/Namespace": "kubernetes-models/v1/Namespace",
  "v1/ConfigMap": "kubernetes-models/v1/ConfigMap",
  "v1/Secret": "kubernetes-models/v1/Secret",
  "v1/Service": "kubernetes-models/v1/Service",
  "apps/v1/StatefulSet": "kubernetes-models/apps/v1/StatefulSet",
  "apps/v1/Deployment": "kubernetes-models/apps/v1/Deployment",
  "apps/v1/DaemonSet": "kubernetes-models/apps/v1/DaemonSet",
  "networking.k8s.io/v1/NetworkPolicy": "kubernetes-models/networking.k8s.io/v1/NetworkPolicy",
};

let failures = 0;
function fail(msg) {
  console.log("FAIL " + msg);
  failures++;
}
function check(cond, msg) {
  if (!cond) fail(msg);
}

function loadDocs(file) {
  const docs = [];
  for (const d of parseAllDocuments(fs.readFileSync(file, "utf8"))) {
    if (d.errors.length) fail(`${file}: ${d.errors[0].message}`);
    const o = d.toJS();
    if (o) docs.push({ obj: o, where: file });
  }
  return docs;
}

let docs = [];
if (process.argv[2] === "--dir") {
  const dir = process.argv[3];
  const k = parse(fs.readFileSync(path.join(dir, "kustomization.yaml"), "utf8"));
  check(k.kind === "Kustomization", "kustomization.yaml: kind is not Kustomization");
  for (const r of k.resources || []) {
    const f = path.join(dir, r);
    if (!fs.existsSync(f)) { fail(`kustomization.yaml names ${r}, which does not exist`); continue; }
    for (const d of loadDocs(f)) {
      if (k.namespace && d.obj.kind !== "Namespace") d.obj.metadata.namespace = k.namespace;
      docs.push(d);
    }
  }
} else {
  docs = loadDocs(process.argv[2]);
}

const byKind = {};
for (const { obj, where } of docs) {
  const key = `${obj.apiVersion}/${obj.kind}`;
  const name = `${obj.kind}/${obj.metadata && obj.metadata.name} (${where})`;
  const mod = kinds[key];
  if (!mod) { fail(`${name}: no schema known for ${key}`); continue; }
  const cls = (await import(mod))[obj.kind];
  try {
    new cls(obj).validate();
    console.log(`ok   ${name}: valid ${key}`);
  } catch (e) {
    fail(`${name}: ${e.message}`);
  }
  (byKind[obj.kind] ||= {})[obj.metadata.name] = obj;
}

// What kclaw needs of them.
const get = (kind, name) => (byKind[kind] || {})[name];
const pod = (o) => o && o.spec.template.spec;
const envOf = (c) => Object.fromEntries((c.env || []).map((e) => [e.name, e]));
const sts = get("StatefulSet", "kclawd");
check(sts, "no StatefulSet kclawd");
if (sts) {
  check(sts.spec.replicas === 1, "kclawd: replicas must be 1 (one RocksDB)");
  const vct = (sts.spec.volumeClaimTemplates || [])[0];
  check(vct && vct.spec.resources.requests.storage, "kclawd: no volumeClaimTemplate for its home");
  const c = pod(sts).containers[0];
  check((c.volumeMounts || []).some((m) => m.name === vct.metadata.name && m.mountPath === "/var/lib/kclaw"),
    "kclawd: the claim is not mounted at its home /var/lib/kclaw");
  const probe = c.readinessProbe && c.readinessProbe.exec && c.readinessProbe.exec.command.join(" ");
  check(probe && /kclaw status --json/.test(probe), "kclawd: readiness is not `kclaw status --json` (Health)");
  check(envOf(c).KCLAW_HTTP_URL && /^http:\/\/127\.0\.0\.1:/.test(envOf(c).KCLAW_HTTP_URL.value),
    "kclawd: the dashboard must stay on loopback");
}
const svc = get("Service", "kclawd");
check(svc && ["api", "work", "events"].every((p) => svc.spec.ports.some((x) => x.name === p)),
  "Service kclawd lacks the api, work or events port");
const agents = get("Deployment", "kclaw-agents");
check(agents, "no Deployment kclaw-agents");
if (agents) {
  const roles = pod(agents).containers.map((c) => c.command[c.command.indexOf("--role") + 1]).sort();
  check(roles.join() === "diagnoser,feature,generator,optimizer,planner,repairer",
    `kclaw-agents: roles are ${roles.join()}, not the six`);
}
const sbx = get("Deployment", "kclaw-sandbox") || get("DaemonSet", "kclaw-sandbox");
check(sbx, "no Deployment or DaemonSet kclaw-sandbox");
if (sbx) for (const c of pod(sbx).containers)
  check(String(((c.resources || {}).limits || {})["nvidia.com/gpu"]) === "1",
    `kclaw-sandbox/${c.name}: does not request nvidia.com/gpu: 1`);
for (const o of [sts, agents, sbx].filter(Boolean)) {
  const ps = pod(o);
  check(ps.securityContext && ps.securityContext.runAsNonRoot === true, `${o.metadata.name}: runAsNonRoot`);
  check(ps.automountServiceAccountToken === false, `${o.metadata.name}: mounts a service account token`);
  for (const c of ps.containers) {
    const t = envOf(c).KCLAW_TOKEN;
    check(t && t.valueFrom && t.valueFrom.secretKeyRef && t.valueFrom.secretKeyRef.name === "kclaw" && !t.value,
      `${o.metadata.name}/${c.name}: KCLAW_TOKEN does not come from the Secret kclaw`);
    const sc = c.securityContext || {};
    check(sc.allowPrivilegeEscalation === false && sc.readOnlyRootFilesystem === true &&
      sc.capabilities && sc.capabilities.drop.includes("ALL"), `${o.metadata.name}/${c.name}: container hardening`);
    check(!(c.image || "").includes(":") || c.image.startsWith("registry.example.internal/kclaw:"),
      `${o.metadata.name}/${c.name}: unexpected image ${c.image}`);
  }
}
check(!byKind.Secret, "a Secret ships in the manifests: the token must be created by the operator");

console.log(`${docs.length} objects, ${failures} failures`);
process.exit(failures ? 1 : 0);
