#!/usr/bin/env python3
"""Checks a rendered overlay against the rules docs/kubernetes.md promises.

Usage: check_rules.py OVERLAY_NAME RENDERED.yaml

Schemas say a manifest is well formed; these say it runs hangar safely: the
worker's probes, preStop hook, memory limits and downward API, the RBAC the
worker's pod-status lookup needs, and web's probes and secrets. Prints one
line per broken rule and exits 1 if there is any.
"""

import re
import sys

import yaml

UNITS = {
    "": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40,
}


# What a worker under the naive driver may add after dropping ALL: set a
# task's uid/gid, hand its volumes to it and back, signal it.
WORKER_CAPABILITIES = {"CHOWN", "DAC_OVERRIDE", "FOWNER", "SETUID", "SETGID", "KILL"}


def quantity(q):
    m = re.fullmatch(r"([0-9.]+)([A-Za-z]*)", str(q))
    if not m or m.group(2) not in UNITS:
        raise ValueError(f"not a quantity: {q!r}")
    return float(m.group(1)) * UNITS[m.group(2)]


def main(name, path):
    docs = [d for d in yaml.safe_load_all(open(path)) if d]
    problems = []

    def need(ok, what):
        if not ok:
            problems.append(what)

    def find(kind, obj_name):
        return [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == obj_name]

    def env_of(container):
        return {e["name"]: e for e in container.get("env", [])}

    def secret_ref(env, key):
        e = env.get(key, {})
        return e.get("valueFrom", {}).get("secretKeyRef")

    def secret_file(pod, container, env, key):
        """(secretName, key) of the Secret file that env[key] names, if it is
        one mounted from a secret volume whose files others cannot read."""
        path = env.get(key, {}).get("value")
        if not path:
            return None
        vols = {v["name"]: v for v in pod.get("volumes", [])}
        for m in container.get("volumeMounts", []):
            prefix = m["mountPath"].rstrip("/") + "/"
            secret = vols.get(m["name"], {}).get("secret")
            if not path.startswith(prefix) or secret is None:
                continue
            mode = secret.get("defaultMode", 0o644)
            if mode & 0o007:
                return None
            rel = path[len(prefix):]
            for item in secret.get("items", []):
                if item.get("path") == rel:
                    return (secret.get("secretName"), item.get("key"))
            if not secret.get("items"):
                return (secret.get("secretName"), rel)
        return None

    def projected_token(pod, container, env, key):
        """The audience of the projected service-account token file that
        env[key] names, if it is one others cannot read."""
        path = env.get(key, {}).get("value")
        if not path:
            return None
        vols = {v["name"]: v for v in pod.get("volumes", [])}
        for m in container.get("volumeMounts", []):
            prefix = m["mountPath"].rstrip("/") + "/"
            projected = vols.get(m["name"], {}).get("projected")
            if not path.startswith(prefix) or projected is None:
                continue
            if projected.get("defaultMode", 0o644) & 0o007:
                return None
            for source in projected.get("sources", []):
                token = source.get("serviceAccountToken")
                if token and token.get("path") == path[len(prefix):]:
                    return token.get("audience")
        return None

    # ---- web
    webs = find("Deployment", "hangar-web")
    need(len(webs) == 1, "one Deployment hangar-web")
    web_secret = None
    web_env, web_pod = {}, {}
    if webs:
        spec = webs[0]["spec"]["template"]["spec"]
        c = next((c for c in spec["containers"] if c["name"] == "web"), None)
        need(c is not None, "web: a container named web")
        if c:
            env = env_of(c)
            web_env = env
            web_pod = spec
            need(c.get("args", [None])[0] == "web", "web: runs `hangar web`")
            need(env.get("HANGAR_BIND", {}).get("value", "").startswith("0.0.0.0:"),
                 "web: HANGAR_BIND listens on 0.0.0.0")
            need(secret_ref(env, "HANGAR_DATABASE_URL") is not None,
                 "web: HANGAR_DATABASE_URL comes from a Secret")
            for flag, key in (("HANGAR_ADMIN_TOKEN", "admin-token"), ("HANGAR_WORKER_KEY", "worker-key")):
                need(flag not in env, f"web: {flag} is not in the environment (use {flag}_FILE)")
                ref = secret_file(spec, c, env, f"{flag}_FILE")
                need(ref is not None and ref[1] == key,
                     f"web: {flag}_FILE is the {key} of a Secret volume, not readable by others")
                if key == "worker-key":
                    web_secret = ref
            web_sc = c.get("securityContext", {})
            need(web_sc.get("allowPrivilegeEscalation") is False, "web: allowPrivilegeEscalation false")
            need(web_sc.get("readOnlyRootFilesystem") is True, "web: read-only root filesystem")
            need("ALL" in web_sc.get("capabilities", {}).get("drop", []), "web: drops all capabilities")
            ready = c.get("readinessProbe", {}).get("httpGet", {})
            need(ready.get("path") == "/api/v1/info", "web: readiness probe on /api/v1/info")
            need("livenessProbe" in c, "web: a liveness probe")
            need("memory" in c.get("resources", {}).get("limits", {}), "web: a memory limit")
    services = find("Service", "hangar-web")
    need(len(services) == 1, "a Service hangar-web")
    web_port = services[0]["spec"]["ports"][0]["port"] if services else None

    # ---- the worker workload: a StatefulSet (persistent) or a Deployment (ephemeral)
    workers = [d for d in docs
               if d["kind"] in ("StatefulSet", "Deployment") and d["metadata"]["name"] == "hangar-worker"]
    need(len(workers) == 1, f"exactly one worker workload (found {len(workers)})")
    for w in workers:
        kind = w["kind"]
        pod = w["spec"]["template"]["spec"]
        c = next((c for c in pod["containers"] if c["name"] == "worker"), None)
        need(c is not None, "worker: a container named worker")
        if c is None:
            continue
        env = env_of(c)
        order = [e["name"] for e in c.get("env", [])]
        need(c.get("args", [None])[0] == "worker", "worker: runs `hangar worker`")

        def field_ref(key, path):
            return env.get(key, {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == path

        need(field_ref("POD_NAME", "metadata.name"), "worker: POD_NAME from the downward API")
        need(field_ref("POD_IP", "status.podIP"), "worker: POD_IP from the downward API")
        need(env.get("HANGAR_NAME", {}).get("value") == "$(POD_NAME)", "worker: named after its pod")
        need(env.get("HANGAR_API_BIND", {}).get("value") == "0.0.0.0:7788", "worker: HANGAR_API_BIND=0.0.0.0:7788")
        need(env.get("HANGAR_API_URL", {}).get("value") == "http://$(POD_IP):7788",
             "worker: HANGAR_API_URL=http://$(POD_IP):7788")
        for var, user in (("POD_IP", "HANGAR_API_URL"), ("POD_NAME", "HANGAR_NAME")):
            if var in order and user in order:
                need(order.index(var) < order.index(user), f"worker: {var} is defined before {user} uses it")
        mem_ref = env.get("HANGAR_MEMORY_LIMIT", {}).get("valueFrom", {}).get("resourceFieldRef", {})
        need(mem_ref.get("resource") == "limits.memory" and mem_ref.get("containerName", "worker") == "worker",
             "worker: HANGAR_MEMORY_LIMIT from its own limits.memory")
        # The key is a file the worker reads and passes on to nothing it starts.
        need("HANGAR_WORKER_KEY" not in env, "worker: HANGAR_WORKER_KEY is not in the environment (use HANGAR_WORKER_KEY_FILE)")
        key_ref = secret_file(pod, c, env, "HANGAR_WORKER_KEY_FILE")
        audience = projected_token(pod, c, env, "HANGAR_WORKER_KEY_FILE")
        need(key_ref is not None or audience is not None,
             "worker: HANGAR_WORKER_KEY_FILE is a Secret file or a projected service-account token others cannot read")
        if key_ref is not None and web_secret is not None:
            need(key_ref == web_secret, "worker and web use the same worker key")
        if audience is not None:
            # Admitted by TokenReview: web admits the worker's account for
            # this audience and may create TokenReviews; the fleet key stays
            # out of the worker's pod.
            ns = w["metadata"].get("namespace")
            sa = pod.get("serviceAccountName")
            accounts = web_env.get("HANGAR_KUBERNETES_WORKER_ACCOUNT", {}).get("value", "").split(",")
            need(any(a == f"{ns}:{sa}" or a.startswith(f"{ns}:{sa}:") for a in accounts),
                 f"web: HANGAR_KUBERNETES_WORKER_ACCOUNT admits the workers' account {ns}:{sa}")
            want = web_env.get("HANGAR_KUBERNETES_WORKER_AUDIENCE", {}).get("value", "hangar")
            need(audience == want, f"worker: the projected token's audience is web's ({want}), not {audience}")
            mounted = {v.get("secret", {}).get("secretName") for v in pod.get("volumes", [])}
            need(web_secret is None or web_secret[0] not in mounted,
                 "worker: the fleet's worker key is not mounted where a pod's token admits it")
            web_sa = web_pod.get("serviceAccountName")
            need(web_sa is not None and web_pod.get("automountServiceAccountToken") is not False,
                 "web: runs as its own ServiceAccount, its token mounted, to ask TokenReview")
            delegated = any(
                b["roleRef"].get("name") == "system:auth-delegator"
                and any(x.get("kind") == "ServiceAccount" and x.get("name") == web_sa for x in b.get("subjects", []))
                for b in docs if b["kind"] == "ClusterRoleBinding")
            need(delegated, "web: its ServiceAccount is bound to system:auth-delegator (TokenReview)")
        web_url = env.get("HANGAR_WEB", {}).get("value", "")
        need(web_url == f"http://hangar-web:{web_port}", f"worker: HANGAR_WEB points at the web Service ({web_url})")

        res = c.get("resources", {})
        req, lim = res.get("requests", {}).get("memory"), res.get("limits", {}).get("memory")
        need(req is not None and lim is not None, "worker: memory request and limit")
        if req is not None and lim is not None:
            need(quantity(req) <= quantity(lim), f"worker: memory request {req} <= limit {lim}")

        ports = {p.get("name"): p["containerPort"] for p in c.get("ports", [])}
        need(ports.get("api") == 7788, "worker: port api is 7788")
        # Readiness follows the worker's health (web reachable, work dir
        # writable, no hard pressure); liveness only that the process answers,
        # so a web outage never restarts every worker.
        for probe, path in (("livenessProbe", "/livez"), ("readinessProbe", "/healthz")):
            get = c.get(probe, {}).get("httpGet", {})
            need(get.get("path") == path and get.get("port") in ("api", 7788),
                 f"worker: {probe} on {path} of the api port")

        stop = " ".join(c.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", []))
        grace = pod.get("terminationGracePeriodSeconds", 30)
        need(grace >= 60, f"worker: terminationGracePeriodSeconds >= 60 (is {grace})")
        mounts = {m["name"]: m["mountPath"] for m in c.get("volumeMounts", [])}
        work_dir = env.get("HANGAR_WORK_DIR", {}).get("value")
        need(work_dir is not None and mounts.get("work") == work_dir, "worker: the work volume is mounted at HANGAR_WORK_DIR")
        if kind == "StatefulSet":
            need("kill -USR1 1" in stop, "persistent worker: preStop lands it (SIGUSR1)")
            need(env.get("HANGAR_EPHEMERAL", {}).get("value", "false") in ("false", "0"),
                 "persistent worker: not ephemeral")
            claims = [t["metadata"]["name"] for t in w["spec"].get("volumeClaimTemplates", [])]
            need("work" in claims, "persistent worker: a volume claim template `work`")
            need(len(find("Service", w["spec"].get("serviceName", ""))) == 1,
                 "persistent worker: its serviceName is a Service")
        else:
            need("kill -USR2 1" in stop, "ephemeral worker: preStop retires it (SIGUSR2)")
            need(env.get("HANGAR_EPHEMERAL", {}).get("value") == "true", "ephemeral worker: HANGAR_EPHEMERAL=true")
            vols = {v["name"]: v for v in pod.get("volumes", [])}
            need("emptyDir" in vols.get("work", {}), "ephemeral worker: work dir on an emptyDir")

        driver = env.get("HANGAR_VOLUME_DRIVER", {}).get("value", "auto")
        sc = c.get("securityContext", {})
        privileged = sc.get("privileged", False)
        if driver == "overlay":
            need(privileged, "worker: the overlay driver needs privileged")
        else:
            # Least privilege for the naive driver: root only for dropping a
            # task to its own user, nothing that mounts or escapes.
            need(not privileged, f"worker: not privileged with the {driver} driver (only overlay needs it)")
            need(sc.get("allowPrivilegeEscalation") is False, "worker: allowPrivilegeEscalation false")
            need(sc.get("readOnlyRootFilesystem") is True, "worker: read-only root filesystem")
            caps = sc.get("capabilities", {})
            need("ALL" in caps.get("drop", []), "worker: drops all capabilities")
            extra = set(caps.get("add", [])) - WORKER_CAPABILITIES
            need(not extra, f"worker: adds no capability beyond {sorted(WORKER_CAPABILITIES)} (adds {sorted(extra)})")
            seccomp = (sc.get("seccompProfile") or pod.get("securityContext", {}).get("seccompProfile") or {})
            need(seccomp.get("type") == "RuntimeDefault", "worker: the runtime's default seccomp profile")

        # Only web reaches the worker's API.
        labels = w["spec"]["template"]["metadata"].get("labels", {})
        web_labels = webs[0]["spec"]["template"]["metadata"].get("labels", {}) if webs else {}
        guarded = False
        for np in (d for d in docs if d["kind"] == "NetworkPolicy"):
            sel = np["spec"].get("podSelector", {}).get("matchLabels", {})
            if not sel or any(labels.get(k) != v for k, v in sel.items()):
                continue
            if "Ingress" not in np["spec"].get("policyTypes", []):
                continue
            rules = np["spec"].get("ingress", [])
            ok = bool(rules)
            for r in rules:
                froms = r.get("from", [])
                only_web = bool(froms) and all(
                    set(f) == {"podSelector"}
                    and f["podSelector"].get("matchLabels")
                    and all(web_labels.get(k) == v for k, v in f["podSelector"]["matchLabels"].items())
                    for f in froms)
                ports = {p.get("port") for p in r.get("ports", [])}
                ok = ok and only_web and ports and ports <= {7788, "api"}
            guarded = guarded or ok
        need(guarded, "worker: a NetworkPolicy lets only web's pods reach the API port")

        # RBAC: the service account may get pods in its namespace.
        sa = pod.get("serviceAccountName")
        need(sa is not None and len(find("ServiceAccount", sa)) == 1, "worker: runs as its own ServiceAccount")
        ns = w["metadata"].get("namespace")
        allowed = False
        for rb in (d for d in docs if d["kind"] == "RoleBinding"):
            if not any(s.get("kind") == "ServiceAccount" and s.get("name") == sa
                       and s.get("namespace", ns) == ns for s in rb.get("subjects", [])):
                continue
            for role in find(rb["roleRef"]["kind"], rb["roleRef"]["name"]):
                for rule in role.get("rules", []):
                    if "" in rule.get("apiGroups", []) and "pods" in rule.get("resources", []) \
                            and "get" in rule.get("verbs", []):
                        allowed = True
        need(allowed, "worker: its ServiceAccount may get pods in its namespace")

    # Everything lands in one namespace.
    cluster_scoped = {"Namespace", "ClusterRole", "ClusterRoleBinding"}
    namespaces = {d["metadata"].get("namespace") for d in docs if d["kind"] not in cluster_scoped}
    need(len(namespaces) == 1 and None not in namespaces, f"one namespace for everything (found {namespaces})")

    for p in problems:
        print(f"{name}: {p}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
