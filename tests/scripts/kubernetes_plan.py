"""Checks examples/kubernetes/xmprun-job.yaml with `xmprun plan`: the spec is read out of the
ConfigMap and planned once per pod, with the environment Kubernetes gives the pod of an
Indexed Job (JOB_COMPLETION_INDEX, HOSTNAME) on a host tree with the pod's GPUs; the plans must
agree with the manifest (node ranks, global ranks, world size, MASTER_ADDR/PORT = the headless
Service) and the manifest with itself (completions, subdomain, selector, ports).
Run by test_kubernetes.sh with Debian's python3 (PyYAML)."""

import json
import os
import subprocess
import sys
import tempfile

import yaml

errors = []


def check(cond, msg):
    if not cond:
        errors.append(msg)


def main():
    src = os.environ["XMPRUN_SOURCE_DIR"]
    xmprun = os.environ["XMPRUN_BIN"]
    host = os.path.join(os.environ["XMPRUN_FIXTURES"], "hosts", "gpu8-2numa")
    with open(os.path.join(src, "examples", "kubernetes", "xmprun-job.yaml")) as f:
        docs = {d["kind"]: d for d in yaml.safe_load_all(f)}
    svc, cm, job = docs["Service"], docs["ConfigMap"], docs["Job"]
    spec_text = cm["data"]["job.yaml"]
    spec = yaml.safe_load(spec_text)
    js, pod = job["spec"], job["spec"]["template"]["spec"]
    (ctr,) = pod["containers"]
    n = js["completions"]
    gpus = int(ctr["resources"]["limits"]["nvidia.com/gpu"])
    port = svc["spec"]["ports"][0]["port"]

    check(js.get("completionMode") == "Indexed", "the Job is not Indexed")
    check(js.get("parallelism") == n, "parallelism != completions: pods would wait for each other")
    check(spec["distributed"]["nnodes"] == n, "distributed.nnodes != the Job's completions")
    check(svc["spec"].get("clusterIP") == "None", "the Service is not headless")
    check(pod.get("subdomain") == svc["metadata"]["name"], "the pods' subdomain is not the Service")
    check(svc["spec"]["selector"] == {"job-name": job["metadata"]["name"]},
          "the Service does not select the Job's pods (label job-name)")
    check(spec["distributed"]["master_port"] == port, "master_port != the Service's port")
    check(spec["distributed"]["master_addr"]
          == "%s-0.%s" % (job["metadata"]["name"], svc["metadata"]["name"]),
          "master_addr is not pod 0's name under the headless Service")
    mounts = {m["name"]: m["mountPath"] for m in ctr["volumeMounts"]}
    spec_arg = ctr["args"][-1]
    check(os.path.dirname(spec_arg) == mounts["spec"], "args do not name the mounted spec")
    check(pod.get("terminationGracePeriodSeconds", 30) > 5, "grace period below on_failure.grace")

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, os.path.basename(spec_arg))
        with open(path, "w") as f:
            f.write(spec_text)
        ranks = []
        for index in range(n):
            # What the pod's environment has that xmprun reads; nothing of this machine's.
            env = {"PATH": "/usr/bin:/bin", "XMPRUN_HOST_ROOT": host,
                   "JOB_COMPLETION_INDEX": str(index),
                   "HOSTNAME": "%s-%d" % (job["metadata"]["name"], index)}
            out = subprocess.run([xmprun, "plan", path], env=env, capture_output=True, text=True)
            if out.returncode != 0:
                errors.append("pod %d: xmprun plan exited %d: %s" % (index, out.returncode, out.stderr))
                continue
            plan = json.loads(out.stdout)
            pj, workers = plan["job"], plan["workers"]
            print("pod %d: node_rank %d of %d, world_size %d, ranks %s, MASTER_ADDR %s:%s"
                  % (index, pj["node_rank"], pj["nnodes"], pj["world_size"],
                     [w["rank"] for w in workers], pj["master_addr"], pj["master_port"]))
            check(pj["node_rank"] == index, "pod %d: node_rank %s" % (index, pj["node_rank"]))
            check(pj["nnodes"] == n and pj["world_size"] == n * gpus,
                  "pod %d: nnodes %s world_size %s" % (index, pj["nnodes"], pj["world_size"]))
            check(len(workers) == gpus, "pod %d: %d workers for %d GPUs" % (index, len(workers), gpus))
            for w in workers:
                e = w["env"]
                ranks.append(w["rank"])
                check(e["MASTER_ADDR"] == spec["distributed"]["master_addr"]
                      and e["MASTER_PORT"] == str(port), "pod %d: MASTER_ADDR/PORT %s:%s"
                      % (index, e["MASTER_ADDR"], e["MASTER_PORT"]))
                check(e["GROUP_RANK"] == str(index) and e["WORLD_SIZE"] == str(n * gpus),
                      "pod %d rank %d: GROUP_RANK/WORLD_SIZE" % (index, w["rank"]))
                check(e["CUDA_VISIBLE_DEVICES"] == str(w["local_rank"]),
                      "pod %d rank %d: CUDA_VISIBLE_DEVICES %s" % (index, w["rank"], e["CUDA_VISIBLE_DEVICES"]))
        check(sorted(ranks) == list(range(n * gpus)), "global ranks are not 0..%d once each" % (n * gpus - 1))
    for e in errors:
        print("FAIL: " + e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
