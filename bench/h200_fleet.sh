#!/bin/bash
# A Ray fleet on the lent H200 (issue 13): NODES local Ray nodes (ray.cluster_utils.Cluster: real raylets,
# each its own node id, one GPU each: the same H200), `october_setup fleet` from the FlashInfer-only kit
# with the image's torch, and `current smoke` (promised level: kernel) on every node.  Run from the
# repository root after bench/h200_flashinfer_stack.sh (its tool env /tmp/toolenv and its stack's lock).
#   WHEELS=DIR RAYWHEELS=DIR KIT=DIR LOCK=FILE OUT=DIR NODES=2 bash bench/h200_fleet.sh
set -u
export PYTHONUNBUFFERED=1 PATH=/usr/local/cuda-13.0/bin:$PATH
SYS=/opt/torch/.venv/bin/python; T=/tmp/toolenv/bin/python; NODES=${NODES:-2}; F=/tmp/fleet
rm -rf $F; mkdir -p $F
/tmp/boot/bin/uv pip install -q --python $T --no-index --find-links "$RAYWHEELS" --find-links "$WHEELS" ray || exit 1
$T -c "import ray; print('ray', ray.__version__)"
$T - "$NODES" "$KIT" "$LOCK" "$OUT" "$SYS" <<'P'
import json, os, subprocess, sys, time
from ray.cluster_utils import Cluster
n, kit, lock, out, sysp = int(sys.argv[1]), *sys.argv[2:]
t0 = time.perf_counter()
c = Cluster(initialize_head=True, head_node_args={"num_cpus": 4, "num_gpus": 1, "include_dashboard": False,
                                                  "labels": {"october-node": "n0"}})
for i in range(1, n):
    c.add_node(num_cpus=4, num_gpus=1, labels={"october-node": f"n{i}"})
c.wait_for_nodes()
print(f"cluster of {n} nodes up in {time.perf_counter() - t0:.1f} s", flush=True)
def fleet(tag):
    t = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "october.installer.october_setup", "fleet", "/tmp/fleet/{name}/stack",
                           "--address", c.address, "--recipe", "flashinfer-pr3812", "--kit", kit, "--lock-file", lock,
                           "--system-python", sysp, "--cache-dir", "/tmp/fleet/shared-cache", "--select", "gpu",
                           "--receipt", f"{out}/fleet.json"], capture_output=True, text=True)
    print(f"== fleet ({tag}): rc={done.returncode} in {time.perf_counter() - t:.1f} s", flush=True)
    print(done.stdout[-3000:], done.stderr[-3000:], flush=True)
    doc = json.load(open(f"{out}/fleet.json"))
    print("passed", doc["passed"], "consistent", doc.get("consistent"), "reasons", doc.get("reasons"))
    for x in doc["nodes"]:
        sm = x.get("smoke") or {}
        print(f"  {x['name']} {x['status']:<10} setup {((x.get('setup') or {}).get('seconds') or 0):6.1f} s "
              f"smoke {sm.get('seconds') or 0:5.1f} s level={sm.get('level')} proves={sm.get('proves')} "
              f"passed={sm.get('passed')} lock={str(x.get('lock_sha256'))[:12]} jit={[m['sha256'][:12] for m in x.get('jit') or []]}")
    return doc
try:
    first = fleet("first run")
    os.replace(f"{out}/fleet.json", f"{out}/fleet-first.json")
    import shutil; shutil.copy(f"{out}/fleet-first.json", f"{out}/fleet.json")
    again = fleet("re-run: every node finished, nothing to resume")
finally:
    c.shutdown()
P
