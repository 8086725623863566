#!/usr/bin/env bash
# Renders every kustomize overlay under deploy/kubernetes/overlays and checks
# the result offline, with no cluster:
#
#   1. against the Kubernetes schemas (kubernetes-validate --strict, version
#      $K8S_VERSION, default 1.33.0), after proving on a broken copy that the
#      validator does reject an unknown field;
#   2. against the rules docs/kubernetes.md promises (probes, preStop, memory
#      limits, the downward API, RBAC for the worker), with
#      deploy/kubernetes/check_rules.py.
#
# Rendering uses `kubectl kustomize` (kubectl >= 1.21 embeds kustomize v4+),
# else a standalone `kustomize build`. kubernetes-validate is installed with
# pip when missing. Prints PASS/FAIL per overlay and "N passed, M failed".
set -euo pipefail
cd "$(dirname "$0")/.."
k8s_version=${K8S_VERSION:-1.33.0}

render() {
  if command -v kubectl >/dev/null && kubectl kustomize --help >/dev/null 2>&1; then
    kubectl kustomize "$1"
  elif command -v kustomize >/dev/null; then
    kustomize build "$1"
  else
    echo "check-manifests: neither kubectl (with kustomize) nor kustomize is installed" >&2
    return 1
  fi
}

if ! command -v kubernetes-validate >/dev/null; then
  echo "check-manifests: installing kubernetes-validate (PyPI)"
  python3 -m pip install --quiet --disable-pip-version-check 'kubernetes-validate>=1.33' >/dev/null
fi
python3 -c 'import yaml' 2>/dev/null || python3 -m pip install --quiet --disable-pip-version-check pyyaml >/dev/null

out=$(mktemp -d /tmp/hangar-manifests.XXXXXX)
trap 'rm -rf "$out"' EXIT
passed=0
failed=0
pass() { echo "PASS: $*"; passed=$((passed + 1)); }
fail() { echo "FAIL: $*"; failed=$((failed + 1)); }

overlays=(deploy/kubernetes/overlays/*/)
[ ${#overlays[@]} -gt 0 ] || { echo "no overlays found" >&2; exit 1; }
for dir in "${overlays[@]}"; do
  name=$(basename "$dir")
  file="$out/$name.yaml"
  if ! render "$dir" >"$file" 2>"$out/$name.err"; then
    fail "$name: renders"
    sed 's/^/    /' "$out/$name.err"
    continue
  fi
  pass "$name: renders ($(grep -c '^kind:' "$file") objects)"
  if kubernetes-validate --strict --quiet -k "$k8s_version" "$file" >"$out/$name.val" 2>&1; then
    pass "$name: valid against Kubernetes $k8s_version schemas (strict)"
  else
    fail "$name: valid against Kubernetes $k8s_version schemas (strict)"
    sed 's/^/    /' "$out/$name.val"
  fi
  if python3 deploy/kubernetes/check_rules.py "$name" "$file" >"$out/$name.rules" 2>&1; then
    pass "$name: follows the rules in docs/kubernetes.md"
  else
    fail "$name: follows the rules in docs/kubernetes.md"
    sed 's/^/    /' "$out/$name.rules"
  fi
done

# The validator must catch what it is here for: an unknown field (a typo in
# a probe) in an otherwise valid rendering.
first="$out/$(basename "${overlays[0]}").yaml"
python3 - "$first" "$out/broken.yaml" <<'EOF'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
for d in docs:
    if d["kind"] in ("StatefulSet", "Deployment") and d["metadata"]["name"] == "hangar-worker":
        c = d["spec"]["template"]["spec"]["containers"][0]
        c["livenessProbe"]["httpGett"] = c["livenessProbe"].pop("httpGet")
        break
yaml.safe_dump_all(docs, open(sys.argv[2], "w"))
EOF
if kubernetes-validate --strict --quiet -k "$k8s_version" "$out/broken.yaml" >/dev/null 2>&1; then
  fail "the validator rejects a misspelt field (it accepted one)"
else
  pass "the validator rejects a misspelt field"
fi

# The rules must catch what least privilege is about: each of these breaks
# in the statefulset rendering must be reported.
sts="$out/statefulset-workers.yaml"
for breakage in no-network-policy extra-capability key-in-env readable-key; do
  python3 - "$sts" "$out/$breakage.yaml" "$breakage" <<'BREAK'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
what = sys.argv[3]
if what == "no-network-policy":
    docs = [d for d in docs if d["kind"] != "NetworkPolicy"]
for d in docs:
    if d["kind"] == "StatefulSet" and d["metadata"]["name"] == "hangar-worker":
        pod = d["spec"]["template"]["spec"]
        c = pod["containers"][0]
        if what == "extra-capability":
            c["securityContext"]["capabilities"]["add"].append("SYS_ADMIN")
        elif what == "key-in-env":
            c["env"].append({"name": "HANGAR_WORKER_KEY", "value": "in-the-clear"})
        elif what == "readable-key":
            for v in pod["volumes"]:
                if "secret" in v:
                    v["secret"]["defaultMode"] = 0o444
yaml.safe_dump_all(docs, open(sys.argv[2], "w"))
BREAK
  if python3 deploy/kubernetes/check_rules.py "$breakage" "$out/$breakage.yaml" >"$out/$breakage.rules" 2>&1; then
    fail "the rules catch $breakage (they accepted it)"
  else
    pass "the rules catch $breakage: $(head -1 "$out/$breakage.rules")"
  fi
done

# And what admitting workers by their pods' tokens rests on, in the
# token-review rendering: web allowed to ask TokenReview, the audience web
# expects, and the fleet key kept out of the workers' pods.
tr="$out/token-review-workers.yaml"
for breakage in no-auth-delegator other-audience fleet-key-mounted; do
  python3 - "$tr" "$out/$breakage.yaml" "$breakage" <<'BREAK'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
what = sys.argv[3]
if what == "no-auth-delegator":
    docs = [d for d in docs if d["kind"] != "ClusterRoleBinding"]
for d in docs:
    if d["kind"] == "StatefulSet" and d["metadata"]["name"] == "hangar-worker":
        pod = d["spec"]["template"]["spec"]
        for v in pod["volumes"]:
            if what == "other-audience" and "projected" in v:
                v["projected"]["sources"][0]["serviceAccountToken"]["audience"] = "https://kubernetes.default.svc"
        if what == "fleet-key-mounted":
            pod["volumes"].append({"name": "secrets", "secret": {"secretName": "hangar", "defaultMode": 0o400}})
yaml.safe_dump_all(docs, open(sys.argv[2], "w"))
BREAK
  if python3 deploy/kubernetes/check_rules.py "$breakage" "$out/$breakage.yaml" >"$out/$breakage.rules" 2>&1; then
    fail "the rules catch $breakage (they accepted it)"
  else
    pass "the rules catch $breakage: $(head -1 "$out/$breakage.rules")"
  fi
done

echo "check-manifests: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
