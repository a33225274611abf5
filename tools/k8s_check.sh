#!/usr/bin/env bash
# tools/k8s_check.sh - checks deploy/kubernetes without a cluster (none is reachable here):
# `kubectl kustomize` renders the base and each overlay (a malformed manifest, a patch that
# misses its target or a missing file fails it); then each rendering is checked for what
# the cluster needs: a head Deployment and worker StatefulSet whose node runs
# `troupe start --block` (the pod lives with its node), joined by the token of the Secret
# troupe-cluster-token (a file, 0400), binding the pod's address, allowing the image's
# Python as the workers' program, ready and live by `troupe status`; the head's Service on
# the port the workers join; GPUs asked for in the base, not in overlays/cpu-only. Where
# kubectl does reach an API server, `kubectl apply --dry-run=server` checks the schemas too.
#
# Prints "FAILED <check>" per failed check, then "k8s_check: N checks, M failed"
# (tools/test.sh counts them as cases). Usage: tools/k8s_check.sh
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dir="$root/deploy/kubernetes"
checks=0 bad=0
check() { # check NAME COMMAND...
    checks=$((checks + 1))
    if ! "${@:2}"; then
        echo "FAILED $1"
        bad=$((bad + 1))
    fi
}
work=$(mktemp -d "${TMPDIR:-/tmp}/troupe-k8s.XXXXXX")
trap 'rm -rf "$work"' EXIT

if ! command -v kubectl >/dev/null; then
    check "kubectl is installed (Debian's kubernetes-client, tools/deps.sh)" false
    echo "k8s_check: $checks checks, $bad failed"
    exit 0
fi
for k in base overlays/cpu-only; do
    out="$work/${k//\//_}.yaml"
    check "kubectl kustomize $k renders" bash -c "kubectl kustomize '$dir/$k' >'$out' 2>'$out.err' || { cat '$out.err'; exit 1; }"
    gpus=1
    [[ $k == overlays/cpu-only ]] && gpus=0
    while IFS= read -r line; do
        [[ $line == ok* ]] && checks=$((checks + 1)) && continue
        checks=$((checks + 1)) bad=$((bad + 1))
        echo "FAILED $k: ${line#bad }"
    done < <(/usr/bin/python3 - "$out" "$gpus" <<'EOF'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
want_gpu = sys.argv[2] == "1"
def say(ok, what):
    print(("ok " if ok else "bad ") + what)
kinds = {(d["kind"], d["metadata"]["name"]): d for d in docs}
for key in [("Service", "troupe-head"), ("Deployment", "troupe-head"),
            ("Service", "troupe-worker"), ("StatefulSet", "troupe-worker")]:
    say(key in kinds, f"there is a {key[0]} {key[1]}")
head_ports = [p["port"] for p in kinds.get(("Service", "troupe-head"), {}).get("spec", {}).get("ports", [])]
for name in ["Deployment", "StatefulSet"]:
    d = kinds.get((name, "troupe-head" if name == "Deployment" else "troupe-worker"))
    if not d:
        continue
    spec = d["spec"]["template"]["spec"]
    c = spec["containers"][0]
    args = c.get("args", [])
    def arg(flag):
        return args[args.index(flag) + 1] if flag in args and args.index(flag) + 1 < len(args) else None
    what = f"{name}'s node"
    say(args[:1] == ["start"] and "--block" in args, f"{what} is `troupe start --block`")
    if name == "Deployment":
        say("--head" in args and arg("--port") is not None and int(arg("--port")) in head_ports,
            f"{what} is the head, on the port its Service has ({head_ports})")
    else:
        addr = arg("--address") or ""
        say(addr.split(":")[0] == "troupe-head" and int(addr.split(":")[1]) in head_ports,
            f"{what} joins the head's Service ({addr})")
    say(arg("--bind") == "$(POD_IP)" and any(e["name"] == "POD_IP" and
        e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "status.podIP"
        for e in c.get("env", [])), f"{what} binds the pod's address")
    tf = arg("--token-file")
    mounts = {m["name"]: m["mountPath"] for m in c.get("volumeMounts", [])}
    vols = {v["name"]: v for v in spec.get("volumes", [])}
    secret_ok = any(tf and tf.startswith(mounts.get(n, "//") + "/") and
                    v.get("secret", {}).get("secretName") == "troupe-cluster-token" and
                    v["secret"].get("defaultMode") == 0o400 for n, v in vols.items())
    say(secret_ok, f"{what} reads its token from Secret troupe-cluster-token (0400)")
    say(arg("--worker-path") == "/opt/troupe/bin/python3",
        f"{what} allows the image's Python for its workers")
    for probe in ["readinessProbe", "livenessProbe"]:
        say(c.get(probe, {}).get("exec", {}).get("command") == ["troupe", "status"],
            f"{what}'s {probe} is `troupe status`")
    say(c.get("image", "").startswith("troupe:"), f"{what} runs the troupe image")
    if name == "StatefulSet":
        has = "nvidia.com/gpu" in c.get("resources", {}).get("limits", {})
        say(has == want_gpu, f"{what} asks for a GPU: {has} (want {want_gpu})")
EOF
)
done
if kubectl version --request-timeout=3s >/dev/null 2>&1; then
    check "kubectl apply --dry-run=server (an API server is reachable)" \
        kubectl apply --dry-run=server -k "$dir/base"
else
    echo "k8s_check: no API server reachable: schemas not checked (kubectl apply --dry-run=server)"
fi
echo "k8s_check: $checks checks, $bad failed"
